"""Compactions: summaries of a session's older messages, which one is in use, and its notice; and
the memory flushes that come before them."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from bot.store.database import Database
from bot.store.records import CompactionRecord

COMPACTION_COLUMNS = (
    "id, session_key, summary, last_summarised_id, first_kept_message_id, tokens_before, "
    "tokens_after, model, created_at, notified"
)


def latest_compaction_sql(*, limit: str = "1", padding: str = "") -> str:
    """The compaction in use for session ?1: the newest that summarised messages above the context
    floor (/reset); `padding` columns after its own (`ContextReads` runs it inside a union)."""
    return (f"SELECT {COMPACTION_COLUMNS}{padding} FROM compactions WHERE session_key = ?1 AND "
            "last_summarised_id > (SELECT COALESCE((SELECT context_floor FROM sessions "
            f"WHERE key = ?1), 0)) ORDER BY id DESC LIMIT {limit}")


_LATEST_COMPACTION = latest_compaction_sql()
_LATEST_COLUMNS = ", ".join(f"c.{name.strip()}" for name in COMPACTION_COLUMNS.split(","))
# `latest_compaction` and `history_tokens` after it (its first kept message on; every message
# above the context floor when there is none), one row: the compaction's columns (NULL when none),
# then the count and the tokens.
_COMPACTION_STATE = (
    f"SELECT {_LATEST_COLUMNS}, COUNT(m.id), COALESCE(SUM(m.token_estimate), 0) FROM (SELECT 1 AS one) AS o "
    f"LEFT JOIN ({_LATEST_COMPACTION}) AS c ON 1 = 1 LEFT JOIN messages m ON m.session_key = ?1 "
    "AND m.origin = 'interactive' AND m.id > MAX(COALESCE(c.first_kept_message_id - 1, 0), "
    "(SELECT COALESCE((SELECT context_floor FROM sessions WHERE key = ?1), 0))) "
    f"GROUP BY {_LATEST_COLUMNS}"
)

# Where session ?1's compaction cycle starts (the message id after which its uncompacted history
# begins: the summary in use's first kept message, or the context floor when later), and the
# highest flush threshold that cycle has already claimed (NULL: none).
_FLUSH_STATE = (
    "WITH cycle AS (SELECT MAX(COALESCE((SELECT first_kept_message_id - 1 FROM "
    f"({_LATEST_COMPACTION}) AS c), 0), COALESCE((SELECT context_floor FROM sessions WHERE key = ?1), "
    "0)) AS start) SELECT cycle.start, (SELECT MAX(f.threshold) FROM memory_flushes f WHERE "
    "f.session_key = ?1 AND f.cycle_start = cycle.start) FROM cycle"
)


class Compactions(Database):
    """Writes and reads of the `compactions` table."""

    async def latest_compaction(self, session_key: str) -> CompactionRecord | None:
        """The session's newest compaction that summarised messages above its context floor."""
        found = await self._conn.execute_fetchall(_LATEST_COMPACTION, (session_key,))
        row = next(iter(found), None)
        return CompactionRecord(*row) if row else None

    async def compaction_state(self, session_key: str) -> tuple[CompactionRecord | None, int, int]:
        """`latest_compaction`, and `history_tokens` (messages, tokens) from its first kept message
        (every message when there is none), in one read."""
        found = await self._conn.execute_fetchall(_COMPACTION_STATE, (session_key,))
        row = next(iter(found))
        width = len(row) - 2
        record = CompactionRecord(*row[:width]) if row[0] is not None else None
        return record, int(row[width]), int(row[width + 1])

    async def compaction_by_id(self, compaction_id: int) -> CompactionRecord | None:
        found = await self._conn.execute_fetchall(
            f"SELECT {COMPACTION_COLUMNS} FROM compactions WHERE id = ?", (compaction_id,)
        )
        row = next(iter(found), None)
        return CompactionRecord(*row) if row else None

    async def record_compaction(
        self,
        session_key: str,
        *,
        summary: str,
        last_summarised_id: int,
        first_kept_message_id: int,
        tokens_before: int,
        tokens_after: int,
        model: str,
        replaces: int | None,
        notified: bool = False,
    ) -> CompactionRecord | None:
        """Write a compaction built on `replaces` (the latest one when it started, or None).

        None when another compaction of the session was written meanwhile: the caller's summary
        is stale and is dropped rather than hiding the newer one. Compactions at or below the
        context floor (before a /reset) are out of use and do not count.
        """
        async with self._transaction():
            await self._serialize("compaction", session_key)
            found = await self._conn.execute_fetchall(
                "SELECT MAX(id) FROM compactions WHERE session_key = ? AND last_summarised_id > "
                "(SELECT COALESCE((SELECT context_floor FROM sessions WHERE key = ?), 0))",
                (session_key, session_key),
            )
            latest = next(iter(found))[0]
            if latest is not None and (replaces is None or latest > replaces):
                return None
            inserted = await self._conn.execute_fetchall(
                "INSERT INTO compactions (session_key, summary, last_summarised_id, "
                "first_kept_message_id, tokens_before, tokens_after, model, created_at, notified) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (session_key, summary, last_summarised_id, first_kept_message_id, tokens_before,
                 tokens_after, model, time.time(), int(notified)),
            )
        return await self.compaction_by_id(int(next(iter(inserted))[0]))

    async def take_compaction_notice(self, session_key: str) -> CompactionRecord | None:
        """The compaction in use, if the chat was not told about it yet; every one is marked told.

        Summaries already replaced, or out of use since a /reset, are marked without a notice.
        Called every turn: a read, and a write only when some compaction is still untold.
        """
        pending = await self._conn.execute_fetchall(
            "SELECT 1 FROM compactions WHERE session_key = ? AND notified = 0 LIMIT 1", (session_key,)
        )
        if not list(pending):
            return None
        async with self._transaction():
            await self._serialize("compaction", session_key)
            found = await self._conn.execute_fetchall(_LATEST_COMPACTION, (session_key,))
            row = next(iter(found), None)
            await self._conn.execute(
                "UPDATE compactions SET notified = 1 WHERE session_key = ? AND notified = 0",
                (session_key,),
            )
        record = CompactionRecord(*row) if row is not None else None
        return None if record is None or record.notified else record

    async def memory_flush_state(self, session_key: str) -> tuple[int, float | None]:
        """Where the session's compaction cycle starts, and the highest flush threshold it has
        claimed (None: none yet)."""
        found = await self._conn.execute_fetchall(_FLUSH_STATE, (session_key,))
        start, fired = next(iter(found))
        return int(start), float(fired) if fired is not None else None

    async def claim_memory_flush(
        self, session_key: str, *, cycle_start: int, threshold: float, share: float, request_id: int
    ) -> int | None:
        """Claim the flush of a cycle at a threshold before it runs; its id, or None when it was
        claimed already (a restart, another instance)."""
        async with self._one_write():
            inserted = await self._conn.execute_fetchall(
                "INSERT INTO memory_flushes (session_key, cycle_start, threshold, share, request_id, "
                "status, created_at) VALUES (?, ?, ?, ?, ?, 'running', ?) ON CONFLICT DO NOTHING "
                "RETURNING id",
                (session_key, cycle_start, threshold, share, request_id, time.time()),
            )
        row = next(iter(inserted), None)
        return int(row[0]) if row is not None else None

    async def finish_memory_flush(
        self, flush_id: int, *, model: str | None, notes: int, actions: Sequence[str], reply: str | None,
        error: str | None = None,
    ) -> None:
        """What a claimed flush did: the notes kept, its tools' actions and its (unshown) reply."""
        async with self._one_write():
            await self._conn.execute(
                "UPDATE memory_flushes SET status = ?, model = ?, notes = ?, actions = ?, reply = ?, "
                "error = ?, finished_at = ? WHERE id = ?",
                ("failed" if error is not None else "done", model, notes, json.dumps(list(actions)),
                 reply, error, time.time(), flush_id),
            )
