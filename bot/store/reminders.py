"""Reminders: what users asked the agent to remind them of, where, when, and whether it still stands.

A reminder is pending until its one time has run (done), its owner cancels it (cancelled), or a
recurring one keeps failing (failed). Its firings are schedule runs of job `reminder:<id>`
(`bot.store.schedule_runs`), so what was delivered is recorded exactly as for briefings.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from bot.core.messages import ChatRef
from bot.store.database import Database

ReminderStatus = Literal["pending", "done", "cancelled", "failed"]
JOB_PREFIX = "reminder:"  # config job ids cannot hold a colon, so these never collide with one

_COLUMNS = (
    "id, session_key, provider, chat_id, thread_id, user_id, user_name, text, at, repeat, timezone, "
    "status, created_at, request_message_id, finished_at"
)


@dataclass(frozen=True, slots=True)
class Reminder:
    """One reminder: its owner, its chat, its text, and when it is due (or from when it repeats)."""

    id: int
    session_key: str
    chat: ChatRef
    user_id: str
    user_name: str | None
    text: str
    at: float  # a one-shot's time; a recurring one's occurrences come after it
    repeat: str | None  # a five-field cron line in `timezone`, or None for a one-shot
    timezone: str
    status: ReminderStatus
    created_at: float
    request_message_id: int | None
    finished_at: float | None

    @property
    def job_id(self) -> str:
        """The job its runs are recorded under in `schedule_runs`."""
        return f"{JOB_PREFIX}{self.id}"


def reminder_id(job_id: str) -> int | None:
    """The reminder a schedule run's job id belongs to, or None for a configured job."""
    if not job_id.startswith(JOB_PREFIX):
        return None
    number = job_id.removeprefix(JOB_PREFIX)
    return int(number) if number.isdigit() else None


class ReminderLimitError(Exception):
    """The user already has as many pending reminders as allowed."""


class Reminders(Database):
    """Writes and reads of the `reminders` table."""

    async def add_reminder(
        self, *, session_key: str, chat: ChatRef, user_id: str, user_name: str | None, text: str,
        at: float, repeat: str | None, timezone: str, request_message_id: int | None, max_pending: int,
    ) -> Reminder:
        """Store a pending reminder; ReminderLimitError when its owner already has `max_pending`
        (counted in the same transaction, so two turns at once cannot both pass)."""
        async with self._transaction():
            await self._serialize("reminders", chat.provider, user_id)
            found = await self._conn.execute_fetchall(
                "SELECT COUNT(*) FROM reminders WHERE provider = ? AND user_id = ? AND status = 'pending'",
                (chat.provider, user_id),
            )
            if next(iter(found))[0] >= max_pending:
                plural = "" if max_pending == 1 else "s"
                raise ReminderLimitError(f"you already have {max_pending} pending reminder{plural}")
            inserted = await self._conn.execute_fetchall(
                "INSERT INTO reminders (session_key, provider, chat_id, thread_id, user_id, user_name, "
                "text, at, repeat, timezone, status, created_at, request_message_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?) RETURNING id",
                (session_key, chat.provider, chat.chat_id, chat.thread_id, user_id, user_name, text,
                 at, repeat, timezone, time.time(), request_message_id),
            )
        added = await self.reminder_by_id(int(next(iter(inserted))[0]))
        assert added is not None
        return added

    async def reminder_by_id(self, reminder_id: int) -> Reminder | None:
        found = await self._conn.execute_fetchall(
            f"SELECT {_COLUMNS} FROM reminders WHERE id = ?", (reminder_id,)
        )
        row = next(iter(found), None)
        return _row_to_reminder(row) if row else None

    async def pending_reminders(
        self, *, session_key: str | None = None, provider: str | None = None, user_id: str | None = None
    ) -> list[Reminder]:
        """Pending reminders, oldest first; narrowed to a session and an owner when given."""
        rows = await self._conn.execute_fetchall(
            f"SELECT {_COLUMNS} FROM reminders WHERE status = 'pending' "
            "AND (CAST(?1 AS TEXT) IS NULL OR session_key = ?1) "
            "AND (CAST(?2 AS TEXT) IS NULL OR provider = ?2) "
            "AND (CAST(?3 AS TEXT) IS NULL OR user_id = ?3) ORDER BY id",
            (session_key, provider, user_id),
        )
        return [_row_to_reminder(row) for row in rows]

    async def cancel_reminder(self, reminder_id: int, *, session_key: str, user_id: str) -> Reminder | None:
        """Cancel a pending reminder of this owner in this session; None when there is no such one."""
        async with self._transaction():
            cursor = await self._conn.execute(
                "UPDATE reminders SET status = 'cancelled', finished_at = ? WHERE id = ? "
                "AND session_key = ? AND user_id = ? AND status = 'pending'",
                (time.time(), reminder_id, session_key, user_id),
            )
        if cursor.rowcount != 1:
            return None
        return await self.reminder_by_id(reminder_id)

    async def finish_reminder(self, reminder_id: int, status: ReminderStatus) -> None:
        """A reminder that will not fire again: its one time ran (done), or it kept failing."""
        async with self._transaction():
            await self._conn.execute(
                "UPDATE reminders SET status = ?, finished_at = ? WHERE id = ? AND status = 'pending'",
                (status, time.time(), reminder_id),
            )


def _row_to_reminder(row: Any) -> Reminder:
    return Reminder(
        id=row[0], session_key=row[1], chat=ChatRef(row[2], row[3], row[4]), user_id=row[5],
        user_name=row[6], text=row[7], at=row[8], repeat=row[9], timezone=row[10], status=row[11],
        created_at=row[12], request_message_id=row[13], finished_at=row[14],
    )
