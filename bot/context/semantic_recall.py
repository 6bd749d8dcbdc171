"""Semantic recall for one turn: the request's vector (computed now if the worker has not yet) and
the session's older messages nearest to it. With an encoder that averages words (the static
table), the request is searched by its vector plus that of its content words, both encoded now:
in a mean over every word, "have I", "this" and "lately" pull the request towards every other
question and remark in the chat as much as its subject pulls it towards its own (issue 38)."""

from __future__ import annotations

from operator import add
from typing import TYPE_CHECKING

import structlog

from bot.core.errors import describe
from bot.core.messages import StoredMessage
from bot.ranking.embedding import Encoder, embedding_text, vector_bytes
from bot.ranking.encode_threads import encode_in_thread
from bot.ranking.lexical import content_text

if TYPE_CHECKING:
    from bot.store.seams import SemanticReads

log = structlog.get_logger("switchboard.recall")
RECALL_FAILED = "semantic recall failed; this turn uses lexical recall only"
NEIGHBOURS_FAILED = "the search for the picks' neighbours failed; triage's first round stands"


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
        query = self.query_text(request)
        if query is not None:
            return await self.content_matches(session, request, query, limit=limit)
        found = await self.stored_matches(session, request, limit=limit)
        return found if found is not None else await self.encoded_matches(session, request, limit=limit)

    def query_text(self, request: StoredMessage) -> str | None:
        """With an encoder that averages words (`mean_of_words`), the request's content words and
        question words (`content_text`, after a user's name as `embedding_text` puts it), searched
        beside the request itself (`content_matches`); None with another encoder (the request's
        own vector is searched, as stored) or when it has no content word."""
        if not getattr(self._embedder, "mean_of_words", False):
            return None
        words = content_text(request.text)
        if not words:
            return None
        return f"{request.sender_name}: {words}" if request.role == "user" and request.sender_name else words

    async def content_matches(
        self, session: str, request: StoredMessage, query: str, *, limit: int
    ) -> list[tuple[int, float]]:
        """`matches` by the sum of the vectors of `query` (the request's `query_text`) and of the
        request: its subject counts twice, its other words once (the content words alone lost
        what "whom" or "where else" asks for: multi-turn story questions of the original labelled
        set fell from 0.49 to 0.40). Encoded here, on the event loop: a few dozen rows looked up
        and averaged (~0.2 ms), where a hand-off to the encoding thread took about as long and,
        with the loop busy, up to the GIL's 5 ms switch interval. Searched as floats; the
        request's own vector is left to the worker."""
        try:
            words, whole = self._embedder.encode([query, embedding_text(request)])
            vector = list(map(add, words, whole))
            return await self._store.semantic_matches(
                session, vector, model=self._embedder.model_id, before_id=request.id, limit=limit)
        except Exception as exc:
            log.warning(RECALL_FAILED, session_key=session, error=describe(exc), exc_info=True)
            return []

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
        None when neither (a short chat, or one the worker has not reached: the pool decides).
        With a `query_text`, `content_matches` at once, whatever the session holds."""
        query = self.query_text(request)
        if query is not None:
            return await self.content_matches(session, request, query, limit=limit)
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
        back, scores the same; none when the request was deleted meanwhile. (`content_matches`
        with a `query_text`.)"""
        query = self.query_text(request)
        if query is not None:
            return await self.content_matches(session, request, query, limit=limit)
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

    async def neighbours(
        self, session: str, seeds: list[int], *, before_id: int, limit: int
    ) -> list[list[tuple[int, float]]]:
        """For each seed message, the `limit` messages nearest its stored vector, older and newer
        (below `before_id`), best first: the second round of triage (`second_round`); none (with
        the warning) when the search fails."""
        try:
            return await self._store.semantic_neighbours(
                session, seeds, model=self._embedder.model_id, before_id=before_id, limit=limit)
        except Exception as exc:
            log.warning(NEIGHBOURS_FAILED, session_key=session, error=describe(exc), exc_info=True)
            return [[] for _ in seeds]
