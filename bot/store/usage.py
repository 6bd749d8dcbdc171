"""Model choice and model spending: the model a session switched to, and every call's tokens."""

from __future__ import annotations

import time
from dataclasses import dataclass

from bot.store.database import Database


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One model call's tokens, as the API reported them (cache writes and reads apart)."""

    session_key: str
    user_id: str | None
    kind: str  # reply, triage, compaction, scheduled
    model: str
    input_tokens: int
    output_tokens: int
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    created_at: float = 0.0


class Usage(Database):
    """Writes and reads of `session_models` and `model_usage`."""

    async def session_model(self, session_key: str) -> str | None:
        """The model name a session chose with /model, or None for the configured default."""
        rows = await self._conn.execute_fetchall(
            "SELECT model FROM session_models WHERE session_key = ?", (session_key,)
        )
        row = next(iter(rows), None)
        return str(row[0]) if row is not None else None

    async def set_session_model(self, session_key: str, model: str | None, set_by: str | None) -> None:
        """Choose a session's model by name; None goes back to the configured default."""
        async with self._transaction():
            if model is None:
                await self._conn.execute("DELETE FROM session_models WHERE session_key = ?", (session_key,))
                return
            await self._conn.execute(
                "INSERT INTO session_models (session_key, model, set_by, set_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (session_key) DO UPDATE SET model = excluded.model, "
                "set_by = excluded.set_by, set_at = excluded.set_at",
                (session_key, model, set_by, time.time()),
            )

    async def record_usage(self, record: UsageRecord) -> None:
        async with self._one_write():
            await self._conn.execute(
                "INSERT INTO model_usage (session_key, user_id, kind, model, input_tokens, output_tokens, "
                "cache_write_tokens, cache_read_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record.session_key, record.user_id, record.kind, record.model, record.input_tokens,
                 record.output_tokens, record.cache_write_tokens, record.cache_read_tokens,
                 record.created_at or time.time()),
            )

    async def usage_since(self, since: float, session_key: str | None = None) -> list[UsageRecord]:
        """Every call recorded at or after `since` (of one session, or all), oldest first."""
        sql = ("SELECT session_key, user_id, kind, model, input_tokens, output_tokens, cache_write_tokens, "
               "cache_read_tokens, created_at FROM model_usage WHERE created_at >= ?")
        params: list[object] = [since]
        if session_key is not None:
            sql += " AND session_key = ?"
            params.append(session_key)
        rows = await self._conn.execute_fetchall(sql + " ORDER BY id", params)
        return [UsageRecord(*row) for row in rows]
