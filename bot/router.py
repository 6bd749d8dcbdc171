"""The router: stores every inbound message, then runs turns one at a time per session key."""

from __future__ import annotations

import asyncio
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
        self._closed = False

    async def submit(self, inbound: InboundMessage) -> StoredMessage | None:
        """Store a message and, when it starts a turn, queue it; None for a duplicate."""
        if self._closed:
            raise RouterClosedError("the router is shutting down")
        stored = await self._store.append_inbound(inbound)
        if stored is None:
            log.info("duplicate inbound ignored", session_key=str(inbound.session_key),
                     provider_message_id=inbound.provider_message_id)
            return None
        if inbound.starts_turn:
            key = str(inbound.session_key)
            self._queues.setdefault(key, deque()).append((stored, inbound))
            if key not in self._workers:
                self._workers[key] = asyncio.create_task(self._drain(key), name=f"session {key}")
        return stored

    @property
    def pending(self) -> int:
        return sum(len(queue) for queue in self._queues.values())

    async def _drain(self, key: str) -> None:
        queue = self._queues[key]
        try:
            while queue:
                stored, inbound = queue[0]
                async with self._slots:
                    try:
                        await self._handle_turn(stored, inbound)
                    except Exception:
                        log.exception("turn failed", session_key=key, request_id=stored.id)
                queue.popleft()
        finally:
            del self._workers[key]
            if not queue:
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
