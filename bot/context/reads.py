"""A context build's store reads: the history as the turn sees it, and with lexical recall alone,
the words' search in the same hand-off to the store (`Store.context_and_recall`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import structlog

from bot.config import ConversationConfig
from bot.core.errors import describe
from bot.core.messages import StoredMessage
from bot.store import CompactionRecord
from bot.store.records import ContextRead, LexicalFound
from bot.store.seams import ContextReads

log = structlog.get_logger("switchboard.context")

_NO_UPPER_BOUND = 2**63 - 1  # SQLite's largest rowid

# The compaction in use, the scheduled block, the history as the turn sees it, and the log position
# it was read at (the newest id seen), which replay reads up to.
Seen = tuple[CompactionRecord | None, list[StoredMessage], list[StoredMessage], int]


@dataclass(frozen=True, slots=True)
class Pin:
    """What a replay fixes to the recorded turn: the log position, the time and the compaction."""

    as_of: int
    now: float
    compaction_id: int | None


def _bounds(conv: ConversationConfig, request: StoredMessage, pin: Pin | None) -> dict[str, int]:
    return {"before_id": pin.as_of + 1 if pin is not None else _NO_UPPER_BOUND,
            "limit": conv.lookback_count + 1, "request_id": request.id,
            "scheduled": conv.previous_tasks_count}


async def read_history(
    store: ContextReads, conv: ConversationConfig, session: str, request: StoredMessage,
    pin: Pin | None, *, compaction: bool,
) -> Seen:
    """The compaction in use (when `compaction`; a replay's is the one its turn recorded), the
    scheduled block, and the last `lookback_count` interactive messages as this turn sees them
    with the log position they were read at: one read in the usual case."""
    read = await store.context_reads(session, **_bounds(conv, request, pin),
                                     compaction=compaction and pin is None)
    return await _as_seen(store, conv, session, request, pin, read, compaction=compaction)


async def read_with_recall(
    store: ContextReads, conv: ConversationConfig, session: str, request: StoredMessage,
    pin: Pin | None,
) -> tuple[Seen, LexicalFound]:
    """`read_history` (with the compaction) and `lexical_turns` for the request in one hand-off;
    should that fail, each read on its own (the reads' own errors are the build's)."""
    limit = max(conv.recall_count, 0)
    try:
        read, found = await store.context_and_recall(
            session, **_bounds(conv, request, pin), compaction=pin is None, text=request.text,
            recall_before=request.id, recall_limit=limit, expand=conv.recall_expansions)
    except Exception as exc:
        log.warning("context and recall not read together; read apart", session_key=session,
                    error=describe(exc), exc_info=True)
        return await asyncio.gather(
            read_history(store, conv, session, request, pin, compaction=True),
            store.lexical_turns(session, request.text, before_id=request.id, limit=limit,
                                expand=conv.recall_expansions))
    return await _as_seen(store, conv, session, request, pin, read, compaction=True), found


async def _as_seen(
    store: ContextReads, conv: ConversationConfig, session: str, request: StoredMessage,
    pin: Pin | None, read: ContextRead, *, compaction: bool,
) -> Seen:
    """The read as this turn sees it. The scheduled block is what ran since the user's previous
    message: they have not answered it yet. A message queued behind earlier ones of its session
    was stored before the replies to them: those replies (not the user messages queued after it)
    belong to its history."""
    latest, scheduled, newest, read_before = read
    limit = conv.lookback_count
    if compaction and pin is not None and pin.compaction_id is not None:
        latest = await store.compaction_by_id(pin.compaction_id)
    # The usual case: nothing was stored after the request yet.
    as_of = max([request.id, *(m.id for m in newest)])
    later = [m for m in newest if m.id > request.id]
    if not later:
        return latest, scheduled, [m for m in newest if m.id < request.id][-limit:], as_of
    # Read with the rest where the store could (at most `limit` + 1: the same newest `limit`).
    before = (read_before if read_before is not None
              else await store.recent_messages(session, before_id=request.id, limit=limit))
    answered = [m for m in later if m.role == "assistant"]
    return latest, scheduled, (before + answered)[-limit:], as_of
