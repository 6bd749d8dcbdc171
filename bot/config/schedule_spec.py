"""What a schedule entry says, checked before anything runs it: cron lines, intervals and delivery
targets. Pure, no I/O; the config validates with it and `bot.schedule.triggers` runs with it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, tzinfo

from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped]

from bot.core.errors import SessionKeyError
from bot.core.messages import AGENT_PROVIDER
from bot.core.session_key import SessionKey, build, parse

# "agent": a job may deliver to another agent (`agent:<writer>:agent:direct:<reader>`).
SCHEDULE_CHANNELS = ("console", "telegram", "discord", "slack", "matrix", AGENT_PROVIDER)
# Telegram and Discord address chats, users, topics and threads by number.
NUMERIC_CHANNELS = ("telegram", "discord")
# Platforms with extra bots as accounts ("telegram.work").
ACCOUNT_PLATFORMS = ("telegram", "discord", "slack", "matrix")

_CRON_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_NUMBER = re.compile(r"^-?[0-9]+$")
_SLACK_ID = re.compile(r"^[A-Z][A-Z0-9]{2,}$")
_SLACK_TS = re.compile(r"^[0-9]+\.[0-9]+$")
_MATRIX_ID = re.compile(r"^[@!][^:\s]+:\S+$")
# A cron line that fires at all fires within eight years of any moment (29 February included).
_SOME_MOMENT = datetime(2001, 1, 1, tzinfo=UTC)


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
    APScheduler only when both do. A line that never fires (`0 7 31 2 *`) is refused too.
    """
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(f"expected 5 fields, got {len(fields)}")
    minute, hour, day, month, weekday = (f.replace("?", "*") for f in fields)
    if day != "*" and weekday != "*":
        raise ValueError("restrict the day of month or the weekday, not both")
    trigger = WallClockCronTrigger(
        minute=minute, hour=hour, day=day, month=month, day_of_week=_cron_weekdays(weekday),
        timezone=timezone,
    )
    if trigger.get_next_fire_time(None, _SOME_MOMENT) is None:
        raise ValueError(f"{expr!r} never fires: none of its months has that day")
    return trigger


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


def parse_duration(text: str) -> int:
    """Seconds in a duration such as "90s", "30m", "2h" or "1d12h"; ValueError otherwise."""
    match = _DURATION.match(text.strip())
    if not text.strip() or match is None:
        raise ValueError('a duration such as "30m", "2h" or "1d12h"')
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def delivery_key(text: str, agent_id: str) -> SessionKey:
    """The session a job's output belongs to: a full session key, or `<channel>:<chat id>`."""
    if text.startswith("agent:"):
        key = parse(text)
    else:
        provider, sep, chat = text.partition(":")
        if not sep or not chat:
            raise SessionKeyError(f"{text!r} is neither a session key nor '<channel>:<chat id>'")
        platform = provider.partition(".")[0]
        if platform == "telegram":
            key = build(agent_id, provider, "group" if chat.startswith("-") else "direct", chat)
        elif platform == "discord" or (platform == "slack" and chat[:1] in ("C", "G")):
            key = build(agent_id, provider, "channel", chat)
        elif platform == "matrix" and chat.startswith("!"):
            key = build(agent_id, provider, "room", chat)
        else:
            key = build(agent_id, provider, "direct", chat)
    if key.provider == AGENT_PROVIDER and (not key.is_direct or key.suffix_kind or key.peer == key.agent_id):
        raise SessionKeyError(f"{text!r}: a job delivered to an agent names its writer and its reader, "
                              "two different agents: 'agent:<writer>:agent:direct:<reader>'")
    platform, _, account = key.provider.partition(".")
    if platform not in SCHEDULE_CHANNELS or (account and platform not in ACCOUNT_PLATFORMS):
        raise SessionKeyError(f"unknown channel {key.provider!r}; expected one of {SCHEDULE_CHANNELS} "
                              "or an extra account such as 'telegram.work'")
    if platform in NUMERIC_CHANNELS:
        for part in (key.peer, key.suffix_id):
            if part is not None and not _NUMBER.match(part):
                raise SessionKeyError(f"a {key.provider} chat, user, topic or thread is a numeric id, "
                                      f"not {part!r}")
    if platform == "slack":
        _check_slack(key)
    if platform == "matrix":
        _check_matrix(key)
    return key


def _check_matrix(key: SessionKey) -> None:
    """A Matrix key names a user (@…) for a direct chat or a room (!…), each with its server."""
    expected = "@" if key.is_direct else "!" if key.kind == "room" else ""
    if not _MATRIX_ID.match(key.peer) or key.peer[0] != expected:
        raise SessionKeyError(f"a {key.provider} direct chat is named by its person's id "
                              "('@ada:example.org'), a room by its id ('!abc:example.org'); "
                              f"not {str(key)!r}")


def _check_slack(key: SessionKey) -> None:
    """A Slack key names a member (U…, W…) for a DM or a channel (C…, G…), a thread by its ts."""
    if not _SLACK_ID.match(key.peer) or (key.suffix_id is not None and not _SLACK_TS.match(key.suffix_id)):
        raise SessionKeyError(f"a {key.provider} member or channel is a Slack id such as 'U0123ABCD' or "
                              f"'C0123ABCD', a thread its ts such as '1700000000.000100'; not {str(key)!r}")
    if key.is_direct and key.peer[0] not in ("U", "W"):
        raise SessionKeyError(f"a {key.provider} DM is named by its member's id (U…), not {key.peer!r}")
    if not key.is_direct and key.peer[0] not in ("C", "G"):
        raise SessionKeyError(f"a {key.provider} channel id starts with C or G, not {key.peer!r}")
