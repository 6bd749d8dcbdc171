"""The store's connection surface over a psycopg pool, so the mixins' SQL runs on PostgreSQL too.

The mixins call what aiosqlite offers (`execute`, `execute_fetchall`, `executemany`, cursors with
`fetchone`); `PgConnection` offers the same. A statement outside a transaction takes a pooled
connection in autocommit; `transaction()` holds one connection in a real transaction, bound to the
running task (a contextvar), so every statement inside it uses that connection. SQLite's spelling is
translated once per statement text: `?` and `?N` placeholders, `%` escaped, and the two-argument
scalar MAX / MIN as GREATEST / LEAST.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

Params = Sequence[Any] | None
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGITS = re.compile(r"[0-9]+")


class PgCursor:
    """The rows of one statement, read eagerly, behind aiosqlite's cursor methods."""

    lastrowid = None  # PostgreSQL has none: the store's SQL says RETURNING id instead

    def __init__(self, rows: list[tuple[Any, ...]], rowcount: int) -> None:
        self._rows = rows
        self._next = 0
        self.rowcount = rowcount

    async def fetchone(self) -> tuple[Any, ...] | None:
        if self._next >= len(self._rows):
            return None
        self._next += 1
        return self._rows[self._next - 1]

    async def fetchall(self) -> list[tuple[Any, ...]]:
        rows, self._next = self._rows[self._next:], len(self._rows)
        return rows

    def __aiter__(self) -> AsyncIterator[tuple[Any, ...]]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[tuple[Any, ...]]:
        while (row := await self.fetchone()) is not None:
            yield row

    async def close(self) -> None:
        return None


class _Statement:
    """`conn.execute(...)`: awaited for its cursor, or entered as `async with ... as cursor`."""

    def __init__(self, run: Callable[[], Any]) -> None:
        self._run = run

    def __await__(self) -> Generator[Any, None, PgCursor]:
        cursor: PgCursor = yield from self._run().__await__()
        return cursor

    async def __aenter__(self) -> PgCursor:
        cursor: PgCursor = await self._run()
        return cursor

    async def __aexit__(self, *exc: object) -> None:
        return None


class PgConnection:
    """aiosqlite's connection methods the store uses, over an AsyncConnectionPool."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool
        self._bound: ContextVar[AsyncConnection[Any] | None] = ContextVar("pg_transaction", default=None)
        self._trace: Callable[[str], object] | None = None

    async def set_trace_callback(self, callback: Callable[[str], object] | None) -> None:
        """Like sqlite3's: `callback` gets the text of every statement run from now on."""
        self._trace = callback

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """One pooled connection in a transaction for the block; nested blocks join it."""
        if self._bound.get() is not None:
            yield
            return
        if self._trace is not None:  # as sqlite3's trace shows them: a round trip each
            self._trace("BEGIN")
        end = "COMMIT"
        try:
            async with self.pool.connection() as conn, conn.transaction():
                token = self._bound.set(conn)
                try:
                    yield
                except BaseException:
                    end = "ROLLBACK"
                    raise
                finally:
                    self._bound.reset(token)
        finally:
            if self._trace is not None:
                self._trace(end)

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        bound = self._bound.get()
        if bound is not None:
            yield bound
        else:
            async with self.pool.connection() as conn:
                yield conn

    def execute(self, sql: str, parameters: Params = None) -> _Statement:
        return _Statement(lambda: self._execute(sql, parameters))

    async def _execute(self, sql: str, parameters: Params) -> PgCursor:
        query, args = translate(sql, parameters)
        if self._trace is not None:
            self._trace(query)
        async with self._connection() as conn:
            cursor = await conn.execute(query, args)
            rows = await cursor.fetchall() if cursor.description is not None else []
            return PgCursor(rows, cursor.rowcount)

    async def execute_fetchall(self, sql: str, parameters: Params = None) -> list[tuple[Any, ...]]:
        cursor = await self._execute(sql, parameters)
        return await cursor.fetchall()

    async def executemany(self, sql: str, seq_of_parameters: Iterable[Sequence[Any]]) -> None:
        batch = list(seq_of_parameters)
        if not batch:
            return
        async with self._connection() as conn, conn.cursor() as cursor:
            await cursor.executemany(translate(sql, batch[0])[0], [translate(sql, p)[1] for p in batch])

    async def stream(self, sql: str, batch: int) -> AsyncIterator[list[tuple[Any, ...]]]:
        """A query's rows `batch` at a time through a server-side cursor (inside `transaction()`),
        so a whole table never sits in memory."""
        async with self._connection() as conn, conn.cursor(name="switchboard_stream") as cursor:
            await cursor.execute(translate(sql, None)[0])
            while rows := await cursor.fetchmany(batch):
                yield rows

    async def copy_rows(self, table: str, columns: str, rows: Iterable[Sequence[Any]]) -> None:
        """Rows written with COPY (many times faster than INSERTs); `table` and `columns` are
        quoted SQL already."""
        async with (self._connection() as conn, conn.cursor() as cursor,
                    cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy):
            for row in rows:
                await copy.write_row(row)

    async def execute_script(self, sql: str) -> None:
        """A migration: several statements, no parameters, sent as they are."""
        async with self._connection() as conn:
            await conn.execute(sql)

    async def create_function(self, *_args: object, **_kwargs: object) -> None:
        """SQLite's Python functions are SQL functions of the PostgreSQL schema (`pg_migrations`)."""
        return None

    async def close(self) -> None:
        await self.pool.close()


