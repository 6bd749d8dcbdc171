"""What a schedule means: its trigger (cron as cron means it, wall-clock safe across DST), the times
it should have run since a given moment, and where its output is delivered. Pure, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from apscheduler.triggers.base import BaseTrigger  # type: ignore[import-untyped]
from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped]
from apscheduler.triggers.interval import IntervalTrigger  # type: ignore[import-untyped]

from bot.errors import SessionKeyError
from bot.messages import ChatRef
from bot.session_key import SessionKey, build, parse

if TYPE_CHECKING:
    from bot.config import Config, ScheduleConfig

_CRON_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_TELEGRAM_GENERAL_TOPIC = "1"  # a forum's General topic is sent to without a thread id
# Older scheduled times are not enumerated one by one after a long outage (an every-minute job
# down for a month would be tens of thousands of records).
_CATCH_UP_HORIZON = timedelta(days=2)
MISSED_RECORDS = 100


# -- time ---------------------------------------------------------------------------------------


class WallClockCronTrigger(CronTrigger):  # type: ignore[misc]
    """A cron trigger that fires each local wall-clock time at most once.

    APScheduler 3.11 fires a 02:30 job twice on the night clocks go back (02:30 summer time, then
    02:30 winter time); a time not after the previous fire's wall-clock time is skipped instead.
    A time that does not exist (clocks go forward) fires once, at the same instant an hour later.
    """

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None:
        candidate: datetime | None = super().get_next_fire_time(previous_fire_time, now)
        if previous_fire_time is not None:
            floor = previous_fire_time.astimezone(self.timezone).replace(tzinfo=None)
            while candidate is not None and candidate.replace(tzinfo=None) <= floor:
                candidate = super().get_next_fire_time(candidate, candidate)
        return candidate


def crontab_trigger(expr: str, timezone: str | tzinfo) -> WallClockCronTrigger:
    """A trigger for a standard five-field cron line (minute hour day month weekday).

    Weekday numbers follow cron (0 and 7 are Sunday), not APScheduler 3's own numbering (0 is
    Monday). Restricting both day of month and weekday is refused: cron runs when either matches,
    APScheduler only when both do.
    """
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(f"expected 5 fields, got {len(fields)}")
    minute, hour, day, month, weekday = (f.replace("?", "*") for f in fields)
    if day != "*" and weekday != "*":
        raise ValueError("restrict the day of month or the weekday, not both")
    return WallClockCronTrigger(
        minute=minute, hour=hour, day=day, month=month, day_of_week=_cron_weekdays(weekday),
        timezone=timezone,
    )


def _cron_weekdays(field: str) -> str:
    if field == "*":
        return "*"
    days: set[int] = set()
    for part in field.split(","):
        spec, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if step < 1:
            raise ValueError(f"bad weekday step in {part!r}")
        if spec == "*":
            low, high = 0, 6
        elif "-" in spec:
            first, last = spec.split("-", 1)
            low, high = _cron_day(first), _cron_day(last)
        else:
            low = _cron_day(spec)
            high = 6 if step_text else low
        if high < low:
            raise ValueError(f"weekday range {part!r} runs backwards")
        days.update(day % 7 for day in range(low, high + 1, step))
    return ",".join(_CRON_DAYS[day] for day in sorted(days))


def _cron_day(text: str) -> int:
    name = text.strip().lower()
    if name.isdigit() and 0 <= int(name) <= 7:
        return int(name)
    if name[:3] in _CRON_DAYS and len(name) == 3:
        return _CRON_DAYS.index(name[:3])
    raise ValueError(f"bad weekday {text!r}; expected 0-7 or sun..sat")


def job_zone(job: ScheduleConfig, config: Config) -> ZoneInfo:
    return ZoneInfo(job.timezone or config.agent.timezone)


def job_trigger(job: ScheduleConfig, config: Config) -> BaseTrigger:
    """The job's trigger in its timezone; intervals are anchored to the epoch so restarts keep them."""
    zone = job_zone(job, config)
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


def delivery_key(text: str, agent_id: str) -> SessionKey:
    """The session a job's output belongs to: a full session key, or `<channel>:<chat id>`."""
    from bot.config import SCHEDULE_CHANNELS

    if text.startswith("agent:"):
        key = parse(text)
    else:
        provider, sep, chat = text.partition(":")
        if not sep or not chat:
            raise SessionKeyError(f"{text!r} is neither a session key nor '<channel>:<chat id>'")
        if provider == "telegram":
            key = build(agent_id, provider, "group" if chat.startswith("-") else "direct", chat)
        elif provider == "discord":
            key = build(agent_id, provider, "channel", chat)
        else:
            key = build(agent_id, provider, "direct", chat)
    if key.provider not in SCHEDULE_CHANNELS:
        raise SessionKeyError(f"unknown channel {key.provider!r}; expected one of {SCHEDULE_CHANNELS}")
    return key


def delivery_chat(key: SessionKey, chat: str | None = None) -> ChatRef:
    """Where a channel sends a session's messages; `chat` names it when the key cannot."""
    if key.provider == "telegram":
        thread = key.suffix_id if key.suffix_kind == "topic" else None
        return ChatRef(key.provider, chat or key.peer, None if thread == _TELEGRAM_GENERAL_TOPIC else thread)
    if key.provider == "discord":
        return ChatRef(key.provider, chat or key.suffix_id or key.peer)
    return ChatRef(key.provider, chat or key.peer)


# -- the prompt ---------------------------------------------------------------------------------
