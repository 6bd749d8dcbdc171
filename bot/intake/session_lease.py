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
from collections.abc import AsyncIterator, Collection, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
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
# Listening (`SessionLeases.listening`): work waiting on a lease wakes when it is dropped; what no
# notice tells (a holder killed, a notice lost) one look for all the sessions waited on finds, this often.
WAKE_FALLBACK = 2.0
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
                 clock: LeaseClock | None = None, fallback: float = WAKE_FALLBACK) -> None:
        self._store = store
        self.owner = owner or instance_name()
        self.ttl = ttl
        self.clock = clock or LeaseClock()
        self.started_at = self.clock.time()
        self.fallback = fallback
        # What waits on a lease another instance holds: an event per waiter, under each session
        # key it waits on; `listening` sets them.
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._listening = False  # the store's notices are being received
        self._looking: asyncio.Task[None] | None = None  # the periodic look (`_look`)
        # The leases work here holds, renewed together (`_renew`).
        self._holding: dict[str, list[_Held]] = {}
        self._renewing: asyncio.Task[None] | None = None

    @asynccontextmanager
    async def hold(self, session_key: str, *, wait: bool = True) -> AsyncIterator[bool]:
        """Take the session's lease (True) and keep it renewed until the block ends; while another
        instance holds it, wait, or with `wait=False` run the block at once without it (False)."""
        asked = await self._acquire(session_key, wait)
        if asked is None:
            yield False
            return
        held = _Held(asked + self.ttl * TRUSTED_SHARE, self, session_key)
        token = _HELD.set(held)
        self._holding.setdefault(session_key, []).append(held)
        if self._renewing is None or self._renewing.done():
            self._renewing = asyncio.create_task(self._renew(), name="lease renewals")
        try:
            yield True
        finally:
            _HELD.reset(token)
            left = [other for other in self._holding.get(session_key, ()) if other is not held]
            if left:
                self._holding[session_key] = left
            else:
                self._holding.pop(session_key, None)
            if not self._holding and self._renewing is not None:
                self._renewing.cancel()  # nothing left to renew (an extension crossing a drop is void)
            try:
                await asyncio.shield(self._store.drop_lease(session_key, self.owner))
            except Exception as exc:  # it expires on its own
                log.warning("lease not dropped", session_key=session_key, error=describe(exc), exc_info=True)

    async def _acquire(self, session_key: str, wait: bool) -> float | None:
        """Take the lease, waiting while another instance holds it (unless not `wait`: then None);
        the moment it was asked for, on the monotonic clock (the store counts the ttl from after it)."""
        delay = POLL_FIRST
        # Watched before the first try: a lease dropped between a refusal and the wait still wakes it.
        with self._watching((session_key,)) as woken:
            while True:
                asked = self.clock.monotonic()
                if await self._take(session_key):
                    return asked
                if not wait:
                    return None
                await self._until(woken, delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, POLL_CAP)

    @asynccontextmanager
    async def taking_part(self) -> AsyncIterator[None]:
        """This instance's part among the daemons sharing the store while the block runs: shown
        alive (`Leases.living`, entered before the first heartbeat), dropped leases heard
        (`listening`), and a first heartbeat."""
        async with self._store.living(self.owner), self.listening():
            await self.beat_once()
            yield

    # -- waking work that waits on another instance's lease ------------------------------------------

    @asynccontextmanager
    async def listening(self) -> AsyncIterator[None]:
        """While the block runs, work waiting on a lease wakes when the store tells that it was
        dropped (`Leases.lease_releases`, PostgreSQL's NOTIFY), or when this instance's one look
        every `fallback` seconds, for all the sessions waited on, finds it free (a holder killed, a
        notice lost); instead of each waiting session asking again and again. Where the store tells
        nothing (SQLite), or outside the block, waiting work polls as before."""
        releases = self._store.lease_releases()
        if releases is None:
            yield
            return
        heard = asyncio.Event()
        listener = asyncio.create_task(self._listen(releases, heard), name="lease notices")
        try:
            # Listening (or looking, the store away) before work waits: no drop goes untold.
            await asyncio.wait({listener, asyncio.create_task(heard.wait())},
                               return_when=asyncio.FIRST_COMPLETED)
            if listener.done():
                listener.result()  # its failure, raised
            yield
        finally:
            listener.cancel()
            with suppress(asyncio.CancelledError):
                await listener
            self._listening = False
            if self._looking is not None:
                self._looking.cancel()
                with suppress(asyncio.CancelledError):
                    await self._looking
            self._wake(*self._waiters)  # they poll from here on

    @property
    def waited_on(self) -> frozenset[str]:
        """The sessions whose lease work here waits for now (or tries to take)."""
        return frozenset(self._waiters)

    async def wait_free(self, session_keys: Collection[str], poll: float) -> None:
        """Return once one of these sessions' leases may be free: listening, when it is told or
        found so (see `listening`); else after `poll` seconds."""
        with self._watching(session_keys) as woken:
            await self._until(woken, poll)

    async def _listen(self, releases: AsyncIterator[str | None], heard: asyncio.Event) -> None:
        async for session_key in releases:
            # None: listening (again), and some notices may have been missed: every waiter looks.
            self._listening = True
            heard.set()
            self._wake(*(self._waiters if session_key is None else (session_key,)))

    @contextmanager
    def _watching(self, session_keys: Collection[str]) -> Iterator[asyncio.Event]:
        woken = asyncio.Event()
        for key in session_keys:
            self._waiters.setdefault(key, set()).add(woken)
        try:
            yield woken
        finally:
            for key in session_keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(woken)
                    if not waiters:
                        del self._waiters[key]

    async def _until(self, woken: asyncio.Event, poll: float) -> None:
        if self._listening:
            if self._looking is None or self._looking.done():
                self._looking = asyncio.create_task(self._look(), name="leases waited on")
            await woken.wait()
        else:
            await self.clock.sleep(poll)
        woken.clear()

    async def _look(self) -> None:
        """Every `fallback` seconds while work waits: one query for every session waited on, and
        those found free are woken."""
        while self._waiters and self._listening:
            await self.clock.sleep(self.fallback)
            keys = list(self._waiters)
            try:
                held = await self._store.held_sessions(keys, now=self.clock.time())
            except Exception as exc:  # a store hiccup: the next look tries again
                log.warning("leases waited on not looked at", error=describe(exc))
                continue
            self._wake(*(key for key in keys if key not in held))

    def _wake(self, *session_keys: str) -> None:
        for key in list(session_keys):
            for woken in self._waiters.get(key, ()):
                woken.set()

    async def take_again(self, session_key: str) -> bool:
        """Take the session's lease for this instance, unless another holds it (see `lease_retaken`)."""
        return await self._take(session_key)

    async def _take(self, session_key: str) -> bool:
        return await self._store.take_lease(session_key, self.owner, self.ttl, now=self.clock.time())

    async def _renew(self) -> None:
        """Renew every lease held here every third of their ttl, in one statement for all of them,
        while any is held. Once a lease lapsed (a renewal too late, or refused), it stays lost for
        the work under it, even should a renewal find it still this instance's: another instance
        may have answered in between."""
        failing = False
        while self._holding:
            await self.clock.sleep(self.ttl / 3)
            asked = self.clock.monotonic()
            holding = {key: list(held) for key, held in self._holding.items()}
            try:
                kept = await self._store.renew_leases(list(holding), self.owner, self.ttl,
                                                      now=self.clock.time())
            except Exception as exc:  # a store hiccup: the next renewal tries again
                # The traceback once per run of failures: a store that is away fails every renewal.
                log.warning("leases not renewed", sessions=len(holding), error=describe(exc),
                            exc_info=not failing)
                failing = True
                continue
            failing = False
            for key, holders in holding.items():
                for held in holders:
                    if not any(held is now for now in self._holding.get(key, ())):
                        continue  # its work ended (and let go) while the renewal ran
                    if key in kept and not (held.lost or asked >= held.until):
                        held.until = asked + self.ttl * TRUSTED_SHARE
                    elif not held.lost:
                        held.lost = True
                        log.error("session lease lost while its work ran", session_key=key,
                                  taken_over=key not in kept)

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
