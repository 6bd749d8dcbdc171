"""Lease queries per second while chats wait on a lease another instance holds (issue 39, item 3).

Usage: .venv/bin/python -m bench.lease_queries [--sessions 500] [--seconds 20] [--mode poll|wake|both]
       [--postgres URL]

Three instances (the real `Router` and `SessionLeases` over a `PostgresStore` each, in one process)
on one PostgreSQL: A works on `--sessions` chats at once (turns that wait until the bench lets them
go, so A holds every chat's lease); B and C each receive, for every chat, a message (left to A, and
watched until answered) and a chat command (which must run itself, so it waits for the lease). For
`--seconds` the bench counts every statement each instance sends (the store's trace callback) and
prints the lease queries per second (statements on `session_leases`) by instance and kind; then it
lets A's turns finish and times how long the waiting commands take to run. `--mode poll` is
`SessionLeases` without `listening()` (each waiting command polls its own lease), `wake` with it
(LISTEN/NOTIFY, one batched fallback look per instance). A's own, the renewals of the leases
it holds, are shown apart: one statement per lease every third of the ttl before they were
batched, one per instance after.
Then five probes, one chat at a time: the time from A letting a lease go to B's command waiting
on it running.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from bench.postgres_load import databases
from bot.core.log import configure_logging
from bot.core.messages import ChatRef, InboundMessage, StoredMessage
from bot.core.session_key import build
from bot.intake.router import Router
from bot.intake.session_lease import SessionLeases
from bot.store.postgres import PostgresStore

WARMUP = 5.0  # the polling waits grow to their cap first


def kind(statement: str) -> str | None:
    """A lease statement's kind, None for others."""
    if "session_leases" not in statement:
        return None
    if statement.lstrip().startswith("INSERT INTO session_leases"):
        return "take"  # before batched renewals, each renewal was one of these too
    if statement.lstrip().startswith("UPDATE session_leases"):
        return "renew"
    if "DELETE FROM session_leases" in statement or "pg_notify" in statement:
        return "drop"
    return "look"


def message(peer: int, n: int) -> InboundMessage:
    return InboundMessage(session_key=build("main", "telegram", "direct", str(peer)),
                          chat=ChatRef("telegram", str(peer)), sender_id=str(peer), sender_name="Ada",
                          text=f"{peer}-{n}", provider_message_id=str(n))


class Instance:
    """One daemon's part that waits on leases: its store, leases and router, its statements counted."""

    def __init__(self, name: str, store: PostgresStore, gate: asyncio.Event | None) -> None:
        self.name, self.store = name, store
        self.leases = SessionLeases(store, f"bench:{ord(name)}:{name}")
        self.counts: Counter[str] = Counter()
        self.counting = False
        self.started = 0
        self.commands_run = 0

        async def turn(request: StoredMessage, inbound: InboundMessage) -> None:
            self.started += 1
            if gate is not None:
                await gate.wait()
            await store.append_reply(request.session_key, "ok", request_id=request.id)

        self.router = Router(store, turn, max_concurrent=10_000, leases=self.leases)

    def trace(self, statement: str) -> None:
        if self.counting:
            self.counts[kind(statement) or "other"] += 1

    async def command(self) -> None:
        self.commands_run += 1


@asynccontextmanager
async def instance(url: str, folder: Path, name: str, gate: asyncio.Event | None,
                   wake: bool) -> AsyncIterator[Instance]:
    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(
            PostgresStore.connect(url, state_path=folder / f"{name}.db", label="bench"))
        one = Instance(name, store, gate)
        await stack.enter_async_context(store.living(one.leases.owner))
        if wake:
            await stack.enter_async_context(one.leases.listening())
        await store._conn.set_trace_callback(one.trace)
        try:
            yield one
        finally:
            await one.router.close(1.0)


