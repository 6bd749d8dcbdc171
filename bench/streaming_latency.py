"""Time to first visible text, with and without streaming, on Telegram and Discord.

Usage: .venv/bin/python -m bench.streaming_latency [--samples 3] [--first-token 0.5] [--seconds 4]

The daemon runs with the real TelegramChannel (python-telegram-bot) and the real DiscordChannel
(discord.py) against their local stand-ins, and the real SDK brain against an Anthropic stand-in
that writes slowly: `--first-token` seconds before the first text, then a ~700-character reply in
60 deltas over `--seconds`. For each chat kind and `streaming = "auto"` / `"off"`, one message at
a time, it reports (median over `--samples`) the time from the message reaching the platform
stand-in to:
- first text: the first thing with reply text the stand-in received (a draft, the preview
  message, or, streaming off, the reply itself);
- complete: the whole reply on screen (the final message, or the preview's last edit).
Every time is read from the stand-ins' own clocks (time.monotonic(), one clock in one process).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from bot.config import Config, parse_config
from bot.core.log import configure_logging
from bot.daemon.assembly import Daemon
from bot.models.brain import AnthropicBrain
from bot.testing.anthropic_api import AnthropicStandIn, Text
from bot.testing.discord_api import DiscordStandIn
from bot.testing.discord_api import user as discord_user
from bot.testing.telegram_api import (
    TelegramStandIn,
    group_chat,
    mention_entities,
    private_chat,
)
from bot.testing.telegram_api import user as telegram_user
from channels.discord.channel import DiscordChannel
from channels.telegram.channel import TelegramChannel

REPLY = " ".join(
    f"Point {n}: the moon pulls the sea toward it, and the earth turns under that bulge." for n in range(8)
)
BOT_ID, ALICE_ID, GUILD, GENERAL = 900_000_000_000_000_000, 100_000_000_000_000_001, 100, 101
ADA = telegram_user(42, "Ada")
WAIT = 60.0


def build_config(tmp: str, tg: TelegramStandIn, api: AnthropicStandIn, streaming: str) -> Config:
    groups = [-100_000 - n for n in range(200)]
    return parse_config({
        "database": {"path": str(Path(tmp) / f"bench-{streaming}.db")},
        "anthropic": {"base_url": api.base_url, "model": "bench-model", "fast_model": "bench-fast",
                      "timeout": 60.0, "max_retries": 0},
        "semantic": {"enabled": "off"},
        "channels": {
            "console": {"enabled": False},
            "telegram": {"enabled": True, "base_url": tg.base_url, "allow_from": [42], "groups": groups,
                         "streaming": streaming},
            "discord": {"enabled": True, "allow_from": [ALICE_ID], "guilds": {str(GUILD): {}},
                        "streaming": streaming},
        },
    }, str(Path(tmp) / "config.toml"))


async def until(predicate: Callable[[], Any]) -> Any:
    async with asyncio.timeout(WAIT):
        while not (found := predicate()):  # noqa: ASYNC110 - the stand-ins' lists, read as they grow
            await asyncio.sleep(0.002)
    return found


async def telegram_sample(tg: TelegramStandIn, group: int | None) -> tuple[float, float]:
    """(first text, complete) in seconds for one message in a private chat or a fresh group."""
    drafts, sent, edits = len(tg.drafts), len(tg.sent), len(tg.edits)
    if group is None:
        chat, text, entities = private_chat(ADA), "why are there tides?", None
    else:
        chat = group_chat(group, f"Group {group}", supergroup=True)
        text = "@switchboard_bot why are there tides?"
        entities = mention_entities(text, "switchboard_bot")
    pushed = time.monotonic()
    tg.push_message(chat, ADA, text, entities=entities)
    chat_id = chat["id"]

    def final() -> float | None:
        shown = [m for m in tg.sent[sent:] if m.chat_id == chat_id]
        shown += [e for e in tg.edits[edits:] if e.chat_id == chat_id]
        done = [m.time for m in shown if m.visible_text == REPLY]
        return done[-1] if done else None

    done = await until(final)
    await asyncio.sleep(0.1)
    firsts = [d.time for d in tg.drafts[drafts:] if d.chat_id == chat_id and d.visible_text]
    firsts += [m.time for m in tg.sent[sent:] if m.chat_id == chat_id]
    return min(firsts) - pushed, done - pushed


async def discord_sample(dc: DiscordStandIn) -> tuple[float, float]:
    sent, edits = len(dc.sent), len(dc.edits)
    alice = discord_user(ALICE_ID, "alice")
    pushed = time.monotonic()
    dc.message_create(GENERAL, alice, f"<@{BOT_ID}> why are there tides?", mentions=[BOT_ID])

    def final() -> float | None:
        shown = [(m.content, m.time) for m in dc.sent[sent:]]
        shown += [(e.content, e.time) for e in dc.edits[edits:]]
        done = [at for content, at in shown if content == REPLY]
        return done[-1] if done else None

    done = await until(final)
    await asyncio.sleep(0.1)
    return dc.sent[sent].time - pushed, done - pushed


async def run(args: argparse.Namespace) -> None:
    reply = Text(REPLY, parts=60, delay=args.first_token, delta_delay=args.seconds / 60)
    print(f"model: first text after {args.first_token:.2f} s, then {len(REPLY)} characters in 60 deltas "
          f"over {args.seconds:.1f} s; {args.samples} samples each, medians")
    print(f"{'chat':<26} {'streaming':<10} {'first text':>11} {'complete':>10}")
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        async with AnthropicStandIn() as api, TelegramStandIn() as tg, \
                DiscordStandIn(bot_id=BOT_ID, bot_name="switchboard") as dc:
            api.default = lambda rec: reply
            dc.add_guild(GUILD, "Guild", channels=[(GENERAL, "general")],
                         members=[discord_user(ALICE_ID, "alice")])
            dc.patch(patch)
            groups = iter(range(-100_000, -100_200, -1))
            for streaming in ("auto", "off"):
                config = build_config(tmp, tg, api, streaming)
                scenarios: list[tuple[str, Callable[[], Awaitable[tuple[float, float]]]]] = [
                    ("Telegram private (draft)", lambda: telegram_sample(tg, None)),
                    ("Telegram group (edit)", lambda: telegram_sample(tg, next(groups))),
                    ("Discord channel (edit)", lambda: discord_sample(dc)),
                ]
                await measure(config, tg, dc, streaming, scenarios, args.samples)


async def measure(
    config: Config, tg: TelegramStandIn, dc: DiscordStandIn, streaming: str,
    scenarios: list[tuple[str, Callable[[], Awaitable[tuple[float, float]]]]], samples: int,
) -> None:
    telegram = TelegramChannel(config.channels.telegram, agent_id="main", token=tg.token)
    discord = DiscordChannel(config.channels.discord, agent_id="main", token=dc.token,
                             guild_ready_timeout=0.05)
    brain = AnthropicBrain(config.anthropic, "bench-key")
    daemon = Daemon(config, [telegram, discord], brain=brain)
    task = asyncio.create_task(daemon.run())
    try:
        await asyncio.wait_for(asyncio.gather(telegram.ready.wait(), discord.ready.wait()), 10)
        for name, sample in scenarios:
            results = [await sample() for _ in range(samples)]
            first = statistics.median(r[0] for r in results)
            complete = statistics.median(r[1] for r in results)
            print(f"{name:<26} {streaming:<10} {first:>9.2f} s {complete:>8.2f} s")
    finally:
        daemon.request_stop()
        await asyncio.wait_for(task, 30)
        await brain.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--first-token", type=float, default=0.5,
                        help="seconds before the model's first text")
    parser.add_argument("--seconds", type=float, default=4.0,
                        help="seconds the model takes to write the rest")
    args = parser.parse_args()
    print("command: .venv/bin/python -m bench.streaming_latency " + " ".join(sys.argv[1:]))
    with open(os.devnull, "w") as sink:
        configure_logging("INFO", "json", secrets=[], stream=sink)
        asyncio.run(run(args))
    print(f"load average {os.getloadavg()[0]:.2f} (other processes share the machine)")


if __name__ == "__main__":
    main()
