"""Pictures on Telegram: what a photo costs between Telegram and the model, against a text message.

Usage: .venv/bin/python -m bench.media_intake [--samples 20]

The daemon runs with the real TelegramChannel against the local Bot API stand-in (in this process)
and an in-process brain that records what it is sent. For a text message and photos of 100 KB,
1 MB and 5 MB it prints the median time from the update being queued at the Bot API to the reply
reaching it (intake, getFile, download, keeping the file, the context, building the image block
and the reply), and the size of the model request's turns.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from telegram.ext import AIORateLimiter

from bench.instant_brain import InstantBrain
from bot.config import parse_config
from bot.core.log import configure_logging
from bot.daemon.assembly import Daemon
from bot.models.brain import Completion, ReplyRequest
from bot.testing.telegram_api import TelegramStandIn, private_chat, user
from channels.telegram.channel import TelegramChannel


class RecordingBrain(InstantBrain):
    """Replies at once and remembers the size of the last request's turns."""

    last_bytes = 0

    async def reply(self, request: ReplyRequest) -> Completion:
        self.last_bytes = len(json.dumps(request.messages))
        return await super().reply(request)


async def bench(samples: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with TelegramStandIn() as tg:
            config = parse_config({
                "database": {"path": str(Path(tmp) / "bench.db")},
                "channels": {"telegram": {"enabled": True, "base_url": tg.base_url, "dm_policy": "open"}},
                "semantic": {"enabled": "off"},
            }, str(Path(tmp) / "config.toml"))
            channel = TelegramChannel(config.channels.telegram, agent_id="main", token=tg.token,
                                      rate_limiter=AIORateLimiter(overall_max_rate=0, group_max_rate=0))
            brain = RecordingBrain()
            daemon = Daemon(config, [channel], brain=brain)
            task = asyncio.create_task(daemon.run())
            try:
                await asyncio.wait_for(channel.ready.wait(), 10)
                print(f"{'message':<14}{'median ms':>10}{'p90 ms':>9}{'request KB':>12}")
                kinds = (("text", 0), ("photo 100 KB", 100_000), ("photo 1 MB", 1_000_000),
                         ("photo 5 MB", 4_999_000))
                for k, (name, size) in enumerate(kinds):
                    times = []
                    for n in range(samples):
                        ada = user(10_000 * (k + 1) + n, "Ada")  # a fresh chat each time: one message
                        fields = {"text": "hello"} if not size else {"photo": tg.photo_sizes(
                            (1280, 960, b"\xff\xd8\xff\xe0" + bytes([n % 251]) * (size - 6) + b"\xff\xd9"))}
                        before = len(tg.sent)
                        started = time.perf_counter()
                        tg.push_message(private_chat(ada), ada, **fields)
                        await tg.wait_for(lambda before=before: len(tg.sent) > before, timeout=60)
                        times.append((time.perf_counter() - started) * 1000)
                    p90 = statistics.quantiles(times, n=10)[-1] if len(times) > 1 else times[0]
                    print(f"{name:<14}{statistics.median(times):>10.1f}{p90:>9.1f}"
                          f"{brain.last_bytes / 1000:>12.0f}")
            finally:
                daemon.request_stop()
                await asyncio.wait_for(task, 30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20)
    samples = parser.parse_args().samples
    with open(os.devnull, "w") as sink:  # the production log setting, written nowhere
        configure_logging("INFO", "json", secrets=[], stream=sink)
        asyncio.run(bench(samples))


if __name__ == "__main__":
    main()
