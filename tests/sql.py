"""Rows read and written behind the store's methods, for tests: the one place a test reaches the
store's connection, on either backend.

A test sets up what no method writes (an old timestamp, a damaged row, a deleted vector) or reads
what no method returns (a table's raw rows, the statements the store ran). The SQL is SQLite's
spelling, `?` placeholders included: PostgreSQL's connection translates it as it does the store's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from bot.store import Store


async def rows(store: Store, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Every row `sql` gives, as tuples."""
    return [tuple(row) for row in await store._conn.execute_fetchall(sql, params)]


async def value(store: Store, sql: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the one row `sql` gives."""
    (row,) = await rows(store, sql, params)
    return row[0]


async def execute(store: Store, sql: str, params: Sequence[Any] = ()) -> None:
    """Run one statement (its own transaction: autocommit on both backends)."""
    await store._conn.execute(sql, params)


@asynccontextmanager
async def traced(store: Store) -> AsyncIterator[list[str]]:
    """The text of every statement the store runs inside the block (SQLite: bound values
    expanded), in order, as they run."""
    statements: list[str] = []
    await store._conn.set_trace_callback(statements.append)
    try:
        yield statements
    finally:
        await store._conn.set_trace_callback(None)


@asynccontextmanager
async def hand_offs(store: Store) -> AsyncIterator[list[str]]:
    """On SQLite, one entry per item the store hands to its connections' threads inside the block
    (a statement, or several batched into one item; the shared connection's, and the one that
    records sent chunks); what the event loop waits on."""
    items: list[str] = []
    records: Any = getattr(store, "_records", store._conn)
    conns: list[Any] = [store._conn] if records is store._conn else [store._conn, records]

    def counting(queue: Any) -> Any:
        async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
            items.append(getattr(fn, "__name__", "item"))
            return await queue(fn, *args, **kwargs)
        return counted

    for conn in conns:
        conn._execute = counting(conn._execute)
    try:
        yield items
    finally:
        for conn in conns:
            del conn._execute
