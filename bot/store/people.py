"""What each user asked the agent to keep about them: notes (`remember`) and their own timezone."""

from __future__ import annotations

import time
from dataclasses import dataclass

from bot.store.database import Database


@dataclass(frozen=True, slots=True)
class UserNote:
    id: int
    provider: str
    user_id: str
    note: str
    created_at: float


class People(Database):
    """Writes and reads of `user_notes` and `user_settings`, always for one (provider, user)."""

    async def add_note(
        self, provider: str, user_id: str, note: str, *, session_key: str | None, max_notes: int
    ) -> UserNote | None:
        """Keep a note; None when the user already has `max_notes` (nothing is dropped silently)."""
        async with self._transaction():
            await self._serialize("notes", provider, user_id)
            found = await self._conn.execute_fetchall(
                "SELECT COUNT(*) FROM user_notes WHERE provider = ? AND user_id = ?", (provider, user_id)
            )
            if int(next(iter(found))[0]) >= max_notes:
                return None
            now = time.time()
            inserted = await self._conn.execute_fetchall(
                "INSERT INTO user_notes (provider, user_id, note, session_key, created_at) "
                "VALUES (?, ?, ?, ?, ?) RETURNING id", (provider, user_id, note, session_key, now),
            )
            return UserNote(int(next(iter(inserted))[0]), provider, user_id, note, now)

    async def forget_note(self, provider: str, user_id: str, note_id: int) -> bool:
        """Delete one of the user's own notes; False when they have no note with that id."""
        async with self._transaction():
            cursor = await self._conn.execute(
                "DELETE FROM user_notes WHERE id = ? AND provider = ? AND user_id = ?",
                (note_id, provider, user_id),
            )
            return cursor.rowcount > 0

    async def notes_of(self, provider: str, user_id: str) -> list[UserNote]:
        rows = await self._conn.execute_fetchall(
            "SELECT id, provider, user_id, note, created_at FROM user_notes "
            "WHERE provider = ? AND user_id = ? ORDER BY id", (provider, user_id),
        )
        return [UserNote(*row) for row in rows]

    async def all_notes(self) -> list[UserNote]:
        rows = await self._conn.execute_fetchall(
            "SELECT id, provider, user_id, note, created_at FROM user_notes "
            "ORDER BY provider, user_id, id"
        )
        return [UserNote(*row) for row in rows]

    async def user_timezone(self, provider: str, user_id: str) -> str | None:
        found = await self._conn.execute_fetchall(
            "SELECT timezone FROM user_settings WHERE provider = ? AND user_id = ?", (provider, user_id)
        )
        row = next(iter(found), None)
        return str(row[0]) if row is not None and row[0] else None

    async def set_user_timezone(self, provider: str, user_id: str, zone: str) -> None:
        async with self._one_write():
            await self._conn.execute(
                "INSERT INTO user_settings (provider, user_id, timezone, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(provider, user_id) DO UPDATE SET timezone = excluded.timezone, "
                "updated_at = excluded.updated_at", (provider, user_id, zone, time.time()),
            )
