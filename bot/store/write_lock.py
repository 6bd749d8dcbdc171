"""The SQLite store's write lock, with a way to the front of its queue.

One connection is shared by every coroutine, so a write transaction holds this lock from BEGIN to
COMMIT. Waiters are served in arrival order, except that `first()` goes ahead of every ordinary
waiter: the record that a chunk reached the platform. Between the platform creating a message and
that record's commit, a crash leaves a message the chat shows and the store does not know was sent
(on Telegram, which has no idempotency key, a restart sends it again); behind fifty turns' writes
that window was tens of milliseconds. With `first()` it waits for the one transaction running.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class WriteLock:
    """An asyncio lock with two queues: `first()` waiters, then everyone else, each in order."""

    def __init__(self) -> None:
        self._held = False
        self._first: deque[asyncio.Future[None]] = deque()
        self._rest: deque[asyncio.Future[None]] = deque()

    def locked(self) -> bool:
        return self._held

    async def __aenter__(self) -> None:
        await self._acquire(self._rest)

    async def __aexit__(self, *exc: object) -> None:
        self._release()

    @asynccontextmanager
    async def first(self) -> AsyncIterator[None]:
        """Hold the lock as soon as the transaction holding it now ends, ahead of every other."""
        await self._acquire(self._first)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, queue: deque[asyncio.Future[None]]) -> None:
        if not self._held and not self._first and not self._rest:
            self._held = True
            return
        turn = asyncio.get_running_loop().create_future()
        queue.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release()  # handed the lock as it was cancelled: hand it on
            else:
                queue.remove(turn)
            raise

    def _release(self) -> None:
        """Hand the lock to the next waiter (it stays held), or free it."""
        for queue in (self._first, self._rest):
            while queue:
                turn = queue.popleft()
                if not turn.done():
                    turn.set_result(None)
                    return
        self._held = False
