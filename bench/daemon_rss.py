"""Peak RSS of the daemon with 10 k sessions in its database.

Usage: .venv/bin/python bench/daemon_rss.py [--sessions 10000] [--per-session 20] [--turns 1000]
       [--concurrency 100] [--keep DIR]

The parent makes the database (real Store schema, filled with sqlite3 executemany), then starts a
child process that runs the real bot.daemon.Daemon with an in-process recording channel, an
instant brain and production logging (INFO as JSON, to /dev/null), drives `--turns` turns across
random existing sessions, stops the daemon cleanly and reports its peak RSS. Prints figures only.
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
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


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


# -- child: the daemon under load -----------------------------------------------------------------


async def _drive(
    db: Path, sessions: int, turns: int, concurrency: int, devnull: TextIO
) -> dict[str, float]:
    from bench.instant_brain import InstantBrain
    from bot.config import parse_config
    from bot.daemon import Daemon
    from bot.log import configure_logging
    from bot.messages import OutboundMessage
    from tests.fakes import FakeChannel

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

    configure_logging("INFO", "json", [], stream=devnull)
    figures = {"rss_after_imports_mib": _rss_mib()}
    # Semantic recall off: its model (~125 MB, bench/embedding_speed.py) and its worker embedding
    # the generated history would be measured instead of the daemon's own memory.
    config = parse_config({"database": {"path": str(db)}, "semantic": {"enabled": "off"}}, "<bench>")
    channel = RecordingChannel()
    daemon = Daemon(config, [channel], brain=InstantBrain())
    running = asyncio.create_task(daemon.run())
    await channel._ready.wait()
    figures["rss_after_start_mib"] = _rss_mib()

    rng = random.Random(3)
    order = [rng.randrange(sessions) for _ in range(turns)]
    pending: deque[int] = deque(order)
    # Platform ids unique to this run (a kept database may be driven again) and far from the ids
    # FakeChannel gives its replies (1001, 1002, ...).
    counter = iter(range(time.time_ns() // 1000, 2**62))
    loop = asyncio.get_running_loop()

    async def client() -> None:
        while pending:
            index = pending.popleft()
            kind = "group" if index % 10 == 9 else "direct"
            peer = str(10_000 + index)
            inbound = channel.message(
                f"message {index}: please remind me about the thing we discussed yesterday",
                kind=kind, peer=peer, sender=peer, message_id=str(next(counter)),
            )
            future: asyncio.Future[None] = loop.create_future()
            channel.waiting.setdefault(peer, deque()).append(future)
            await channel.inject(inbound)
            try:
                async with asyncio.timeout(30):
                    await future
            except TimeoutError:
                raise RuntimeError(f"no reply in chat {peer} within 30 s") from None

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    figures["drive_seconds"] = time.perf_counter() - started
    figures["rss_after_turns_mib"] = _rss_mib()
    daemon.request_stop()
    await running
    figures["rss_after_stop_mib"] = _rss_mib()
    return figures


def child(args: argparse.Namespace) -> None:
    with open(os.devnull, "w") as devnull:
        figures = asyncio.run(
            _drive(Path(args.child), args.sessions, args.turns, args.concurrency, devnull)
        )
    figures["peak_rss_mib"] = _status_mib("VmHWM")
    figures["ru_maxrss_mib"] = _peak_mib()
    print(json.dumps(figures))


# -- parent ----------------------------------------------------------------------------------------


def parent(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from context_build import generate_db

    print(f"daemon RSS: {args.sessions:,} sessions x ~{args.per_session} messages in the database, "
          f"{args.turns:,} turns over random sessions, {args.concurrency} at a time, instant brain, "
          "production logging (INFO, JSON, /dev/null)")
    with tempfile.TemporaryDirectory(prefix="sb-bench-") as tmp:
        folder = Path(args.keep) if args.keep else Path(tmp)
        db = folder / "rss.db"
        for suffix in ("", "-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
        generated = generate_db(db, args.sessions * args.per_session, args.sessions, seed=13)
        print(f"generated {generated.messages:,} messages over {args.sessions:,} sessions in "
              f"{generated.seconds:.1f} s ({db.stat().st_size / 2**20:.0f} MiB)")
        command = [sys.executable, str(Path(__file__).resolve()), "--child", str(db),
                   "--sessions", str(args.sessions), "--turns", str(args.turns),
                   "--concurrency", str(args.concurrency)]
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
    print(f"  ru_maxrss                {figures['ru_maxrss_mib']:7.1f} MiB  (Linux carries the "
          "spawning parent's high-water mark across exec, so VmHWM is the daemon's own peak)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--per-session", type=int, default=20, help="average messages per session")
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=100, help="turns in flight at once")
    parser.add_argument("--keep", metavar="DIR", help="keep the generated database in DIR")
    parser.add_argument("--child", metavar="DB", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
