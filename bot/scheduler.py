"""Scheduled jobs: briefings from config.toml, fired by APScheduler, recorded, delivered at most once.

APScheduler is only the alarm clock. What a wake-up means is decided here from our own run records
(`schedule_runs`): which scheduled times are due, missed or coalesced, whether a time was already
generated or delivered, and what to do after a restart. So the whole run logic is `run_job`, which a
test (or `switchboard jobs run`) can call directly, and the clock can be driven through `fire`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import structlog
from apscheduler.schedulers.asyncio import AsyncIOScheduler  # type: ignore[import-untyped]

from bot.errors import DeliveryError, ModelError
from bot.messages import OutboundMessage, StoredMessage
from bot.schedules import MISSED_RECORDS, delivery_chat, delivery_key, job_trigger, job_zone, plan_runs
from bot.session_key import SessionKey
from bot.store import delivery_key as reply_delivery_key

if TYPE_CHECKING:
    from bot.brain import Brain
    from bot.channel import Channel
    from bot.config import Config, ScheduleConfig
    from bot.store import ScheduleRun, Store

log = structlog.get_logger("switchboard.scheduler")

BrainFor = Callable[[str | None], "Brain"]
Sleep = Callable[[float], Awaitable[None]]

_FINISHED = ("delivered", "quiet", "failed")


def job_turn_prompt(job: ScheduleConfig, key: SessionKey, zone: ZoneInfo, scheduled_for: float,
                    now: float) -> str:
    """The per-run system part: which job, where it goes, when it was due and what time it is."""

    def both(at: float) -> str:
        local = datetime.fromtimestamp(at, zone).strftime("%A %Y-%m-%d %H:%M %Z")
        return f"{local} ({datetime.fromtimestamp(at, UTC).strftime('%Y-%m-%d %H:%M UTC')})"

    return "\n".join([
        f'This is scheduled job "{job.id}"; your answer is sent as a message to a '
        f"{'one-to-one chat' if key.is_direct else key.kind} on {key.provider}, as it is.",
        f"It was scheduled for {both(scheduled_for)}.",
        f"Current time: {both(now)}.",
    ])


def job_messages(job: ScheduleConfig, zone: ZoneInfo, previous: list[StoredMessage]) -> list[dict[str, str]]:
    """One user turn: the job's earlier outputs (if any), then its prompt."""
    parts: list[str] = []
    if previous:
        parts.append("[Your previous outputs for this job, oldest first:]")
        for message in previous:
            when = datetime.fromtimestamp(message.created_at, zone).strftime("%Y-%m-%d %H:%M %Z")
            parts.append(f"--- {when}\n{message.text}")
        parts.append("[End of previous outputs.]")
    parts.append(job.prompt)
    return [{"role": "user", "content": "\n\n".join(parts)}]


async def failing(store: Store, job_id: str, limit: int) -> bool:
    """Whether a job's newest finished runs are `limit` failures in a row (so it is paused)."""
    runs = await store.schedule_runs(job_id, limit * 4 + 20)
    finished = [run.status for run in runs if run.status in _FINISHED][:limit]
    return len(finished) == limit and all(status == "failed" for status in finished)


# -- running jobs -------------------------------------------------------------------------------


