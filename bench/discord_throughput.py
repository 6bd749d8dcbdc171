"""Discord end to end: MESSAGE_CREATE events/s and dispatch→reply latency through the real discord.py.

Usage: .venv/bin/python -m bench.discord_throughput [--messages 2000] [--chats 50] [--serial 200]
       [--chatter 2000] [--standin process|inline] [--pin-cpu N]

The daemon runs with the real DiscordChannel (discord.py's gateway client and REST) against the
local Discord stand-in on 127.0.0.1 and an instant in-process brain; discord.py's rate limiting is
left as it is, and the stand-in answers at once with rate-limit headers that are never exhausted,
so it never has to wait. Logging is the production setting (INFO JSON lines) into /dev/null.

The stand-in plays Discord's servers, so by default it runs in a child process (this script with
`--serve-standin`, driven over a small control API) and its CPU is not charged to the daemon;
`--standin inline` shares one event loop, which gives a floor. Times are time.monotonic(), one
clock for every process on Linux.

1. Burst: `--messages` DMs dispatched at once, round-robin over `--chats` DM chats; events/s from
   the first dispatch to the last reply created at the REST API, latency dispatch → reply created
   (queueing included), and the daemon process's CPU per event.
2. Serial: `--serial` DMs in one chat, each dispatched after the previous reply: unloaded latency.
3. Chatter: `--chatter` unaddressed guild messages (stored, no turn): intake events/s until stored.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Protocol

import aiohttp
import pytest
import yarl
from aiohttp import web

from bench import standin_process
from bench.instant_brain import InstantBrain
from bot.config import parse_config
from bot.core.log import configure_logging
from bot.daemon.assembly import Daemon
from bot.store import Store
from bot.testing.discord_api import DiscordStandIn, user
from channels.discord.channel import DiscordChannel

BOT_ID = 900_000_000_000_000_000
GUILD, GENERAL = 100, 101
FIRST_USER = 100_000_000_000_000_000
FIRST_DM = 200_000
WAIT = 300.0
# (channel id, author id, content) for DiscordStandIn.message_create
Event = tuple[int, int, str]
Sent = tuple[int, float]  # (channel id, time created)


def _standin() -> DiscordStandIn:
    return DiscordStandIn(bot_id=BOT_ID)


def _prepare(dc: DiscordStandIn) -> None:
    dc.add_guild(GUILD, "Bench", channels=[(GENERAL, "general")])


def _dispatch_all(dc: DiscordStandIn, events: list[Event]) -> list[float]:
    times = []
    for channel_id, author_id, content in events:
        times.append(time.monotonic())
        dc.message_create(channel_id, user(author_id, f"user{author_id}"), content)
    return times


def _sent(dc: DiscordStandIn, start: int) -> list[Sent]:
    return [(m.channel_id, m.time) for m in dc.sent[start:]]


class Gateway(Protocol):
    """The bench's view of the stand-in, wherever it runs."""

    token: str
    base_url: str
    gateway_url: str

    async def dispatch(self, events: list[Event]) -> list[float]: ...
    async def wait_sent(self, count: int, start: int) -> list[Sent]: ...
    async def stats(self) -> dict[str, int]: ...


class InlineGateway:
    """The stand-in on the daemon's own event loop: its CPU counts against the daemon."""

    def __init__(self, dc: DiscordStandIn) -> None:
        self._dc = dc
        self.token, self.base_url, self.gateway_url = dc.token, dc.base_url, dc.gateway_url

    async def dispatch(self, events: list[Event]) -> list[float]:
        return _dispatch_all(self._dc, events)

    async def wait_sent(self, count: int, start: int) -> list[Sent]:
        await self._dc.wait_for(lambda: len(self._dc.sent) >= count, timeout=WAIT)
        return _sent(self._dc, start)

    async def stats(self) -> dict[str, int]:
        return _stats(self._dc)


class RemoteGateway:
    """The stand-in in a child process, driven over its control API (one request per step)."""

    def __init__(self, session: aiohttp.ClientSession, hello: dict[str, str]) -> None:
        self._session, self._control = session, hello["control"]
        self.token, self.base_url, self.gateway_url = hello["token"], hello["base_url"], hello["gateway_url"]

    async def dispatch(self, events: list[Event]) -> list[float]:
        async with self._session.post(f"{self._control}/dispatch", json=events) as response:
            response.raise_for_status()
            return [float(t) for t in await response.json()]

    async def wait_sent(self, count: int, start: int) -> list[Sent]:
        params = {"count": count, "start": start}
        async with self._session.get(f"{self._control}/wait", params=params) as response:
            response.raise_for_status()
            return [(int(c), float(t)) for c, t in await response.json()]

    async def stats(self) -> dict[str, int]:
        async with self._session.get(f"{self._control}/stats") as response:
            response.raise_for_status()
            return {k: int(v) for k, v in (await response.json()).items()}


