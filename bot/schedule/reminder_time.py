"""When a reminder is due: the `when` a model writes and the `repeat` cron line, read in the user's
zone. Pure, no I/O; every refusal is a ValueError whose text the model reads and can act on.

Accepted `when`: an ISO 8601 time (with an offset it is absolute, without one it is the user's
wall-clock time), a relative one ("in 2 hours", "+90m", "in 1 day 3 hours"), or a day word and a
time ("tomorrow 09:00", "today at 6pm", "friday 9:30", "next monday 8am", or a bare "18:30": the
next such time). Anything else is refused rather than guessed.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from apscheduler.triggers.base import BaseTrigger  # type: ignore[import-untyped]

from bot.config.schedule_spec import crontab_trigger

_UNITS = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}
_AMOUNT = re.compile(r"(\d+|(?<![a-z])an?\b)\s*([a-z]+)")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAY = re.compile(
    r"^(?:on\s+)?(today|tomorrow|(?:next\s+)?(?:monday|tuesday|wednesday|thursday|friday|saturday|"
    r"sunday|mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun))(?:\s+(.+))?$"
)
_CLOCK = re.compile(r"^(?:at\s+)?(\d{1,2})(?:[:.h](\d{2}))?\s*(am|pm)?$")
_EXAMPLES = ('"2025-04-01T09:00" (your local time), "2025-04-01T07:00Z", "in 2 hours", "+90m", '
             '"tomorrow 09:00", "friday 18:30", "next monday 8am"')
MAX_AHEAD = 10 * 366 * 86400  # seconds: further than this is a slip, not a plan
# How many of a cron line's next times are compared to find its shortest gap (a week of hourly).
_GAP_SAMPLES = 200


def parse_when(text: str, now: float, zone: ZoneInfo) -> datetime:
    """The moment `text` names, as an aware datetime in `zone`; ValueError when it names none."""
    cleaned = " ".join(text.strip().lower().split())
    if not cleaned:
        raise ValueError(f"`when` is empty; give a time such as {_EXAMPLES}")
    local_now = datetime.fromtimestamp(now, zone)
    try:
        found = (_relative(cleaned, local_now) or _iso(text.strip(), zone)
                 or _day_and_clock(cleaned, local_now))
    except OverflowError as exc:
        raise ValueError(f"{text!r} is too far ahead") from exc
    if found is None:
        raise ValueError(f"cannot read {text!r} as a time; use one of {_EXAMPLES}")
    return found


def future_when(text: str, now: float, zone: ZoneInfo) -> datetime:
    """`parse_when`, refusing a moment that is not after `now`."""
    at = parse_when(text, now, zone)
    if at.timestamp() - now > MAX_AHEAD:
        raise ValueError(f"{text!r} is {describe(at.timestamp(), zone)}, more than ten years ahead")
    if at.timestamp() <= now:
        raise ValueError(f"{text!r} is {describe(at.timestamp(), zone)}, which is in the past "
                         f"(it is now {describe(now, zone)})")
    return at


def _relative(text: str, local_now: datetime) -> datetime | None:
    if text.startswith("in "):
        rest = text[3:]
    elif text.startswith("+"):
        rest = text[1:].strip()
    else:
        return None
    rest = rest.replace(" and ", " ").replace(",", " ")
    seconds, position = 0, 0
    for match in _AMOUNT.finditer(rest):
        if rest[position:match.start()].strip():
            return None
        amount, unit = match.groups()
        if unit not in _UNITS:
            raise ValueError(f"unknown unit {unit!r} in {text!r}; use minutes, hours, days or weeks")
        seconds += (1 if amount in ("a", "an") else int(amount)) * _UNITS[unit]
        position = match.end()
    if position == 0 or rest[position:].strip():
        return None
    # Real elapsed time: "in 2 hours" across a clock change is still two hours away.
    return (local_now.astimezone(UTC) + timedelta(seconds=seconds)).astimezone(local_now.tzinfo)


def _iso(text: str, zone: ZoneInfo) -> datetime | None:
    candidate = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    if not re.match(r"^\d{4}-?\d{2}-?\d{2}", candidate):
        return None
    try:
        parsed = datetime.fromisoformat(candidate)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a valid ISO 8601 time ({exc})") from exc
    if re.fullmatch(r"\d{4}-?\d{2}-?\d{2}", candidate):
        raise ValueError(f"{text!r} is a date without a time; add one, such as {text}T09:00")
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=zone)
    return parsed.astimezone(zone)


def _day_and_clock(text: str, local_now: datetime) -> datetime | None:
    match = _DAY.match(text)
    day_word, clock_text = (match.group(1), match.group(2)) if match else ("", text)
    clock = _clock(clock_text) if clock_text else None
    if clock is None:
        if match is not None and not clock_text:
            raise ValueError(f"{text!r} has no time of day; add one, such as '{text} 09:00'")
        return None
    today = local_now.date()

    def at(day: date) -> datetime:
        return datetime.combine(day, clock, tzinfo=local_now.tzinfo)

    name = day_word.removeprefix("next ")
    if name == "today":
        return at(today)
    if name == "tomorrow":
        return at(today + timedelta(days=1))
    if name:
        weekday = next(i for i, day in enumerate(_WEEKDAYS) if day.startswith(name[:3]))
        ahead = (weekday - today.weekday()) % 7
        if ahead == 0 and (day_word.startswith("next ") or at(today) <= local_now):
            ahead = 7
        return at(today + timedelta(days=ahead))
    # A bare time of day is its next occurrence.
    return at(today) if at(today) > local_now else at(today + timedelta(days=1))


def _clock(text: str) -> time | None:
    match = _CLOCK.match(text.strip())
    if match is None:
        return None
    hour, minute = int(match.group(1)), int(match.group(2) or 0)
    meridiem = match.group(3)
    if meridiem is None and match.group(2) is None and not text.strip().startswith("at"):
        return None  # "tomorrow 9" is too bare to trust; "tomorrow at 9" and "9am" are fine
    if meridiem is not None:
        if not 1 <= hour <= 12:
            raise ValueError(f"{text!r}: an am/pm hour is 1 to 12")
        hour = hour % 12 + (12 if meridiem == "pm" else 0)
    if hour > 23 or minute > 59:
        raise ValueError(f"{text!r} is not a time of day (00:00 to 23:59)")
    return time(hour, minute)


def repeat_trigger(expr: str, zone: ZoneInfo, min_gap: int) -> BaseTrigger:
    """The trigger of a `repeat` cron line in the user's zone; ValueError when it is not one, or
    when two of its times come closer than `min_gap` seconds."""
    try:
        trigger = crontab_trigger(expr, zone)
    except ValueError as exc:
        raise ValueError(
            f"`repeat` {expr!r} is not a five-field cron line ({exc}); e.g. '0 8 * * 1-5' is every "
            "weekday at 08:00, '30 18 * * *' every day at 18:30, '0 9 * * mon' Mondays at 09:00"
        ) from exc
    previous: datetime | None = None
    at = trigger.get_next_fire_time(None, datetime(2001, 1, 1, tzinfo=UTC))
    for _ in range(_GAP_SAMPLES):
        if at is None:
            break
        if previous is not None and (at - previous).total_seconds() < min_gap:
            raise ValueError(f"`repeat` {expr!r} fires more often than every {min_gap // 60} minutes, "
                             "the least gap allowed between two reminders")
        previous, at = at, trigger.get_next_fire_time(at, at)
    return trigger


def describe(at: float, zone: ZoneInfo) -> str:
    """A time as people read it: "Mon 31 Mar 2025 09:00 CEST"."""
    return datetime.fromtimestamp(at, zone).strftime("%a %d %b %Y %H:%M %Z")
