"""Scheduled jobs: briefings from config.toml, fired by APScheduler, recorded, delivered at most once.

APScheduler is only the alarm clock. What a wake-up means is decided here from our own run records
(`schedule_runs`): which scheduled times are due, missed or coalesced, what to do after a restart,
and which jobs are paused. How one time runs is `bot.schedule.job_run`; `run_job` can be called directly by
a test (or `switchboard jobs run`), and the clock driven through `fire`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog
from apscheduler.schedulers.asyncio import AsyncIOScheduler  # type: ignore[import-untyped]

from bot.schedule.job_run import BrainFor, JobRunner, Sleep, failing
from bot.schedule.triggers import MISSED_RECORDS, job_trigger, plan_runs
from bot.store.reminders import reminder_id

if TYPE_CHECKING:
    from bot.config import Config, ScheduleConfig
    from bot.intake.channel import Channel
    from bot.store import ScheduleRun
    from bot.store.seams import ScheduleStore

log = structlog.get_logger("switchboard.scheduler")

__all__ = ["Scheduler", "failing"]  # failing: `switchboard jobs` shows paused jobs


class Scheduler:
    """Runs the configured jobs inside the daemon's loop; an async context manager."""

    def __init__(
        self,
        config: Config,
        store: ScheduleStore,
        brain_for: BrainFor,
        channels: Mapping[str, Channel],
        *,
        clock: Callable[[], float] = time.time,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._config = config
        self._settings = config.scheduler
        self._store = store
        self._channels = channels
        self._clock = clock
        self._runner = JobRunner(config, store, brain_for, channels, self._run_outcome,
                                 clock=clock, sleep=sleep)
        self.jobs: dict[str, ScheduleConfig] = {job.id: job for job in config.schedules}
        self._triggers = {job.id: job_trigger(job, config) for job in config.schedules}
        # Jobs whose channel runs in this process; `switchboard chat` must not fail Telegram jobs.
        self.runnable = {
            job.id for job in config.schedules
            if config.job_key(job).provider in channels
        }
        self._cursor: dict[str, datetime] = {}
        self.paused: set[str] = set()
        self._taken: set[int] = set()
        self._inflight: set[asyncio.Task[Any]] = set()
        self._aps: AsyncIOScheduler | None = None
        self._poller: asyncio.Task[None] | None = None

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Resume interrupted runs, catch up on missed times, then let APScheduler fire the rest."""
        now = self._now()
        enabled = [job for job in self.jobs.values() if job.enabled and job.id in self.runnable]
        for job in self.jobs.values():
            if job.enabled and job.id not in self.runnable:
                log.info("job not scheduled here: its channel is not running", job_id=job.id)
        for job in enabled:
            last = await self._store.last_scheduled_time(job.id)
            self._cursor[job.id] = datetime.fromtimestamp(last, UTC) if last is not None else now
            if await failing(self._store, job.id, self._settings.max_failures):
                self.paused.add(job.id)
                log.error("job stays paused: its last runs all failed", job_id=job.id,
                          max_failures=self._settings.max_failures)
        self._spawn(self.resume_interrupted())
        aps = self._aps = AsyncIOScheduler(timezone=UTC)
        for job in enabled:
            # Our records decide what a wake-up means, so APScheduler must never drop one itself.
            aps.add_job(
                self._fire_tracked, self._triggers[job.id], args=[job.id], id=job.id, name=job.id,
                misfire_grace_time=None, coalesce=True, max_instances=1,
            )
            if job.id in self.paused:
                aps.pause_job(job.id)
            else:
                self._spawn(self.fire(job.id))  # catch-up: runs only if a time was missed
        aps.start()
        self._poller = asyncio.create_task(self._poll_requests_forever(), name="scheduler-requests")
        log.info("scheduler started", jobs=[job.id for job in enabled], paused=sorted(self.paused))

    async def close(self, grace: float) -> None:
        """Stop firing, give runs in flight `grace` seconds to finish, cancel what is left."""
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        if self._aps is not None and self._aps.running:
            self._aps.pause()
        if self._inflight:
            _, pending = await asyncio.wait(set(self._inflight), timeout=grace)
            for task in pending:
                log.warning("scheduled run cancelled at shutdown", task=task.get_name())
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._aps is not None and self._aps.running:
            self._aps.shutdown(wait=False)

    async def __aenter__(self) -> Scheduler:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close(self._config.router.shutdown_grace)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(self._guarded(coro))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        return task

    async def _guarded(self, coro: Coroutine[Any, Any, Any]) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug in one run must not stop the scheduler or the daemon
            log.exception("scheduled run crashed")

    async def _fire_tracked(self, job_id: str) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
        await self._guarded(self.fire(job_id))

    async def wait_idle(self) -> None:
        """Wait until no run is in flight (tests)."""
        while self._inflight:
            await asyncio.wait(set(self._inflight))

    async def reconfigure(self, config: Config) -> None:
        """Take a reloaded config: jobs added, removed or changed are (un)scheduled, runs go on.

        A job added or changed starts from now (its past times under the new schedule are not
        caught up); an unchanged job keeps its place, and runs in flight finish as they started.
        """
        old_jobs, old_triggers = self.jobs, self._triggers
        self._config = config
        self._settings = config.scheduler
        self.jobs = {job.id: job for job in config.schedules}
        self._triggers = {job.id: job_trigger(job, config) for job in config.schedules}
        self.runnable = {
            job.id for job in config.schedules
            if config.job_key(job).provider in self._channels
        }
        self._runner.reconfigure(config)
        now = self._now()
        changed: list[str] = []
        for job_id in set(old_jobs) | set(self.jobs):
            job = self.jobs.get(job_id)
            same = (job is not None and old_jobs.get(job_id) == job
                    and repr(old_triggers.get(job_id)) == repr(self._triggers[job_id]))
            scheduled = self._aps is not None and self._aps.get_job(job_id) is not None
            wanted = job is not None and job.enabled and job_id in self.runnable
            if same and scheduled == wanted:
                continue
            changed.append(job_id)
            if scheduled and self._aps is not None:
                self._aps.remove_job(job_id)
            if job is None:
                self.paused.discard(job_id)
                self._cursor.pop(job_id, None)
                continue
            self._cursor[job_id] = now
            if wanted and self._aps is not None:
                self._aps.add_job(
                    self._fire_tracked, self._triggers[job_id], args=[job_id], id=job_id, name=job_id,
                    misfire_grace_time=None, coalesce=True, max_instances=1,
                )
                if job_id in self.paused:
                    self._aps.pause_job(job_id)
        if changed:
            log.info("schedules reconfigured", changed=sorted(changed),
                     jobs=sorted(j for j in self.jobs if self.jobs[j].enabled and j in self.runnable))

    async def job_states(self) -> list[dict[str, Any]]:
        """Each configured job's next run, last run and whether it is paused (for `status`)."""
        states: list[dict[str, Any]] = []
        for job_id, job in self.jobs.items():
            runs = await self._store.schedule_runs(job_id, 1)
            upcoming = self.next_run_time(job_id) if job_id in self.runnable else None
            states.append({
                "id": job_id,
                "enabled": job.enabled,
                "runnable": job_id in self.runnable,
                "paused": job_id in self.paused,
                "next_run": upcoming.isoformat() if upcoming else None,
                "last_status": runs[0].status if runs else None,
                "last_scheduled_for": runs[0].scheduled_for if runs else None,
                "last_error": runs[0].error if runs else None,
            })
        return states

    def next_run_time(self, job_id: str) -> datetime | None:
        job = self.jobs[job_id]
        if not job.enabled or job_id in self.paused:
            return None
        return self._triggers[job_id].get_next_fire_time(None, self._now())  # type: ignore[no-any-return]

    # -- what a wake-up means -------------------------------------------------------------------

    async def fire(self, job_id: str) -> ScheduleRun | None:
        """Run the job's due time as of the clock, recording times that will not run."""
        job = self.jobs[job_id]
        if job_id in self.paused:
            return None
        now = self._now()
        after = self._cursor.get(job_id, now)
        plan = plan_runs(self._triggers[job_id], after, now, self._settings.misfire_grace)
        if plan.last is not None:
            self._cursor[job_id] = plan.last
        if plan.missed:
            log.warning("scheduled times missed", job_id=job_id, count=len(plan.missed),
                        first=plan.missed[0].isoformat(), last=plan.missed[-1].isoformat())
            await self._store.record_missed(
                job_id, [t.timestamp() for t in plan.missed[-MISSED_RECORDS:]],
                f"not run: more than misfire_grace ({self._settings.misfire_grace}s) late",
            )
        if plan.due is None:
            return None
        if plan.coalesced:
            await self._store.record_missed(
                job_id, [t.timestamp() for t in plan.coalesced],
                f"coalesced into the run for {plan.due.isoformat()}",
            )
        return await self.run_job(job, plan.due.timestamp())

    async def resume_interrupted(self) -> None:
        """After a restart: deliver what was generated but not sent; redo or fail what was cut off."""
        now = self._clock()
        me, live = await self._store.claimants()  # a run another live instance claimed is its own
        for run in await self._store.pending_runs("generated"):
            if self._store.at_work_elsewhere(run, me, live):
                continue
            job = self.jobs.get(run.job_id)
            if (job is not None and job.id not in self.runnable) or reminder_id(run.job_id) is not None:
                continue  # reminders' runs are resumed by `bot.schedule.reminders`
            if job is None:
                await self._store.finish_run(run.id, "failed", error="job no longer in config")
            else:
                await self.run_job(job, run.scheduled_for, run.trigger)
        for run in await self._store.pending_runs("running"):
            if self._store.at_work_elsewhere(run, me, live):
                continue
            job = self.jobs.get(run.job_id)
            if (job is not None and job.id not in self.runnable) or reminder_id(run.job_id) is not None:
                continue
            if job is not None and now - run.scheduled_for <= self._settings.misfire_grace:
                await self.run_job(job, run.scheduled_for, run.trigger)
            else:
                await self._store.finish_run(run.id, "failed", error="interrupted by a restart")

    async def poll_requests(self) -> None:
        """Run what `switchboard jobs run ID` asked for."""
        for run in await self._store.pending_runs("requested"):
            job = self.jobs.get(run.job_id)
            if job is None:
                await self._store.finish_run(run.id, "failed", error=f"no job {run.job_id!r} in config")
                continue
            if job.id not in self.runnable or run.id in self._taken:
                continue  # another process runs its channel, or it is already on its way
            self._taken.add(run.id)
            self._spawn(self.run_job(job, run.scheduled_for, "manual"))

    async def _poll_requests_forever(self) -> None:
        while True:
            try:
                await self.poll_requests()
            except Exception:
                log.exception("could not read job run requests")
            await asyncio.sleep(self._settings.request_poll)

    # -- one run --------------------------------------------------------------------------------

    async def run_job(
        self, job: ScheduleConfig, scheduled_for: float, trigger: str = "schedule"
    ) -> ScheduleRun:
        """Run one scheduled time of a job (see `bot.schedule.job_run`)."""
        return await self._runner.run_job(job, scheduled_for, trigger)

    def _run_outcome(self, job_id: str, succeeded: bool) -> None:
        """Pause a job after max_failures failed runs in a row; a success resumes it."""
        scheduled = self._aps is not None and self._aps.get_job(job_id) is not None
        if not succeeded and job_id not in self.paused:
            self.paused.add(job_id)
            if scheduled and self._aps is not None:
                self._aps.pause_job(job_id)
            log.error("job paused after consecutive failures", job_id=job_id,
                      max_failures=self._settings.max_failures,
                      hint=f"fix it, then `switchboard jobs run {job_id}`; a success resumes it")
        elif succeeded and job_id in self.paused:
            self.paused.discard(job_id)
            if scheduled and self._aps is not None:
                self._aps.resume_job(job_id)
            log.info("job resumed after a successful run", job_id=job_id)
