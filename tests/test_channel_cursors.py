"""Channel cursors (Matrix's `/sync` token): kept per provider, each replacing the last; on SQLite
kept in one statement, so the write lock is held only while SQLite runs it on the store's thread,
never across a return to the event loop."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from contextlib import closing
from pathlib import Path

from bot.store import Store
from bot.store.sqlite.store import SqliteStore


async def test_each_token_replaces_the_last_of_its_channel_alone(store: Store) -> None:
    assert await store.channel_cursor("matrix") is None
    await store.keep_channel_cursor("matrix", "s1")
    await store.keep_channel_cursor("matrix.work", "w1")
    await store.keep_channel_cursor("matrix", "s2")
    assert (await store.channel_cursor("matrix"), await store.channel_cursor("matrix.work")) == ("s2", "w1")


def lock_after_the_store_s_write(db_path: Path, cursor: str) -> None:
    """From another connection, with the calling thread (the event loop's) blocked throughout:
    wait until the store's write has either committed `cursor` or taken the write lock, then take
    the lock (busy timeout 10 s). A write that still needs the event loop to reach its COMMIT
    cannot end meanwhile, and this raises "database is locked"."""
    with closing(sqlite3.connect(db_path, timeout=0, isolation_level=None)) as outside:
        deadline = time.monotonic() + 60  # a guard: the write was queued before this was called
        while time.monotonic() < deadline:
            if outside.execute("SELECT cursor FROM channel_cursors").fetchall() == [(cursor,)]:
                return  # committed, the lock free
            try:
                outside.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:  # the store's write holds it: wait for its end
                outside.execute("PRAGMA busy_timeout = 10000")
                outside.execute("BEGIN IMMEDIATE")
                outside.execute("ROLLBACK")
                return
            outside.execute("ROLLBACK")  # before the store's write began: let it begin
        raise AssertionError("the store's write never ran")


async def test_the_sync_token_is_kept_without_the_event_loop_between_begin_and_commit(tmp_path: Path) -> None:
    """Matrix keeps its `/sync` token after every sync. Written as BEGIN, the statement, COMMIT,
    each waiting for the event loop before the next went to SQLite's thread, it held the write
    lock across the loop's turns: a writer that blocked that loop (a test's plain sqlite3 call
    beside an in-process daemon) waited out its whole busy timeout, and any other writer waited as
    long as the loop was busy elsewhere. One statement is a transaction of its own, begun and
    committed on the thread."""
    db_path = tmp_path / "switchboard.db"
    async with SqliteStore.open(db_path) as store:
        write = asyncio.create_task(store.keep_channel_cursor("matrix", "s1"))
        for _ in range(5):  # it takes the store's lock and queues its statement on the thread
            await asyncio.sleep(0)
        lock_after_the_store_s_write(db_path, "s1")  # blocks the event loop until it has the lock
        await write
        assert await store.channel_cursor("matrix") == "s1"
