"""Schedule runs: one record per job time, claimed, generated, delivered or missed."""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Sequence
from typing import Any

from bot.core.messages import StoredMessage
from bot.store.database import Database
from bot.store.messages import insert_message, qualified_columns, rows_to_messages
from bot.store.records import RunStatus, RunTrigger, ScheduleRun

_RUN_COLUMNS = (
    "id, job_id, scheduled_for, trigger, status, started_at, finished_at, attempts, "
    "reply_message_id, delivered_ids, error, owner"
)


class ScheduleRuns(Database):
    """Writes and reads of the `schedule_runs` table, and the outputs runs delivered."""

    async def claim_run(
        self, job_id: str, scheduled_for: float, trigger: RunTrigger = "schedule", *,
        owner: str | None = None, live: Collection[str] = (),
    ) -> tuple[ScheduleRun, bool]:
        """The run record of one job time, and whether this call may (re)start generating it.

        A new time, a requested run or one left `running` by a crash is claimed (status
        `running`, by `owner`); any other record is returned as it is for the caller to honour.
        On a store daemons share, a run `running` under an owner among `live` (the instances
        beating now, this one included) is still at work there and is not claimed again.
        """
        now = time.time()
        others = [name for name in live if name != owner] or [""]
        marks = ", ".join("?" for _ in others)
        async with self._transaction():
            # Insert-or-nothing, then a conditional update: each is one atomic step, so writers
            # at once (instances sharing a PostgreSQL store) cannot both create the record.
            claimed = list(await self._conn.execute_fetchall(
                "INSERT INTO schedule_runs (job_id, scheduled_for, trigger, status, started_at, owner) "
                "VALUES (?, ?, ?, 'running', ?, ?) ON CONFLICT (job_id, scheduled_for) DO NOTHING "
                "RETURNING id",
                (job_id, scheduled_for, trigger, now, owner),
            )) or list(await self._conn.execute_fetchall(
                "UPDATE schedule_runs SET status = 'running', started_at = ?, owner = ? WHERE job_id = ? "
                "AND scheduled_for = ? AND (status = 'requested' OR (status = 'running' "
                f"AND (owner IS NULL OR owner NOT IN ({marks})))) RETURNING id",
                (now, owner, job_id, scheduled_for, *others),
            ))
            found = await self._conn.execute_fetchall(
                f"SELECT {_RUN_COLUMNS} FROM schedule_runs WHERE job_id = ? AND scheduled_for = ?",
                (job_id, scheduled_for),
            )
        return _row_to_run(next(iter(found))), bool(claimed)

    async def request_run(self, job_id: str, at: float) -> ScheduleRun:
        """Ask the running daemon to run a job now (`switchboard jobs run ID`)."""
        async with self._transaction():
            inserted = await self._conn.execute_fetchall(
                "INSERT INTO schedule_runs (job_id, scheduled_for, trigger, status) "
                "VALUES (?, ?, 'manual', 'requested') RETURNING id",
                (job_id, at),
            )
        run = await self.schedule_run_by_id(int(next(iter(inserted))[0]))
        assert run is not None
        return run

    async def record_scheduled_output(
        self, run_id: int, session_key: str, text: str, *, job_id: str, attempts: int
    ) -> StoredMessage:
        """Store a job's output and mark its run generated, in one transaction, before sending."""
        async with self._transaction():
            stored = await insert_message(
                self._conn, session_key=session_key, role="assistant", origin="scheduled", text=text,
                created_at=time.time(), job_id=job_id,
            )
            await self._conn.execute(
                "UPDATE schedule_runs SET status = 'generated', reply_message_id = ?, attempts = ? "
                "WHERE id = ?",
                (stored.id, attempts, run_id),
            )
        return stored

    async def finish_run(
        self,
        run_id: int,
        status: RunStatus,
        *,
        error: str | None = None,
        delivered_ids: Sequence[str] = (),
        attempts: int | None = None,
    ) -> None:
        async with self._transaction():
            await self._conn.execute(
                "UPDATE schedule_runs SET status = ?, finished_at = ?, error = ?, "
                "delivered_ids = ?, attempts = COALESCE(?, attempts) WHERE id = ?",
                (status, time.time(), error, json.dumps(list(delivered_ids)) if delivered_ids else None,
                 attempts, run_id),
            )

    async def record_missed(self, job_id: str, times: Sequence[float], reason: str) -> None:
        """Record scheduled times that will not run (down too long, or coalesced into a later run)."""
        if not times:
            return
        now = time.time()
        async with self._transaction():
            await self._conn.executemany(
                "INSERT INTO schedule_runs (job_id, scheduled_for, trigger, status, "
                "finished_at, error) VALUES (?, ?, 'schedule', 'missed', ?, ?) ON CONFLICT DO NOTHING",
                [(job_id, at, now, reason) for at in times],
            )

    async def schedule_run_by_id(self, run_id: int) -> ScheduleRun | None:
        found = await self._conn.execute_fetchall(
            f"SELECT {_RUN_COLUMNS} FROM schedule_runs WHERE id = ?", (run_id,)
        )
        row = next(iter(found), None)
        return _row_to_run(row) if row else None

    async def schedule_runs(self, job_id: str, limit: int) -> list[ScheduleRun]:
        """A job's newest `limit` runs, newest first (by scheduled time)."""
        rows = await self._conn.execute_fetchall(
            f"SELECT {_RUN_COLUMNS} FROM schedule_runs WHERE job_id = ? "
            "ORDER BY scheduled_for DESC, id DESC LIMIT ?",
            (job_id, limit),
        )
        return [_row_to_run(row) for row in rows]

    async def last_scheduled_time(self, job_id: str) -> float | None:
        """The newest time of the job's own schedule that has a record (manual runs do not count)."""
        found = await self._conn.execute_fetchall(
            "SELECT MAX(scheduled_for) FROM schedule_runs WHERE job_id = ? AND trigger = 'schedule'",
            (job_id,),
        )
        row = next(iter(found), None)
        return float(row[0]) if row and row[0] is not None else None

    async def pending_runs(self, status: RunStatus) -> list[ScheduleRun]:
        """Runs waiting in one state (`requested` by the CLI, `generated` but not delivered)."""
        rows = await self._conn.execute_fetchall(
            f"SELECT {_RUN_COLUMNS} FROM schedule_runs WHERE status = ? ORDER BY scheduled_for, id",
            (status,),
        )
        return [_row_to_run(row) for row in rows]

    async def job_outputs(self, job_id: str, limit: int) -> list[StoredMessage]:
        """The job's newest `limit` delivered outputs, oldest first."""
        if limit <= 0:
            return []
        rows = await self._conn.execute_fetchall(
            f"SELECT {qualified_columns('m')} FROM schedule_runs r "
            "JOIN messages m ON m.id = r.reply_message_id "
            "WHERE r.job_id = ? AND r.status = 'delivered' ORDER BY r.scheduled_for DESC LIMIT ?",
            (job_id, limit),
        )
        return rows_to_messages(reversed(list(rows)))


def _row_to_run(row: Any) -> ScheduleRun:
    return ScheduleRun(
        id=row[0], job_id=row[1], scheduled_for=row[2], trigger=row[3], status=row[4],
        started_at=row[5], finished_at=row[6], attempts=row[7], reply_message_id=row[8],
        delivered_ids=tuple(json.loads(row[9])) if row[9] else (), error=row[10], owner=row[11],
    )
