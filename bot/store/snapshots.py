"""Context snapshots: what each turn was answered from, kept for replay."""

from __future__ import annotations

import json
import time
from typing import Any

import structlog

from bot.ranking.stages import read_snapshot
from bot.store.database import Database
from bot.store.records import SnapshotRecord

log = structlog.get_logger("switchboard.store")


class Snapshots(Database):
    """Writes and reads of the `context_snapshots` table."""

    async def record_snapshot(
        self,
        session_key: str,
        request_message_id: int,
        reply_message_id: int | None,
        snapshot: dict[str, Any],
        snapshot_hash: str,
    ) -> None:
        async with self._one_write():
            await self._conn.execute(
                "INSERT INTO context_snapshots (session_key, request_message_id, "
                "reply_message_id, created_at, hash, snapshot) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    session_key,
                    request_message_id,
                    reply_message_id,
                    time.time(),
                    snapshot_hash,
                    json.dumps(snapshot, sort_keys=True),
                ),
            )

    async def snapshots(self, session_key: str) -> list[SnapshotRecord]:
        """Every turn's snapshot, numbered from 1; an unreadable one keeps its number but is left out."""
        rows = await self._conn.execute_fetchall(
            f"SELECT {_COLUMNS} FROM context_snapshots WHERE session_key = ? ORDER BY id", (session_key,)
        )
        return [record for turn, row in enumerate(rows, start=1)
                if (record := _record(session_key, turn, row)) is not None]

    async def snapshot_of_turn(self, session_key: str, turn: int) -> list[SnapshotRecord]:
        """Turn `turn`'s snapshot alone (numbered as `snapshots` numbers them), read without the
        others (a page showing one turn of a long session parses one snapshot, not thousands):
        [] when there is no such turn or its snapshot is unreadable."""
        if turn < 1:
            return []
        rows = await self._conn.execute_fetchall(
            f"SELECT {_COLUMNS} FROM context_snapshots WHERE session_key = ? ORDER BY id LIMIT 1 OFFSET ?",
            (session_key, turn - 1),
        )
        return [record for row in rows if (record := _record(session_key, turn, row)) is not None]

    async def snapshot_count(self, session_key: str) -> int:
        """How many turns of a session have a snapshot, readable or not (the newest turn's number)."""
        found = await self._conn.execute_fetchall(
            "SELECT COUNT(*) FROM context_snapshots WHERE session_key = ?", (session_key,)
        )
        return int(next(iter(found))[0])


_COLUMNS = "request_message_id, reply_message_id, created_at, hash, snapshot"


def _record(session_key: str, turn: int, row: Any) -> SnapshotRecord | None:
    """A row of `_COLUMNS` as turn `turn`'s record; None (and a warning) when it is unreadable."""
    try:
        snapshot = read_snapshot(row[4])
        if not isinstance(row[0], int) or not isinstance(row[2], int | float) or not isinstance(row[3], str):
            raise ValueError("request id, time or hash is malformed")
    except (ValueError, TypeError, RecursionError) as exc:
        log.warning("unreadable context snapshot skipped", session_key=session_key, turn=turn, error=str(exc))
        return None
    return SnapshotRecord(turn, row[0], row[1], row[2], row[3], snapshot)
