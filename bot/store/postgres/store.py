"""The store on PostgreSQL: the shared `Store`, its statements run through a psycopg pool
(`PgConnection`), with PostgreSQL's own schema history, recall, context reads and maintenance.

psycopg 3 and psycopg_pool are imported only when a store is opened here, so an SQLite daemon
never loads them. Several daemons may share the database: migrations run under an advisory lock,
writes are transactions of their own connection, and the unique keys (platform message ids, run
records, chat commands) decide who stored something first.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from bot.core.errors import StoreError
from bot.core.messages import ChatRef
from bot.media.files import KeptFiles
from bot.store.base import Store
from bot.store.dialect import POSTGRES
from bot.store.postgres.connection import PgConnection
from bot.store.postgres.context_reads import PgContextReads
from bot.store.postgres.files import PgKeptFiles
from bot.store.postgres.inbound import PgInbound
from bot.store.postgres.living import living_lock
from bot.store.postgres.recall import PgRecall
from bot.store.postgres.signals import PgLeaseSignals
from bot.store.postgres.tables import PgTables
from bot.store.postgres.turn_commits import PgTurnCommits
from bot.store.schema import is_empty, migrations

if TYPE_CHECKING:
    import aiosqlite

# Any number, the same in every Switchboard: held while one instance migrates, so others wait.
_MIGRATION_LOCK = 0x5357_4D49
T = TypeVar("T")


class PostgresStore(PgLeaseSignals, PgRecall, PgContextReads, PgInbound, PgTurnCommits, PgTables,
                    Store):
    """`Store` on a PostgreSQL database. Open it with `PostgresStore.connect(url, ...)`.

    `path` is the local state file a SQLite store would have used: the daemon keeps its media
    files and control socket beside it (its folder), as it does beside a database file.
    """

    dialect = POSTGRES

    def __init__(
        self, conn: PgConnection, path: Path, label: str, records: PgConnection | None = None
    ) -> None:
        # PgConnection offers the part of aiosqlite's connection the mixins call.
        super().__init__(cast("aiosqlite.Connection", conn), path)
        self._pg = conn
        self._label = label
        # Connections of their own for `record_chunk`, so a sent chunk's record never waits for
        # one of the pool's, behind every other statement of a loaded daemon.
        self._records = records or conn

    @property
    def label(self) -> str:
        return self._label

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, url: str, *, state_path: Path, label: str, password: str | None = None,
        max_connections: int = 10,
    ) -> AsyncIterator[Self]:
        """Open a pool on `url` (libpq's PG* variables and ~/.pgpass apply), migrate, close on exit.

        StoreError when the server cannot be reached or refuses us, or has a newer schema.
        """
        import psycopg
        from psycopg_pool import AsyncConnectionPool

        try:  # the daemon's own files (control socket, kept media) live in this folder
            state_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot make the state folder {state_path.parent}: {exc}") from exc
        kwargs: dict[str, Any] = {"autocommit": True}
        if password is not None:
            kwargs["password"] = password
        try:
            # One connection first: a refusal is told at once, with the server's reason (a pool
            # would retry in the background until its timeout and then say only that).
            first = await psycopg.AsyncConnection.connect(url, connect_timeout=10, **kwargs)
            await first.close()
        except psycopg.Error as exc:
            raise StoreError(f"cannot open database {label}: {' '.join(str(exc).split())}") from exc
        # One of the `max_connections` is kept for the records of sent chunks (`record_chunk`).
        pool = AsyncConnectionPool(url, kwargs=kwargs, min_size=1, max_size=max(max_connections - 1, 1),
                                   open=False, name="switchboard")
        records = AsyncConnectionPool(url, kwargs=kwargs, min_size=1, max_size=1, open=False,
                                      name="switchboard-records")
        try:
            await pool.open(wait=True, timeout=15)
            await records.open(wait=True, timeout=15)
        except Exception as exc:
            await pool.close()
            await records.close()
            raise StoreError(f"cannot open database {label}: {exc}") from exc
        try:
            store = cls(PgConnection(pool), state_path, label, PgConnection(records))
            try:
                await store._migrate()
            except psycopg.Error as exc:
                raise StoreError(f"cannot prepare database {label}: {str(exc).strip()}") from exc
            yield store
        finally:
            await records.close()
            await pool.close()

    async def _apply_migrations(self) -> None:
        """`postgres/migrations/`, each whole, all in one transaction under the advisory lock."""
        wanted = migrations(self.dialect.name)
        async with self._transaction():
            await self._conn.execute("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK,))
            await self._conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
            )
            current = await self.schema_version()
            if current > len(wanted):
                raise StoreError(
                    f"database {self.label} is at schema {current}, newer than this Switchboard "
                    f"({len(wanted)}); upgrade Switchboard"
                )
            for version, sql in enumerate(wanted[current:], start=current + 1):
                if not is_empty(sql):
                    await self._pg.execute_script(sql)
                await self._conn.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                    (version, time.time()),
                )

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[None]:
        # No write lock: each transaction has a connection of its own, PostgreSQL orders them.
        async with self._pg.transaction():
            yield

    def kept_files(self) -> KeptFiles:
        """In the database (`kept_files`), not on this host's disk: any instance reads them."""
        return PgKeptFiles(self._pg)

    @asynccontextmanager
    async def living(self, instance: str) -> AsyncIterator[None]:
        """Hold this instance's advisory lock while the block runs (`postgres.living`)."""
        async with living_lock(self._pg.pool, instance):
            yield

    async def record_chunk(
        self, message_id: int, chat: ChatRef, index: int, provider_message_id: str, *,
        last: bool = False,
    ) -> None:
        """As on SQLite, in one statement on a connection kept for these records: one round trip
        from the platform's answer to the record that the chunk was sent, waiting for no other
        statement (a daemon killed in between sends it again when taken over). The last chunk's
        deletes the outbox row instead of counting the chunk (one statement may not do both)."""
        sent, counted = (("DELETE FROM outbox WHERE message_id = ?", (message_id,)) if last else
                         ("UPDATE outbox SET chunks_sent = GREATEST(chunks_sent, ?) WHERE message_id = ?",
                          (index + 1, message_id)))
        await self._records.execute(
            f"WITH sent AS ({sent}), "
            "named AS (UPDATE messages SET provider_message_id = COALESCE(provider_message_id, ?) "
            "WHERE id = ?) INSERT INTO provider_messages (provider, chat_id, provider_message_id, "
            "message_id) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (*counted, provider_message_id, message_id, chat.provider, chat.chat_id, provider_message_id,
             message_id),
        )

    async def _batch(self, body: Callable[[aiosqlite.Connection], Coroutine[Any, Any, T]]) -> T:
        """The body in one transaction of one pooled connection, a round trip per statement (those
        worth merging are merged in their SQL)."""
        async with self._transaction():
            return await body(self._conn)

    def _one_write(self) -> AbstractAsyncContextManager[None]:
        # Autocommit: the statement is its own transaction (or joins the one bound to this task).
        return nullcontext()

    async def _serialize(self, *key: str) -> None:
        """A transaction-scoped advisory lock on the key: concurrent transactions (other tasks,
        other daemons) that read before they write take turns, as under SQLite's write lock."""
        await self._conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", ("\x1f".join(key),))

    async def check_integrity(self) -> None:
        """The server keeps its own pages sound: a round trip proves it answers."""
        await self._count("SELECT 1")

    async def backup_to(self, target: Path) -> None:
        raise StoreError(
            f"`db backup` copies an SQLite file; back up PostgreSQL with its own tools "
            f"(pg_dump {self.label})"
        )

    async def foreign_key_problems(self) -> int:
        """Always 0: PostgreSQL enforces every foreign key as rows are written."""
        return 0

    async def _references_to_messages(self) -> list[tuple[str, str]]:
        rows = await self._conn.execute_fetchall(
            "SELECT c.conrelid::regclass::text, a.attname FROM pg_constraint c "
            "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey) "
            "WHERE c.contype = 'f' AND c.confrelid = 'messages'::regclass "
            "AND c.conrelid::regclass::text NOT IN ('messages', 'provider_messages', 'context_snapshots') "
            "ORDER BY 1, 2"
        )
        return [(f'"{table}"', f'"{column}"') for table, column in rows]

