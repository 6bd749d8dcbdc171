"""The store's tables as plain rows, for `copying`: which tables and columns hold data, how they
refer to each other, and whole tables read and written in batches.

Only tables that hold data count: SQLite's FTS index of recall and its shadow tables are rebuilt
by triggers as `recall_terms` is written (PostgreSQL's `recall_postings` too), and
the schema history is the target's own. What reads the catalog, or reads and writes in bulk, each
backend writes for itself (`sqlite.tables`, `postgres.tables`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from bot.store.database import Database

# The schema history: every store writes its own when it is opened (and migrated).
SCHEMA_HISTORY = "schema_migrations"


def quoted(name: str) -> str:
    """An identifier as SQL spells it, whatever it is called."""
    return '"' + name.replace('"', '""') + '"'


class Tables(Database):
    """Whole-table reads and writes, below the domain methods."""

    @abstractmethod
    async def table_columns(self) -> dict[str, list[str]]:
        """Each data table's stored columns, in schema order (generated columns left out)."""

    @abstractmethod
    async def table_references(self) -> set[tuple[str, str]]:
        """(table, table it refers to) for every foreign key between data tables."""

    @abstractmethod
    def reading_snapshot(self) -> AbstractAsyncContextManager[None]:
        """Every read in the block sees the database as of one moment."""

    @abstractmethod
    def read_table(
        self, table: str, columns: Sequence[str], batch: int
    ) -> AsyncIterator[list[tuple[Any, ...]]]:
        """The table's rows, `batch` at a time."""

    @abstractmethod
    async def write_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Rows as they are, ids included (inside `bulk_load`)."""

    @abstractmethod
    async def after_bulk_load(self) -> None:
        """What a backend's indexes and ids need after a whole load."""

    async def table_count(self, table: str) -> int:
        return await self._count(f"SELECT COUNT(*) FROM {quoted(table)}")

    @asynccontextmanager
    async def bulk_load(self) -> AsyncIterator[None]:
        """One transaction for a whole load: a failure leaves the database as it was."""
        async with self._transaction():
            yield

    async def clear_table(self, table: str) -> None:
        await self._conn.execute(f"DELETE FROM {quoted(table)}")
