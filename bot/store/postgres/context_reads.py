"""PostgreSQL's `context_reads`: a context build's fixed reads in one statement, one round trip to
the server, not three."""

from __future__ import annotations

from typing import Any

from bot.store.compactions import COMPACTION_COLUMNS, latest_compaction_sql
from bot.store.database import Database
from bot.store.messages import MESSAGE_COLUMNS, recent_sql, rows_to_messages, scheduled_sql
from bot.store.records import CompactionRecord, ContextRead

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


class PgContextReads(Database):
    """The reads every context build makes, together."""

    async def context_reads(
        self, session_key: str, *, before_id: int, limit: int, request_id: int,
        scheduled: int, compaction: bool,
    ) -> ContextRead:
        """See `Store.context_reads`: the same one read (one round trip to the server, not
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
                rows_to_messages(history), None)


def _message_id_of(row: Any) -> int:
    return int(row[1])
