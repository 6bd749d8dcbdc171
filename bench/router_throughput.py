"""Turns per second through the real Router + TurnRunner + Store with an instant in-process brain.

Usage: .venv/bin/python -m bench.router_throughput [--sessions 100] [--turns 5000] [--warmup 15]
       [--repeat 3] [--max-concurrent N] [--only quiet|production] [--pin-cpu N] [--profile FILE]

100 client coroutines (one per session) each send a message, wait for the reply to be sent, and
send the next (closed loop). A warm-up of `--warmup` turns per session fills every session's
lookback first, so timed turns run triage (answered instantly). Two setups, `--repeat` runs each on
a fresh database: logging at WARNING, and the production setting (INFO turn line rendered as JSON
to /dev/null). Prints figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import random
import resource
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.instant_brain import InstantBrain
from bot.config import parse_config
from bot.core.log import configure_logging
from bot.core.messages import OutboundMessage
from bot.intake.router import Router
from bot.store import Store
from bot.testing.fake_channel import FakeChannel
from bot.turn.runner import TurnRunner

TARGET_TURNS_PER_S = 1000.0
REPLY_TIMEOUT = 30.0
_WORDS = str.split(
    "please remind me about the meeting tomorrow what was the name of that restaurant we talked "
    "about can you summarise the notes from last week check the deploy log for errors thanks "
    "sure sounds good how long does the train take to the airport and what about coffee"
)


class RecordingChannel(FakeChannel):
    """FakeChannel that also wakes the client waiting for a reply in that chat."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: dict[str, asyncio.Future[float]] = {}

    async def send(self, message: OutboundMessage, on_chunk: Any = None) -> list[str]:
        ids = await super().send(message, on_chunk)
        future = self.waiting.pop(message.chat.chat_id, None)
        if future is not None and not future.done():
            future.set_result(time.perf_counter())
        return ids


def _texts(rng: random.Random, count: int) -> list[str]:
    """Message texts of 50-300 characters, made before timing starts."""
    corpus = " ".join(rng.choice(_WORDS) for _ in range(20_000))
    texts = []
    for _ in range(count):
        length = rng.randint(50, 300)
        start = rng.randrange(len(corpus) - length)
        texts.append(corpus[start : start + length].strip())
    return texts


@dataclass
class RunResult:
    label: str
    turns: int
    wall_s: float
    cpu_s: float
    main_cpu_s: float
    latencies_ms: list[float]
    sent: int


