"""`tables` on PostgreSQL: the catalog's tables and foreign keys, reads through a server-side cursor
in one repeatable-read snapshot, writes with COPY, and identities moved past the copied ids."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from bot.store.postgres.connection import PgConnection
from bot.store.tables import SCHEMA_HISTORY, Tables, quoted

# Recall's postings: derived from `recall_terms` by its triggers, never copied.
DERIVED_INDEX = "recall_postings"
# Kept pictures and files: SQLite keeps them on disk, so a copy takes them through `kept_files()`.
FILES_TABLE = "kept_files"


class PgTables(Tables):
    """Whole-table reads and writes on PostgreSQL (the current schema's tables)."""

    _pg: PgConnection

    async def table_columns(self) -> dict[str, list[str]]:
        """Each data table's stored columns (generated columns left out, and `recall_postings`:
        its triggers write it from `recall_terms`, as SQLite's write recall's FTS index; and
        `kept_files`, which SQLite keeps on disk)."""
        found: dict[str, list[str]] = {}
        for table, column in await self._conn.execute_fetchall(
            "SELECT c.table_name, c.column_name FROM information_schema.columns c "
            "JOIN information_schema.tables t ON t.table_schema = c.table_schema "
            "AND t.table_name = c.table_name AND t.table_type = 'BASE TABLE' "
            "WHERE c.table_schema = current_schema() AND c.is_generated = 'NEVER' "
            "ORDER BY c.table_name, c.ordinal_position"
        ):
            if table not in (SCHEMA_HISTORY, DERIVED_INDEX, FILES_TABLE):
                found.setdefault(str(table), []).append(str(column))
        return found

    async def table_references(self) -> set[tuple[str, str]]:
        rows = await self._conn.execute_fetchall(
            "SELECT c.conrelid::regclass::text, c.confrelid::regclass::text FROM pg_constraint c "
            "JOIN pg_namespace n ON n.oid = c.connamespace "
            "WHERE c.contype = 'f' AND n.nspname = current_schema()"
        )
        return {(str(table).strip('"'), str(parent).strip('"')) for table, parent in rows}

    @asynccontextmanager
    async def reading_snapshot(self) -> AsyncIterator[None]:
        """One connection in a repeatable-read, read-only transaction: every table as of its start."""
        async with self._pg.transaction():
            await self._conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield

    async def read_table(
        self, table: str, columns: Sequence[str], batch: int
    ) -> AsyncIterator[list[tuple[Any, ...]]]:
        listed = ", ".join(quoted(column) for column in columns)
        async for rows in self._pg.stream(f"SELECT {listed} FROM {quoted(table)}", batch):
            yield rows

    async def write_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        await self._pg.copy_rows(quoted(table), ", ".join(quoted(column) for column in columns), rows)

    async def after_bulk_load(self) -> None:
        """Each identity continues after the largest copied id (a copy writes the ids itself, and
        the sequences would hand out 1 again); then a vacuum: fresh planner statistics for the new
        rows, and every page marked visible, so recall's postings and counts are read from their
        indexes alone from the first turn (not after autovacuum comes round)."""
        for table, column in await self._conn.execute_fetchall(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND is_identity = 'YES'"
        ):
            await self._conn.execute(
                f"SELECT setval(pg_get_serial_sequence(?, ?), COALESCE(MAX({quoted(column)}), 0) + 1, "
                f"false) FROM {quoted(table)}",
                (quoted(str(table)), str(column)),
            )
        await self._conn.execute("VACUUM (ANALYZE)")
