"""One run of a scheduled job: claim its time, generate once, store, deliver at most once, record.

The run records (`schedule_runs`) decide everything: a time already generated is delivered without
asking the model again, one already finished is left alone, one whose output would arrive more than
`stale_after` late is recorded `stale`. `bot.schedule.scheduler` decides when to run; this module, how.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import structlog

from bot.core.errors import DeliveryError, ModelError, StoreError, describe
from bot.core.messages import AGENT_PROVIDER, ChatRef, OutboundMessage, StoredMessage
from bot.core.session_key import SessionKey
from bot.schedule.triggers import delivery_chat, job_zone
from bot.store import delivery_key as reply_delivery_key

if TYPE_CHECKING:
    from bot.config import Config, ScheduleConfig, SchedulerConfig
    from bot.intake.channel import Channel
    from bot.models.brain import Brain
    from bot.store import ScheduleRun
    from bot.store.seams import RunLedger

log = structlog.get_logger("switchboard.scheduler")

BrainFor = Callable[[str | None], "Brain"]
Sleep = Callable[[float], Awaitable[None]]
# Told after a run: (job id, True when it succeeded / False when it failed max_failures in a row).
Outcome = Callable[[str, bool], None]

_FINISHED = ("delivered", "quiet", "failed")


def job_turn_prompt(job: ScheduleConfig, key: SessionKey, zone: ZoneInfo, scheduled_for: float,
                    now: float) -> str:
    """The per-run system part: which job, where it goes, when it was due and what time it is."""

    def both(at: float) -> str:
        local = datetime.fromtimestamp(at, zone).strftime("%A %Y-%m-%d %H:%M %Z")
        return f"{local} ({datetime.fromtimestamp(at, UTC).strftime('%Y-%m-%d %H:%M UTC')})"

    where = f"{'one-to-one chat' if key.is_direct else key.kind} on {key.provider}"
    if key.provider == AGENT_PROVIDER:
        where = f"conversation with the agent {key.peer}, who may answer you"
    return "\n".join([
        f'This is scheduled job "{job.id}"; your answer is sent as a message to a {where}, as it is.',
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


async def failing(store: RunLedger, job_id: str, limit: int) -> bool:
    """Whether a job's newest finished runs are `limit` failures in a row (so it is paused)."""
    runs = await store.schedule_runs(job_id, limit * 4 + 20)
    finished = [run.status for run in runs if run.status in _FINISHED][:limit]
    return len(finished) == limit and all(status == "failed" for status in finished)


async def run_by_id(store: RunLedger, run_id: int) -> ScheduleRun:
    """A run read back after writing it; StoreError if its row is gone (a database edited by hand
    or restored from an older copy): nothing this module does can go on without it."""
    run = await store.schedule_run_by_id(run_id)
    if run is None:
        raise StoreError(f"schedule run #{run_id} is no longer in the database")
    return run


async def stored_output(store: RunLedger, run: ScheduleRun) -> StoredMessage | None:
    """The text a generated run stored, or None when the database lacks it (a damaged row): the
    caller records the run failed instead of leaving it `generated` to fail again on every start."""
    if run.reply_message_id is None:
        return None
    return await store.message_by_id(run.reply_message_id)


def output_missing(run: ScheduleRun) -> str:
    return f"run #{run.id} is generated but its stored text is missing from the database"


async def deliver_output(
    store: RunLedger, channel: Channel, chat: ChatRef, message: StoredMessage, settings: SchedulerConfig,
    sleep: Sleep, bound: Any,
) -> tuple[list[str], str | None]:
    """Send a run's stored output at most once (retried only while nothing arrived) and record what
    arrived; (the platform ids sent, the error or None). Reminders are delivered the same way."""
    sent: list[str] = []
    error: str | None = None
    for attempt in range(1, settings.retries + 2):
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
            if sent or exc.permanent or attempt > settings.retries:
                break
        except Exception as exc:  # it may have arrived: never send twice
            sent, error = [], describe(exc)
            bound.warning("delivery crashed; not retried, it may have arrived", error=error, exc_info=True)
            break
        bound.warning("delivery failed, retrying", attempt=attempt, error=error)
        await sleep(settings.retry_delay)
    await store.mark_delivered(message.id, chat, sent)
    return sent, error


