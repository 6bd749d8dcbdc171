"""The store on PostgreSQL: the same `Store`, its statements run through a psycopg pool
(`PgConnection`), with PostgreSQL's own schema history, recall, vectors read and maintenance.

psycopg 3 and psycopg_pool are imported only when a store is opened here, so an SQLite daemon
never loads them. Several daemons may share the database: migrations run under an advisory lock,
writes are transactions of their own connection, and the unique keys (platform message ids, run
records, chat commands) decide who stored something first.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, cast

from bot.errors import StoreError
from bot.media_files import KeptFiles
from bot.messages import ChatRef, StoredMessage
from bot.store import Store
from bot.store.compactions import COMPACTION_COLUMNS, latest_compaction_sql
from bot.store.messages import MESSAGE_COLUMNS, recent_sql, rows_to_messages, scheduled_sql
from bot.store.pg_connection import PgConnection
from bot.store.pg_files import PgKeptFiles
from bot.store.pg_living import LIVING_LOCKS, living_lock
from bot.store.pg_migrations import PG_MIGRATIONS
from bot.store.pg_recall import PgRecall
from bot.store.pg_tables import PgTables
from bot.store.records import CompactionRecord

if TYPE_CHECKING:
    import aiosqlite

_MESSAGE_WIDTH = len(MESSAGE_COLUMNS.split(","))
_COMPACTION_AT = 1 + _MESSAGE_WIDTH  # where a row's compaction columns start
# `ContextReads`' statement in PostgreSQL's terms: a union's columns need a type each, so every row
# carries the message columns and then the compaction's, NULL where they are not its own; the
# compaction's row comes first, as PostgreSQL types a chain of unions a pair at a time (a column
# NULL in both of the first two would be typed text). Tagged 0 history, 1 scheduled, 2 compaction.
_NO_COMPACTION = ", NULL" * len(COMPACTION_COLUMNS.split(","))
_CONTEXT_READS = (
    f"SELECT 2{', NULL' * _MESSAGE_WIDTH}, * FROM ({latest_compaction_sql(limit='?6')}) AS c "
    f"UNION ALL SELECT 0, *{_NO_COMPACTION} FROM ("
    + recent_sql(origin="'interactive'", before="?2", after="0", limit="?3")
    + f") AS r UNION ALL SELECT 1, *{_NO_COMPACTION} FROM ("
    + scheduled_sql(after=None, before="?4", limit="?5")
    + ") AS s"
)

# Any number, the same in every Switchboard: held while one instance migrates, so others wait.
_MIGRATION_LOCK = 0x5357_4D49


class PostgresStore(PgRecall, PgTables, Store):
    """`Store` on a PostgreSQL database. Open it with `PostgresStore.connect(url, ...)`.

    `path` is the local state file a SQLite store would have used: the daemon keeps its media
    files and control socket beside it (its folder), as it does beside a database file.
    """

    # Every vector of a session after an id, in id order, in one row (see `Embeddings._vectors`).
    _ALL_VECTORS = (
        "SELECT string_agg(message_id::text, ',' ORDER BY message_id), "
        "string_agg(vector, ''::bytea ORDER BY message_id), (SELECT length(vector) FROM embeddings "
        "WHERE session_key = ?1 AND model = ?2 AND message_id > ?3 ORDER BY message_id LIMIT 1) "
        "FROM embeddings WHERE session_key = ?1 AND model = ?2 AND message_id > ?3"
    )
    _VECTORS = (
        "SELECT string_agg(message_id::text, ',' ORDER BY message_id), "
        "string_agg(vector, ''::bytea ORDER BY message_id), MAX(length(vector)) FROM embeddings "
        "WHERE session_key = ?1 AND model = ?2 AND message_id > ?3 AND length(vector) = ("
        "SELECT length(vector) FROM embeddings WHERE session_key = ?1 AND model = ?2 "
        "AND message_id > ?3 ORDER BY message_id LIMIT 1)"
    )
    _PRUNE_IDS = "CREATE TEMP TABLE IF NOT EXISTS prune_ids (id BIGINT PRIMARY KEY)"
    # Several daemons may share it: each session's work then runs under a lease (`bot.session_lease`).
    shared = True
    # An instance that beat at least once (so it took its lock first, see `living`) and holds no
    # lock now has gone.
    _GONE = (
        "(EXISTS (SELECT 1 FROM instances i WHERE i.id = {instance}) AND NOT EXISTS (SELECT 1 "
        f"FROM pg_locks WHERE locktype = 'advisory' AND classid = {LIVING_LOCKS}::oid "
        "AND objid = hashtext({instance})::oid AND objsubid = 2))"
    )

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
        """PG_MIGRATIONS, each whole, all in one transaction under the advisory lock."""
        async with self._transaction():
            await self._conn.execute("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK,))
            await self._conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
            )
            current = await self.schema_version()
            if current > len(PG_MIGRATIONS):
                raise StoreError(
                    f"database {self.label} is at schema {current}, newer than this Switchboard "
                    f"({len(PG_MIGRATIONS)}); upgrade Switchboard"
                )
            for version, sql in enumerate(PG_MIGRATIONS[current:], start=current + 1):
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
        """Hold this instance's advisory lock while the block runs (`bot.store.pg_living`)."""
        async with living_lock(self._pg.pool, instance):
            yield

    async def record_chunk(
        self, message_id: int, chat: ChatRef, index: int, provider_message_id: str
    ) -> None:
        """As on SQLite, in one statement on a connection kept for these records: one round trip
        from the platform's answer to the record that the chunk was sent, waiting for no other
        statement (a daemon killed in between sends it again when taken over)."""
        await self._records.execute(
            "WITH sent AS (UPDATE outbox SET chunks_sent = GREATEST(chunks_sent, ?) WHERE message_id = ?), "
            "named AS (UPDATE messages SET provider_message_id = COALESCE(provider_message_id, ?) "
            "WHERE id = ?) INSERT INTO provider_messages (provider, chat_id, provider_message_id, "
            "message_id) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (index + 1, message_id, provider_message_id, message_id, chat.provider, chat.chat_id,
             provider_message_id, message_id),
        )

    async def context_reads(
        self, session_key: str, *, before_id: int, limit: int, request_id: int,
        scheduled: int, compaction: bool,
    ) -> tuple[CompactionRecord | None, list[StoredMessage], list[StoredMessage]]:
        """See `ContextReads.context_reads`: the same one read (one round trip to the server, not
        three), each row with the message columns, then the compaction's."""
        rows = await self._conn.execute_fetchall(
            _CONTEXT_READS,
            (session_key, before_id, limit, request_id, max(scheduled, 0), int(compaction)),
        )
        parts: tuple[list[Any], ...] = ([], [], [])
        for row in rows:
            parts[row[0]].append(row)
        latest = parts[2][0][_COMPACTION_AT:] if parts[2] else None
        history, block = ([row[1:_COMPACTION_AT] for row in sorted(part, key=_message_id_of)]
                          for part in parts[:2])
        return (CompactionRecord(*latest) if latest else None, rows_to_messages(block),
                rows_to_messages(history))

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


def _message_id_of(row: Any) -> int:
    return int(row[1])
