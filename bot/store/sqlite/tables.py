"""`tables` on SQLite: the catalog's tables and foreign keys through its pragmas, reads in one read
transaction, writes as INSERTs, and the recall index merged after a load."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from bot.store.tables import SCHEMA_HISTORY, Tables, quoted


class SqliteTables(Tables):
    """Whole-table reads and writes on one SQLite file."""

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

    @asynccontextmanager
    async def reading_snapshot(self) -> AsyncIterator[None]:
        """Every read in the block sees the database as of one moment (a read transaction: in WAL
        mode a daemon still writing is not seen, and is not blocked)."""
        try:  # BEGIN inside: cancelled while it waits on the thread, it still runs there
            await self._conn.execute("BEGIN")
            yield
        finally:
            with contextlib.suppress(sqlite3.Error):  # none open when BEGIN itself failed
                await self._conn.execute("COMMIT")

    async def read_table(
        self, table: str, columns: Sequence[str], batch: int
    ) -> AsyncIterator[list[tuple[Any, ...]]]:
        """The table's rows, `batch` at a time."""
        listed = ", ".join(quoted(column) for column in columns)
        async with self._conn.execute(f"SELECT {listed} FROM {quoted(table)}") as cursor:
            while rows := await cursor.fetchmany(batch):
                yield [tuple(row) for row in rows]

    async def write_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Rows as they are, ids included (inside `bulk_load`)."""
        listed = ", ".join(quoted(column) for column in columns)
        marks = ", ".join("?" for _ in columns)
        await self._conn.executemany(f"INSERT INTO {quoted(table)} ({listed}) VALUES ({marks})", rows)

    async def after_bulk_load(self) -> None:
        """Merge the recall index's segments into one, as upkeep keeps a live index (new rowids
        simply continue after the largest copied id)."""
        await self._conn.execute("INSERT INTO recall_fts (recall_fts) VALUES ('optimize')")
