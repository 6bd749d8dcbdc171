"""search_history's cost: the built-in tool run against a generated database, in a private chat, in
a group, and (`[tools] search_scope = "user"`) in the private chat of a person who wrote in every
group (bench/context_build.py's generator: groups have five members, so that search spans a tenth
of all sessions, of which it may read only that person's own messages).

Prints median, p95 and max in ms of the whole tool call (the sessions it may read, lexical matches
in each, the ownership filter, formatting) and of its parts. No target: the figures say whether a
tool call costs a noticeable share of a reply's seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from bench.context_build import AGENT, PROVIDER, bench_config, generate_db, percentile
from bot.core.messages import ChatRef
from bot.core.session_key import build
from bot.store import Store
from bot.tools.base import ToolContext
from bot.tools.history import history_tool


def figures(name: str, values: list[float]) -> str:
    return (f"  {name:<34} median {statistics.median(values):7.2f}  p95 {percentile(values, 0.95):7.2f}  "
            f"max {max(values):7.2f} ms")


async def run(db: Path, samples: int) -> None:
    rng = random.Random(11)
    async with Store.open(db) as store:
        words = [row[0] for row in await store._conn.execute_fetchall(
            "SELECT text FROM messages WHERE role = 'user' ORDER BY random() LIMIT 500")]
        # (user, chat kind, chat, search_scope)
        cases = {"a private-chat user": ("10000", "direct", "10000", "session"),
                 "a group member in a group": ("20003", "group", "10009", "session"),
                 "search_scope user, a member of every group": ("20003", "direct", "20003", "user")}
        for label, (user, kind, peer, scope) in cases.items():
            base = bench_config(db)
            config = base.model_copy(update={"tools": base.tools.model_copy(update={"search_scope": scope})})
            tool = history_tool(store, functools.partial(lambda c: c, config), None)
            key = build(AGENT, PROVIDER, kind, peer)
            context = ToolContext(key, ChatRef(PROVIDER, peer), user, 0, False, kind != "direct",
                                  time.time(), "UTC")
            sessions = [str(key)]
            if scope == "user":
                sessions += await store.user_sessions(AGENT, PROVIDER, user)
            whole: list[float] = []
            parts: dict[str, list[float]] = {"lexical_history": []}
            if scope == "user":
                parts["user_sessions"] = []
            for _ in range(samples):
                query = " ".join(rng.sample(rng.choice(words).split(), 3))
                started = time.perf_counter()
                await tool.run({"query": query}, context)
                whole.append((time.perf_counter() - started) * 1000)
                if scope == "user":
                    started = time.perf_counter()
                    await store.user_sessions(AGENT, PROVIDER, user)
                    parts["user_sessions"].append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                await store.lexical_history(sessions, query, limit=32)
                parts["lexical_history"].append((time.perf_counter() - started) * 1000)
            print(f"{label}: {len(sessions)} sessions searched")
            print(figures("whole tool call", whole))
            for name, values in parts.items():
                print(figures(name, values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="stored-message counts")
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    print(f"search_history: {args.samples} calls per user and size over {args.sessions} sessions; "
          f"load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="sb-bench-") as tmp:
        for size in (int(part) for part in args.sizes.split(",") if part):
            db = Path(tmp) / f"history-{size}.db"
            generated = generate_db(db, size, args.sessions)
            print(f"{generated.messages} messages (generated in {generated.seconds:.1f} s)")
            asyncio.run(run(db, args.samples))


if __name__ == "__main__":
    main()
