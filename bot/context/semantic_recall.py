"""Semantic recall for one turn: the request's vector (computed now if the worker has not yet) and
the session's older messages nearest to it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from bot.core.errors import describe
from bot.core.messages import StoredMessage
from bot.ranking.embedding import Encoder, embedding_text, vector_bytes
from bot.ranking.encode_threads import encode_in_thread

if TYPE_CHECKING:
    from bot.store.seams import SemanticReads

log = structlog.get_logger("switchboard.recall")
RECALL_FAILED = "semantic recall failed; this turn uses lexical recall only"


class SemanticRecall:
    """Finds a session's messages close in meaning to a request, within that session only."""

    def __init__(self, store: SemanticReads, embedder: Encoder) -> None:
        self._store = store
        self._embedder = embedder

    async def matches(
        self, session: str, request: StoredMessage, *, limit: int
    ) -> list[tuple[int, float]]:
        """(message id, cosine) of the `limit` nearest older messages, best first; none (with a
        warning) when the model or its vectors fail: the turn goes on with lexical recall."""
        found = await self.stored_matches(session, request, limit=limit)
        return found if found is not None else await self.encoded_matches(session, request, limit=limit)

    async def stored_matches(
        self, session: str, request: StoredMessage, *, limit: int
    ) -> list[tuple[int, float]] | None:
        """`matches` by the request's stored vector; None when it has none yet (the worker has not
        reached it), [] when the search failed (with the warning)."""
        try:
            return await self._store.semantic_matches_of(
                session, request.id, model=self._embedder.model_id, limit=limit)
        except Exception as exc:
            log.warning(RECALL_FAILED, session_key=session, error=describe(exc), exc_info=True)
            return []

    async def early_matches(
        self, session: str, request: StoredMessage, *, limit: int, window: int
    ) -> list[tuple[int, float]] | None:
        """`stored_matches`, started beside the turn's other reads; when the request has no
        vector yet but the session already holds `window` vectors or more (so more than the
        context window: what the turn would encode it for), `encoded_matches` at once, so the
        encoding, its write and the search run while SQLite reads the history and the words.
        None when neither (a short chat, or one the worker has not reached: the pool decides)."""
        try:
            found, count = await self._store.semantic_matches_counted(
                session, request.id, model=self._embedder.model_id, limit=limit)
        except Exception as exc:
            log.warning(RECALL_FAILED, session_key=session, error=describe(exc), exc_info=True)
            return []
        if found is not None or count < window:
            return found
        return await self.encoded_matches(session, request, limit=limit)

    async def encoded_matches(
        self, session: str, request: StoredMessage, *, limit: int
    ) -> list[tuple[int, float]]:
        """`matches` of a request the worker has not reached yet: embedded here (in a thread, so
        the event loop keeps running) and kept, so the worker and replay reuse it. Searched as
        stored (quantised, and the worker's if it stored one first), so replay, which reads it
        back, scores the same; none when the request was deleted meanwhile."""
        model = self._embedder.model_id
        try:
            encoded = await encode_in_thread(self._embedder, [embedding_text(request)], urgent=True)
            row = (request.id, session, vector_bytes(encoded[0]), request.text)
            await self._store.save_embeddings(model, [row])
            found = await self._store.semantic_matches_of(session, request.id, model=model, limit=limit)
        except Exception as exc:
            log.warning(RECALL_FAILED, session_key=session, error=describe(exc), exc_info=True)
            return []
        return found or []

