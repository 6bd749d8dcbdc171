"""The SQLite store's connection: opening, pragmas, migrations, the write lock, integrity, backup;
and the second connection that only records sent chunks."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Self, TypeVar

import aiosqlite

from bot.core.errors import StoreError
from bot.media.files import KeptFiles, MediaFiles, files_dir
from bot.store.database import Database
from bot.store.dialect import SQLITE
from bot.store.schema import migrations
from bot.store.sqlite.batch import transaction_on_thread

# The page cache of the store's connection (see `Database.open`).
PAGE_CACHE_KIB = 8192

T = TypeVar("T")


async def in_connection_thread(conn: aiosqlite.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """`work(sqlite3 connection)` on the connection's own thread, as one item of its queue: several
    statements, and the Python deciding between them, without the event loop between them.

    aiosqlite has no public call for it; this uses the two its own calls are built on (`_execute`:
    queue a function on the thread; `_conn`: the sqlite3 connection there).
    """
    runner: Any = conn
    return await runner._execute(lambda: work(runner._conn))  # type: ignore[no-any-return]


# What `SqliteStore.record_chunk` writes, as one statement: an insert into this view of the records
# connection's own (TEMP), which the trigger turns into the three writes, in the statement's own
# transaction. One statement is one hand-over of Python's GIL to and from SQLite; under load each
# costs up to the interpreter's switch interval (5 ms), so BEGIN, three statements and COMMIT
# waited for it five times.
_SENT_CHUNKS = """
CREATE TEMP VIEW sent_chunks (message_id, provider, chat_id, provider_message_id, chunks, last)
    AS SELECT 0, '', '', '', 0, 0 WHERE 0;
CREATE TEMP TRIGGER sent_chunk INSTEAD OF INSERT ON sent_chunks BEGIN
    UPDATE messages SET provider_message_id = COALESCE(provider_message_id, NEW.provider_message_id)
        WHERE id = NEW.message_id;
    INSERT INTO provider_messages (provider, chat_id, provider_message_id, message_id)
        VALUES (NEW.provider, NEW.chat_id, NEW.provider_message_id, NEW.message_id) ON CONFLICT DO NOTHING;
    DELETE FROM outbox WHERE NEW.last AND message_id = NEW.message_id;
    UPDATE outbox SET chunks_sent = MAX(chunks_sent, NEW.chunks)
        WHERE NOT NEW.last AND message_id = NEW.message_id;