async def run_once(
    label: str, db: Path, *, sessions: int, turns: int, warmup: int, max_concurrent: int | None,
) -> RunResult:
    # Semantic off: its worker would embed the generated history while turns are timed.
    data: dict[str, object] = {"database": {"path": str(db)}, "semantic": {"enabled": "off"}}
    if max_concurrent is not None:
        data["router"] = {"max_concurrent_turns": max_concurrent}
    config = parse_config(data, "<bench>")
    channel = RecordingChannel()
    texts = _texts(random.Random(5), 1024)
    # Inbound platform ids live far from the ids FakeChannel gives its replies (1001, 1002, ...):
    # on a real platform both directions share one id space per chat, so they never collide.
    counter = iter(range(10**8, 10**9))
    async with Store.open(config.database_path()) as store:
        runner = TurnRunner(config, store, InstantBrain(), {channel.provider: channel})
        router = Router(store, runner, max_concurrent=config.router.max_concurrent_turns)
        latencies: list[float] = []

        async def client(peer: str, count: int, record: bool) -> None:
            loop = asyncio.get_running_loop()
            kind = "group" if int(peer) % 10 == 9 else "direct"
            for index in range(count):
                text = texts[(int(peer) * 31 + index) % len(texts)]
                inbound = channel.message(text, kind=kind, peer=peer, sender=peer,
                                          message_id=str(next(counter)))
                future: asyncio.Future[float] = loop.create_future()
                channel.waiting[peer] = future
                started = time.perf_counter()
                if await router.submit(inbound) is None:
                    raise RuntimeError(f"inbound {inbound.provider_message_id} taken as a duplicate")
                try:
                    async with asyncio.timeout(REPLY_TIMEOUT):
                        sent_at = await future
                except TimeoutError:
                    raise RuntimeError(f"no reply in chat {peer} within {REPLY_TIMEOUT:g} s (a failed "
                                       "turn is logged, but this bench logs to /dev/null)") from None
                if record:
                    latencies.append((sent_at - started) * 1000)

        peers = [str(1000 + i) for i in range(sessions)]
        await asyncio.gather(*(client(p, warmup, False) for p in peers))
        await router.idle()
        per_session, extra = divmod(turns, sessions)
        counts = [per_session + (1 if i < extra else 0) for i in range(sessions)]
        sent_before = len(channel.sent)
        cpu_before = _cpu()
        main_before = time.thread_time()
        started = time.perf_counter()
        await asyncio.gather(*(client(p, n, True) for p, n in zip(peers, counts, strict=True)))
        await router.idle()
        wall = time.perf_counter() - started
        cpu = _cpu() - cpu_before
        main_cpu = time.thread_time() - main_before
        await router.close(1.0)
    return RunResult(label, turns, wall, cpu, main_cpu, latencies, len(channel.sent) - sent_before)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def report(label: str, results: list[RunResult]) -> None:
    """The best of the repeats (least disturbed by other processes), and the spread."""
    rates = sorted(r.turns / r.wall_s for r in results)
    best = max(results, key=lambda r: r.turns / r.wall_s)
    rate = best.turns / best.wall_s
    lat = sorted(best.latencies_ms)
    p99 = lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))]
    verdict = "target met" if rate >= TARGET_TURNS_PER_S else "TARGET MISSED"
    print(f"[{label}]")
    print(f"  {len(results)} runs of {best.turns} turns: "
          f"{', '.join(f'{r:,.0f}' for r in rates)} turns/s")
    print(f"  best: {rate:,.0f} turns/s ({verdict}: >= {TARGET_TURNS_PER_S:,.0f}); "
          f"median of runs {statistics.median(rates):,.0f} turns/s; replies sent {best.sent}")
    print(f"  per-turn overhead (best run): wall/turn {best.wall_s / best.turns * 1000:.3f} ms, "
          f"CPU/turn {best.cpu_s / best.turns * 1000:.3f} ms (event-loop thread "
          f"{best.main_cpu_s / best.turns * 1000:.3f}, SQLite thread and rest "
          f"{(best.cpu_s - best.main_cpu_s) / best.turns * 1000:.3f})")
    print(f"  submit -> reply sent (best run, {best.turns} turns, queueing included): "
          f"mean {statistics.fmean(lat):.2f} ms, median {statistics.median(lat):.2f} ms, "
          f"p99 {p99:.2f} ms")
    print(f"  load average {os.getloadavg()[0]:.2f} (other processes share the 2 cores)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--turns", type=int, default=5000, help="timed turns in all, per run")
    parser.add_argument("--warmup", type=int, default=15, help="untimed turns per session first")
    parser.add_argument("--repeat", type=int, default=3, help="runs per logging setup (best shown)")
    parser.add_argument("--max-concurrent", type=int, default=None,
                        help="router.max_concurrent_turns (default: the config default)")
    parser.add_argument("--only", choices=("quiet", "production"), help="run one logging setup")
    parser.add_argument("--profile", metavar="FILE", help="write a cProfile of the runs to FILE")
    parser.add_argument("--pin-cpu", type=int, metavar="N",
                        help="run every thread on CPU N (no cross-core wake-ups of the SQLite thread)")
    args = parser.parse_args()
    if args.pin_cpu is not None:
        os.sched_setaffinity(0, {args.pin_cpu})

    limit = args.max_concurrent or parse_config({}, "<bench>").router.max_concurrent_turns
    print(f"router throughput: {args.sessions} concurrent sessions, {args.turns} timed turns per run, "
          f"{args.warmup} warm-up turns per session, max_concurrent_turns={limit}, instant brain, "
          f"CPUs {sorted(os.sched_getaffinity(0))}")
    devnull = open(os.devnull, "w")  # noqa: SIM115 - lives for the whole process
    setups = [("quiet", "WARNING", "logging at WARNING"),
              ("production", "INFO", "production logging: INFO turn line as JSON to /dev/null")]
    profiler = cProfile.Profile() if args.profile else None
    with tempfile.TemporaryDirectory(prefix="sb-bench-") as tmp:
        for name, level, label in setups:
            if args.only and args.only != name:
                continue
            configure_logging(level, "json", [], stream=devnull)
            results = []
            for run in range(args.repeat):
                if profiler:
                    profiler.enable()
                results.append(asyncio.run(run_once(
                    label, Path(tmp) / f"{name}-{run}.db", sessions=args.sessions,
                    turns=args.turns, warmup=args.warmup, max_concurrent=args.max_concurrent,
                )))
                if profiler:
                    profiler.disable()
            report(label, results)
    if profiler:
        profiler.dump_stats(args.profile)
        print(f"profile written to {args.profile}")


if __name__ == "__main__":
    main()
