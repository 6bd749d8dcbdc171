"""A context build's recall beyond the window: what it found, and with semantic recall on, its two
searches started before the history is read and answered to the pool.

The meaning's search (the request's vector) starts at once. The words' search gets the planner of
the recalled turns' read (`plan_reads`) once the pool knows the window and the meaning's matches:
on SQLite with one CPU it waits for it, then searches, plans and reads the planned turns on
SQLite's thread in one hand-off from the event loop (issue 38: on one core the search started
earlier finished before the pool could plan, and the turns took a hand-off of their own); with
more CPUs, and on PostgreSQL, the search runs meanwhile (`Recall.lexical_then_turns`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from bot.config import ConversationConfig
from bot.context.recalled_turns import Plan
from bot.context.semantic_recall import SemanticRecall
from bot.core.messages import StoredMessage
from bot.store.seams import ContextReads
from bot.store.turn_starts import Planner, TurnStarts

Words = tuple[list[tuple[int, float]], TurnStarts, Plan, dict[int, list[StoredMessage]]]


@dataclass(frozen=True, slots=True)
class Found:
    """What recall found beyond the window: ranked (message id, score) matches, and their turns
    (lexical recall alone); with semantic recall, both searches still under way: the words'
    (`words`: matches, turn starts, the plan `planner` is given and its turns), whose turns are
    read once the pool's cut is known, and the meaning's by the request's stored vector
    (`meaning`: None when it has none yet, and the pool encodes it only where the session holds
    more than the window)."""

    lexical: list[tuple[int, float]]
    semantic: list[tuple[int, float]]
    turns: dict[int, list[StoredMessage]]
    words: asyncio.Future[Words] | None = None
    planner: asyncio.Future[Planner[Plan]] | None = None
    session: str = ""
    meaning: asyncio.Future[list[tuple[int, float]] | None] | None = None

    def abandon(self) -> None:
        """The words' search given up (the build ended before its pool planned): it stops
        waiting for the planner (nothing when it has it)."""
        if self.planner is not None and not self.planner.done():
            self.planner.cancel()


NOTHING = Found([], [], {})


def start_searches(
    store: ContextReads, semantic: SemanticRecall, conv: ConversationConfig, session: str,
    request: StoredMessage, *, expand: int,
) -> Found:
    """Both searches started and neither waited for: the meaning's by the request's stored vector
    (the request encoded beside the reads when the session's vectors alone outnumber the window,
    issue 32: not after them; else only if the pool wants it, `meaning`), and the words', which
    waits for its planner. (Lexical recall alone is read with the history: `read_with_recall`.)
    The build calls `abandon` on the answer when it ends."""
    meaning = asyncio.ensure_future(semantic.early_matches(
        session, request, limit=conv.semantic_count, window=conv.lookback_count))
    planner: asyncio.Future[Planner[Plan]] = asyncio.get_running_loop().create_future()
    words: asyncio.Future[Words] = asyncio.ensure_future(store.lexical_then_turns(
        session, request.text, before_id=request.id, limit=max(conv.recall_count, 0), plan=planner,
        expand=expand))
    # Awaited by the pool; should the build fail before, its error is the build's already.
    words.add_done_callback(lambda done: done.cancelled() or done.exception())
    return Found([], [], {}, words, planner, session, meaning)


async def meaning(
    found: Found, semantic: SemanticRecall | None, request: StoredMessage, *, wanted: bool, limit: int
) -> list[tuple[int, float]]:
    """Semantic recall's matches: those of the request's stored vector, else of its encoding
    (run in its thread while SQLite reads the history); none unless `wanted`, whether or not a
    vector was stored, so that replay (which finds the one stored since) agrees."""
    if found.meaning is None:
        return found.semantic if wanted else []
    stored = await found.meaning  # started before the reads: answered, or nearly, by now
    if not wanted:
        return []
    if stored is not None or semantic is None:
        return stored or []
    return await semantic.encoded_matches(found.session, request, limit=limit)
