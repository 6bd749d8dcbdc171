"""What a running daemon says about itself: `switchboard status`, the one-line state the service
manager shows, and READY=1 once every channel has connected."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import time
from typing import Any

import structlog

from bot.config import Config
from bot.core.log import last_error
from bot.core.misconfiguration import Misconfigurations
from bot.daemon.notify import Notifier
from bot.daemon.supervisor import ChannelSupervisor
from bot.intake.channel import Channel
from bot.intake.router import Router
from bot.schedule.scheduler import Scheduler
from bot.store.leases import LIVE_WINDOW
from bot.store.seams import HealthReads
from bot.tools.mcp import McpManager
from bot.turn.agents import Agents

log = structlog.get_logger("switchboard.daemon")


class DaemonHealth:
    """The daemon's reports on itself; mixed into `Daemon`, which sets every attribute below."""

    config: Config
    router: Router | None
    scheduler: Scheduler | None
    mcp: McpManager
    ready: asyncio.Event
    reloads: list[dict[str, Any]]
    _started_at: float
    _store: HealthReads | None
    _channels: ChannelSupervisor
    _by_provider: dict[str, Channel]
    _notifier: Notifier
    _ready_timeout: float

    @functools.cached_property
    def misconfigured(self) -> Misconfigurations:
        """Refused keys and tokens, unknown models, spent balances: told once an hour, kept for status
        (channels reach it as their intake's `misconfigured`)."""
        return Misconfigurations(self._by_provider)

    def channel_state(self, channel: Channel) -> str:
        """starting, connected, restarting, stopping, stopped or error (for `switchboard status`)."""
        return self._channels.state(channel)

    async def _announce_ready(self) -> None:
        """READY=1 once every channel is connected, or after the timeout naming those still late."""
        waits = {
            channel.provider: asyncio.ensure_future(ready.wait())
            for channel in self._by_provider.values()
            if isinstance(ready := getattr(channel, "ready", None), asyncio.Event)
        }
        if waits:
            _, late = await asyncio.wait(waits.values(), timeout=self._ready_timeout)
            for waiter in late:
                waiter.cancel()
            late_names = sorted(name for name, waiter in waits.items() if waiter in late)
            if late_names:
                log.warning("channels not connected yet; reporting ready anyway", channels=late_names,
                            waited_s=self._ready_timeout)
        self.ready.set()
        self._notifier.ready(self.status_line())

    def status_line(self) -> str:
        states = ", ".join(f"{c.provider} {self.channel_state(c)}" for c in self._by_provider.values())
        pending = self.router.pending if self.router is not None else 0
        return f"{states or 'no channels'}; {pending} queued"

    async def status(self) -> dict[str, Any]:
        """What `switchboard status` shows: channels, queues, schedules, the last error."""
        router = self.router
        channels = [self._with_misconfiguration(entry) for entry in self._channels.status()]
        sessions = router.sessions() if router is not None else {}
        return {
            "pid": os.getpid(),
            "started_at": self._started_at,
            "uptime_s": round(time.time() - self._started_at, 1),
            "ready": self.ready.is_set(),
            "config": self.config.source,
            "database": self._store.label if self._store is not None else None,
            "agent": self.config.agent.id,
            "agents": Agents.status(self.config, sessions),
            "channels": channels,
            "queue": {
                "pending": router.pending if router is not None else 0,
                "sessions": {key: {"running": running, "waiting": waiting}
                             for key, (running, waiting) in sessions.items()},
            },
            "schedules": await self.scheduler.job_states() if self.scheduler is not None else [],
            "mcp_servers": self.mcp.status(),
            "providers": self.misconfigured.providers(),
            "quarantined": await self._store.quarantine_count() if self._store is not None else 0,
            "last_error": last_error(),
            "last_reload": self.reloads[-1] if self.reloads else None,
            "instances": await self._instances(),
        }

    def _with_misconfiguration(self, entry: dict[str, Any]) -> dict[str, Any]:
        """A channel that stopped over a misconfiguration (a refused token) shows it, with the fix,
        as its last error; once it runs again (a reload with a new token) it no longer does."""
        problem = self.misconfigured.latest("channel", entry["provider"])
        if problem is None or entry["state"] not in ("stopped", "error"):
            return entry
        return {**entry, "error": problem["error"], "fix": problem["fix"]}

    async def _instances(self) -> list[dict[str, Any]]:
        """The daemons sharing this store that beat lately ([] when the store is this one's alone)."""
        store = self._store
        if store is None or not store.shared:
            return []
        return [dataclasses.asdict(i) for i in await store.instances(time.time() - LIVE_WINDOW)]
