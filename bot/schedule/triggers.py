"""What a schedule means: its trigger (cron as cron means it, wall-clock safe across DST), the times
it should have run since a given moment, and where its output is delivered. Pure, no I/O.

What an entry may say (cron lines, intervals, targets) is checked by `bot.config.schedule_spec`, which the
config uses too; this module runs what the config accepted."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from apscheduler.triggers.base import BaseTrigger  # type: ignore[import-untyped]
from apscheduler.triggers.interval import IntervalTrigger  # type: ignore[import-untyped]

from bot.config.schedule_spec import crontab_trigger as crontab_trigger
from bot.config.schedule_spec import delivery_key as delivery_key
from bot.core.agent_chat import agent_chat
from bot.core.messages import AGENT_PROVIDER, ChatRef
from bot.core.session_key import SessionKey

if TYPE_CHECKING:
    from bot.config import Config, ScheduleConfig

_TELEGRAM_GENERAL_TOPIC = "1"  # a forum's General topic is sent to without a thread id
# Older scheduled times are not enumerated one by one after a long outage (an every-minute job
# down for a month would be tens of thousands of records).
_CATCH_UP_HORIZON = timedelta(days=2)
MISSED_RECORDS = 100


# -- time ---------------------------------------------------------------------------------------


def job_zone(job: ScheduleConfig, config: Config) -> ZoneInfo:
    return ZoneInfo(job.timezone or config.agent.timezone)


def job_trigger(job: ScheduleConfig, config: Config) -> BaseTrigger:
    """The job's trigger in its timezone; intervals are anchored to the epoch so restarts keep them."""
    zone = job_zone(job, config.for_agent(config.job_key(job).agent_id))  # the writing agent's zone
    seconds = job.interval_seconds()
    if seconds is not None:
        return IntervalTrigger(seconds=seconds, start_date=datetime(1970, 1, 1, tzinfo=UTC), timezone=zone)
    assert job.cron is not None
    return crontab_trigger(job.cron, zone)


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What a wake-up at `now` means for one job: at most one run, and the times that will not run."""

    due: datetime | None
    missed: list[datetime]  # older than misfire_grace
    coalesced: list[datetime]  # within misfire_grace but superseded by `due`
    last: datetime | None  # the newest time considered: the next plan starts after it


def plan_runs(trigger: BaseTrigger, after: datetime, now: datetime, grace: float) -> RunPlan:
    """The trigger's times in (after, now]: the newest runs if within `grace`, the rest are skipped."""
    times: list[datetime] = []
    if after < now - _CATCH_UP_HORIZON:
        after = now - _CATCH_UP_HORIZON
    if isinstance(trigger, IntervalTrigger):
        # An interval trigger would count from `after` as if it were a fire time; ask for the
        # anchored time after it instead.
        at = trigger.get_next_fire_time(None, after + timedelta(microseconds=1))
    else:
        # A cron trigger treats `after` as the previous fire time, which keeps wall-clock times
        # that repeat when clocks go back from firing again.
        at = trigger.get_next_fire_time(after, after)
    while at is not None and at <= now:
        times.append(at)
        at = trigger.get_next_fire_time(at, at)
    if not times:
        return RunPlan(None, [], [], None)
    cutoff = now - timedelta(seconds=grace)
    due = times[-1] if times[-1] >= cutoff else None
    earlier = times[:-1] if due is not None else times
    return RunPlan(
        due,
        [t for t in earlier if t < cutoff],
        [t for t in earlier if t >= cutoff],
        times[-1],
    )


# -- where a job delivers -----------------------------------------------------------------------


def delivery_chat(key: SessionKey, chat: str | None = None) -> ChatRef:
    """Where a channel sends a session's messages; `chat` names it when the key cannot."""
    platform = key.provider.partition(".")[0]
    if platform == AGENT_PROVIDER:
        return agent_chat(key.agent_id, key.peer, key.suffix_id if key.suffix_kind == "thread" else None)
    if platform == "telegram":
        thread = key.suffix_id if key.suffix_kind == "topic" else None
        return ChatRef(key.provider, chat or key.peer, None if thread == _TELEGRAM_GENERAL_TOPIC else thread)
    if platform == "discord":
        return ChatRef(key.provider, chat or key.suffix_id or key.peer)
    if platform in ("slack", "matrix"):
        # A member's id posts into the bot's DM with them; a thread is its channel and its root.
        return ChatRef(key.provider, chat or key.peer, key.suffix_id if key.suffix_kind == "thread" else None)
    return ChatRef(key.provider, chat or key.peer)

