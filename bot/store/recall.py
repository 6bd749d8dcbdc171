"""Recall: a session's older messages found by the words of a new one, and the turns they belong to."""

from __future__ import annotations

from bot.messages import StoredMessage
from bot.recall import fts_phrase, query_terms, rank_matches
from bot.store.connection import Database
from bot.store.messages import MESSAGE_COLUMNS, rows_to_messages

RECALL_COMMON = 500  # recall ignores a word found in more of the searched messages than this


class Recall(Database):
    """Full-text search over the `messages_fts` index, ranked by `bot.recall`."""

    async def search_messages(
        self, session_key: str, text: str, *, before_id: int, limit: int
    ) -> list[StoredMessage]:
        """Up to `limit` interactive messages before `before_id` sharing words with `text`, best first.

        Each content word of `text` is searched as a quoted FTS5 string (user text is never FTS5
        syntax) and the matches ranked by `bot.recall.rank_matches`, which looks only at the
        session's messages in the searched range: the answer never changes as the log grows.
        Reads stop at the session's context floor.
        """
        terms = query_terms(text)
        if limit <= 0 or not terms:
            return []
        found = await self._conn.execute_fetchall(
            "SELECT COALESCE((SELECT context_floor FROM sessions WHERE key = ?), 0)", (session_key,)
        )
        floor = int(next(iter(found))[0])
        if before_id <= floor + 1:
            return []
        hits: list[set[int]] = []
        for term in terms:
            # CROSS JOIN: the full-text index leads (the planner would otherwise scan the session
            # and search the index once per message). A term in more than RECALL_COMMON messages
            # says little about any of them and is left out, which also bounds the work.
            ids = [int(row[0]) for row in await self._conn.execute_fetchall(
                "SELECT m.id FROM messages_fts f CROSS JOIN messages m ON m.id = f.rowid "
                "WHERE messages_fts MATCH ? AND f.rowid > ? AND f.rowid < ? "
                "AND m.session_key = ? AND m.origin = 'interactive' ORDER BY f.rowid DESC LIMIT ?",
                (fts_phrase(term), floor, before_id, session_key, RECALL_COMMON + 1),
            )]
            hits.append(set(ids) if len(ids) <= RECALL_COMMON else set())
        if not any(hits):
            return []
        total = await self._count_interactive(session_key, after_id=floor, before_id=before_id)
        best = rank_matches(hits, total, limit)
        marks = ", ".join("?" * len(best))
        rows = await self._conn.execute_fetchall(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id IN ({marks})", best
        )
        by_id = {message.id: message for message in rows_to_messages(rows)}
        return [by_id[message_id] for message_id in best if message_id in by_id]

    async def turn_of(
        self, session_key: str, message_id: int, *, before_id: int, limit: int = 6
    ) -> list[StoredMessage]:
        """The turn an interactive message belongs to, oldest first: the user message it is or that
        it answers, and the replies that followed it (before the next user message and `before_id`).

        Empty when a reply's user message is not above the context floor. At most `limit` messages.
        """
        found = await self._conn.execute_fetchall(
            "SELECT MAX(id) FROM messages WHERE session_key = ?1 AND origin = 'interactive' "
            "AND role = 'user' AND id <= ?2 AND id > (SELECT COALESCE((SELECT context_floor "
            "FROM sessions WHERE key = ?1), 0))",
            (session_key, message_id),
        )
        start = next(iter(found))[0]
        if start is None:
            return []
        rows = await self._conn.execute_fetchall(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_key = ?1 "
            "AND origin = 'interactive' AND id >= ?2 AND id < ?3 AND id < COALESCE((SELECT MIN(id) "
            "FROM messages WHERE session_key = ?1 AND origin = 'interactive' AND role = 'user' "
            "AND id > ?2), ?3) ORDER BY id LIMIT ?4",
            (session_key, int(start), before_id, limit),
        )
        return rows_to_messages(rows)

    async def _count_interactive(self, session_key: str, *, after_id: int, before_id: int) -> int:
        found = await self._conn.execute_fetchall(
            "SELECT COUNT(*) FROM messages WHERE session_key = ? AND origin = 'interactive' "
            "AND id > ? AND id < ?",
            (session_key, after_id, before_id),
        )
        return int(next(iter(found))[0])
