"""The console's usage page in its two parts, timed apart: the store's grouped read of this month's
calls (`usage_summed`, per day, model, agent and user) and the Python that prices and gathers its
rows (`fold`).

Usage: .venv/bin/python -m bench.usage_parts DATABASE [--requests 50] [--timezone UTC]

DATABASE is a store file, e.g. the one `bench.web --keep DIR` leaves in DIR/web.db (a month of
`model_usage` rows over 1 000 sessions and 300 users). Wall time and this process's CPU time
(`time.process_time`, less swayed by a loaded machine) of each part, after 5 warm-up rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import time
from pathlib import Path
from zoneinfo import ZoneInfo

from bot.config import parse_config
from bot.models.usage import fold, window
from bot.store import Store
from bot.web.usage_page import BY_NAME

BY = ("day", *BY_NAME)


def shown(values: list[float]) -> str:
    ordered = sorted(values)
    return (f"median {statistics.median(values):7.2f}  p99 "
            f"{ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]:7.2f}")


async def run(path: Path, requests: int, zone: ZoneInfo) -> None:
    prices = parse_config({}, "<defaults>").prices
    since, period = window(time.time(), zone, None)
    parts: dict[str, list[float]] = {"read wall": [], "read cpu": [], "fold wall": [], "fold cpu": []}
    async with Store.open(path) as store:
        for round_ in range(requests + 5):
            wall, cpu = time.perf_counter(), time.process_time()
            sums = await store.usage_summed(since, BY, zone)
            read_wall, read_cpu = time.perf_counter(), time.process_time()
            fold(sums, BY, prices)
            if round_ >= 5:
                parts["read wall"].append((read_wall - wall) * 1000)
                parts["read cpu"].append((read_cpu - cpu) * 1000)
                parts["fold wall"].append((time.perf_counter() - read_wall) * 1000)
                parts["fold cpu"].append((time.process_time() - read_cpu) * 1000)
    with sqlite3.connect(path) as conn:
        (calls,) = conn.execute("SELECT COUNT(*) FROM model_usage WHERE created_at >= ?", (since,)).fetchone()
    print(f"{period} ({zone}): {calls:,} calls summed into {len(sums):,} rows; {requests} rounds, ms")
    for name, values in parts.items():
        print(f"  {name:<10} {shown(values)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("database", type=Path)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--timezone", default="UTC")
    args = parser.parse_args()
    asyncio.run(run(args.database, args.requests, ZoneInfo(args.timezone)))


if __name__ == "__main__":
    main()