def _stats(dc: DiscordStandIn) -> dict[str, int]:
    return {"requests": len(dc.requests), "rate_limited": sum(r.status == 429 for r in dc.requests)}


@asynccontextmanager
async def inline_standin() -> AsyncIterator[Gateway]:
    async with _standin() as dc:
        _prepare(dc)
        yield InlineGateway(dc)


@asynccontextmanager
async def child_standin() -> AsyncIterator[Gateway]:
    async with standin_process.child_standin("bench.discord_throughput", WAIT + 10) as (session, hello):
        yield RemoteGateway(session, hello)


async def serve_standin() -> None:
    """The child: a DiscordStandIn plus a control app; prints the addresses as one JSON line."""
    async with _standin() as dc:
        _prepare(dc)

        async def dispatch(request: web.Request) -> web.Response:
            events = [(int(c), int(a), str(t)) for c, a, t in await request.json()]
            return web.json_response(_dispatch_all(dc, events))

        async def wait(request: web.Request) -> web.Response:
            count, start = int(request.query["count"]), int(request.query["start"])
            await dc.wait_for(lambda: len(dc.sent) >= count, timeout=WAIT)
            return web.json_response(_sent(dc, start))

        async def stats(request: web.Request) -> web.Response:
            return web.json_response(_stats(dc))

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/dispatch", dispatch)
        app.router.add_get("/wait", wait)
        app.router.add_get("/stats", stats)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        print(json.dumps({"base_url": dc.base_url, "gateway_url": dc.gateway_url, "token": dc.token,
                          "control": f"http://127.0.0.1:{port}"}), flush=True)
        # The parent closes our stdin when done (or dies): that is the stop signal.
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        await reader.read()
        await runner.cleanup()


def point_discord_at(monkeypatch: pytest.MonkeyPatch, gateway: Gateway) -> None:
    """What DiscordStandIn.patch does, for a stand-in that may live in another process."""
    import discord

    monkeypatch.setattr(discord.http.Route, "BASE", f"{gateway.base_url}/api/v10")
    monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(gateway.gateway_url))
    monkeypatch.setattr(discord.Client, "before_identify_hook", _no_identify_delay)


