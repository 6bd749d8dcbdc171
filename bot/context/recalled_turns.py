"""Which recalled turns a context build reads: those that can make triage's cut.

With semantic recall on, recall finds up to recall_count + semantic_count messages in about as many
turns, and triage is shown triage_max_candidates turns of them and the window's. Rank fusion ranks a
turn by where its sources found it, not by what it says, so the pool is ranked first with each
unread turn standing as its user message alone, and only the turns in that cut are read, with those
whose messages decide something: a turn reaching into the context's own messages (which may leave
it empty) and the one holding the window's leading replies. A stand-in counts in its source's
ranking as its turn would (a turn older than the context's messages keeps its user message), so the
pool is the one reading every turn gives; should a stand-in make the cut once the rest is read, it
is read too and the pool ranked again. The first read is planned as soon as the words' search
answers, given the planner once the pool knows the window (`plan_reads`, `Recall.lexical_then_turns`):
on SQLite on the store's thread, where the turns are read too, the event loop not woken in between.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.core.messages import StoredMessage
from bot.ranking.candidates import RRF_K, WEIGHTS, Candidate, Source

if TYPE_CHECKING:
    from bot.store.seams import TurnReads
    from bot.store.turn_starts import TurnStarts

Span = tuple[int, int]  # [start, stop): a turn's user message and the next one
Ranker = Callable[[Mapping[int, Sequence[StoredMessage]]], list[Candidate]]


@dataclass(frozen=True, slots=True)
class Plan:
    """The pool's first read: each matched id's turn span, the matched ids older than the starts
    read (read by id), and the spans that can make the cut."""

    spans: dict[int, Span]
    older: list[int]
    wanted: frozenset[Span]


def plan_reads(
    found: Mapping[Source, Sequence[tuple[int, float]]], starts: TurnStarts, *, limit: int,
    lookback: Sequence[int], edge: int | None, lead: int | None,
) -> Plan:
    """Which recalled turns to read first (the arguments as `pool_of_recalled` takes them). Pure:
    the store may run it on its own thread, as soon as the words' search answers."""
    spans, older = starts.spans(message_id for matches in found.values() for message_id, _ in matches)
    distinct = set(spans.values())
    if len(distinct) <= limit:  # every turn may make the cut
        wanted = distinct
    else:
        wanted = {span for span in distinct if (edge is not None and span[1] > edge)
                  or (lead is not None and span[0] <= lead < span[1])}
        wanted.update(_cut(found, spans, lookback, limit, edge))
    return Plan(spans, older, frozenset(wanted))


async def pool_of_recalled(
    store: TurnReads, session: str, found: Mapping[Source, Sequence[tuple[int, float]]],
    starts: TurnStarts, rank: Ranker, *, limit: int, lookback: Sequence[int], edge: int | None,
    lead: int | None, ahead: tuple[Plan, Mapping[int, list[StoredMessage]]] | None = None,
) -> list[Candidate]:
    """`rank` (the pool from each matched id's turn) as it is with every matched turn read.

    `found`: each recall source's ranked matches; `lookback`: the keys of the window's turns that
    keep a message, newest first; `edge`: the oldest message already in the context (a turn
    reaching it may lose messages); `lead`: the window's leading reply, whose whole turn a match
    may hold; `ahead`: the plan and the turns of it read already (`Recall.lexical_then_turns`).
    """
    if ahead is None:
        plan, read = plan_reads(found, starts, limit=limit, lookback=lookback, edge=edge, lead=lead), {}
    else:
        plan, read = ahead[0], dict(ahead[1])
    spans = plan.spans
    by_id = await store.turns_of(session, plan.older, before_id=starts.before_id) if plan.older else {}
    by_start = dict(spans.values())
    wanted = set(plan.wanted)
    while True:
        unread = sorted(span for span in wanted if span[0] not in read)
        if unread:
            turns = await store.turns_at(session, unread)
            read.update({start: turns.get(start, []) for start, _ in unread})
        pool = rank(_turns(session, spans, read, by_id))
        missing = {(c.id, by_start[c.id]) for c in pool if c.id in by_start and c.id not in read}
        if not missing:
            return pool
        wanted |= missing


def _cut(
    found: Mapping[Source, Sequence[tuple[int, float]]], spans: Mapping[int, Span],
    lookback: Sequence[int], limit: int, edge: int | None,
) -> list[Span]:
    """The recalled turns in the pool's cut, every turn standing in (rank fusion on their keys,
    as `fuse` ranks them; a turn from `edge` on has nothing the context lacks)."""
    fused: dict[int, float] = {}
    for rank, key in enumerate(lookback, start=1):
        fused[key] = 0 + WEIGHTS["lookback"] / (RRF_K + rank)
    for name, matches in found.items():
        seen: set[int] = set()
        weight = WEIGHTS[name]
        for message_id, _ in matches:
            span = spans.get(message_id)
            if span is None or span[0] in seen or (edge is not None and span[0] >= edge):
                continue
            seen.add(span[0])
            fused[span[0]] = fused.get(span[0], 0) + weight / (RRF_K + len(seen))
    cut = sorted(fused, key=lambda key: (-fused[key], -key))[:limit]
    by_start = dict(spans.values())
    return [(key, by_start[key]) for key in cut if key in by_start]


def _turns(
    session: str, spans: Mapping[int, Span], read: Mapping[int, list[StoredMessage]],
    by_id: Mapping[int, list[StoredMessage]],
) -> dict[int, Sequence[StoredMessage]]:
    """Each matched id's turn: read, or standing in as its user message alone."""
    turns: dict[int, Sequence[StoredMessage]] = dict(by_id)
    stand_ins: dict[int, tuple[StoredMessage, ...]] = {}
    for message_id, (start, _) in spans.items():
        if start in read:
            turns[message_id] = read[start]
            continue
        if start not in stand_ins:
            stand_ins[start] = (StoredMessage(start, session, "user", "interactive", "", 0.0),)
        turns[message_id] = stand_ins[start]
    return turns
