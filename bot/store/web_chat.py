"""What the open web chats read: the messages of their sessions stored since they last looked, by
whichever instance on the shared store wrote them."""

from __future__ import annotations

from collections.abc import Sequence

from bot.core.messages import StoredMessage
from bot.store.database import Database
from bot.store.messages import MESSAGE_COLUMNS, rows_to_messages


class WebChatReads(Database):
    """One read for every chat page a server has open (`bot.web.chat_feed`)."""

    async def messages_after(
        self, session_keys: Sequence[str], after_id: int, limit: int
    ) -> list[StoredMessage]:
        """The first `limit` messages of any of `session_keys` with an id above `after_id`,
        oldest first."""
        if not session_keys:
            return []
        marks = ", ".join("?" * len(session_keys))
        rows = await self._conn.execute_fetchall(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_key IN ({marks}) AND id > ? "
            "ORDER BY id LIMIT ?",
            (*session_keys, after_id, limit),
        )
        return rows_to_messages(rows)
