"""`bench.multi_instance --rolling`: the daemons behind the webhook proxy restarted one at a time
(SIGTERM, wait for it to exit, start it, wait for its webhook, next) while `--users` people write,
each sending their next message a random pause (mean `--think` s) after the answer to the last.

Printed: the usual block (lost, twice, out of order, what is left), each restart's stop and start
times, and every message's wait (pushed → its answer reached Telegram): median, p99 and the longest,
for messages sent before, during and after the restarts, the longest against the lease TTL + 2 s.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import time
from pathlib import Path

from bench.multi_instance_count import MARKER, block, count, telegram_sent
from bench.multi_instance_daemons import FIRST_USER, Daemon, Plan, telegram_fleet, webhooks_up
from bot.testing.telegram_api import TelegramStandIn, private_chat, user

SETTLE = 10.0  # seconds of steady writing before the first restart and after the last


class Writers:
    """The users: each writes, waits for the answer (up to `quiet` s), pauses, writes again."""

    def __init__(self, tg: TelegramStandIn, plan: Plan, think: float) -> None:
        self.tg, self.plan, self.think = tg, plan, think
        self.rng = random.Random(plan.seed)
        self.pushed: list[str] = []
        self.pushed_at: dict[str, float] = {}
        self.answered_at: dict[str, float] = {}
        self.writing = True
        self._waiting: dict[str, asyncio.Future[float]] = {}
        self._seen = 0

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tasks:
            watcher = tasks.create_task(self._watch())
            await asyncio.gather(*(self._user(u) for u in range(self.plan.users)))
            watcher.cancel()

    async def _user(self, u: int) -> None:
        person = user(FIRST_USER + u, f"User{u}")
        await asyncio.sleep(self.rng.uniform(0, 2 * self.think))
        n = 0
        while self.writing:
            marker = f"m{u}-{n}"
            answer = self._waiting[marker] = asyncio.get_running_loop().create_future()
            self.pushed.append(marker)
            self.pushed_at[marker] = time.monotonic()
            self.tg.push_message(private_chat(person), person, f"note {marker}")
            try:
                await asyncio.wait_for(answer, self.plan.quiet)
            except TimeoutError:
                return  # never answered: counted below; this user stops writing
            n += 1
            await asyncio.sleep(self.rng.uniform(0, 2 * self.think))

    async def _watch(self) -> None:
        while True:
            sent = self.tg.sent
            for message in sent[self._seen:]:
                for a, b in MARKER.findall(message.visible_text):
                    marker = f"m{a}-{b}"
                    self.answered_at.setdefault(marker, message.time)
                    future = self._waiting.pop(marker, None)
                    if future is not None and not future.done():
                        future.set_result(message.time)
            self._seen = len(sent)
            await asyncio.sleep(0.02)


def waits(w: Writers, since: float, until: float) -> str:
    spans = sorted(w.answered_at[m] - w.pushed_at[m] for m in w.pushed
                   if since <= w.pushed_at[m] < until and m in w.answered_at)
    if not spans:
        return "none"
    p99 = spans[min(len(spans) - 1, int(len(spans) * 0.99))]
    return (f"{len(spans)} messages, median {statistics.median(spans):.2f} s, p99 {p99:.2f} s, "
            f"longest {spans[-1]:.2f} s")


async def restart_one(daemon: Daemon, tg: TelegramStandIn) -> str:
    began = time.monotonic()
    code = await daemon.stop()
    stopped = time.monotonic()
    await daemon.start()
    await webhooks_up([daemon], tg, len(tg.calls_of("setWebhook")) + 1)
    return (f"{daemon.name} stopped in {stopped - began:.1f} s (exit {code}), taking webhooks again "
            f"{time.monotonic() - stopped:.1f} s later")


async def rolling(plan: Plan, workdir: Path, think: float) -> None:
    from bot.testing.postgres import PostgresServer

    limit = plan.lease_ttl + 2
    print(f"multi_instance --rolling: {plan.instances} instances on PostgreSQL behind the webhook proxy, "
          f"{plan.users} users each writing a random {2 * think:g} s or less after their last answer, "
          f"lease_ttl {plan.lease_ttl:g} s; load average {os.getloadavg()[0]:.2f}", flush=True)
    server = PostgresServer()
    server.start()
    try:
        database = server.create_database()
        async with telegram_fleet(plan, database, workdir / "rolling") as (tg, lb, daemons):
            for daemon in daemons:
                await daemon.start()
            await webhooks_up(daemons, tg, len(daemons))
            writers = Writers(tg, plan, think)
            started = time.monotonic()
            writing = asyncio.create_task(writers.run())
            await asyncio.sleep(SETTLE + 2 * think)  # every user has written at least once
            first = time.monotonic()
            for daemon in daemons:
                print(f"  {await restart_one(daemon, tg)}", flush=True)
            last = time.monotonic()
            await asyncio.sleep(SETTLE)
            writers.writing = False
            await writing
            await asyncio.sleep(1.0)  # a late double would show here
            for daemon in daemons:
                await daemon.stop()
            outcome = count(f"{plan.instances} instances, rolling restart", writers.pushed, database,
                            telegram_sent(tg),
                            workdir / "rolling", started, end="users stopped writing",
                            forwarded=[lb.forwarded[d.port] for d in daemons], failovers=lb.failovers)
    finally:
        server.stop()
    print("\n".join(block(outcome)))
    print(f"  waits before the restarts: {waits(writers, started, first)}")
    print(f"  waits during the restarts ({last - first:.1f} s): {waits(writers, first, last)}")
    print(f"  waits after the restarts: {waits(writers, last, float('inf'))}")
    longest = max((writers.answered_at[m] - writers.pushed_at[m] for m in writers.pushed
                   if m in writers.answered_at), default=0.0)
    unanswered = sum(1 for m in writers.pushed if m not in writers.answered_at)
    print(f"rolling restart: lost {outcome.lost}, twice {outcome.twice}, out of order "
          f"{outcome.out_of_order}, never answered {unanswered}; longest wait {longest:.2f} s against "
          f"lease_ttl + 2 s = {limit:g} s "
          f"({'met' if longest <= limit and not unanswered else 'MISSED'}); load average "
          f"{os.getloadavg()[0]:.2f}")
