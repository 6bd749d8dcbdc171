"""History search for one person: words matched in the sessions a tool may read (`bot.tools.scope`
decides which), and of those only what is theirs: never another person's words."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from bot.core.messages import StoredMessage
from bot.ranking.lexical import search_terms, term_weight
from bot.store.database import Database, like_prefix
from bot.store.messages import MESSAGE_COLUMNS, rows_to_messages

# Newest matches read per term and session; older ones beyond this are not searched.
TERM_HITS = 500
SEARCHED_CAP = 10_000


class HistorySearch(Database):
    """Reads for the `search_history` tool; every read is bounded to the asking person."""

    async def user_sessions(self, agent_id: str, provider: str, user_id: str) -> list[str]:
        """Every session of this agent and provider where `user_id` wrote a message."""
        rows = await self._conn.execute_fetchall(
            "SELECT DISTINCT session_key FROM messages WHERE sender_id = ? AND role = 'user' "
            "AND session_key LIKE ? ESCAPE '\\' ORDER BY session_key",
            (user_id, like_prefix(f"agent:{agent_id}:{provider}:")),
        )
        return [str(row[0]) for row in rows]

    async def lexical_history(
        self, sessions: Sequence[str], query: str, *, limit: int
    ) -> list[tuple[int, float]]:
        """(message id, score) of the best `limit` messages sharing words with `query` in these
        sessions (interactive, whole history), best first; each term weighs its idf in its session."""
        scores: dict[int, float] = defaultdict(float)
        for session in sessions:
            terms = search_terms(session, query)
            if not terms:
                continue
            found = await self._conn.execute_fetchall(
                "SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE session_key = ? "
                f"AND origin = 'interactive' LIMIT {SEARCHED_CAP}) AS searchable", (session,),
            )
            searched = int(next(iter(found))[0])
            for term in terms:
                hits = await self._term_hits(term)
                weight = term_weight(len(hits), max(searched, len(hits)))
                for (message_id,) in hits:
                    scores[int(message_id)] += weight
        ranked = sorted(scores.items(), key=lambda item: (-item[1], -item[0]))
        return ranked[: max(limit, 0)]

    async def owned_messages(
        self, message_ids: Sequence[int], session_key: str, user_id: str, *, private: bool,
        elsewhere: Sequence[str] = (), since: float | None = None, until: float | None = None,
    ) -> list[StoredMessage]:
        """Of these ids, those that belong to `user_id`, within [since, until), fallback replies
        left out: in `session_key` their own messages and the replies answering their requests (a
        reply's stored link to its request decides, not who wrote last; every reply of a `private`
        chat, whose one participant they are); in the `elsewhere` sessions their own messages only."""
        ids = sorted(set(message_ids))
        if not ids:
            return []
        id_marks = ", ".join("?" for _ in ids)
        others = [key for key in elsewhere if key != session_key]
        other_marks = ", ".join("?" for _ in others) or "NULL"
        rows = await self._conn.execute_fetchall(
            f"SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.id IN ({id_marks}) "
            "AND m.origin = 'interactive' AND m.fallback = 0 AND m.created_at >= ? AND m.created_at < ? "
            "AND ((m.session_key = ? AND ((m.role = 'user' AND m.sender_id = ?) OR (m.role = 'assistant' "
            "AND (? OR (SELECT u.sender_id FROM messages u WHERE u.id = m.request_id) = ?)))) "
            f"OR (m.session_key IN ({other_marks}) AND m.role = 'user' AND m.sender_id = ?)) ORDER BY m.id",
            (*ids, since if since is not None else float("-inf"),
             until if until is not None else float("inf"), session_key, user_id, private, user_id,
             *others, user_id),
        )
        return rows_to_messages(rows)
