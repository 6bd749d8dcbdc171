"""The store on SQLite: one file (WAL, foreign keys on, mode 0600), the embedded default.

`SqliteStore` is the shared `Store` over one aiosqlite connection (`connection`), with SQLite's own
recall index (`recall`), context reads (`context_reads`) and whole-table copies (`tables`).
"""

from __future__ import annotations

import sqlite3

from bot.core.messages import ChatRef
from bot.store.base import Store
from bot.store.sqlite.connection import SqliteDatabase, in_connection_thread
from bot.store.sqlite.context_reads import SqliteContextReads
from bot.store.sqlite.recall import SqliteRecall
from bot.store.sqlite.tables import SqliteTables


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

        Committed ahead of every other write waiting (`WriteLock.first`) and as one item of the
        connection thread's queue: until it is, a crash would send the chunk again."""

        def record(db: sqlite3.Connection) -> None:
            db.execute("BEGIN IMMEDIATE")
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

        async with self._write_lock.first():
            await in_connection_thread(self._conn, record)

