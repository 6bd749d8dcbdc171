"""The scheduling config sections: how jobs run (`[scheduler]`) and each `[[schedules]]` entry."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from bot.config.fields import NonNegInt, PlatformId, PosFloat, PosInt, Section, known_timezone
from bot.config.schedule_spec import crontab_trigger, delivery_key, parse_duration
from bot.core.errors import SessionKeyError


class SchedulerConfig(Section):
    """How scheduled jobs run: catch-up after downtime, staleness, retries, failures, history."""

    # A run missed by at most this many seconds (daemon down, loop busy) still runs, once.
    misfire_grace: NonNegInt = 600
    # A run whose output would arrive later than this after its time is not delivered; 0 = no cap.
    stale_after: NonNegInt = 1800
    retries: NonNegInt = 2
    retry_delay: Annotated[float, Field(ge=0)] = 30.0
    timeout: PosFloat = 120.0
    max_failures: PosInt = 5
    history_runs: NonNegInt = 1
    quiet_marker: Annotated[str, Field(min_length=1)] = "NO_REPLY"
    # How often the daemon looks for `switchboard jobs run ID` requests.
    request_poll: PosFloat = 2.0


class ScheduleConfig(Section):
    """One `[[schedules]]` entry: a briefing the daemon runs on a cron or interval schedule."""

    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
    cron: str | None = None
    every: str | None = None
    timezone: str | None = None
    prompt: Annotated[str, Field(min_length=1)]
    deliver_to: str
    # The platform chat to send to when the session key does not name it (a Discord DM's channel).
    chat: PlatformId | None = None
    model: str | None = None
    enabled: bool = True
    history_runs: NonNegInt | None = None

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                crontab_trigger(value, "UTC")
            except ValueError as exc:
                raise ValueError(f"a five-field cron expression ({exc})") from exc
        return value

    @field_validator("every")
    @classmethod
    def _valid_every(cls, value: str | None) -> str | None:
        if value is not None and parse_duration(value) < 60:
            raise ValueError("an interval of at least 1m")
        return value

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str | None) -> str | None:
        return None if value is None else known_timezone(value)

    @field_validator("deliver_to")
    @classmethod
    def _valid_target(cls, value: str) -> str:
        try:
            delivery_key(value, "main")
        except SessionKeyError as exc:
            raise ValueError(
                "a session key such as 'agent:main:telegram:direct:42', or '<channel>:<chat id>' "
                f"such as 'telegram:-1001234567890' ({exc})"
            ) from exc
        return value

    @model_validator(mode="after")
    def _one_schedule(self) -> ScheduleConfig:
        if (self.cron is None) == (self.every is None):
            raise ValueError("exactly one of cron or every")
        return self

    def interval_seconds(self) -> int | None:
        return parse_duration(self.every) if self.every is not None else None


class RemindersConfig(Section):
    """Reminders users set through the agent (`set_reminder`): how many, and how often at most."""

    # Pending reminders one user may have at once (across their chats on one platform).
    max_pending: PosInt = 25
    # The least gap between two times of a recurring reminder ("15m", "1h"; at least 1m).
    min_repeat: str = "15m"

    @field_validator("min_repeat")
    @classmethod
    def _valid_min_repeat(cls, value: str) -> str:
        if parse_duration(value) < 60:
            raise ValueError('a duration of at least 1m, such as "15m" or "1h"')
        return value

    def min_repeat_seconds(self) -> int:
        return parse_duration(self.min_repeat)
