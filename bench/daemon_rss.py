"""RSS and CPU of the daemon under load: 10 k sessions in its database, or a chat service's first
2 000 messages with semantic recall on.

Usage: .venv/bin/python -m bench.daemon_rss [--sessions 10000] [--per-session 20] [--turns 1000]
       [--concurrency 100] [--rate PER_S] [--semantic [--encoder minilm|static]] [--tracemalloc N]
       [--keep DIR]

The parent makes the database (real Store schema, filled with sqlite3 executemany; none with
`--per-session 0`), then starts a child process that runs the real bot.daemon.assembly.Daemon with an
in-process recording channel, an instant brain and production logging (INFO as JSON, to a file it
reads back), drives `--turns` turns across random sessions (chat-like text of 6-45 words, as
bench/context_build.py writes it), stops the daemon cleanly and reports its RSS and CPU.
`--semantic` turns semantic recall on (the shipped model; the embed worker's backlog is waited for
before the RSS after the turns is read, so its vectors count); then the context time of the turn
log and the time from a message's intake to its model request are printed too (median, p90).
`--tracemalloc N` prints the N sites (file:line) whose Python-visible allocations grew most from
start to the end of the turns (numpy's arrays included; native libraries' own allocations, e.g.
OpenBLAS or the tokenizer, are not seen: compare with the RSS). Prints figures only.

The issue's setting, 100 users writing 2 000 direct messages from an empty database:
    .venv/bin/python -m bench.daemon_rss --sessions 100 --per-session 0 --turns 2000 --rate 30 \\
        --semantic
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent


def _status_mib(field: str) -> float:
    """A memory figure from /proc/self/status (Linux), in MiB: VmRSS now, VmHWM the peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _rss_mib() -> float:
    return _status_mib("VmRSS")


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _quantile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


# -- child: the daemon under load -----------------------------------------------------------------