async def until(condition: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def probes(a: Instance, b: Instance, count: int = 5) -> list[float]:
    """One chat at a time: A holds its lease, B's command waits on it long enough for a poll to
    reach its longest wait, A lets go; the milliseconds until the command runs at B."""
    waits = []
    for n in range(count):
        key = str(build("main", "telegram", "direct", f"probe{n}"))
        assert await a.store.take_lease(key, a.leases.owner, 60.0)
        ran = asyncio.Event()

        async def run(ran: asyncio.Event = ran) -> None:
            ran.set()

        b.router.enqueue_work(key, "/reset", run)
        await asyncio.sleep(WARMUP)
        let_go = time.perf_counter()
        await a.store.drop_lease(key, a.leases.owner)
        await asyncio.wait_for(ran.wait(), 60)
        waits.append((time.perf_counter() - let_go) * 1000)
    return waits


async def measure(url: str, sessions: int, seconds: float, wake: bool) -> None:
    gate = asyncio.Event()
    with tempfile.TemporaryDirectory() as folder:
        async with instance(url, Path(folder), "a", gate, wake) as a, \
                instance(url, Path(folder), "b", None, wake) as b, \
                instance(url, Path(folder), "c", None, wake) as c:
            for peer in range(sessions):
                await a.router.submit(message(peer, 1))
            if not await until(lambda: a.started == sessions, 120):
                raise SystemExit(f"A started only {a.started} of {sessions} turns")
            for n, waiter in ((2, b), (3, c)):
                for peer in range(sessions):
                    await waiter.router.submit(message(peer, n))
                    key = str(build("main", "telegram", "direct", str(peer)))
                    waiter.router.enqueue_work(key, "/reset", waiter.command)
            await asyncio.sleep(WARMUP)
            for one in (a, b, c):
                one.counting = True
            started = time.perf_counter()
            await asyncio.sleep(seconds)
            for one in (a, b, c):
                one.counting = False
            elapsed = time.perf_counter() - started
            mode = "wake (LISTEN/NOTIFY + one fallback look per instance)" if wake else "poll"
            print(f"\n{mode}: {sessions} chats held by A, each waited on by B and C "
                  f"(a message left to A and a command waiting for the lease), {elapsed:.1f} s; "
                  f"load average {os.getloadavg()[0]:.2f}")
            waiting_total = 0.0
            for one in (a, b, c):
                per_s = {k: v / elapsed for k, v in sorted(one.counts.items())}
                lease = sum(v for k, v in per_s.items() if k != "other")
                if one is not a:
                    waiting_total += lease
                print(f"  {one.name}: lease queries {lease:7.1f}/s  ("
                      + ", ".join(f"{k} {v:.1f}/s" for k, v in per_s.items()) + ")")
            holder = sum(v for k, v in a.counts.items() if k != "other") / elapsed
            print(f"  lease queries of the waiting instances (B + C): {waiting_total:.1f}/s; "
                  f"A's, which holds the {sessions} leases: {holder:.1f}/s")
            print("  a lease let go → the command waiting on it at B running: "
                  + ", ".join(f"{ms:.0f}" for ms in await probes(a, b)) + " ms")
            let_go = time.perf_counter()
            gate.set()
            done = await until(lambda: b.commands_run == c.commands_run == sessions, 120)
            print(f"  after A let go: the {2 * sessions} waiting commands ran in "
                  f"{time.perf_counter() - let_go:.2f} s" + ("" if done else
                  f" (only {b.commands_run + c.commands_run} within 120 s)"))
            for one in (a, b, c):
                await asyncio.wait_for(one.router.idle(), 120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--mode", choices=("poll", "wake", "both"), default="both")
    parser.add_argument("--postgres", default="", metavar="URL",
                        help="an empty database to use (default: a throwaway server per mode)")
    args = parser.parse_args()
    configure_logging("WARNING")
    modes = {"poll": [False], "wake": [True], "both": [False, True]}[args.mode]
    for wake in modes:
        with databases(args.postgres) as database:
            assert database is not None
            asyncio.run(measure(database(), args.sessions, args.seconds, wake))


if __name__ == "__main__":
    main()
