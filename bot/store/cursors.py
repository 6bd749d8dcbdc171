"""Channel cursors: where a channel's intake stands at a platform that keeps no offset for it.

Matrix's `/sync` hands out a `next_batch` token that the client must remember itself (Telegram
keeps its getUpdates offset on its own side). One row per channel (its provider name); the channel
writes it only after every event the token moves past is stored, so a crash re-reads those events
and the store drops the ones it holds already.
"""

from __future__ import annotations

import time

from bot.store.database import Database


class Cursors(Database):
    """Reads and writes of `channel_cursors`."""

    async def channel_cursor(self, provider: str) -> str | None:
        rows = await self._conn.execute_fetchall(
            "SELECT cursor FROM channel_cursors WHERE provider = ?", (provider,))
        row = next(iter(rows), None)
        return str(row[0]) if row is not None else None

    async def keep_channel_cursor(self, provider: str, cursor: str) -> None:
        async with self._one_write():
            await self._conn.execute(
                "INSERT INTO channel_cursors (provider, cursor, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (provider) DO UPDATE SET cursor = excluded.cursor, "
                "updated_at = excluded.updated_at", (provider, cursor, time.time()))
