"""A write transaction of several statements as one item of SQLite's thread: one hand-off, not one
per statement.

The concerns write a transaction's body once, as a coroutine over the connection methods aiosqlite
offers (`execute`, `execute_fetchall`, `executemany`, cursors). `ThreadConnection` offers the same
methods over the sqlite3 connection on aiosqlite's own thread, each answered at once, so the body
never suspends there and `run_to_end` drives it to its end in one step, BEGIN to COMMIT, without
the event loop between its statements.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Iterable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


class ThreadCursor:
    """One statement's cursor behind aiosqlite's cursor methods."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor
        self.rowcount = cursor.rowcount
        self.lastrowid = cursor.lastrowid

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._rows()

    async def _rows(self) -> AsyncIterator[Any]:
        for row in self._cursor:
            yield row

    async def close(self) -> None:
        self._cursor.close()


class _Statement:
    """`conn.execute(...)`: awaited for its cursor, or entered as `async with ... as cursor`."""

    def __init__(self, cursor: ThreadCursor) -> None:
        self._cursor = cursor

    def __await__(self) -> Generator[Any, None, ThreadCursor]:
        yield from ()  # never suspends
        return self._cursor

    async def __aenter__(self) -> ThreadCursor:
        return self._cursor

    async def __aexit__(self, *exc: object) -> None:
        await self._cursor.close()


class ThreadConnection:
    """aiosqlite's connection methods the concerns call, run at once on the connection's thread."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> _Statement:
        return _Statement(ThreadCursor(self._db.execute(sql, parameters or ())))

    async def execute_fetchall(self, sql: str, parameters: Sequence[Any] | None = None) -> list[Any]:
        return self._db.execute(sql, parameters or ()).fetchall()

    async def executemany(self, sql: str, seq_of_parameters: Iterable[Sequence[Any]]) -> None:
        self._db.executemany(sql, seq_of_parameters)


def run_to_end(body: Coroutine[Any, Any, T]) -> T:
    """The body's result, driven in one step: it must await only `ThreadConnection`'s methods."""
    try:
        body.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    body.close()
    raise RuntimeError("a batched transaction awaited something other than its statements")


def transaction_on_thread(body: Callable[[Any], Coroutine[Any, Any, T]]) -> Callable[[sqlite3.Connection], T]:
    """What runs on the thread: BEGIN IMMEDIATE, the body over a `ThreadConnection`, COMMIT
    (ROLLBACK and the body's error when it raises)."""

    def run(db: sqlite3.Connection) -> T:
        db.execute("BEGIN IMMEDIATE")
        try:
            result = run_to_end(body(ThreadConnection(db)))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return result

    return run
