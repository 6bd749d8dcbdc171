"""The store on SQLite: one file (WAL, foreign keys on, mode 0600), the embedded default.

`SqliteStore` is the shared `Store` over one aiosqlite connection (`connection`; a second only
records sent chunks), with SQLite's own recall index (`recall`), context reads (`context_reads`)
and whole-table copies (`tables`).
"""

from __future__ import annotations

from bot.core.messages import ChatRef
from bot.store.base import Store
from bot.store.sqlite.connection import SqliteDatabase
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

        Until it is committed a crash sends the chunk again, so it waits for no queue: it is one
        statement (`connection._SENT_CHUNKS`) on a connection and thread of its own
        (`records_connection`), not behind the shared connection's reads and writes, and not under
        the write lock (which a write holds while its statements wait in that queue). It waits only
        while SQLite's own write lock is held, by a transaction writing now."""
        await self._records.execute(
            "INSERT INTO sent_chunks VALUES (?, ?, ?, ?, ?, ?)",
            (message_id, chat.provider, chat.chat_id, provider_message_id, index + 1, int(last)))
