"""SQLite's `context_reads`: a context build's fixed reads in one statement: the compaction in use,
the scheduled block and the newest history (each as its own method reads it), so SQLite's thread
answers one call, not three; and `context_and_recall`: that statement and lexical recall's in one
hand-off to SQLite's thread, the event loop not woken between them."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from bot.store.compactions import COMPACTION_COLUMNS, latest_compaction_sql
from bot.store.database import Database
from bot.store.messages import MESSAGE_COLUMNS, recent_sql, rows_to_messages, scheduled_sql
from bot.store.records import CompactionRecord, ContextRead, LexicalFound
from bot.store.sqlite.connection import in_connection_thread
from bot.store.sqlite.recall import lexical_turns_of, lexical_turns_statement

_COMPACTION_WIDTH = len(COMPACTION_COLUMNS.split(","))
_PAD = ", NULL" * (len(MESSAGE_COLUMNS.split(",")) - _COMPACTION_WIDTH)

# ?1 the session, ?2 the history's bound, ?3 its limit, ?4 the request, ?5 the scheduled block's
# limit, ?6 1 when the compaction is wanted (else 0). The statements of `recent_messages`,
# `scheduled_between` (since the previous user message) and `latest_compaction`, tagged 0, 1, 2;
# a compaction's columns come first in its row. Tagged 3, only when the history holds messages
# stored after the request (a request queued behind others of its session), `recent_messages`
# before the request too, which the build then reads: no second hand-off to SQLite's thread.
_CONTEXT_READS = (
    "SELECT 0, * FROM ("
    + recent_sql(origin="'interactive'", before="?2", after="0", limit="?3")
    + ") UNION ALL SELECT 1, * FROM ("
    + scheduled_sql(after=None, before="?4", limit="?5")
    + ") UNION ALL SELECT 2, * FROM ("
    + latest_compaction_sql(limit="?6", padding=_PAD)
    + ") UNION ALL SELECT 3, * FROM ("
    # The condition inside the scan's own WHERE: SQLite tests it once, before reading a row.
    + recent_sql(origin="'interactive'", after="0", limit="?3", before="?4 AND EXISTS ("
                 + recent_sql(origin="'interactive'", before="?2", after="?4", limit="1") + ")")
    + ")"
)


class SqliteContextReads(Database):
    """The reads every context build makes, together."""

    async def context_reads(
        self, session_key: str, *, before_id: int, limit: int, request_id: int,
        scheduled: int, compaction: bool,
    ) -> ContextRead:
        """`latest_compaction` (None unless `compaction`), `scheduled_between(after_id=None,
        before_id=request_id, limit=scheduled)`, `recent_messages(before_id=before_id,
        limit=limit)` and, when that holds messages after the request, `recent_messages(
        before_id=request_id, limit=limit)` (else no rows), in one read."""
        rows = await self._conn.execute_fetchall(
            _CONTEXT_READS,
            (session_key, before_id, limit, request_id, max(scheduled, 0), int(compaction)),
        )
        return _context_of(rows)

    async def context_and_recall(
        self, session_key: str, *, before_id: int, limit: int, request_id: int,
        scheduled: int, compaction: bool, text: str, recall_before: int, recall_limit: int,
        expand: int = 0,
    ) -> tuple[ContextRead, LexicalFound]:
        """See `Store.context_and_recall`: both statements as one item of SQLite's thread."""
        reads = (session_key, before_id, limit, request_id, max(scheduled, 0), int(compaction))
        recall = lexical_turns_statement(session_key, text, before_id=recall_before, limit=recall_limit,
                                         expand=expand)

        def both(db: sqlite3.Connection) -> tuple[list[Any], list[Any] | None]:
            rows = db.execute(_CONTEXT_READS, reads).fetchall()
            return rows, db.execute(*recall).fetchall() if recall is not None else None

        context_rows, recall_rows = await in_connection_thread(self._conn, both)
        found = lexical_turns_of(recall_rows) if recall_rows is not None else ([], {})
        return _context_of(context_rows), found


def _context_of(rows: Iterable[Any]) -> ContextRead:
    """`context_reads`' answer from its statement's rows."""
    parts: tuple[list[Any], ...] = ([], [], [], [])
    for row in rows:
        parts[row[0]].append(row[1:])
    history, block, latest, before = (sorted(part, key=_row_id) for part in parts)
    record = CompactionRecord(*latest[-1][:_COMPACTION_WIDTH]) if latest else None
    return record, rows_to_messages(block), rows_to_messages(history), rows_to_messages(before)


def _row_id(row: Any) -> int:
    return int(row[0])