class Scheduler:
    """Runs the configured jobs inside the daemon's loop; an async context manager."""

    def __init__(
        self,
        config: Config,
        store: Store,
        brain_for: BrainFor,
        channels: Mapping[str, Channel],
        *,
        clock: Callable[[], float] = time.time,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        from bot.prompt import PromptFiles

        self._config = config
        self._settings = config.scheduler
        self._store = store
        self._brain_for = brain_for
        self._channels = channels
        self._clock = clock
        self._sleep = sleep
        self.jobs: dict[str, ScheduleConfig] = {job.id: job for job in config.schedules}
        self._triggers = {job.id: job_trigger(job, config) for job in config.schedules}
        # Jobs whose channel runs in this process; `switchboard chat` must not fail Telegram jobs.
        self.runnable = {
            job.id for job in config.schedules
            if delivery_key(job.deliver_to, config.agent.id).provider in channels
        }
        self._locks: dict[str, asyncio.Lock] = {job_id: asyncio.Lock() for job_id in self.jobs}
        self._cursor: dict[str, datetime] = {}
        self.paused: set[str] = set()
        self._taken: set[int] = set()
        self._inflight: set[asyncio.Task[Any]] = set()
        self._aps: AsyncIOScheduler | None = None
        self._poller: asyncio.Task[None] | None = None
        # Read again when SOUL/MEMORY change on disk, as for chat turns.
        self._prompt_files = PromptFiles(config)

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
            if await self._failing(job.id):
                self.paused.add(job.id)
                log.error("job stays paused: its last runs all failed", job_id=job.id,
                          max_failures=self._settings.max_failures)
        self._spawn(self._resume_interrupted())
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
        from bot.prompt import PromptFiles

        old_jobs, old_triggers = self.jobs, self._triggers
        self._config = config
        self._settings = config.scheduler
        self.jobs = {job.id: job for job in config.schedules}
        self._triggers = {job.id: job_trigger(job, config) for job in config.schedules}
        self.runnable = {
            job.id for job in config.schedules
            if delivery_key(job.deliver_to, config.agent.id).provider in self._channels
        }
        # Read again when SOUL/MEMORY change on disk, as for chat turns.
        self._prompt_files = PromptFiles(config)
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
            self._locks.setdefault(job_id, asyncio.Lock())
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

    async def _resume_interrupted(self) -> None:
        """After a restart: deliver what was generated but not sent; redo or fail what was cut off."""
        now = self._clock()
        for run in await self._store.pending_runs("generated"):
            job = self.jobs.get(run.job_id)
            if job is not None and job.id not in self.runnable:
                continue
            if job is None:
                await self._store.finish_run(run.id, "failed", error="job no longer in config")
            else:
                await self.run_job(job, run.scheduled_for, run.trigger)
        for run in await self._store.pending_runs("running"):
            job = self.jobs.get(run.job_id)
            if job is not None and job.id not in self.runnable:
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
        """Run one scheduled time of a job: generate once, store, then deliver at most once."""
        async with self._locks.setdefault(job.id, asyncio.Lock()):
            run, claimed = await self._store.claim_run(
                job.id, scheduled_for, "manual" if trigger == "manual" else "schedule"
            )
            bound = log.bind(job_id=job.id, run_id=run.id,
                             scheduled_for=datetime.fromtimestamp(scheduled_for, UTC).isoformat())
            if not claimed:
                if run.status == "generated":  # stored before a crash: send it, never regenerate
                    return await self._deliver(job, run, bound)
                bound.info("scheduled run already handled", status=run.status)
                return run
            if self._stale(scheduled_for):
                return await self._finish(job, run, "stale", bound, error=self._stale_reason(scheduled_for))
            text, attempts, error = await self._generate(job, scheduled_for, bound)
            if text is None:
                return await self._finish(job, run, "failed", bound, error=error, attempts=attempts)
            if text.startswith(self._settings.quiet_marker):
                return await self._finish(job, run, "quiet", bound, attempts=attempts)
            key = delivery_key(job.deliver_to, self._config.agent.id)
            await self._store.record_scheduled_output(run.id, str(key), text, job_id=job.id,
                                                      attempts=attempts)
            generated = await self._store.schedule_run_by_id(run.id)
            assert generated is not None
            return await self._deliver(job, generated, bound)

    async def _generate(
        self, job: ScheduleConfig, scheduled_for: float, bound: Any
    ) -> tuple[str | None, int, str | None]:
        from bot.brain import ReplyRequest

        settings = self._settings
        zone = job_zone(job, self._config)
        key = delivery_key(job.deliver_to, self._config.agent.id)
        history = settings.history_runs if job.history_runs is None else job.history_runs
        previous = await self._store.job_outputs(job.id, history)
        error: str | None = None
        attempts = 0
        for attempt in range(1, settings.retries + 2):
            attempts = attempt
            request = ReplyRequest(
                system_stable=self._prompt_files.stable_prompt(),
                system_turn=job_turn_prompt(job, key, zone, scheduled_for, self._clock()),
                messages=job_messages(job, zone, previous),
                deadline=time.monotonic() + settings.timeout,
            )
            try:
                completion = await self._brain_for(job.model).reply(request)
            except ModelError as exc:
                error = str(exc)
                if not exc.retryable:
                    break
            except Exception as exc:  # the provider path surprised us: record it, keep the daemon up
                bound.exception("model call crashed")
                error = f"{type(exc).__name__}: {exc}"
            else:
                if completion.text.strip():
                    return completion.text.strip(), attempts, None
                error = "the model returned no text"
            if attempt <= settings.retries:
                bound.warning("scheduled run failed, retrying", attempt=attempt, error=error)
                await self._sleep(settings.retry_delay)
        return None, attempts, error

    async def _deliver(self, job: ScheduleConfig, run: ScheduleRun, bound: Any) -> ScheduleRun:
        if self._stale(run.scheduled_for):
            return await self._finish(job, run, "stale", bound, error=self._stale_reason(run.scheduled_for))
        assert run.reply_message_id is not None
        message = await self._store.message_by_id(run.reply_message_id)
        assert message is not None
        key = delivery_key(job.deliver_to, self._config.agent.id)
        chat = delivery_chat(key, job.chat)
        channel = self._channels.get(key.provider)
        if channel is None:
            missing = f"channel {key.provider} is not running"
            return await self._finish(job, run, "failed", bound, error=missing)
        sent: list[str] = []
        error: str | None = None
        for attempt in range(1, self._settings.retries + 2):
            try:
                # The same key on every attempt: Discord posts a retried chunk once (its nonce).
                sent = await channel.send(
                    OutboundMessage(chat, message.text, delivery_key=reply_delivery_key(message.id))
                )
                error = None
                break
            except DeliveryError as exc:
                sent, error = exc.sent_ids, str(exc)
                # Part of it arrived, or retrying cannot help: sending again would repeat or fail.
                if sent or exc.permanent or attempt > self._settings.retries:
                    break
            except Exception as exc:  # it may have arrived: never send twice
                sent, error = [], f"{type(exc).__name__}: {exc}"
                break
            bound.warning("delivery failed, retrying", attempt=attempt, error=error)
            await self._sleep(self._settings.retry_delay)
        await self._store.mark_delivered(message.id, chat, sent)
        if error is not None:
            return await self._finish(job, run, "failed", bound, error=f"delivery: {error}", sent=sent)
        return await self._finish(job, run, "delivered", bound, sent=sent)

    async def _finish(
        self, job: ScheduleConfig, run: ScheduleRun, status: Any, bound: Any, *,
        error: str | None = None, attempts: int | None = None, sent: list[str] | None = None,
    ) -> ScheduleRun:
        await self._store.finish_run(run.id, status, error=error, delivered_ids=sent or (), attempts=attempts)
        finished = await self._store.schedule_run_by_id(run.id)
        assert finished is not None
        if status == "failed":
            bound.error("scheduled run failed", error=error, attempts=finished.attempts)
            if await self._failing(job.id) and job.id not in self.paused:
                self.paused.add(job.id)
                if self._aps is not None and self._aps.get_job(job.id) is not None:
                    self._aps.pause_job(job.id)
                log.error("job paused after consecutive failures", job_id=job.id,
                          max_failures=self._settings.max_failures,
                          hint=f"fix it, then `switchboard jobs run {job.id}`; a success resumes it")
        else:
            bound.info("scheduled run", status=status, attempts=finished.attempts,
                       delivered=len(finished.delivered_ids), error=error)
            if status in ("delivered", "quiet") and job.id in self.paused:
                self.paused.discard(job.id)
                if self._aps is not None and self._aps.get_job(job.id) is not None:
                    self._aps.resume_job(job.id)
                log.info("job resumed after a successful run", job_id=job.id)
        return finished

    async def _failing(self, job_id: str) -> bool:
        return await failing(self._store, job_id, self._settings.max_failures)

    def _stale(self, scheduled_for: float) -> bool:
        cap = self._settings.stale_after
        return cap > 0 and self._clock() - scheduled_for > cap

    def _stale_reason(self, scheduled_for: float) -> str:
        late = round(self._clock() - scheduled_for)
        return f"not delivered: {late}s after its time (stale_after {self._settings.stale_after}s)"