async def _drive(
    db: Path, sessions: int, turns: int, concurrency: int, log_file: TextIO, *, semantic: bool,
    top: int, rate: float, encoder: str = "minilm",
) -> dict[str, Any]:
    from bench.context_build import TextMaker
    from bench.instant_brain import InstantBrain
    from bot.config import parse_config
    from bot.core.log import configure_logging
    from bot.core.messages import OutboundMessage
    from bot.daemon.assembly import Daemon
    from bot.models.brain import Completion, ReplyRequest, TextSink
    from bot.testing.fake_channel import FakeChannel

    injected: dict[str, float] = {}  # a message's mark -> when it was handed to the daemon
    to_request: list[float] = []

    class TimingBrain(InstantBrain):
        """Notes when each message's model request is made (the mark is in its text)."""

        async def reply(self, request: ReplyRequest, on_text: TextSink | None = None) -> Completion:
            content = request.messages[-1]["content"]
            text = content if isinstance(content, str) else json.dumps(content)
            mark = text.rsplit("#", 1)[-1].split()[0].strip('"\\.,]}') if "#" in text else ""
            sent = injected.pop(mark, None)
            if sent is not None:
                to_request.append((time.perf_counter() - sent) * 1000)
            return await super().reply(request, on_text)

    class RecordingChannel(FakeChannel):
        """Wakes the waiting client per chat, in order (replies in one chat come in FIFO order)."""

        def __init__(self) -> None:
            super().__init__()
            self.waiting: dict[str, deque[asyncio.Future[None]]] = {}

        async def send(self, message: OutboundMessage, on_chunk: Any = None) -> list[str]:
            ids = await super().send(message, on_chunk)
            queue = self.waiting.get(message.chat.chat_id)
            if queue:
                queue.popleft().set_result(None)
                if not queue:
                    del self.waiting[message.chat.chat_id]
            # Keep the bench's own bookkeeping out of the figure.
            self.sent.clear()
            self.typing_chats.clear()
            return ids

    configure_logging("INFO", "json", [], stream=log_file)
    figures: dict[str, Any] = {"rss_after_imports_mib": _rss_mib()}
    # Semantic recall off unless asked: its model and its worker embedding the generated history
    # would be measured instead of the daemon's own memory.
    config = parse_config({"database": {"path": str(db)},
                           "semantic": {"enabled": "on" if semantic else "off", "encoder": encoder}},
                          "<bench>")
    channel = RecordingChannel()
    daemon = Daemon(config, [channel], brain=TimingBrain())
    running = asyncio.create_task(daemon.run())
    await channel._ready.wait()
    if daemon.embed_worker is not None:
        await daemon.embed_worker.settled()  # the start's catch-up on the generated history
    figures["rss_after_start_mib"] = _rss_mib()
    if top:
        import tracemalloc

        tracemalloc.start(1)
        before = tracemalloc.take_snapshot()

    rng = random.Random(3)
    maker = TextMaker(random.Random(5), sessions)
    order = [rng.randrange(sessions) for _ in range(turns)]
    pending: deque[int] = deque(order)
    # Platform ids unique to this run (a kept database may be driven again) and far from the ids
    # FakeChannel gives its replies (1001, 1002, ...).
    counter = iter(range(time.time_ns() // 1000, 2**62))
    loop = asyncio.get_running_loop()
    started = time.perf_counter()

    sent = 0

    async def client() -> None:
        nonlocal sent
        while pending:
            index = pending.popleft()
            if rate:  # paced: the n-th message not before n / rate seconds
                sent += 1
                await asyncio.sleep(max(0.0, started + sent / rate - time.perf_counter()))
            kind = "group" if index % 10 == 9 else "direct"
            peer = str(10_000 + index)
            mark = str(next(counter))
            inbound = channel.message(
                f"{maker.text(index)} #{mark}", kind=kind, peer=peer, sender=peer, message_id=mark,
            )
            future: asyncio.Future[None] = loop.create_future()
            channel.waiting.setdefault(peer, deque()).append(future)
            injected[mark] = time.perf_counter()
            await channel.inject(inbound)
            try:
                async with asyncio.timeout(30):
                    await future
            except TimeoutError:
                raise RuntimeError(f"no reply in chat {peer} within 30 s") from None

    cpu = _cpu_seconds()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    figures["drive_seconds"] = time.perf_counter() - started
    if daemon.embed_worker is not None:
        await daemon.embed_worker.settled()  # the turns' vectors are part of their cost
    figures["cpu_ms_per_turn"] = (_cpu_seconds() - cpu) * 1000 / turns
    figures["rss_after_turns_mib"] = _rss_mib()
    figures["to_request_ms"] = [_quantile(to_request, 0.5), _quantile(to_request, 0.9)]
    if top:
        after = tracemalloc.take_snapshot()
        figures["traced_peak_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        figures["top"] = [
            [str(stat.traceback[0]), stat.size_diff / 2**20, stat.count_diff]
            for stat in after.compare_to(before, "lineno")[:top]
        ]
    daemon.request_stop()
    await running
    figures["rss_after_stop_mib"] = _rss_mib()
    return figures


def child(args: argparse.Namespace) -> None:
    log_path = Path(args.child).with_suffix(".log")
    with open(log_path, "w") as log_file:
        figures = asyncio.run(
            _drive(Path(args.child), args.sessions, args.turns, args.concurrency, log_file,
                   semantic=args.semantic, top=args.tracemalloc, rate=args.rate, encoder=args.encoder)
        )
    figures["peak_rss_mib"] = _status_mib("VmHWM")
    figures["ru_maxrss_mib"] = _peak_mib()
    context = []
    for line in log_path.read_text().splitlines():
        if '"context_ms"' in line:
            context.append(float(json.loads(line)["context_ms"]))
    figures["context_ms"] = [_quantile(context, 0.5), _quantile(context, 0.9), len(context)]
    print(json.dumps(figures))


# -- parent ----------------------------------------------------------------------------------------


def parent(args: argparse.Namespace) -> None:
    from bench.context_build import generate_db

    print(f"daemon RSS: {args.sessions:,} sessions x ~{args.per_session} messages in the database, "
          f"{args.turns:,} turns over random sessions, {args.concurrency} at a time, instant brain, "
          f"production logging (INFO, JSON, to a file), semantic recall "
          f"{'on (' + args.encoder + ')' if args.semantic else 'off'}; "
          f"load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="sb-bench-") as tmp:
        folder = Path(args.keep) if args.keep else Path(tmp)
        db = folder / "rss.db"
        for suffix in ("", "-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
        if args.per_session > 0:
            generated = generate_db(db, args.sessions * args.per_session, args.sessions, seed=13)
            print(f"generated {generated.messages:,} messages over {args.sessions:,} sessions in "
                  f"{generated.seconds:.1f} s ({db.stat().st_size / 2**20:.0f} MiB)")
        command = [sys.executable, "-m", "bench.daemon_rss", "--child", str(db),
                   "--sessions", str(args.sessions), "--turns", str(args.turns),
                   "--concurrency", str(args.concurrency), "--tracemalloc", str(args.tracemalloc),
                   "--rate", str(args.rate)]
        if args.semantic:
            command += ["--semantic", "--encoder", args.encoder]
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
        if done.returncode != 0:
            print(done.stdout + done.stderr, file=sys.stderr)
            raise SystemExit(f"daemon child failed with exit code {done.returncode}")
        figures = json.loads(done.stdout.strip().splitlines()[-1])
    rate = args.turns / figures["drive_seconds"]
    print(f"  RSS after imports        {figures['rss_after_imports_mib']:7.1f} MiB")
    print(f"  RSS after daemon start   {figures['rss_after_start_mib']:7.1f} MiB")
    print(f"  RSS after {args.turns:,} turns{'':<{max(0, 9 - len(f'{args.turns:,}'))}}"
          f"{figures['rss_after_turns_mib']:7.1f} MiB  ({rate:,.0f} turns/s)")
    print(f"  RSS after clean stop     {figures['rss_after_stop_mib']:7.1f} MiB")
    print(f"  peak RSS (VmHWM)         {figures['peak_rss_mib']:7.1f} MiB")
    print(f"  CPU per turn             {figures['cpu_ms_per_turn']:7.2f} ms  (user + system, the "
          "turns and their vectors)")
    median, p90, count = figures["context_ms"]
    print(f"  context build (turn log) {median:7.2f} ms median, p90 {p90:.2f} ms over {count:,} turns")
    median, p90 = figures["to_request_ms"]
    print(f"  message -> model request {median:7.2f} ms median, p90 {p90:.2f} ms")
    if "traced_peak_mib" in figures:
        print(f"  Python-visible allocations at their peak (tracemalloc): "
              f"{figures['traced_peak_mib']:.1f} MiB; grown most from start to the end of the turns:")
    for site, mib, count in figures.get("top", []):
        print(f"  {mib:+8.2f} MiB {count:+8d} blocks  {site}")
    print(f"  ru_maxrss                {figures['ru_maxrss_mib']:7.1f} MiB  (Linux carries the "
          "spawning parent's high-water mark across exec, so VmHWM is the daemon's own peak)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--per-session", type=int, default=20, help="average messages per session")
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=100, help="turns in flight at once")
    parser.add_argument("--semantic", action="store_true", help="semantic recall on (the extra "
                        "and the weights installed)")
    parser.add_argument("--encoder", choices=("minilm", "static"), default="minilm",
                        help="with --semantic: the encoder ([semantic] encoder; default %(default)s)")
    parser.add_argument("--rate", type=float, default=0.0, metavar="PER_S",
                        help="messages per second in all (0: each client sends as soon as it is "
                             "answered; the latencies then include the queue)")
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="N",
                        help="print the N sites whose allocations grew most during the turns")
    parser.add_argument("--keep", metavar="DIR", help="keep the generated database in DIR")
    parser.add_argument("--child", metavar="DB", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