class JobRunner:
    """Runs scheduled times of jobs, one at a time per job."""

    def __init__(
        self,
        config: Config,
        store: RunLedger,
        brain_for: BrainFor,
        channels: Mapping[str, Channel],
        outcome: Outcome,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._store = store
        self._brain_for = brain_for
        self._channels = channels
        self._outcome = outcome
        self._clock = clock
        self._sleep = sleep
        self._locks: dict[str, asyncio.Lock] = {}
        self.reconfigure(config)

    def reconfigure(self, config: Config) -> None:
        """Runs started from now on use this config (and its prompt files)."""
        from bot.context.prompt import PromptFiles

        self._config = config
        self._settings = config.scheduler
        # Each job is written by the agent of the session it delivers to, as that agent (its soul
        # and memory files, read again when they change on disk, as for chat turns).
        self._prompt_files = {agent: PromptFiles(config.for_agent(agent)) for agent in config.agent_ids()}

    async def run_job(
        self, job: ScheduleConfig, scheduled_for: float, trigger: str = "schedule"
    ) -> ScheduleRun:
        """Run one scheduled time of a job: generate once, store, then deliver at most once."""
        async with self._locks.setdefault(job.id, asyncio.Lock()):
            me, live = await self._store.claimants()
            run, claimed = await self._store.claim_run(
                job.id, scheduled_for, "manual" if trigger == "manual" else "schedule", owner=me, live=live
            )
            bound = log.bind(job_id=job.id, run_id=run.id,
                             scheduled_for=datetime.fromtimestamp(scheduled_for, UTC).isoformat())
            if not claimed:
                # Stored before a crash: send it, never regenerate (unless its live claimer does).
                if run.status == "generated" and not self._store.at_work_elsewhere(run, me, live):
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
            key = self._config.job_key(job)
            await self._store.record_scheduled_output(run.id, str(key), text, job_id=job.id,
                                                      attempts=attempts)
            return await self._deliver(job, await run_by_id(self._store, run.id), bound)

    async def _generate(
        self, job: ScheduleConfig, scheduled_for: float, bound: Any
    ) -> tuple[str | None, int, str | None]:
        from bot.models.brain import ReplyRequest

        settings = self._settings
        key = self._config.job_key(job)
        zone = job_zone(job, self._config.for_agent(key.agent_id))
        prompt_files = self._prompt_files[key.agent_id]
        history = settings.history_runs if job.history_runs is None else job.history_runs
        previous = await self._store.job_outputs(job.id, history)
        error: str | None = None
        attempts = 0
        for attempt in range(1, settings.retries + 2):
            attempts = attempt
            request = ReplyRequest(
                system_stable=prompt_files.stable_prompt(),
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
                error = describe(exc)
            else:
                from bot.models.usage import record_usage

                await record_usage(self._store, str(key), None, "scheduled", completion)
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
        message = await stored_output(self._store, run)
        if message is None:
            return await self._finish(job, run, "failed", bound, error=output_missing(run))
        key = self._config.job_key(job)
        chat = delivery_chat(key, job.chat)
        channel = self._channels.get(key.provider)
        if channel is None:
            missing = f"channel {key.provider} is not running"
            return await self._finish(job, run, "failed", bound, error=missing)
        sent, error = await deliver_output(self._store, channel, chat, message, self._settings,
                                           self._sleep, bound)
        if error is not None:
            return await self._finish(job, run, "failed", bound, error=f"delivery: {error}", sent=sent)
        return await self._finish(job, run, "delivered", bound, sent=sent)

    async def _finish(
        self, job: ScheduleConfig, run: ScheduleRun, status: Any, bound: Any, *,
        error: str | None = None, attempts: int | None = None, sent: list[str] | None = None,
    ) -> ScheduleRun:
        await self._store.finish_run(run.id, status, error=error, delivered_ids=sent or (), attempts=attempts)
        finished = await run_by_id(self._store, run.id)
        if status == "failed":
            bound.error("scheduled run failed", error=error, attempts=finished.attempts)
            if await failing(self._store, job.id, self._settings.max_failures):
                self._outcome(job.id, False)
        else:
            bound.info("scheduled run", status=status, attempts=finished.attempts,
                       delivered=len(finished.delivered_ids), error=error)
            if status in ("delivered", "quiet"):
                self._outcome(job.id, True)
        return finished

    def _stale(self, scheduled_for: float) -> bool:
        cap = self._settings.stale_after
        return cap > 0 and self._clock() - scheduled_for > cap

    def _stale_reason(self, scheduled_for: float) -> str:
        late = round(self._clock() - scheduled_for)
        return f"not delivered: {late}s after its time (stale_after {self._settings.stale_after}s)"
