"""The router: stores every inbound message, then runs turns one at a time per session key."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable

import structlog

from bot.messages import InboundMessage, StoredMessage
from bot.store import Store

log = structlog.get_logger("switchboard.router")

TurnHandler = Callable[[StoredMessage, InboundMessage], Awaitable[None]]


class RouterClosedError(Exception):
    """The router is shutting down and takes no new input."""


class Router:
    """Per-session FIFO queues; different sessions run in parallel up to a global limit."""

    def __init__(self, store: Store, handle_turn: TurnHandler, *, max_concurrent: int) -> None:
        self._store = store
        self._handle_turn = handle_turn
        self._slots = asyncio.Semaphore(max_concurrent)
        self._queues: dict[str, deque[tuple[StoredMessage, InboundMessage]]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        # When each queued request was queued: its wait is part of the turn's latency.
        self._queued_at: dict[int, float] = {}
        self._closed = False

    async def submit(self, inbound: InboundMessage) -> StoredMessage | None:
        """Store a message and, when it starts a turn, queue it; None for a duplicate.

        A duplicate whose turn never ran (the daemon stopped before answering, and the platform
        delivered the message again) is queued once more rather than dropped.
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
            self._enqueue(str(inbound.session_key), stored, inbound)
        return stored

    def _enqueue(self, key: str, stored: StoredMessage, inbound: InboundMessage) -> None:
        self._queues.setdefault(key, deque()).append((stored, inbound))
        self._queued_at.setdefault(stored.id, time.perf_counter())
        if key not in self._workers:
            self._workers[key] = asyncio.create_task(self._drain(key), name=f"session {key}")

    def _is_queued(self, message_id: int) -> bool:
        return any(stored.id == message_id for queue in self._queues.values() for stored, _ in queue)

    def session_state(self, key: str) -> tuple[bool, int]:
        """(a turn is running, messages waiting behind it) for one session."""
        queue = self._queues.get(key)
        if not queue:
            return False, 0
        running = key in self._workers
        return running, len(queue) - (1 if running else 0)

    async def stop_session(self, key: str) -> list[StoredMessage]:
        """Abandon a session's running turn and everything queued behind it (/stop).

        The messages stay stored; they are returned so the caller can mark them abandoned.
        """
        queue = self._queues.pop(key, None)
        worker = self._workers.pop(key, None)
        abandoned = [stored for stored, _ in queue] if queue else []
        for stored in abandoned:
            self._queued_at.pop(stored.id, None)
        if worker is not None:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
        return abandoned

    def replace_handler(self, handle_turn: TurnHandler) -> None:
        """Answer turns started from now on with `handle_turn` (config reload); turns running finish."""
        self._handle_turn = handle_turn

    def sessions(self) -> dict[str, tuple[bool, int]]:
        """Every session with queued work: (a turn is running, messages waiting behind it)."""
        return {key: self.session_state(key) for key in list(self._queues)}

    @property
    def pending(self) -> int:
        return sum(len(queue) for queue in self._queues.values())

    async def _drain(self, key: str) -> None:
        queue = self._queues[key]
        me = asyncio.current_task()
        try:
            while queue:
                stored, inbound = queue[0]
                async with self._slots:
                    queued_at = self._queued_at.pop(stored.id, None)
                    waited = (time.perf_counter() - queued_at) * 1000 if queued_at is not None else 0.0
                    try:
                        # Bound for the turn's log line: the wait for the session and a free slot.
                        with structlog.contextvars.bound_contextvars(queue_ms=round(waited, 1)):
                            await self._handle_turn(stored, inbound)
                    except Exception:
                        log.exception("turn failed", session_key=key, request_id=stored.id)
                queue.popleft()
        finally:
            # After /stop a new worker may already own this key: only clean up our own entries.
            if self._workers.get(key) is me:
                del self._workers[key]
            if self._queues.get(key) is queue and not queue:
                del self._queues[key]

    async def close(self, grace: float) -> None:
        """Stop taking input, let queued turns finish for up to `grace` seconds, then cancel."""
        self._closed = True
        workers = list(self._workers.values())
        if not workers:
            return
        _, still_running = await asyncio.wait(workers, timeout=grace)
        for task in still_running:
            task.cancel()
        if still_running:
            log.warning("abandoned in-flight turns at shutdown", sessions=len(still_running),
                        queued=self.pending)
            await asyncio.gather(*still_running, return_exceptions=True)

    async def idle(self) -> None:
        """Wait until every queued turn has been handled (used by `chat` and tests)."""
        while self._workers:
            await asyncio.gather(*list(self._workers.values()), return_exceptions=True)
