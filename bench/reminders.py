"""Reminders: what setting one costs, what loading many costs at start, and how late they arrive.

Usage: .venv/bin/python -m bench.reminders [--set 2000] [--users 100] [--due 50]

Three figures with the real Store, ReminderTools, ReminderSchedule and APScheduler on the real
clock, delivering to an in-process FakeChannel: `set_reminder` calls (parse, store, schedule) in
ms; `ReminderSchedule.start` with that many pending reminders in s; and for `--due` reminders set
to fall due 1-2 s ahead, how long after its time each reached the channel (ms). Prints figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bot.config import parse_config
from bot.core.log import configure_logging
from bot.core.messages import ChatRef, OutboundMessage
from bot.core.session_key import build
from bot.schedule.reminder_tools import ReminderTools
from bot.schedule.reminders import ReminderSchedule
from bot.store import Store
from bot.testing.fake_channel import FakeChannel
from bot.tools.base import ToolContext


class TimedChannel(FakeChannel):
    """Records when each reminder reached it."""

    def __init__(self) -> None:
        super().__init__("telegram")
        self.arrived: list[float] = []

    async def send(self, message: OutboundMessage, on_chunk: Any = None) -> list[str]:
        self.arrived.append(time.time())
        return await super().send(message, on_chunk)


def context(user: int, now: float) -> ToolContext:
    key = build("main", "telegram", "direct", str(user))
    return ToolContext(session_key=key, chat=ChatRef("telegram", str(user)), user_id=str(user),
                       request_id=0, is_admin=False, shared=False, now=now, timezone="Europe/Berlin")


def ms(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"median {statistics.median(ordered):.2f} ms, p99 {p99:.2f} ms, max {ordered[-1]:.2f} ms"


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as folder:
        config = parse_config({"database": {"path": str(Path(folder) / "s.db")},
                               "reminders": {"max_pending": args.set}}, "<bench>")
        async with Store.open(config.database_path()) as store:
            channel = TimedChannel()
            schedule = ReminderSchedule(lambda: config, store, {"telegram": channel})
            tools = ReminderTools(store, lambda: config.reminders, schedule)
            (set_tool,) = [t for t in tools.tools() if t.name == "set_reminder"]
            await schedule.start()
            costs: list[float] = []
            for n in range(args.set):
                started = time.perf_counter()
                await set_tool.run({"text": f"r{n}", "when": f"in {n % 300 + 10} days"},
                                   context(n % args.users, time.time()))
                costs.append((time.perf_counter() - started) * 1000)
            await schedule.close(1)
            print(f"set_reminder ({args.set} calls, {args.users} users): {ms(costs)}")

            loading = ReminderSchedule(lambda: config, store, {"telegram": channel})
            started = time.perf_counter()
            await loading.start()
            await loading.wait_idle()
            print(f"start with {args.set} pending reminders: {time.perf_counter() - started:.2f} s")

            (set_due,) = [t for t in ReminderTools(store, lambda: config.reminders, loading).tools()
                          if t.name == "set_reminder"]
            now = time.time()
            dues = [now + 1.0 + i / args.due for i in range(args.due)]
            for i, due in enumerate(dues):
                result = await set_due.run({"text": f"due {i}", "when": _iso(due)}, context(1, time.time()))
                assert not result.is_error, result.content
            await asyncio.sleep(dues[-1] - time.time() + 1.0)
            await loading.wait_idle()
            await loading.close(1)
            late = [(arrived - due) * 1000 for arrived, due in zip(channel.arrived, dues, strict=False)]
            print(f"{len(channel.arrived)}/{args.due} due reminders delivered; after their time: {ms(late)}")
    print(f"load average {os.getloadavg()[0]:.2f}")


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()


if __name__ == "__main__":
    devnull = open(os.devnull, "w")  # noqa: SIM115  (the logs go nowhere while measuring)
    configure_logging("WARNING", "json", stream=devnull)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", type=int, default=2000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--due", type=int, default=50)
    asyncio.run(main(parser.parse_args()))
