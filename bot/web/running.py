"""The running daemon as the console reaches it: what it is told (reload, run a job) and reads.

The daemon hands itself over when it starts the console; the console sees it only through these
protocols, so `bot.web` never imports `bot.daemon.assembly` (it sits just below it).
"""

from __future__ import annotations

from typing import Any, Protocol

from bot.config import Config


class JobRunner(Protocol):
    """The scheduler's part a "Run now" uses: take up requested runs (`switchboard jobs run`)."""

    async def poll_requests(self) -> None: ...


class ReminderTimer(Protocol):
    """The reminder schedule's part a cancel uses: forget a reminder's timer."""

    def remove(self, reminder_id: int) -> None: ...


class RunningDaemon(Protocol):
    """The daemon serving the console: its config as in force, status, reload, jobs and reminders."""

    @property
    def config(self) -> Config: ...
    @property
    def scheduler(self) -> JobRunner | None: ...
    @property
    def reminders(self) -> ReminderTimer | None: ...
    async def status(self) -> dict[str, Any]: ...
    async def reload(self) -> dict[str, Any]: ...
