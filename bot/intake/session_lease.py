"""One conversation, one order, across daemons sharing a store: a session's work runs under its lease.

Any instance may receive any update (a load balancer spreads webhooks). Each queues what it stored
as one daemon does; before running an item it takes the session's lease (a row in the store, see
`bot.store.leases`), so one instance at a time works on a session. The holder works through every
request of the session still waiting, whichever instance stored it, in arrival order (the router,
`bot.intake.router`); an instance that finds the lease held leaves its request to the holder, which looks
again after letting go. A daemon killed with a lease held loses it at once where the store can
tell (PostgreSQL: `Leases.living`), else after `ttl` seconds, and the others take its sessions
over (`bot.delivery.resume.adopt_waiting` queues what it left waiting).

All of it reads time and waits through one `LeaseClock`, so tests move time instead of waiting it out.
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass

import structlog

from bot.core.errors import describe
from bot.store import Instance
from bot.store.leases import HEARTBEAT
from bot.store.seams import LeaseStore

log = structlog.get_logger("switchboard.lease")

# A lease lasts this long unless renewed; it is renewed every third of it while its work runs.
LEASE_TTL = 15.0
# Work that must run itself (a chat command) waits for a lease another instance holds: polled, the
# wait doubling up to the cap (with a random part, so waiters spread out). A request does not wait:
# the holder answers it.
POLL_FIRST = 0.02
POLL_CAP = 2.0
# The share of a lease's ttl this instance counts on: the store measures expiry on the clock of the
# instance taking the lease over, which may run a little ahead of this one's.
TRUSTED_SHARE = 0.9


class LeaseClock:
    """The time leases are measured in: this process's monotonic clock for its own deadlines, wall
    time for the store's rows (shared with other hosts), and the waits between looks. Tests pass one
    they move by hand."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclass(slots=True)
class _Held:
    """A lease the work running in this task holds: no other instance takes it before `until`
    (this process's monotonic clock) unless it was `lost`."""

    until: float
    leases: SessionLeases
    session_key: str
    lost: bool = False


_HELD: ContextVar[_Held | None] = ContextVar("session_lease", default=None)


def lease_lapsed() -> bool:
    """Whether the session work running here outlived its lease: this instance stalled, or could
    not renew it, past its ttl, so another may have taken the chat over and answered. Such work
    looks before acting in the chat (a preview's edits would overwrite the other's reply). False
    for work under no lease (a daemon with a store of its own)."""
    held = _HELD.get()
    return held is not None and (held.lost or held.leases.clock.monotonic() >= held.until)


async def lease_retaken() -> bool:
    """For session work whose lease lapsed: whether it holds the lease again, taken afresh now
    because no other instance holds it. False: another instance does, works on the chat (it answers
    the requests still waiting, in order) and the lapsed work must leave the chat to it. True for
    work whose lease never lapsed, or when the store cannot say (then the store's refusal of an
    answered request still keeps a reply from being stored twice)."""
    held = _HELD.get()
    if held is None or not lease_lapsed():
        return True
    try:
        return await held.leases.take_again(held.session_key)
    except Exception as exc:
        log.warning("lease not taken again", session_key=held.session_key, error=describe(exc),
                    exc_info=True)
        return True


def instance_name() -> str:
    """This daemon among those sharing the store: host, process id and a random tag (a restart is
    a new instance, so an old lease of a killed process is never mistaken for its own)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


class SessionLeases:
    """Holds session leases for one instance."""

    def __init__(self, store: LeaseStore, owner: str | None = None, *, ttl: float = LEASE_TTL,
                 clock: LeaseClock | None = None) -> None:
        self._store = store
        self.owner = owner or instance_name()
        self.ttl = ttl
        self.clock = clock or LeaseClock()
        self.started_at = self.clock.time()

    @asynccontextmanager
    async def hold(self, session_key: str, *, wait: bool = True) -> AsyncIterator[bool]:
        """Take the session's lease (True) and keep it renewed until the block ends; while another
        instance holds it, wait, or with `wait=False` run the block at once without it (False)."""
        delay = POLL_FIRST
        while True:
            asked = self.clock.monotonic()  # the store counts the ttl from a moment after this
            if await self._take(session_key):
                break
            if not wait:
                yield False
                return
            await self.clock.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, POLL_CAP)
        held = _Held(asked + self.ttl * TRUSTED_SHARE, self, session_key)
        token = _HELD.set(held)
        renewing = asyncio.create_task(self._renew(session_key, held), name=f"lease {session_key}")
        try:
            yield True
        finally:
            _HELD.reset(token)
            renewing.cancel()
            with suppress(asyncio.CancelledError):
                await renewing
            try:
                await asyncio.shield(self._store.drop_lease(session_key, self.owner))
            except Exception as exc:  # it expires on its own
                log.warning("lease not dropped", session_key=session_key, error=describe(exc), exc_info=True)

    async def take_again(self, session_key: str) -> bool:
        """Take the session's lease for this instance, unless another holds it (see `lease_retaken`)."""
        return await self._take(session_key)

    async def _take(self, session_key: str) -> bool:
        return await self._store.take_lease(session_key, self.owner, self.ttl, now=self.clock.time())

    async def _renew(self, session_key: str, held: _Held) -> None:
        """Renew the lease every third of its ttl. Once it lapsed (a renewal too late, or refused),
        it stays lost for the work under it, even should a renewal find it free again: another
        instance may have answered in between."""
        failing = False
        while True:
            await self.clock.sleep(self.ttl / 3)
            asked = self.clock.monotonic()
            lapsed = held.lost or asked >= held.until
            try:
                taken = await self._take(session_key)
            except Exception as exc:  # a store hiccup: the next renewal tries again
                # The traceback once per run of failures: a store that is away fails every renewal.
                log.warning("lease not renewed", session_key=session_key, error=describe(exc),
                            exc_info=not failing)
                failing = True
                continue
            failing = False
            if taken and not lapsed:
                held.until = asked + self.ttl * TRUSTED_SHARE
            elif not held.lost:
                held.lost = True
                log.error("session lease lost while its work ran", session_key=session_key,
                          taken_over=not taken)

    async def beat_once(self) -> None:
        """Tell the store this instance is alive now."""
        host, pid, _ = self.owner.split(":")
        await self._store.heartbeat(Instance(self.owner, host, int(pid), self.started_at, self.clock.time()))

    async def beat(self) -> None:
        """Tell the store this instance is alive, every HEARTBEAT seconds, until cancelled."""
        failing = False
        while True:
            await self.clock.sleep(HEARTBEAT)
            try:
                await self.beat_once()
            except Exception as exc:
                # The traceback once per run of failures, as for renewals.
                log.warning("heartbeat not recorded", error=describe(exc), exc_info=not failing)
                failing = True
                continue
            failing = False
