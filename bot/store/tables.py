"""The store's tables as plain rows, for `copying`: which tables and columns hold data, how they
refer to each other, and whole tables read and written in batches.

Only tables that hold data count: SQLite's FTS index of recall and its shadow tables are rebuilt
by triggers as `recall_terms` is written (PostgreSQL's `recall_postings` too), and
the schema history is the target's own. `postgres.PostgresStore` overrides each method.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from bot.store.connection import Database

# The schema history: every store writes its own when it is opened (and migrated).
SCHEMA_HISTORY = "schema_migrations"


def quoted(name: str) -> str:
    """An identifier as SQL spells it, whatever it is called."""
    return '"' + name.replace('"', '""') + '"'


class Tables(Database):
    """Whole-table reads and writes, below the domain methods."""

    async def table_columns(self) -> dict[str, list[str]]:
        """Each data table's stored columns, in schema order (generated columns left out)."""
        names = [str(row[0]) for row in await self._conn.execute_fetchall(
            "SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'table' "
            "AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        return {name: [str(row[0]) for row in await self._conn.execute_fetchall(
                    "SELECT name FROM pragma_table_info(?) ORDER BY cid", (name,))]
                for name in names if name != SCHEMA_HISTORY}

    async def table_references(self) -> set[tuple[str, str]]:
        """(table, table it refers to) for every foreign key between data tables."""
        found: set[tuple[str, str]] = set()
        for table in await self.table_columns():
            for (parent,) in await self._conn.execute_fetchall(
                'SELECT "table" FROM pragma_foreign_key_list(?)', (table,)
            ):
                found.add((table, str(parent)))
        return found

    async def table_count(self, table: str) -> int:
        return await self._count(f"SELECT COUNT(*) FROM {quoted(table)}")

    @asynccontextmanager
    async def reading_snapshot(self) -> AsyncIterator[None]:
        """Every read in the block sees the database as of one moment (a read transaction: in WAL
        mode a daemon still writing is not seen, and is not blocked)."""
        await self._conn.execute("BEGIN")
        try:
            yield
        finally:
            await self._conn.execute("COMMIT")

    async def read_table(
        self, table: str, columns: Sequence[str], batch: int
    ) -> AsyncIterator[list[tuple[Any, ...]]]:
        """The table's rows, `batch` at a time."""
        listed = ", ".join(quoted(column) for column in columns)
        async with self._conn.execute(f"SELECT {listed} FROM {quoted(table)}") as cursor:
            while rows := await cursor.fetchmany(batch):
                yield [tuple(row) for row in rows]

    @asynccontextmanager
    async def bulk_load(self) -> AsyncIterator[None]:
        """One transaction for a whole load: a failure leaves the database as it was."""
        async with self._transaction():
            yield

    async def write_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Rows as they are, ids included (inside `bulk_load`)."""
        listed = ", ".join(quoted(column) for column in columns)
        marks = ", ".join("?" for _ in columns)
        await self._conn.executemany(f"INSERT INTO {quoted(table)} ({listed}) VALUES ({marks})", rows)

    async def clear_table(self, table: str) -> None:
        await self._conn.execute(f"DELETE FROM {quoted(table)}")

    async def after_bulk_load(self) -> None:
        """Merge the recall index's segments into one, as upkeep keeps a live index (new rowids
        simply continue after the largest copied id)."""
        await self._conn.execute("INSERT INTO recall_fts (recall_fts) VALUES ('optimize')")