def translate(sql: str, parameters: Params) -> tuple[str, Any]:
    """The statement in psycopg's spelling, and its parameters (a dict for `?N` placeholders)."""
    if not parameters:  # nothing to bind: psycopg sends the text as it is, `%` and all
        return _scalar_extrema(sql), None
    query, numbered = _translated(sql)
    if numbered:
        return query, {f"p{index + 1}": value for index, value in enumerate(parameters)}
    return query, list(parameters)


@lru_cache(maxsize=1024)
def _translated(sql: str) -> tuple[str, bool]:
    """(psycopg query, whether it uses numbered placeholders) for one SQLite statement."""
    sql = _scalar_extrema(sql)
    out: list[str] = []
    numbered = False
    index, length = 0, len(sql)
    while index < length:
        char = sql[index]
        if char in "'\"":
            end = _closing_quote(sql, index)
            out.append(sql[index:end].replace("%", "%%"))  # psycopg reads % inside quotes too
            index = end
            continue
        if char == "?":
            digits = _DIGITS.match(sql, index + 1)
            if digits:
                numbered = True
                out.append(f"%(p{digits.group()})s")
                index = digits.end()
            else:
                out.append("%s")
                index += 1
            continue
        out.append("%%" if char == "%" else char)
        index += 1
    return "".join(out), numbered


def _closing_quote(sql: str, start: int) -> int:
    """The index just past the quoted string or identifier starting at `start` (doubled quotes inside)."""
    quote, index = sql[start], start + 1
    while index < len(sql):
        if sql[index] == quote:
            if index + 1 < len(sql) and sql[index + 1] == quote:
                index += 2
                continue
            return index + 1
        index += 1
    return len(sql)


@lru_cache(maxsize=1024)
def _scalar_extrema(sql: str) -> str:
    """SQLite's MAX(a, b) / MIN(a, b) (scalar, two or more arguments) as GREATEST / LEAST."""
    if "MAX(" not in sql.upper() and "MIN(" not in sql.upper():
        return sql
    calls: list[tuple[int, int]] = []  # (name start, open paren) of every MAX( / MIN(
    scalar: set[int] = set()
    stack: list[int] = []  # open parens, innermost last
    index = 0
    while index < len(sql):
        char = sql[index]
        if char in "'\"":
            index = _closing_quote(sql, index)
            continue
        if char == "(":
            stack.append(index)
            name_start = index
            while name_start > 0 and (sql[name_start - 1].isalnum() or sql[name_start - 1] == "_"):
                name_start -= 1
            if sql[name_start:index].upper() in ("MAX", "MIN"):
                calls.append((name_start, index))
        elif char == ")" and stack:
            stack.pop()
        elif char == "," and stack:
            scalar.add(stack[-1])
        index += 1
    for name_start, paren in reversed(calls):
        if paren in scalar:
            name = "GREATEST" if sql[name_start:paren].upper() == "MAX" else "LEAST"
            sql = sql[:name_start] + name + sql[paren:]
    return sql
