"""Tool calls: each round of a reply's tool use, written as it happens and linked to the reply."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.store.database import Database


@dataclass(frozen=True, slots=True)
class StoredToolCall:
    """One call as stored: `result` is None while it runs (or when a crash cut it short)."""

    id: int
    request_id: int
    reply_id: int | None
    round: int
    position: int
    tool_use_id: str
    name: str
    arguments: dict[str, Any]
    round_text: str | None
    result: str | None
    summary: str | None
    is_error: bool
    duration_ms: float | None
    started_at: float


_COLUMNS = ("id, request_id, reply_id, round, position, tool_use_id, name, arguments, round_text, "
            "result, summary, is_error, duration_ms, started_at")


class ToolCalls(Database):
    """Writes and reads of the `tool_calls` table."""

    async def begin_tool_round(
        self, session_key: str, request_id: int, round_number: int, text: str,
        calls: Sequence[tuple[str, str, dict[str, Any]]],
    ) -> list[int]:
        """Store a round's calls (tool_use id, name, arguments) before any of them runs; their ids."""
        now = time.time()
        ids: list[int] = []
        async with self._transaction():
            for position, (use_id, name, arguments) in enumerate(calls):
                inserted = await self._conn.execute_fetchall(
                    "INSERT INTO tool_calls (session_key, request_id, round, position, tool_use_id, "
                    "name, arguments, round_text, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "RETURNING id",
                    (session_key, request_id, round_number, position, use_id, name,
                     json.dumps(arguments, sort_keys=True), text if position == 0 else None, now),
                )
                ids.append(int(next(iter(inserted))[0]))
        return ids

    async def finish_tool_call(
        self, call_id: int, *, result: str, summary: str, is_error: bool, duration_ms: float
    ) -> None:
        async with self._transaction():
            await self._conn.execute(
                "UPDATE tool_calls SET result = ?, summary = ?, is_error = ?, duration_ms = ?, "
                "finished_at = ? WHERE id = ?",
                (result, summary, int(is_error), duration_ms, time.time(), call_id),
            )

    async def open_tool_calls(self, request_id: int) -> list[StoredToolCall]:
        """The calls of a request not yet answered by a stored reply, in round order: what a turn
        cut short left, to be sent again instead of run again."""
        rows = await self._conn.execute_fetchall(
            f"SELECT {_COLUMNS} FROM tool_calls WHERE request_id = ? AND reply_id IS NULL "
            "ORDER BY round, position", (request_id,),
        )
        return [_call(row) for row in rows]

    async def attach_tool_calls(self, request_id: int, reply_id: int) -> None:
        """The reply that answered the request owns its calls from now on."""
        async with self._one_write():
            await self._conn.execute(
                "UPDATE tool_calls SET reply_id = ? WHERE request_id = ? AND reply_id IS NULL",
                (reply_id, request_id),
            )

    async def tool_calls_of_reply(self, reply_id: int) -> list[StoredToolCall]:
        rows = await self._conn.execute_fetchall(
            f"SELECT {_COLUMNS} FROM tool_calls WHERE reply_id = ? ORDER BY round, position",
            (reply_id,),
        )
        return [_call(row) for row in rows]


def _call(row: Any) -> StoredToolCall:
    try:
        arguments = json.loads(row[7])
    except ValueError:
        arguments = {}
    return StoredToolCall(
        int(row[0]), int(row[1]), row[2], int(row[3]), int(row[4]), str(row[5]), str(row[6]),
        arguments if isinstance(arguments, dict) else {}, row[8], row[9], row[10],
        bool(row[11]), row[12], float(row[13]),
    )