async def _no_identify_delay(self: object, shard_id: int | None, *, initial: bool = False) -> None:
    return None  # discord.py waits 5 s before every IDENTIFY but the first; none happen here


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _latency_line(latencies: list[float]) -> str:
    return (f"median {statistics.median(latencies):.2f} ms, p99 {_percentile(latencies, 0.99):.2f} ms, "
            f"max {max(latencies):.2f} ms")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Bench:
    """The three measurements against one running daemon; `sent` counts replies seen so far."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.sent = 0

    async def burst(self, messages: int, chats: int, offset: int) -> tuple[float, list[float], float]:
        """(events/s, dispatch → reply latencies in ms, CPU ms per event) for one burst."""
        events = [
            (FIRST_DM + offset + n % chats, FIRST_USER + offset + n % chats,
             f"message {n} about the train to the airport")
            for n in range(messages)
        ]
        cpu = _cpu()
        times = await self.gateway.dispatch(events)
        replies = await self.gateway.wait_sent(self.sent + messages, self.sent)
        cpu = _cpu() - cpu
        self.sent += len(replies)
        dispatched: dict[int, list[float]] = defaultdict(list)
        for (channel_id, _, _), at in zip(events, times, strict=True):
            dispatched[channel_id].append(at)
        seen: dict[int, int] = defaultdict(int)
        latencies = []
        for channel_id, at in replies:  # the k-th reply in a chat answers its k-th message
            latencies.append((at - dispatched[channel_id][seen[channel_id]]) * 1000)
            seen[channel_id] += 1
        elapsed = max(at for _, at in replies) - times[0]
        return messages / elapsed, latencies, cpu / messages * 1000

    async def serial(self, count: int) -> list[float]:
        latencies = []
        for n in range(count):
            (at,) = await self.gateway.dispatch([(FIRST_DM - 1, FIRST_USER - 1, f"serial message {n}")])
            ((_, replied),) = await self.gateway.wait_sent(self.sent + 1, self.sent)
            self.sent += 1
            latencies.append((replied - at) * 1000)
        return latencies

    async def chatter(self, store: Store, count: int) -> float:
        key = f"agent:main:discord:channel:{GENERAL}"
        events = [(GENERAL, FIRST_USER - 2, f"just chatting, line {n}") for n in range(count)]
        times = await self.gateway.dispatch(events)
        deadline = time.monotonic() + WAIT
        while True:
            counts = {s.key: s.message_count for s in await store.list_sessions()}
            if counts.get(key, 0) >= count:
                return count / (time.monotonic() - times[0])
            if time.monotonic() > deadline:
                raise RuntimeError("timed out waiting for the chatter to be stored")
            await asyncio.sleep(0.005)


async def run(args: argparse.Namespace, tmp: Path) -> None:
    data = {
        "database": {"path": str(tmp / "bench.db")},
        "channels": {"discord": {"enabled": True, "dm_policy": "open", "guilds": {str(GUILD): {}}}},
        "router": {"shutdown_grace": 5.0},
        "semantic": {"enabled": "off"},  # its worker would compete for the CPU being measured
    }
    config = parse_config(data, "<bench>")
    standin = child_standin() if args.standin == "process" else inline_standin()
    monkeypatch = pytest.MonkeyPatch()
    async with standin as gateway:
        point_discord_at(monkeypatch, gateway)
        channel = DiscordChannel(config.channels.discord, agent_id=config.agent.id, token=gateway.token,
                                 guild_ready_timeout=0.05)
        daemon = Daemon(config, [channel], brain=InstantBrain())
        task = asyncio.create_task(daemon.run())
        bench = Bench(gateway)
        try:
            await asyncio.wait_for(channel.ready.wait(), 30)
            await bench.burst(min(200, args.messages), args.chats, offset=0)  # warm-up
            rate, latencies, cpu_ms = await bench.burst(args.messages, args.chats, offset=args.chats)
            print(f"burst: {args.messages} DMs over {args.chats} chats: {rate:,.0f} events/s answered "
                  f"end to end; daemon CPU {cpu_ms:.2f} ms per event")
            print(f"  dispatch -> reply created (queueing included): {_latency_line(latencies)}")
            one = await bench.serial(args.serial)
            print(f"serial: {args.serial} DMs in one chat, one at a time: {_latency_line(one)}")
            async with Store.open(config.database_path()) as store:
                stored = await bench.chatter(store, args.chatter)
            print(f"chatter: {args.chatter} unaddressed guild messages: {stored:,.0f} events/s stored")
            stats = await gateway.stats()
            print(f"  REST calls answered: {stats['requests']}, 429s: {stats['rate_limited']}")
        finally:
            daemon.request_stop()
            await asyncio.wait_for(task, 30)
            monkeypatch.undo()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000, help="DMs in the burst")
    parser.add_argument("--chats", type=int, default=50, help="DM chats the burst is spread over")
    parser.add_argument("--serial", type=int, default=200, help="one-at-a-time DMs for unloaded latency")
    parser.add_argument("--chatter", type=int, default=2000, help="unaddressed guild messages")
    parser.add_argument("--standin", choices=("process", "inline"), default="process",
                        help="run the Discord stand-in in a child process (default) or on our loop")
    parser.add_argument("--pin-cpu", type=int, metavar="N", help="run the daemon's threads on CPU N")
    parser.add_argument("--serve-standin", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_standin:
        asyncio.run(serve_standin())
        return
    if args.pin_cpu is not None:
        os.sched_setaffinity(0, {args.pin_cpu})
    devnull = open(os.devnull, "w")  # noqa: SIM115 - lives for the whole process
    configure_logging("INFO", "json", [], stream=devnull)
    print(f"discord throughput: real discord.py + Daemon, Discord stand-in {args.standin}, instant brain, "
          f"CPUs {sorted(os.sched_getaffinity(0))}")
    print("command: .venv/bin/python -m bench.discord_throughput " + " ".join(sys.argv[1:]))
    with tempfile.TemporaryDirectory(prefix="sb-discord-bench-") as tmp:
        asyncio.run(run(args, Path(tmp)))
    print(f"load average {os.getloadavg()[0]:.2f} (other processes share the CPUs)")


if __name__ == "__main__":
    main()
