"""Telegram end to end: updates/s and update→typing latency through the real python-telegram-bot.

Usage: .venv/bin/python bench/telegram_throughput.py [--users 100] [--per-user 30] [--samples 50]

The daemon runs with the real TelegramChannel (python-telegram-bot long polling) against the local
Bot API stand-in on 127.0.0.1 and an instant in-process brain; the rate limiter is built with its
limits off, since it exists to hold us to Telegram's ~30 messages/s and would measure only itself.
Logging is the production setting (INFO JSON lines) into /dev/null.

1. Latency: one update at a time, the time from the update being queued at the Bot API to the
   first sendChatAction for that chat (target ≤ 100 ms). The brain takes 200 ms here: with an
   instant reply the typing action is rightly cancelled before it is sent.
2. Throughput: `users × per-user` updates queued at once; turns/s until every reply is sent
   (target ≥ 300 turns/s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from telegram.ext import AIORateLimiter  # noqa: E402

from bench.instant_brain import InstantBrain  # noqa: E402
from bot.config import parse_config  # noqa: E402
from bot.daemon import Daemon  # noqa: E402
from bot.log import configure_logging  # noqa: E402
from channels.telegram import TelegramChannel  # noqa: E402
from tests.standins.telegram_api import TelegramStandIn, private_chat, user  # noqa: E402

TARGET_TURNS_PER_S = 300.0
TARGET_TYPING_MS = 100.0
MODEL_DELAY = 0.2


async def bench(users: int, per_user: int, samples: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with TelegramStandIn() as tg:
            config = parse_config(
                {
                    "database": {"path": str(Path(tmp) / "bench.db")},
                    "channels": {"telegram": {"enabled": True, "base_url": tg.base_url,
                                              "dm_policy": "open"}},
                },
                str(Path(tmp) / "config.toml"),
            )
            limiter = AIORateLimiter(overall_max_rate=0, group_max_rate=0)
            channel = TelegramChannel(config.channels.telegram, agent_id="main", token=tg.token,
                                      rate_limiter=limiter)
            brain = InstantBrain()
            daemon = Daemon(config, [channel], brain=brain)
            task = asyncio.create_task(daemon.run())
            try:
                await asyncio.wait_for(channel.ready.wait(), 10)
                brain.reply_delay = MODEL_DELAY  # an instant reply would cancel typing before it is sent
                await latency(tg, samples)
                brain.reply_delay = 0.0
                await throughput(tg, users, per_user)
            finally:
                daemon.request_stop()
                await asyncio.wait_for(task, 30)


async def latency(tg: TelegramStandIn, samples: int) -> None:
    person = user(1, "Solo")
    chat = private_chat(person)
    delays = []
    for n in range(samples):
        before = len(tg.sent)
        actions = len(tg.calls_of("sendChatAction"))
        pushed_at = time.monotonic()
        tg.push_message(chat, person, f"sample {n}")
        await tg.wait_for(lambda before=before: len(tg.sent) > before, timeout=10)
        first = tg.calls_of("sendChatAction")[actions]
        delays.append((first.time - pushed_at) * 1000)
    delays.sort()
    p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))]
    print(f"update → first sendChatAction over {samples} updates: median {statistics.median(delays):.1f} ms, "
          f"p99 {p99:.1f} ms, max {delays[-1]:.1f} ms (target ≤ {TARGET_TYPING_MS:.0f} ms)")


async def throughput(tg: TelegramStandIn, users: int, per_user: int) -> None:
    total = users * per_user
    people = [user(1000 + n, f"User{n}") for n in range(users)]
    start_sent = len(tg.sent)
    started = time.perf_counter()
    for round_ in range(per_user):
        for person in people:
            tg.push_message(private_chat(person), person, f"message {round_} from {person['first_name']}")
    await tg.wait_for(lambda: len(tg.sent) - start_sent >= total, timeout=300)
    wall = time.perf_counter() - started
    print(f"{total} updates from {users} users: {wall:.2f} s, {total / wall:.0f} turns/s "
          f"(target ≥ {TARGET_TURNS_PER_S:.0f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--per-user", type=int, default=30)
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()
    with open(os.devnull, "w") as sink:
        configure_logging("INFO", "json", secrets=[], stream=sink)
        asyncio.run(bench(args.users, args.per_user, args.samples))


if __name__ == "__main__":
    main()
