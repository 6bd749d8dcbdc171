"""The router: stores every inbound message, then works through each session's queue in order.

A session's queue holds its turns (one per stored request) and other work that must keep the
session's order: a chat command such as /reset, or a reply a restart still has to deliver.
Different sessions run in parallel; turns also share a global limit.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from bot.core.messages import InboundMessage, StoredMessage, inbound_of
from bot.intake.session_lease import SessionLeases
from bot.store.seams import RouterStore

log = structlog.get_logger("switchboard.router")

TurnHandler = Callable[[StoredMessage, InboundMessage], Awaitable[None]]
Work = Callable[[], Awaitable[None]]
SessionWork = Callable[[str], Awaitable[object]]

# How often requests left to another instance are checked (one query for all of them).
LEFT_CHECK = 0.5


class RouterClosedError(Exception):
    """The router is shutting down and takes no new input."""


@dataclass(frozen=True, slots=True)
class _Turn:
    request: StoredMessage
    inbound: InboundMessage


@dataclass(frozen=True, slots=True)
class _Job:
    label: str
    work: Work


_Item = _Turn | _Job


class Router:
    """Per-session FIFO queues; different sessions run in parallel, turns up to a global limit."""

    def __init__(
        self, store: RouterStore, handle_turn: TurnHandler, *, max_concurrent: int,
        leases: SessionLeases | None = None, send_left_over: SessionWork | None = None,
    ) -> None:
        self._store = store
        # With a store shared by several daemons: each item runs under its session's lease, and a
        # turn first sends the session's replies left in the outbox (`Outbox.send_left_over`).
        self._leases = leases
        self._send_left_over = send_left_over
        self._handle_turn = handle_turn
        self._slots = asyncio.Semaphore(max_concurrent)
        self._queues: dict[str, deque[_Item]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        # Work that belongs to no queue (a /status answer): tracked so shutdown can wait for it.
        self._loose: set[asyncio.Task[Any]] = set()
        self._lanes: dict[str, asyncio.Task[Any]] = {}  # the newest such work per session
        # When each queued request was queued: its wait is part of the turn's latency.
        self._queued_at: dict[int, float] = {}
        # Requests left to the instance holding their session, watched until answered.
        self._left: dict[int, _Turn] = {}
        self._watcher: asyncio.Task[None] | None = None
        self._closed = False

    async def submit(self, inbound: InboundMessage) -> StoredMessage | None:
        """Store a message and, when it starts a turn, queue it; None for a duplicate.

        A duplicate whose turn never ran (the daemon stopped before answering, and the platform
        delivered the message again) is queued once more rather than dropped. Raises when the
        message could not be stored: the channel must not tell the platform it was received.
        """
        if self._closed:
            raise RouterClosedError("the router is shutting down")
        stored = await self._store.append_inbound(inbound)
        if stored is None:
            pending = None
            if inbound.starts_turn and inbound.provider_message_id is not None:
                pending = await self._store.awaiting_request(inbound.chat, inbound.provider_message_id)
            if pending is None or self._is_queued(pending.id):
                log.info("duplicate inbound ignored", session_key=str(inbound.session_key),
                         provider_message_id=inbound.provider_message_id)
                return None
            log.info("redelivered message still unanswered; queued", session_key=str(inbound.session_key),
                     request_id=pending.id)
            stored = pending
        if inbound.starts_turn:
            self.enqueue_turn(stored, inbound)
        return stored

    def enqueue_turn(self, stored: StoredMessage, inbound: InboundMessage) -> None:
        """Queue a stored request behind its session's earlier work (a restart resumes this way)."""
        self._queued_at.setdefault(stored.id, time.perf_counter())
        self._enqueue(str(inbound.session_key), _Turn(stored, inbound))

    def enqueue_work(self, key: str, label: str, work: Work) -> None:
        """Queue other work in a session's order (a command, a delivery left over from a restart)."""
        self._enqueue(key, _Job(label, work))

    def run_now(self, key: str, label: str, work: Work) -> None:
        """Run work beside a session's queue, not behind its turn (read-only commands), in order
        with the session's other such work; shutdown waits for it within the grace."""
        previous = self._lanes.get(key)

        async def after_previous() -> None:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            await self._guarded(label, work, session_key=key)

        task = asyncio.create_task(after_previous(), name=f"{label} {key}")
        self._lanes[key] = task
        self._loose.add(task)

        def done(finished: asyncio.Task[Any]) -> None:
            self._loose.discard(finished)
            if self._lanes.get(key) is finished:
                del self._lanes[key]

        task.add_done_callback(done)

    def _enqueue(self, key: str, item: _Item) -> None:
        if self._closed:
            raise RouterClosedError("the router is shutting down")
        self._queues.setdefault(key, deque()).append(item)
        if key not in self._workers:
            self._workers[key] = asyncio.create_task(self._drain(key), name=f"session {key}")

    def _is_queued(self, message_id: int) -> bool:
        return message_id in self.queued_requests()

    def queued_requests(self) -> set[int]:
        """The ids of the requests queued here (running or waiting their turn, or left to another
        instance and watched)."""
        return {item.request.id for queue in self._queues.values() for item in queue
                if isinstance(item, _Turn)} | set(self._left)

    def session_state(self, key: str) -> tuple[bool, int]:
        """(work is running, items waiting behind it) for one session."""
        queue = self._queues.get(key)
        if not queue:
            return False, 0
        running = key in self._workers
        return running, len(queue) - (1 if running else 0)

    async def stop_session(self, key: str) -> list[StoredMessage]:
        """Abandon a session's running turn and the turns queued behind it (/stop).

        Other queued work (a /reset, a delivery) stays and still runs in order. The messages stay
        stored; they are returned so the caller can mark them abandoned.
        """
        # Those left to another instance holding the session too: marked abandoned, it skips them.
        left = [item.request for item in self._left.values() if str(item.inbound.session_key) == key]
        for request in left:
            del self._left[request.id]
        queue = self._queues.get(key)
        if not queue:
            return left
        abandoned = left + [item.request for item in queue if isinstance(item, _Turn)]
        for request in abandoned:
            self._queued_at.pop(request.id, None)
        kept = [item for item in queue if not isinstance(item, _Turn)]
        worker = self._workers.get(key)
        if worker is not None and isinstance(queue[0], _Turn):
            # The worker is inside the head turn: cancel it, and start afresh with what is kept.
            del self._workers[key]
            del self._queues[key]
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
            for item in kept:
                self._enqueue(key, item)
        else:
            # The worker (if any) runs the head job, which stays first: edit its queue in place.
            queue.clear()
            queue.extend(kept)
        return abandoned

    def sessions(self) -> dict[str, tuple[bool, int]]:
        """Every session with queued work: (work is running, items waiting behind it)."""
        return {key: self.session_state(key) for key in list(self._queues)}

    @property
    def pending(self) -> int:
        return sum(len(queue) for queue in self._queues.values())

    async def _drain(self, key: str) -> None:
        queue = self._queues[key]
        me = asyncio.current_task()
        try:
            while queue:
                item = queue[0]
                if self._leases is not None:
                    try:
                        await self._shared(key, item, self._leases)
                    except Exception:  # the store failed us: what still waits there is adopted later
                        log.exception("session work failed; left for the next look", session_key=key)
                elif isinstance(item, _Turn):
                    async with self._slots:
                        await self._turn(key, item.request, item.inbound)
                else:
                    await self._guarded(item.label, item.work, session_key=key)
                queue.popleft()
        finally:
            # After /stop a new worker may already own this key: only clean up our own entries.
            if self._workers.get(key) is me:
                del self._workers[key]
            if self._queues.get(key) is queue and not queue:
                del self._queues[key]

    async def _turn(self, key: str, request: StoredMessage, inbound: InboundMessage) -> None:
        """Answer one request (in a turn slot); a failure is logged, the session goes on."""
        queued_at = self._queued_at.pop(request.id, None)
        waited = (time.perf_counter() - queued_at) * 1000 if queued_at is not None else 0.0
        try:
            # Bound for the turn's log line: the wait for the session and a free slot.
            with structlog.contextvars.bound_contextvars(queue_ms=round(waited, 1)):
                await self._handle_turn(request, inbound)
        except Exception:
            log.exception("turn failed", session_key=key, request_id=request.id)

    # -- a store several daemons share (`bot.intake.session_lease`) -----------------------------------

    async def _shared(self, key: str, item: _Item, leases: SessionLeases) -> None:
        """Run `item` under the session's lease. A request whose session another instance holds is
        left to it (the holder answers every waiting request, then looks again after letting go);
        other work waits for the lease. After letting go, answer what was left to us meanwhile."""
        tried: set[int] = set()
        if isinstance(item, _Job):
            async with leases.hold(key):
                await self._guarded(item.label, item.work, session_key=key)
        else:
            # A turn slot first, then the lease: an instance holds the leases only of the chats it
            # works on now, and a request still waiting for a slot here can be answered elsewhere.
            async with self._slots:
                # Answered while it waited for the slot (by the instance holding the chat then):
                # a read tells, without taking and letting go of the lease.
                if not await self._still_waiting(key, item):
                    return
                async with leases.hold(key, wait=False) as held:
                    if not held:
                        self._leave(key, item, leases)
                        return
                    await self._work_through(key, item, tried)
        while not self._work_behind(key):
            here = self.queued_requests()
            if all(i in here or i in tried for i in await self._store.waiting_ids(key)):
                return
            async with self._slots, leases.hold(key, wait=False) as held:
                if not held:  # another instance holds it now: it answers them
                    return
                await self._work_through(key, None, tried)

    async def _work_through(self, key: str, item: _Turn | None, tried: set[int]) -> None:
        """Under the lease: send the session's replies left in the outbox (an instance died before
        sending them), then answer its waiting requests in arrival order, whichever instance stored
        them, `item`'s among them, until none waits. Not past other work queued here after `item`
        (a /reset keeps its place between the messages around it). Each request is tried once."""
        if self._send_left_over is not None:
            await self._send_left_over(key)
        own = item.request.id if item is not None else None
        looked = False
        while True:
            last = own if own is not None and self._work_behind(key) else None
            if looked and all(i in tried or (last is not None and i > last)
                              for i in await self._store.waiting_ids(key)):
                break
            looked = True
            waiting = []
            for pending in await self._store.awaiting_requests(key):
                request_id = pending.message.id
                if request_id in tried or (last is not None and request_id > last):
                    continue
                if pending.chat is None and request_id != own:
                    tried.add(request_id)  # nowhere to answer it (its channel is gone)
                    continue
                waiting.append(pending)
            if not waiting:
                break
            for pending in waiting:
                request = pending.message
                tried.add(request.id)
                if item is not None and request.id == own:
                    await self._turn(key, request, item.inbound)
                    continue
                assert pending.chat is not None
                log.info("newer request of the session answered in the same lease" if own is None
                         or request.id > own else "older request of the session answered first",
                         session_key=key, request_id=request.id)
                await self._turn(key, request, inbound_of(request, pending.chat))
                self._unqueue(key, request.id)
        if own is not None and own not in tried:
            self._skipped(key, own)

    async def _still_waiting(self, key: str, item: _Turn) -> bool:
        """Whether `item`'s request still waits for a reply. One read for the session: its other
        requests queued here that were answered meanwhile (by the instance holding the chat) are
        dropped from the queue too, rather than each taking a slot for a read of its own."""
        queued = [q.request.id for q in self._queues.get(key, ()) if isinstance(q, _Turn)]
        waiting = set(await self._store.waiting_ids(key))
        answered = [request_id for request_id in queued if request_id not in waiting]
        for request_id in answered:
            self._unqueue(key, request_id)
        if answered:
            self._skipped(key, *answered)
        return item.request.id in waiting

    def _skipped(self, key: str, *request_ids: int) -> None:
        for request_id in request_ids:
            self._queued_at.pop(request_id, None)
        log.info("request already answered; skipped", session_key=key, request_ids=list(request_ids))

    def _work_behind(self, key: str) -> bool:
        """Whether other work (a chat command) is queued here behind the item running now: the
        requests after it wait for it."""
        return any(isinstance(queued, _Job) for queued in list(self._queues.get(key, ()))[1:])

    def _leave(self, key: str, item: _Turn, leases: SessionLeases) -> None:
        """Leave a request to the instance holding its session; watch it in case that instance dies
        before answering (its lease then ends and the request is queued here again)."""
        self._queued_at.pop(item.request.id, None)
        self._left[item.request.id] = item
        log.info("request left to the instance holding the session", session_key=key,
                 request_id=item.request.id)
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.create_task(self._watch_left(leases), name="requests left to others")
            self._loose.add(self._watcher)
            self._watcher.add_done_callback(self._loose.discard)

    async def _watch_left(self, leases: SessionLeases) -> None:
        """One query for every request left to another instance, every LEFT_CHECK seconds (or, with
        the leases `listening`, once one of their sessions is let go): drop the answered ones, queue
        again those whose session nobody holds now."""
        clock = leases.clock
        while self._left and not self._closed:
            # Listening, woken when one of their sessions' lease is dropped (or found free).
            sessions = {str(item.inbound.session_key) for item in self._left.values()}
            await leases.wait_free(sessions, LEFT_CHECK)
            try:
                waiting, free = await self._store.left_requests(list(self._left), now=clock.time())
            except Exception as exc:  # a store hiccup: the next check tries again
                log.warning("requests left to other instances not checked", error=str(exc), exc_info=True)
                continue
            for request_id in list(self._left):
                if request_id not in waiting:
                    del self._left[request_id]
                elif request_id in free and not self._closed:
                    item = self._left.pop(request_id)
                    self.enqueue_turn(item.request, item.inbound)

    def _unqueue(self, key: str, request_id: int) -> None:
        """Drop a request answered ahead of its place from this session's queue (never its head,
        the item running now)."""
        queue = self._queues.get(key)
        if not queue:
            return
        for item in list(queue)[1:]:
            if isinstance(item, _Turn) and item.request.id == request_id:
                queue.remove(item)
                self._queued_at.pop(request_id, None)

    @staticmethod
    async def _guarded(label: str, work: Work, **fields: str) -> None:
        try:
            await work()
        except Exception:
            log.exception("queued work failed", work=label, **fields)

    async def close(self, grace: float) -> None:
        """Stop taking input, let queued work finish for up to `grace` seconds, then cancel."""
        self._closed = True
        tasks = [*self._workers.values(), *self._loose]
        if not tasks:
            return
        _, still_running = await asyncio.wait(tasks, timeout=grace)
        for task in still_running:
            task.cancel()
        if still_running:
            log.warning("abandoned in-flight turns at shutdown", tasks=len(still_running),
                        queued=self.pending)
            await asyncio.gather(*still_running, return_exceptions=True)

    async def idle(self) -> None:
        """Wait until every queued item has been handled (used by `chat` and tests)."""
        while self._workers or self._loose:
            await asyncio.gather(*list(self._workers.values()), *list(self._loose), return_exceptions=True)
