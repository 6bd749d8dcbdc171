"""context_build.py on PostgreSQL: a throwaway server when no URL is given (bot/testing/postgres.py's), and
the generated SQLite database loaded into it with `switchboard db copy`'s code: COPY per table, ids
kept, recall terms as the PostgreSQL store writes them (its triggers write the postings)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from pathlib import Path

from bot.store import Store
from bot.store.copying import copy_store
from bot.store.postgres import PostgresStore


@contextmanager
def databases(url: str | None) -> Iterator[Callable[[], str] | None]:
    """None without --postgres; else what gives each size its database: `url` itself, or a new
    database on a server started for the run (stopped and removed after)."""
    if url is None:
        yield None
        return
    if url:
        yield lambda: url
        return
    from bot.testing.postgres import PostgresServer

    server = PostgresServer()
    try:
        server.start()
        yield server.create_database
    finally:
        server.stop()


def opener(url: str, path: Path) -> AbstractAsyncContextManager[Store]:
    return PostgresStore.connect(url, state_path=path, label="bench")


def load(sqlite_path: Path, url: str) -> tuple[float, int] | None:
    """Copy the SQLite database into the (empty) PostgreSQL one: (seconds, rows); None when it
    holds the same messages already (a previous run's, with --postgres URL)."""

    async def run() -> tuple[float, int] | None:
        async with Store.open(sqlite_path) as source, opener(url, sqlite_path) as target:
            held = await target.message_count()
            if held and held == await source.message_count():
                return None
            started = time.perf_counter()
            counts = await copy_store(source, target, batch=20_000)
            differ = [c.table for c in counts if c.source != c.target]
            if differ:
                raise SystemExit(f"the copy's counts differ in {', '.join(differ)}")
            return time.perf_counter() - started, sum(c.target for c in counts)

    return asyncio.run(run())
