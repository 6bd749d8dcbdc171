"""Turns per second through the real Router + TurnRunner + Store with an instant in-process brain.

Usage: .venv/bin/python bench/router_throughput.py [--sessions 100] [--turns 5000] [--warmup 15]
       [--max-concurrent N] [--profile FILE]

100 client coroutines (one per session) each send a message, wait for the reply to be sent, and
send the next (closed loop). A warm-up of `--warmup` turns per session fills every session's
lookback first, so timed turns run triage (answered instantly). Two runs: logging at WARNING, and
the production setting (INFO turn line rendered as JSON to /dev/null). Prints figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bot.brain import Completion, ReplyRequest  # noqa: E402
from bot.config import parse_config  # noqa: E402
from bot.log import configure_logging  # noqa: E402
from bot.messages import OutboundMessage  # noqa: E402
from bot.router import Router  # noqa: E402
from bot.store import Store  # noqa: E402
from bot.turn import TurnRunner  # noqa: E402
from tests.fakes import FakeChannel  # noqa: E402

TARGET_TURNS_PER_S = 1000.0
_WORDS = str.split(
    "please remind me about the meeting tomorrow what was the name of that restaurant we talked "
    "about can you summarise the notes from last week check the deploy log for errors thanks "
    "sure sounds good how long does the train take to the airport and what about coffee"
)


class InstantCompleter:
    async def complete(self, prompt: str, *, system: str, model: str, deadline: float) -> Completion:
        return Completion('{"relevant":[1,2]}', model, len(prompt) // 4, 8)


class InstantBrain:
    """Replies and triages at once, with no I/O."""

    def __init__(self) -> None:
        self._completer = InstantCompleter()

    async def reply(self, request: ReplyRequest) -> Completion:
        return Completion("Sure, noted. Anything else?", "bench-main", 120, 7)

    def fast_completer(self) -> InstantCompleter:
        return self._completer

    def model_for(self, role: str) -> str:
        return {"fast": "bench-fast", "main": "bench-main"}.get(role, role)


class RecordingChannel(FakeChannel):
    """FakeChannel that also wakes the client waiting for a reply in that chat."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: dict[str, asyncio.Future[float]] = {}

    async def send(self, message: OutboundMessage) -> list[str]:
        ids = await super().send(message)
        future = self.waiting.pop(message.chat.chat_id, None)
        if future is not None and not future.done():
            future.set_result(time.perf_counter())
        return ids


def _text(rng: random.Random) -> str:
    words: list[str] = []
    target = rng.randint(50, 300)
    while sum(len(w) + 1 for w in words) < target:
        words.append(rng.choice(_WORDS))
    return " ".join(words)


@dataclass
class RunResult:
    label: str
    turns: int
    wall_s: float
    cpu_s: float
    latencies_ms: list[float]
    sent: int


async def run_once(
    label: str, db: Path, *, sessions: int, turns: int, warmup: int, max_concurrent: int | None,
) -> RunResult:
    data: dict[str, object] = {"database": {"path": str(db)}}
    if max_concurrent is not None:
        data["router"] = {"max_concurrent_turns": max_concurrent}
    config = parse_config(data, "<bench>")
    channel = RecordingChannel()
    rng = random.Random(5)
    counter = iter(range(1, 10**9))
    async with Store.open(config.database_path()) as store:
        runner = TurnRunner(config, store, InstantBrain(), {channel.provider: channel})
        router = Router(store, runner, max_concurrent=config.router.max_concurrent_turns)
        latencies: list[float] = []

        async def client(peer: str, count: int, record: bool) -> None:
            loop = asyncio.get_running_loop()
            kind = "group" if int(peer) % 10 == 9 else "direct"
            for _ in range(count):
                inbound = channel.message(_text(rng), kind=kind, peer=peer, sender=peer,
                                          message_id=str(next(counter)))
                future: asyncio.Future[float] = loop.create_future()
                channel.waiting[peer] = future
                started = time.perf_counter()
                await router.submit(inbound)
                sent_at = await future
                if record:
                    latencies.append((sent_at - started) * 1000)

        peers = [str(1000 + i) for i in range(sessions)]
        await asyncio.gather(*(client(p, warmup, False) for p in peers))
        await router.idle()
        per_session, extra = divmod(turns, sessions)
        counts = [per_session + (1 if i < extra else 0) for i in range(sessions)]
        sent_before = len(channel.sent)
        cpu_before = _cpu()
        started = time.perf_counter()
        await asyncio.gather(*(client(p, n, True) for p, n in zip(peers, counts, strict=True)))
        await router.idle()
        wall = time.perf_counter() - started
        cpu = _cpu() - cpu_before
        await router.close(1.0)
    return RunResult(label, turns, wall, cpu, latencies, len(channel.sent) - sent_before)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def report(result: RunResult) -> None:
    rate = result.turns / result.wall_s
    lat = sorted(result.latencies_ms)
    p99 = lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))]
    print(f"[{result.label}]")
    print(f"  turns {result.turns} (replies sent {result.sent}) in {result.wall_s:.2f} s "
          f"-> {rate:,.0f} turns/s  ({'target met' if rate >= TARGET_TURNS_PER_S else 'TARGET MISSED'}: "
          f">= {TARGET_TURNS_PER_S:,.0f})")
    print(f"  per-turn overhead: wall/turn {result.wall_s / result.turns * 1000:.3f} ms, "
          f"CPU/turn {result.cpu_s / result.turns * 1000:.3f} ms (both threads)")
    print(f"  submit -> reply sent: mean {statistics.fmean(lat):.2f} ms, "
          f"median {statistics.median(lat):.2f} ms, p99 {p99:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--turns", type=int, default=5000, help="timed turns in all")
    parser.add_argument("--warmup", type=int, default=15, help="untimed turns per session first")
    parser.add_argument("--max-concurrent", type=int, default=None,
                        help="router.max_concurrent_turns (default: the config default)")
    parser.add_argument("--only", choices=("quiet", "production"), help="run one logging setup")
    parser.add_argument("--profile", metavar="FILE", help="write a cProfile of the runs to FILE")
    args = parser.parse_args()

    limit = args.max_concurrent or parse_config({}, "<bench>").router.max_concurrent_turns
    print(f"router throughput: {args.sessions} concurrent sessions, {args.turns} timed turns, "
          f"{args.warmup} warm-up turns per session, max_concurrent_turns={limit}, instant brain")
    devnull = open(os.devnull, "w")  # noqa: SIM115 - lives for the whole process
    setups = [("quiet", "WARNING", "logging at WARNING"),
              ("production", "INFO", "production logging: INFO turn line as JSON to /dev/null")]
    profiler = cProfile.Profile() if args.profile else None
    with tempfile.TemporaryDirectory(prefix="sb-bench-") as tmp:
        for name, level, label in setups:
            if args.only and args.only != name:
                continue
            configure_logging(level, "json", [], stream=devnull)
            if profiler:
                profiler.enable()
            result = asyncio.run(run_once(
                label, Path(tmp) / f"{name}.db", sessions=args.sessions, turns=args.turns,
                warmup=args.warmup, max_concurrent=args.max_concurrent,
            ))
            if profiler:
                profiler.disable()
            report(result)
    if profiler:
        profiler.dump_stats(args.profile)
        print(f"profile written to {args.profile}")


if __name__ == "__main__":
    main()
