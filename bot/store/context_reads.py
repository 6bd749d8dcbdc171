"""A context build's fixed reads in one statement: the compaction in use, the scheduled block and
the newest history (each as its own method reads it), so SQLite's thread answers one call, not three."""

from __future__ import annotations

from typing import Any

from bot.messages import StoredMessage
from bot.store.compactions import _COMPACTION_COLUMNS
from bot.store.connection import Database
from bot.store.messages import MESSAGE_COLUMNS, rows_to_messages
from bot.store.records import CompactionRecord

_FLOOR = "(SELECT COALESCE((SELECT context_floor FROM sessions WHERE key = ?1), 0))"
_PAD = ", NULL" * (len(MESSAGE_COLUMNS.split(",")) - len(_COMPACTION_COLUMNS.split(",")))

# ?1 the session, ?2 the history's bound, ?3 its limit, ?4 the request, ?5 the scheduled block's
# limit, ?6 1 when the compaction is wanted (else 0). The statements of `recent_messages`,
# `scheduled_between` (since the previous user message) and `latest_compaction`, tagged 0, 1, 2;
# a compaction's columns come first in its row.
_CONTEXT_READS = (
    f"SELECT 0, * FROM (SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_key = ?1 "
    f"AND origin = 'interactive' AND fallback = 0 AND id < ?2 AND id > MAX(0, {_FLOOR}) "
    "ORDER BY id DESC LIMIT ?3) "
    f"UNION ALL SELECT 1, * FROM (SELECT {MESSAGE_COLUMNS} FROM messages m WHERE session_key = ?1 "
    "AND origin = 'scheduled' AND id < ?4 AND id > MAX((SELECT COALESCE(MAX(id), 0) FROM messages "
    "WHERE session_key = ?1 AND origin = 'interactive' AND role = 'user' AND id < ?4), "
    f"{_FLOOR}) AND NOT EXISTS (SELECT 1 FROM schedule_runs r WHERE r.reply_message_id = m.id "
    "AND r.status <> 'delivered') ORDER BY id DESC LIMIT ?5) "
    f"UNION ALL SELECT 2, * FROM (SELECT {_COMPACTION_COLUMNS}{_PAD} FROM compactions "
    f"WHERE session_key = ?1 AND last_summarised_id > {_FLOOR} ORDER BY id DESC LIMIT ?6)"
)


class ContextReads(Database):
    """The reads every context build makes, together."""

    async def context_reads(
        self, session_key: str, *, before_id: int, limit: int, request_id: int,
        scheduled: int, compaction: bool,
    ) -> tuple[CompactionRecord | None, list[StoredMessage], list[StoredMessage]]:
        """`latest_compaction` (None unless `compaction`), `scheduled_between(after_id=None,
        before_id=request_id, limit=scheduled)` and `recent_messages(before_id=before_id,
        limit=limit)`, in one read."""
        rows = await self._conn.execute_fetchall(
            _CONTEXT_READS,
            (session_key, before_id, limit, request_id, max(scheduled, 0), int(compaction)),
        )
        parts: tuple[list[Any], ...] = ([], [], [])
        for row in rows:
            parts[row[0]].append(row[1:])
        history, block, latest = (sorted(part, key=_row_id) for part in parts)
        record = CompactionRecord(*latest[-1][: len(_COMPACTION_COLUMNS.split(","))]) if latest else None
        return record, rows_to_messages(block), rows_to_messages(history)


def _row_id(row: Any) -> int:
    return int(row[0])
