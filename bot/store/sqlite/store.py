"""The store on SQLite: one file (WAL, foreign keys on, mode 0600), the embedded default.

`SqliteStore` is the shared `Store` over one aiosqlite connection (`connection`; a second only
records sent chunks), with SQLite's own recall index (`recall`), context reads (`context_reads`)
and whole-table copies (`tables`).
"""

from __future__ import annotations

import sqlite3
import time

from bot.core.messages import ChatRef
from bot.store.base import Store
from bot.store.sqlite.connection import SqliteDatabase, in_connection_thread
from bot.store.sqlite.context_reads import SqliteContextReads
from bot.store.sqlite.recall import SqliteRecall
from bot.store.sqlite.tables import SqliteTables

# A sent chunk's record, finding another connection writing, tries again this often, for this long
# (the shared connection's busy timeout is 5 s too).
RETRY_S = 0.0002
BUSY_S = 5.0


class SqliteStore(SqliteDatabase, SqliteRecall, SqliteContextReads, SqliteTables, Store):
    """Conversation history in one SQLite file (WAL, foreign keys on, mode 0600).

    Open it with `SqliteStore.open(path)`; a file that cannot be opened, is damaged or has a newer
    schema raises StoreError.
    """

    async def record_chunk(
        self, message_id: int, chat: ChatRef, index: int, provider_message_id: str, *,
        last: bool = False,
    ) -> None:
        """One chunk of an outbox reply reached the platform as `provider_message_id`; with
        `last`, the reply's last, and the reply leaves the outbox in the same transaction
        (`finish_delivery`'s write).

        Until it is committed a crash sends the chunk again, so it waits for no queue: it runs on a
        connection and thread of its own (`records_connection`), not behind the shared one's reads
        and writes, and not under the write lock (which a write holds while its statements wait in
        that queue). It waits only while SQLite's own write lock is held, by a transaction writing
        now, trying again every RETRY_S (up to BUSY_S)."""

        def record(db: sqlite3.Connection) -> None:
            begin(db)
            try:
                db.execute("UPDATE messages SET provider_message_id = COALESCE(provider_message_id, ?) "
                           "WHERE id = ?", (provider_message_id, message_id))
                db.execute("INSERT INTO provider_messages (provider, chat_id, provider_message_id, "
                           "message_id) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                           (chat.provider, chat.chat_id, provider_message_id, message_id))
                if last:
                    db.execute("DELETE FROM outbox WHERE message_id = ?", (message_id,))
                else:
                    db.execute("UPDATE outbox SET chunks_sent = MAX(chunks_sent, ?) WHERE message_id = ?",
                               (index + 1, message_id))
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

        await in_connection_thread(self._records, record)


def begin(db: sqlite3.Connection) -> None:
    """BEGIN IMMEDIATE on a connection without a busy timeout, tried again every RETRY_S while
    another connection writes (sqlite3's "database is locked"), for up to BUSY_S."""
    give_up = time.monotonic() + BUSY_S
    while True:
        try:
            db.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() >= give_up:
                raise
        time.sleep(RETRY_S)
