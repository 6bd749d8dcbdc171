"""The embed worker: sentence vectors of stored messages, computed in the background, off every turn's path.

The daemon calls `notify()` after it stores a message; the worker then embeds what is missing in
batches, encoding in a thread so the event loop never waits on numpy. It waits `GATHER` after a
notify first: a request's turn encodes the request itself when its recall needs the vector at
once, and the worker, coming after, finds it stored instead of encoding it a second time; and the
messages of a busy moment go in one batch, where a short text costs a third of its encoding alone.
A slow poll covers any message stored without a notify, and a start catches up on everything
missing. A failure is logged in one line and retried after a growing pause; the worker never
takes the daemon down.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self

import structlog

from bot.core.errors import describe
from bot.core.messages import StoredMessage
from bot.ranking.embedding import Embedder, embedding_text, vector_bytes
from bot.ranking.encode_threads import encode_in_thread
from bot.store.seams import EmbeddingWrites

log = structlog.get_logger("switchboard.embed")

POLL_INTERVAL = 60.0  # seconds between looks for work nobody announced
RETRY_DELAY = 2.0  # after a failed pass; doubled after each further failure
MAX_BACKOFF = 300.0
WARM_SESSIONS = 200  # most recently active sessions whose vectors are read into memory at start
GATHER = 0.25  # seconds from a notify to the pass it asks for (see above)


class EmbedWorker:
    """Embeds stored messages that have no vector of the embedder's model; an async context manager."""

    def __init__(
        self, store: EmbeddingWrites, embedder: Embedder, *, batch_size: int,
        poll_interval: float = POLL_INTERVAL,
        retry_delay: float = RETRY_DELAY, gather: float = GATHER,
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._batch_size = batch_size
        self._poll_interval = poll_interval
        self._retry_delay = retry_delay
        self._wake = asyncio.Event()
        self._gather = gather
        self._hurry = asyncio.Event()  # someone waits in `settled`: no gathering
        self._settled = asyncio.Condition()
        self._requested = 0  # notifies so far
        self._handled = 0  # notifies answered by a pass that found nothing more to do
        self._task: asyncio.Task[None] | None = None
        self.embedded = 0

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._run(), name="embed worker")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def notify(self) -> None:
        """A message was stored: embed it soon (cheap; safe to call for every message)."""
        self._requested += 1
        self._wake.set()

    async def settled(self) -> None:
        """Wait until everything stored before this call (and announced by `notify`) is embedded."""
        self.notify()
        self._hurry.set()
        target = self._requested
        async with self._settled:
            await self._settled.wait_for(lambda: self._handled >= target)

    async def stop(self) -> None:
        """Stop after cancelling the batch in progress (its vectors are computed again next start)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        failures = 0
        after_id = 0  # the start catches up from the beginning; later passes from the last message seen
        warm = True
        while True:
            self._wake.clear()
            self._hurry.clear()  # whoever waits in `settled` now is answered by this pass
            requested = self._requested
            try:
                after_id = await self._drain(after_id)
                if warm:
                    # Once caught up: the active sessions' first searches read from memory.
                    await self._store.warm_embeddings(self._embedder.model_id, sessions=WARM_SESSIONS)
                    warm = False
            except Exception as exc:
                failures += 1
                pause = min(MAX_BACKOFF, self._retry_delay * 2 ** (failures - 1))
                # The traceback once per run of failures: the same cause repeats every retry.
                log.error("embedding failed; retrying", error=describe(exc),
                          retry_in_s=pause, exc_info=failures == 1)
                await asyncio.sleep(pause)
                continue
            failures = 0
            async with self._settled:
                self._handled = requested
                self._settled.notify_all()
            if self._requested == requested:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._poll_interval)
            if self._wake.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._hurry.wait(), self._gather)

    async def _drain(self, after_id: int) -> int:
        """Embed every pending message after `after_id`; returns the last id handled."""
        model = self._embedder.model_id
        reread: set[int] = set()
        while True:
            batch = await self._store.pending_embeddings(model, after_id=after_id, limit=self._batch_size)
            if not batch:
                return after_id
            stored = await embed_batch(self._store, self._embedder, batch)
            self.embedded += len(batch)
            after_id = batch[-1].id
            if stored < len(batch):
                # Some were refused: embedded already (the turn's request), deleted, or replaced
                # under their id while encoded. The last are pending still: read them again (once).
                again = await self._store.pending_embeddings(model, after_id=batch[0].id - 1, limit=1)
                if again and again[0].id <= after_id and again[0].id not in reread:
                    reread.add(again[0].id)
                    after_id = again[0].id - 1


async def embed_batch(store: EmbeddingWrites, embedder: Embedder, batch: list[StoredMessage]) -> int:
    """Encode one batch in a thread and store its vectors; returns how many were stored."""
    started = time.perf_counter()
    vectors = await encode_in_thread(embedder, [embedding_text(message) for message in batch])
    rows = [(message.id, message.session_key, vector_bytes(vector), message.text)
            for message, vector in zip(batch, vectors, strict=True)]
    stored = await store.save_embeddings(embedder.model_id, rows)
    log.debug("embedded", messages=len(batch), ms=round((time.perf_counter() - started) * 1000, 1))
    return stored


async def embed_backlog(
    store: EmbeddingWrites, embedder: Embedder, *, batch_size: int,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Fill every missing vector of the embedder's model; returns how many messages were embedded.

    `progress` is told the running count after each batch (the CLI prints it).
    """
    done = 0
    after_id = 0
    while batch := await store.pending_embeddings(embedder.model_id, after_id=after_id, limit=batch_size):
        await embed_batch(store, embedder, batch)
        done += len(batch)
        after_id = batch[-1].id
        if progress is not None:
            progress(done)
    return done
