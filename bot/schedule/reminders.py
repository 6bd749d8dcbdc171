"""Reminders fired on time: each pending reminder is an APScheduler job, each firing a schedule run.

As for briefings, APScheduler is only the alarm clock and our run records decide: a firing claims
the run of job `reminder:<id>` at its time (so it runs once, whoever wakes it), its text is stored
in the chat's session with origin "scheduled" before it is sent, and it is sent at most once
(`bot.schedule.job_run.deliver_output`). No model is asked: the text is the one agreed when it was set, so
it arrives on time and as promised even while the model API is down.

After downtime, a one-shot reminder whose time passed fires once at start (saying it is late);
a recurring one follows the briefings' rule: its newest missed time runs if within
`misfire_grace`, older ones are recorded missed, and it goes on at its next time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import structlog
from apscheduler.schedulers.asyncio import AsyncIOScheduler  # type: ignore[import-untyped]
from apscheduler.triggers.base import BaseTrigger  # type: ignore[import-untyped]
from apscheduler.triggers.date import DateTrigger  # type: ignore[import-untyped]

from bot.config.schedule_spec import crontab_trigger
from bot.core.session_key import parse
from bot.schedule.job_run import Sleep, deliver_output, failing, output_missing, run_by_id, stored_output
from bot.schedule.reminder_time import describe
from bot.schedule.triggers import MISSED_RECORDS, plan_runs
from bot.store import Reminder, reminder_id

if TYPE_CHECKING:
    from bot.config import Config
    from bot.intake.channel import Channel
    from bot.store import RunStatus, ScheduleRun
    from bot.store.seams import ReminderRuns

log = structlog.get_logger("switchboard.reminders")


def reminder_trigger(reminder: Reminder) -> BaseTrigger:
    """When APScheduler should wake a reminder: its one time, or its cron line in its zone."""
    if reminder.repeat is None:
        return DateTrigger(run_date=datetime.fromtimestamp(reminder.at, UTC))
    return crontab_trigger(reminder.repeat, ZoneInfo(reminder.timezone))


def next_time(reminder: Reminder, now: float) -> float | None:
    """A pending reminder's next time (a one-shot's may be past: it fires at the next start)."""
    if reminder.repeat is None:
        return reminder.at
    start = datetime.fromtimestamp(max(now, reminder.at), UTC)
    at = reminder_trigger(reminder).get_next_fire_time(None, start)
    return at.timestamp() if at is not None else None


def reminder_text(reminder: Reminder, scheduled_for: float, now: float, late_after: float) -> str:
    """What the chat receives: the text as set, for whom in a shared chat, and whether it is late."""
    shared = not parse(reminder.session_key).is_direct
    who = f" for {reminder.user_name}" if shared and reminder.user_name else ""
    late = ""
    if now - scheduled_for > late_after:
        late = (f" (due {describe(scheduled_for, ZoneInfo(reminder.timezone))}; sent late, "
                "the bot was not running then)")
    return f"⏰ Reminder{who}{late}: {reminder.text}"


class ReminderSchedule:
    """Fires the stored reminders inside the daemon's loop; `add` schedules one as soon as it is set."""

    def __init__(
        self,
        config: Callable[[], Config],
        store: ReminderRuns,
        channels: Mapping[str, Channel],
        *,
        clock: Callable[[], float] = time.time,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._config = config  # the config in force: a reload changes the settings of later runs
        self._store = store
        self._channels = channels
        self._clock = clock
        self._sleep = sleep
        # A recurring reminder's newest time considered: the next wake-up plans after it.
        self._cursor: dict[int, datetime] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._inflight: set[asyncio.Task[Any]] = set()
        self._aps: AsyncIOScheduler | None = None
        self._closed = False

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Finish runs a crash cut short, catch up on missed times, then schedule every pending one."""
        self._aps = AsyncIOScheduler(timezone=UTC)
        self._spawn(self.resume_interrupted())
        pending = await self._store.pending_reminders()
        for reminder in pending:
            await self.add(reminder)
        self._aps.start()
        log.info("reminders scheduled", pending=len(pending))

    async def close(self, grace: float) -> None:
        """Stop firing, give runs in flight `grace` seconds to finish, cancel what is left."""
        self._closed = True
        if self._aps is not None and self._aps.running:
            self._aps.pause()
        if self._inflight:
            _, late = await asyncio.wait(set(self._inflight), timeout=grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        if self._aps is not None and self._aps.running:
            self._aps.shutdown(wait=False)

    async def add(self, reminder: Reminder) -> None:
        """Schedule a pending reminder (just set, or loaded at start); one already due fires now."""
        if self._aps is None or self._closed:
            return  # not running: the next start loads it from the store
        try:
            trigger = reminder_trigger(reminder)
        except ValueError as exc:  # stored by an older version that read cron differently
            log.error("reminder given up: its schedule cannot be read", reminder_id=reminder.id,
                      repeat=reminder.repeat, error=str(exc))
            await self._store.finish_reminder(reminder.id, "failed")
            return
        if reminder.repeat is not None and reminder.id not in self._cursor:
            last = await self._store.last_scheduled_time(reminder.job_id)
            # Its first time may be `at` itself.
            cursor = datetime.fromtimestamp(reminder.at, UTC) - timedelta(seconds=1)
            if last is not None:
                cursor = max(cursor, datetime.fromtimestamp(last, UTC))
            self._cursor[reminder.id] = cursor
        self._aps.add_job(
            self._fire_tracked, trigger, args=[reminder.id], id=reminder.job_id,
            name=reminder.job_id, misfire_grace_time=None, coalesce=True, max_instances=1,
            replace_existing=True,
        )
        self._spawn(self.fire(reminder.id))  # runs only if a time is already due

    def remove(self, reminder_id: int) -> None:
        """Unschedule a reminder (cancelled, or done)."""
        self._cursor.pop(reminder_id, None)
        if self._aps is not None and self._aps.get_job(f"reminder:{reminder_id}") is not None:
            self._aps.remove_job(f"reminder:{reminder_id}")

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(self._guarded(coro))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _guarded(self, coro: Coroutine[Any, Any, Any]) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception:  # one reminder's bug must not stop the others or the daemon
            log.exception("reminder run crashed")

    async def _fire_tracked(self, reminder_id: int) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
        await self._guarded(self.fire(reminder_id))

    async def wait_idle(self) -> None:
        """Wait until no run is in flight (tests)."""
        while self._inflight:
            await asyncio.wait(set(self._inflight))

    # -- what a wake-up means -------------------------------------------------------------------

    async def fire(self, reminder_id: int) -> ScheduleRun | None:
        """Run the reminder's due time as of the clock, if it has one."""
        reminder = await self._store.reminder_by_id(reminder_id)
        if reminder is None or reminder.status != "pending":
            self.remove(reminder_id)
            return None
        if reminder.chat.provider not in self._channels:
            log.info("reminder left for a process running its channel", reminder_id=reminder_id,
                     channel=reminder.chat.provider)
            return None
        now = self._now()
        if reminder.repeat is None:
            return await self._run(reminder, reminder.at) if reminder.at <= now.timestamp() else None
        settings = self._config().scheduler
        after = self._cursor.get(reminder.id, now)
        plan = plan_runs(reminder_trigger(reminder), after, now, settings.misfire_grace)
        if plan.last is not None:
            self._cursor[reminder.id] = plan.last
        if plan.missed:
            await self._store.record_missed(
                reminder.job_id, [t.timestamp() for t in plan.missed[-MISSED_RECORDS:]],
                f"not run: more than misfire_grace ({settings.misfire_grace}s) late",
            )
        if plan.coalesced and plan.due is not None:
            await self._store.record_missed(reminder.job_id, [t.timestamp() for t in plan.coalesced],
                                            f"coalesced into the run for {plan.due.isoformat()}")
        return await self._run(reminder, plan.due.timestamp()) if plan.due is not None else None

    async def resume_interrupted(self) -> None:
        """After a restart: send what was stored but not sent; redo what was claimed but not stored."""
        runs = [*await self._store.pending_runs("generated"), *await self._store.pending_runs("running")]
        me, live = await self._store.claimants()  # a run another live instance claimed is its own
        for run in runs:
            if self._store.at_work_elsewhere(run, me, live):
                continue
            number = reminder_id(run.job_id)
            reminder = await self._store.reminder_by_id(number) if number is not None else None
            if reminder is None or reminder.chat.provider not in self._channels:
                continue
            if reminder.status == "cancelled":
                await self._store.finish_run(run.id, "failed", error="cancelled before it was sent")
                continue
            await self._run(reminder, run.scheduled_for)

    # -- one firing ------------------------------------------------------------------------------

    async def _run(self, reminder: Reminder, scheduled_for: float) -> ScheduleRun:
        """Claim one time of a reminder, store its text, deliver it at most once, record the outcome."""
        async with self._locks.setdefault(reminder.id, asyncio.Lock()):
            me, live = await self._store.claimants()
            run, claimed = await self._store.claim_run(reminder.job_id, scheduled_for, owner=me, live=live)
            bound = log.bind(reminder_id=reminder.id, run_id=run.id, session_key=reminder.session_key,
                             scheduled_for=datetime.fromtimestamp(scheduled_for, UTC).isoformat())
            if claimed:
                text = reminder_text(reminder, scheduled_for, self._clock(),
                                     self._config().scheduler.misfire_grace)
                await self._store.record_scheduled_output(run.id, reminder.session_key, text,
                                                          job_id=reminder.job_id, attempts=1)
                run = await self._deliver(reminder, await run_by_id(self._store, run.id), bound)
            elif run.status == "generated" and not self._store.at_work_elsewhere(run, me, live):
                # stored before a crash: send it, never store it again
                run = await self._deliver(reminder, run, bound)
            else:
                bound.info("reminder time already handled", status=run.status)
            await self._settle(reminder, run)
            return run

    async def _deliver(self, reminder: Reminder, run: ScheduleRun, bound: Any) -> ScheduleRun:
        settings = self._config().scheduler
        channel = self._channels.get(reminder.chat.provider)
        late = self._clock() - run.scheduled_for
        status: RunStatus
        error: str | None
        sent: list[str]
        # A one-shot is sent however late (once); a recurring one's stale time gives way to the next.
        if reminder.repeat is not None and settings.stale_after and late > settings.stale_after:
            status, error, sent = "stale", f"not delivered: {round(late)}s after its time", []
        elif channel is None:
            status, error, sent = "failed", f"channel {reminder.chat.provider} is not running", []
        elif (message := await stored_output(self._store, run)) is None:
            status, error, sent = "failed", output_missing(run), []
        else:
            sent, failure = await deliver_output(self._store, channel, reminder.chat, message, settings,
                                                 self._sleep, bound)
            status, error = ("failed", f"delivery: {failure}") if failure else ("delivered", None)
        await self._store.finish_run(run.id, status, error=error, delivered_ids=sent)
        finished = await run_by_id(self._store, run.id)
        if status == "failed":
            bound.error("reminder not delivered", error=error)
        else:
            bound.info("reminder", status=status, delivered=len(sent), error=error)
        return finished

    async def _settle(self, reminder: Reminder, run: ScheduleRun) -> None:
        """A one-shot is done once its time ran; a recurring one that keeps failing is given up."""
        if reminder.repeat is None:
            if run.status not in ("running", "generated"):
                await self._store.finish_reminder(reminder.id, "done")
                self.remove(reminder.id)
            return
        limit = self._config().scheduler.max_failures
        if run.status == "failed" and await failing(self._store, reminder.job_id, limit):
            log.error("recurring reminder given up after consecutive failures", reminder_id=reminder.id,
                      max_failures=limit)
            await self._store.finish_reminder(reminder.id, "failed")
            self.remove(reminder.id)