END;
"""


@asynccontextmanager
async def records_connection(path: Path) -> AsyncIterator[aiosqlite.Connection]:
    """A second connection to the file, with a thread of its own, for the records that a chunk
    reached the platform (`SqliteStore.record_chunk`): the shared connection's thread has a queue
    (a turn's context reads, other turns' writes), and until the record is committed a crash sends
    the chunk again. WAL lets it write while the other connection reads; SQLite's busy timeout
    makes it wait (without the GIL) only while that one is committing a write; it never
    checkpoints (the shared connection does), so a commit here never waits for one."""
    conn = await aiosqlite.connect(path, isolation_level=None)
    try:
        for pragma in ("foreign_keys=ON", "synchronous=NORMAL", "busy_timeout=5000", "wal_autocheckpoint=0"):
            await conn.execute(f"PRAGMA {pragma}")
        await conn.executescript(_SENT_CHUNKS)
        yield conn
    finally:
        await conn.close()


class SqliteDatabase(Database):
    """One aiosqlite connection to one SQLite file (WAL, foreign keys on, mode 0600)."""

    dialect = SQLITE

    def __init__(self, conn: aiosqlite.Connection, path: Path) -> None:
        super().__init__(conn, path)
        # One connection is shared by every coroutine: a write transaction must not interleave
        # with another coroutine's statements. Waiters are served in arrival order.
        self._write_lock = asyncio.Lock()
        # The connection (and thread) of the records of sent chunks alone (`record_chunk`): set by
        # `open`; the shared one until then.
        self._records = conn

    @classmethod
    @asynccontextmanager
    async def open(cls, path: str | os.PathLike[str]) -> AsyncIterator[Self]:
        """Open (creating with mode 0600 and migrating) the database, closing it on exit.

        StoreError when the file cannot be opened, is damaged, or has a newer schema.
        """
        db_path = Path(path)
        try:
            db_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(db_path, os.O_CREAT | os.O_RDWR, 0o600)
            os.close(fd)
            conn = await aiosqlite.connect(db_path, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open database {db_path}: {exc}") from exc
        try:
            # Plain tuples: reads index columns by position, and building Row objects costs
            # measurably in a context build's ~90 rows.
            try:
                await conn.execute("PRAGMA journal_mode=WAL")
                await conn.execute("PRAGMA foreign_keys=ON")
                await conn.execute("PRAGMA synchronous=NORMAL")
                await conn.execute("PRAGMA busy_timeout=5000")
                # 8 MiB of page cache, not SQLite's 2: a context build's pages (the recall index's
                # and the tables' upper levels) thrashed the default in about four runs of ten of
                # bench/context_build.py (whole runs 25 % slower, decided by the first builds).
                await conn.execute(f"PRAGMA cache_size=-{PAGE_CACHE_KIB}")
                store = cls(conn, db_path)
                await store._migrate()
            except sqlite3.DatabaseError as exc:
                # SQLite reads a damaged file only when first asked (the connect above succeeds).
                raise cls.damaged(db_path, str(exc)) from exc
            async with records_connection(db_path) as records:
                store._records = records
                yield store
        finally:
            await conn.close()

    @property
    def label(self) -> str:
        """The database as messages name it: the file (a PostgreSQL store names its server)."""
        return str(self.path)

    def kept_files(self) -> KeptFiles:
        """Where the pictures and files its messages refer to are kept: on disk beside the file."""
        return MediaFiles(files_dir(self.path))

    @asynccontextmanager
    async def living(self, instance: str) -> AsyncIterator[None]:
        """Nothing to show: an SQLite file is one daemon's alone."""
        yield

    async def _apply_migrations(self) -> None:
        """`sqlite/migrations/`, each in a transaction of its own."""
        wanted = migrations(self.dialect.name)
        await self._conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations "
            "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
        )
        async with self._conn.execute("SELECT MAX(version) FROM schema_migrations") as cur:
            row = await cur.fetchone()
        current = (row[0] if row else None) or 0
        if current > len(wanted):
            raise StoreError(
                f"database {self.label} is at schema {current}, newer than this Switchboard "
                f"({len(wanted)}); upgrade Switchboard"
            )
        for version, sql in enumerate(wanted[current:], start=current + 1):
            async with self._transaction():
                for statement in _statements(sql):
                    await self._conn.execute(statement)
                await self._conn.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                    (version, time.time()),
                )

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[None]:
        async with self._write_lock:
            # BEGIN inside the try: a write cancelled while its BEGIN waits on the connection's
            # thread (a timeout, a stop) still has it run there, and the ROLLBACK queued behind
            # it ends it; left open, it held the write lock for good and every later BEGIN failed.
            try:
                await self._conn.execute("BEGIN IMMEDIATE")
                yield
            except BaseException:
                with contextlib.suppress(sqlite3.Error):  # no transaction when BEGIN itself failed
                    await self._conn.execute("ROLLBACK")
                raise
            await self._conn.execute("COMMIT")

    async def _batch(self, body: Callable[[aiosqlite.Connection], Coroutine[Any, Any, T]]) -> T:
        """The whole transaction, BEGIN to COMMIT, as one item of the connection's thread
        (`sqlite.batch`): one hand-off, not one per statement."""
        async with self._write_lock:
            return await in_connection_thread(self._conn, transaction_on_thread(body))

    def _one_write(self) -> AbstractAsyncContextManager[None]:
        """For a write that is one statement: the write lock (statements of other coroutines must
        not join another's transaction on the shared connection); the statement, run outside a
        transaction, is one of its own, so no BEGIN and COMMIT hand-offs, and the file's write lock
        is held only while the thread runs it, never across the event loop's turns (another
        process waits milliseconds, not for the loop). Where each statement is a transaction of
        its own on its own connection (PostgreSQL), nothing."""
        return self._write_lock

    async def _serialize(self, *key: str) -> None:
        """Inside a transaction that reads before it decides what to write (a limit counted, the
        latest record checked): wait for any other such transaction on the same key. Nothing to
        do here: SQLite's write lock already lets one transaction write at a time."""
        return None

    # -- integrity and backup -------------------------------------------------------------------

    @staticmethod
    def damaged(path: Path, detail: str) -> StoreError:
        """The error for a database file SQLite finds damaged, saying what to do about it."""
        return StoreError(
            f"database {path} is damaged ({detail}); stop the daemon, move the file aside and "
            "restore the newest backup (`switchboard db backup` makes them), or start afresh"
        )

    async def check_integrity(self) -> None:
        """`PRAGMA quick_check`: StoreError naming the file when SQLite finds it damaged."""
        try:
            rows = await self._conn.execute_fetchall("PRAGMA quick_check")
        except sqlite3.DatabaseError as exc:
            raise self.damaged(self.path, str(exc)) from exc
        problems = [str(row[0]) for row in rows if row[0] != "ok"]
        if problems:
            shown = "; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else "")
            raise self.damaged(self.path, shown)

    async def foreign_key_problems(self) -> int:
        """Rows whose foreign key points nowhere (`PRAGMA foreign_key_check`); 0 in a sound file."""
        return len(list(await self._conn.execute_fetchall("PRAGMA foreign_key_check")))

    async def _references_to_messages(self) -> list[tuple[str, str]]:
        """(table, column) of every foreign key to messages.id, except those pruning cleans up."""
        tables = [str(row[0]) for row in await self._conn.execute_fetchall(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        found: list[tuple[str, str]] = []
        for table in tables:
            if table in ("messages", "provider_messages", "context_snapshots"):
                continue
            for target, column in await self._conn.execute_fetchall(
                'SELECT "table", "from" FROM pragma_foreign_key_list(?)', (table,)
            ):
                if target == "messages":
                    found.append((f'"{table}"', f'"{column}"'))
        return found

    async def backup_to(self, target: Path) -> None:
        """Copy the whole database, consistent as of one moment, into a new file (mode 0600).

        SQLite's online backup reads under a read transaction, so a running daemon keeps writing.
        """
        fd = os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(fd)
        copy = await aiosqlite.connect(target)
        try:
            await self._conn.backup(copy)
        finally:
            await copy.close()


def _statements(sql: str) -> list[str]:
    """Split a migration into statements; a trigger body's own semicolons stay inside it."""
    statements: list[str] = []
    pending = ""
    for part in sql.split(";"):
        pending += part + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                statements.append(pending.strip())
            pending = ""
    return statements
