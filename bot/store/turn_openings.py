"""What a turn reads about itself before it starts, in one statement: one round trip, not six.

The session's model (/model), the preview an interrupted earlier run posted for the request,
whether that run left tool calls open, whether a compaction is still untold, and the asker's own
timezone and notes: each read on its own before (`session_model`, `preview_of`, `open_tool_calls`,
`take_compaction_notice`, `user_timezone`, `notes_of`), all now one SELECT both backends run.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.store.database import Database
from bot.store.people import UserNote


@dataclass(frozen=True, slots=True)
class TurnOpening:
    """A request's turn as it starts; `notes` empty unless they were asked for."""

    model: str | None  # the session's /model choice, None for the configured one
    preview_id: str | None  # the preview message an earlier run for the request posted
    open_calls: bool  # whether an earlier run left tool calls of the request unanswered
    untold_compaction: bool  # whether some compaction of the session is not yet told to the chat
    timezone: str | None  # the asker's own, as `user_timezone` reads it
    notes: tuple[UserNote, ...] = ()


# ?1 session, ?2 request, ?3 provider, ?4 user, ?5 1 when the notes are wanted. The first row is
# the facts (tagged 0); each note is a row (tagged 1) in the same columns: (note text, -, -, id,
# -, created_at). The first row's columns are typed, so PostgreSQL types the union from it.
_OPENING = (
    "SELECT 0, (SELECT model FROM session_models WHERE session_key = ?1), "
    "(SELECT preview_id FROM messages WHERE id = ?2), "
    "(SELECT timezone FROM user_settings WHERE provider = ?3 AND user_id = ?4), "
    "CASE WHEN EXISTS (SELECT 1 FROM compactions WHERE session_key = ?1 AND notified = 0) "
    "THEN 1 ELSE 0 END, "
    "CASE WHEN EXISTS (SELECT 1 FROM tool_calls WHERE request_id = ?2 AND reply_id IS NULL) "
    "THEN 1 ELSE 0 END, CAST(NULL AS DOUBLE PRECISION) "
    "UNION ALL SELECT 1, note, NULL, NULL, id, 0, created_at FROM user_notes "
    "WHERE provider = ?3 AND user_id = ?4 AND ?5 = 1"
)


class TurnOpenings(Database):
    """The one read a turn makes before it starts."""

    async def turn_opening(
        self, session_key: str, request_id: int, provider: str, user_id: str, *, notes: bool
    ) -> TurnOpening:
        """See `TurnOpening`; the asker's notes only when `notes`."""
        rows = await self._conn.execute_fetchall(
            _OPENING, (session_key, request_id, provider, user_id, int(notes)))
        facts = next(row for row in rows if row[0] == 0)
        kept = sorted((row for row in rows if row[0] == 1), key=lambda row: int(row[4]))
        return TurnOpening(
            model=None if facts[1] is None else str(facts[1]),
            preview_id=None if facts[2] is None else str(facts[2]),
            open_calls=bool(facts[5]),
            untold_compaction=bool(facts[4]),
            timezone=str(facts[3]) if facts[3] else None,
            notes=tuple(UserNote(int(row[4]), provider, user_id, str(row[1]), float(row[6])) for row in kept),
        )
