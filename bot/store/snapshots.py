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
            "SELECT request_message_id, reply_message_id, created_at, hash, snapshot "
            "FROM context_snapshots WHERE session_key = ? ORDER BY id",
            (session_key,),
        )
        records = []
        for turn, row in enumerate(rows, start=1):
            try:
                snapshot = read_snapshot(row[4])
                if not isinstance(row[0], int) or not isinstance(row[2], int | float) \
                        or not isinstance(row[3], str):
                    raise ValueError("request id, time or hash is malformed")
            except (ValueError, TypeError, RecursionError) as exc:
                log.warning("unreadable context snapshot skipped", session_key=session_key,
                            turn=turn, error=str(exc))
                continue
            records.append(SnapshotRecord(turn, row[0], row[1], row[2], row[3], snapshot))
        return records

    async def snapshot_count(self, session_key: str) -> int:
        """How many turns of a session have a snapshot, readable or not (the newest turn's number)."""
        found = await self._conn.execute_fetchall(
            "SELECT COUNT(*) FROM context_snapshots WHERE session_key = ?", (session_key,)
        )
        return int(next(iter(found))[0])
