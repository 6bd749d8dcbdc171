"""A 300-turn chat's billed input tokens with Anthropic's prompt cache and without.

Usage: flock /tmp/bench.lock .venv/bin/python -m bench.prompt_cache [--turns 300] [--seed 3]
       [--only NAME ...]

Every turn of long_conversation.py's generated chat (its seeded messages, its scripted model)
runs through the real `Daemon` (inbox, router, `TurnRunner`, context, the shipped tools offered,
SQLite `Store` in a temp dir) and the real SDK brain against the Anthropic API stand-in, which
meters each request as the API bills it (bot/testing/prompt_cache.py): a prefix up to each
`cache_control` breakpoint is cached when it reaches the model family's minimum (1 024 tokens
for Sonnet and Opus, 2 048 for Haiku; about four characters a token, plus the API's 346-token
tool-use prompt), read by a later request with the same bytes up to there, and kept five
minutes from its last use. "Without" is the same chat billed by a stand-in that caches nothing
(as the API bills requests that carry no breakpoint).

The stand-in's clock moves between turns by a seeded gap, so the five minutes matter: "steady"
(one message a minute), "mixed" (most within two minutes, some after 2-5 minutes, one in ten
after a break of 6 minutes to 8 hours) and "sparse" (every message more than five minutes after
the last). The daemon's own clock is real (the time in the per-turn prompt is after the
breakpoints, so it changes nothing here).

Billed input = uncached input + 1.25 × cache writes + 0.1 × cache reads (five-minute entries),
in input-token equivalents, for the reply requests (the model that has the tools) and for every
call (triage by the fast model included). Then, from the recorded requests, what a third
breakpoint on the last message of each request would have billed (the conversation prefix
cached too), replayed through the same cache on the same clock. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.long_conversation import ScriptedModel, generate
from bot.config import parse_config
from bot.core.log import configure_logging
from bot.daemon.assembly import Daemon
from bot.daemon.notify import Notifier
from bot.models.brain import AnthropicBrain
from bot.testing.anthropic_api import AnthropicStandIn, PromptCache
from bot.testing.fake_channel import FakeChannel
from bot.testing.prompt_cache import Metered

SONNET, HAIKU, FAST, API_KEY = "bench-sonnet", "bench-haiku", "bench-fast-haiku", "bench-key"
WRITE, READ = 1.25, 0.1
TTL = 300.0


def billed(metered: list[Metered]) -> float:
    return sum(m.input_tokens + WRITE * m.cache_write_tokens + READ * m.cache_read_tokens for m in metered)


def gaps(pace: str, turns: int, seed: int) -> list[float]:
    """Seconds before each turn (the first: none)."""
    rng = random.Random(seed)

    def one() -> float:
        if pace == "steady":
            return 60.0
        if pace == "sparse":
            return rng.uniform(TTL + 60, 8 * 3600)
        roll = rng.random()
        if roll < 0.7:
            return rng.uniform(10, 120)
        if roll < 0.9:
            return rng.uniform(120, TTL)
        return rng.uniform(TTL + 60, 8 * 3600)

    return [0.0] + [one() for _ in range(turns - 1)]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Run:
    """One chat, billed by one stand-in: per reply request and for every call."""

    replies: list[Metered] = field(default_factory=list)
    others: list[Metered] = field(default_factory=list)
    sent: list[tuple[float, dict[str, Any]]] = field(default_factory=list)  # (clock, reply body)
    prefixes: set[str] = field(default_factory=set)  # distinct tools + stable system seen


async def chat(model: str, pairs: list[tuple[str, str]], waits: list[float], caching: bool,
               folder: Path) -> Run:
    run = Run()
    clock = Clock()
    scripted = ScriptedModel(pairs)
    channel = FakeChannel()
    async with AnthropicStandIn(prompt_cache=PromptCache(enabled=caching, clock=clock)) as api:
        api.default = scripted
        config = parse_config({
            "database": {"path": str(folder / f"{model}-{caching}-{time.monotonic_ns()}.db")},
            "anthropic": {"base_url": api.base_url, "model": model, "fast_model": FAST},
            "semantic": {"enabled": "off"},
        }, "<bench>")
        brain = AnthropicBrain(config.anthropic, API_KEY)
        daemon = Daemon(config, [channel], brain=brain, notifier=Notifier(None))
        task = asyncio.create_task(daemon.run())
        try:
            await asyncio.wait_for(daemon.started.wait(), 10)
            assert daemon.router is not None
            for turn, ((user, _), wait) in enumerate(zip(pairs, waits, strict=True), start=1):
                clock.now += wait
                scripted.turn = turn
                seen = api.count
                await channel.inject(channel.message(user, message_id=f"in-{turn}"))
                await daemon.router.idle()
                for rec in api.requests[seen:]:
                    assert rec.metered is not None, "a request was not answered"
                    if rec.model == model:
                        run.replies.append(rec.metered)
                        run.sent.append((clock.now, rec.body))
                        run.prefixes.add(repr((rec.body.get("tools"), rec.body["system"][0])))
                    else:
                        run.others.append(rec.metered)
        finally:
            daemon.request_stop()
            await asyncio.wait_for(task, 30)
            await brain.aclose()
    return run


def with_message_breakpoint(body: dict[str, Any], at: float, *, time_moves: bool) -> dict[str, Any]:
    """The request with its last message's last block marked for caching too. The per-turn system
    part (before the messages) carries the time: `time_moves` sets it from the stand-in's clock, as
    a real chat's minutes would; else one constant, as if it had moved after the breakpoint."""
    marked = copy.deepcopy(body)
    now = f"minute {int(at // 60)}" if time_moves else "(after the breakpoint)"
    for block in marked["system"][1:]:
        block["text"] = re.sub(r"Current time: .*", f"Current time: {now}", block["text"])
    last = marked["messages"][-1]
    if isinstance(last["content"], str):
        last["content"] = [{"type": "text", "text": last["content"]}]
    last["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return marked


def replay(sent: list[tuple[float, dict[str, Any]]], *, time_moves: bool) -> list[Metered]:
    clock = Clock()
    cache = PromptCache(clock=clock)
    metered = []
    for at, body in sent:
        clock.now = at
        metered.append(cache.meter(with_message_breakpoint(body, at, time_moves=time_moves)))
    return metered


def line(label: str, metered: list[Metered], baseline: float | None = None) -> str:
    inputs = sum(m.input_tokens for m in metered)
    written = sum(m.cache_write_tokens for m in metered)
    read = sum(m.cache_read_tokens for m in metered)
    hits = sum(m.cache_read_tokens > 0 for m in metered)
    cost = billed(metered)
    saving = ""
    if baseline:
        saving = (f"saves {1 - cost / baseline:.1%}" if cost <= baseline
                  else f"costs {cost / baseline - 1:.1%} more")
    return (f"| {label} | {cost:,.0f} | {inputs:,} | {written:,} | {read:,} | {hits}/{len(metered)} "
            f"| {saving} |")


SCENARIOS = [("sonnet-class, steady", SONNET, "steady"), ("sonnet-class, mixed", SONNET, "mixed"),
             ("sonnet-class, sparse", SONNET, "sparse"), ("haiku-class, mixed", HAIKU, "mixed")]


async def scenario(label: str, model: str, pace: str, pairs: list[tuple[str, str]], seed: int,
                   folder: Path) -> None:
    waits = gaps(pace, len(pairs), seed)
    long_gaps = sum(w > TTL for w in waits)
    started = time.perf_counter()
    cached = await chat(model, pairs, waits, True, folder)
    plain = await chat(model, pairs, waits, False, folder)
    wall = time.perf_counter() - started
    first = cached.replies[0]
    print(f"\n### {label}: {len(pairs)} turns, {long_gaps} after more than 5 minutes "
          f"({wall:.0f} s for both runs)")
    print(f"tools + stable system prompt: {first.cache_write_tokens or 'under the minimum, not'} "
          f"{'tokens written by the first turn' if first.cache_write_tokens else 'cached'}; "
          f"{len(cached.prefixes)} distinct such prefix(es) over the chat")
    print("| requests | billed input (token equivalents) | uncached input | cache writes | cache reads "
          "| calls that read | saving |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    base = billed(plain.replies)
    print(line("replies, without cache", plain.replies))
    print(line("replies, with cache (tools + stable system)", cached.replies, base))
    print(line("replies, + a breakpoint on the last message (replayed)",
               replay(cached.sent, time_moves=True), base))
    print(line("replies, + a breakpoint on the last message, the time moved after it (replayed)",
               replay(cached.sent, time_moves=False), base))
    every = billed(plain.replies + plain.others)
    print(line("every call (triage too), without cache", plain.replies + plain.others))
    print(line("every call (triage too), with cache", cached.replies + cached.others, every))


async def main_async(args: argparse.Namespace) -> None:
    pairs = generate(args.turns, args.seed)
    chosen = [s for s in SCENARIOS if not args.only or any(part in s[0] for part in args.only)]
    with tempfile.TemporaryDirectory(prefix="sb-bench-") as tmp:
        for label, model, pace in chosen:
            await scenario(label, model, pace, pairs, args.seed, Path(tmp))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300, help="turns in the chat (>= 10)")
    parser.add_argument("--seed", type=int, default=3, help="seed of the chat and its pauses")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="run only scenarios whose name contains NAME (repeatable)")
    args = parser.parse_args()
    if args.turns < 10:
        parser.error("--turns must be at least 10")
    configure_logging("WARNING", "console", [], stream=sys.stderr)
    print(f"prompt cache: a {args.turns}-turn chat (long_conversation.py's, seed {args.seed}); billed "
          f"input = uncached + {WRITE} × cache writes + {READ} × cache reads")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
