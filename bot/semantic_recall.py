"""Semantic recall for one turn: the request's vector (computed now if the worker has not yet) and
the session's older messages nearest to it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog

from bot.embedding import Embedder, embedding_text, vector_bytes
from bot.messages import StoredMessage

if TYPE_CHECKING:
    from bot.store import Store

log = structlog.get_logger("switchboard.recall")


class SemanticRecall:
    """Finds a session's messages close in meaning to a request, within that session only."""

    def __init__(self, store: Store, embedder: Embedder) -> None:
        self._store = store
        self._embedder = embedder

    async def matches(
        self, session: str, request: StoredMessage, *, limit: int
    ) -> list[tuple[int, float]]:
        """(message id, cosine) of the `limit` nearest older messages, best first; none (with a
        warning) when the model or its vectors fail: the turn goes on with lexical recall."""
        try:
            return await self._matches(session, request, limit)
        except Exception as exc:
            log.warning("semantic recall failed; this turn uses lexical recall only",
                        session_key=session, error=f"{type(exc).__name__}: {exc}")
            return []

    async def _matches(self, session: str, request: StoredMessage, limit: int) -> list[tuple[int, float]]:
        model = self._embedder.model_id
        found = await self._store.semantic_matches_of(session, request.id, model=model, limit=limit)
        if found is not None:
            return found
        # The background worker has not reached the request yet: embed it here (in a thread, so
        # the event loop keeps running) and keep it, so the worker and replay reuse it. Searched
        # as stored (quantised, and the worker's if it stored one first), so replay, which reads
        # it back, scores the same; none when the request was deleted meanwhile.
        encoded = await asyncio.to_thread(self._embedder.encode, [embedding_text(request)])
        await self._store.save_embeddings(model, [(request.id, session, vector_bytes(encoded[0]))])
        found = await self._store.semantic_matches_of(session, request.id, model=model, limit=limit)
        return found or []
