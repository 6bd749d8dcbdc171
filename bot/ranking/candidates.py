"""The candidate pool: older turns found by recency, by words and by meaning, merged by rank.

Each source ranks whole turns its own way: the lookback window by recency, lexical recall by the
request's words, semantic recall by closeness in meaning. Reciprocal rank fusion merges them
without comparing their scores (an idf sum and a cosine are not on one scale): a turn scores
weight / (RRF_K + rank) in each source that found it, so one found by two sources rises above one
found by a single source at the same rank (recency weighs half). Everything here is pure and
deterministic, so replay reproduces the pool and the snapshot can explain it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bot.core.messages import StoredMessage

Source = Literal["lookback", "lexical", "semantic", "neighbour"]
# The sources fused into the pool; "neighbour" marks the turns of triage's second round
# (bot/context/second_round.py), offered after the pool, never fused with it.
SOURCES: tuple[Source, ...] = ("lookback", "lexical", "semantic")
# The usual constant of reciprocal rank fusion: large enough that rank 1 of one source does not
# drown ranks 2..10 of the others.
RRF_K = 60
# Recency says nothing about the question: a turn the request's words or meaning found outranks
# one that is merely recent at the same rank.
WEIGHTS: Mapping[Source, float] = {"lookback": 0.5, "lexical": 1.0, "semantic": 1.0}

Turn = tuple[StoredMessage, ...]


@dataclass(frozen=True, slots=True)
class Hit:
    """Where one source ranked a turn (1 = its best) and the score it gave."""

    rank: int
    score: float


@dataclass(frozen=True, slots=True)
class Candidate:
    """One older turn offered to triage: its messages (oldest first), who found it and how well."""

    messages: Turn
    hits: Mapping[Source, Hit]
    score: float
    rank: int

    @property
    def id(self) -> int:
        return self.messages[0].id

    def record(self, chosen: bool) -> dict[str, Any]:
        """The candidate as the snapshot stores it (scores rounded so replay compares exactly)."""
        return {
            "id": self.messages[0].id,
            "ids": [message.id for message in self.messages],
            "rank": self.rank,
            "score": round(self.score, 6),
            "sources": {
                name: {"rank": hit.rank, "score": round(hit.score, 6)} for name, hit in self.hits.items()
            },
            "chosen": chosen,
        }


def lookback_turns(window: Sequence[StoredMessage]) -> list[Turn]:
    """The older window as turns, newest first (the lookback's ranking is recency).

    Replies at the window's start whose question is older than the window are a turn of their own.
    """
    turns: list[list[StoredMessage]] = []
    for message in window:
        if message.role == "user" or not turns:
            turns.append([message])
        else:
            turns[-1].append(message)
    return [tuple(turn) for turn in reversed(turns)]


def matched_turns(
    matches: Sequence[tuple[int, float]], turns: Mapping[int, Sequence[StoredMessage]]
) -> list[tuple[Turn, float]]:
    """A source's ranked message matches as ranked turns: each turn once, at its best match."""
    seen: set[int] = set()
    ranked: list[tuple[Turn, float]] = []
    for message_id, score in matches:
        turn = turns.get(message_id)
        if not turn or turn[0].id in seen:
            continue
        seen.add(turn[0].id)
        ranked.append((tuple(turn), score))
    return ranked


def fuse(
    sources: Mapping[Source, Sequence[tuple[Turn, float]]],
    *,
    exclude: Iterable[int] = (),
    limit: int,
) -> list[Candidate]:
    """The best `limit` turns of all sources by reciprocal rank fusion, best first. Each source
    gives its turns ranked, each turn's messages oldest first (as every source reads them).

    Messages in `exclude` (those already in the context) are taken out of every turn; a turn left
    empty is dropped. Two sources may cut the same turn differently (the window's edge, a long
    turn): the turn is the union of what they found. Ties go to the newer turn.
    """
    excluded = set(exclude)
    found: dict[int, Turn] = {}  # each turn as its first source cut it
    unions: dict[int, dict[int, StoredMessage]] = {}  # by id, once a second source adds to it
    hits: dict[int, dict[Source, Hit]] = {}
    fused: dict[int, float] = {}
    for name in SOURCES:
        rank = 0
        weight = WEIGHTS[name]
        for turn, score in sources.get(name, ()):
            kept = turn
            if excluded:
                for message in turn:  # most turns keep every message: no copy
                    if message.id in excluded:
                        kept = tuple(m for m in turn if m.id not in excluded)
                        break
                if not kept:
                    continue
            rank += 1
            key = turn[0].id
            known = found.get(key)
            if known is None:
                found[key] = kept
                hits[key] = {name: Hit(rank, score)}
                fused[key] = 0 + weight / (RRF_K + rank)  # as sum() adds: from 0, in SOURCES order
                continue
            union = unions.get(key)
            if union is None:
                union = unions[key] = {message.id: message for message in known}
            for message in kept:
                union[message.id] = message
            by_source = hits[key]
            if name not in by_source:
                by_source[name] = Hit(rank, score)
                fused[key] += weight / (RRF_K + rank)
    order = sorted(fused.items(), key=_fused_order)[:limit]
    pool = []
    for position, (key, score) in enumerate(order, start=1):
        union = unions.get(key)
        # A turn comes oldest first; only a union of two sources' cuts needs sorting.
        messages = found[key] if union is None else tuple(sorted(union.values(), key=_message_id))
        pool.append(Candidate(messages, hits[key], score, position))
    return pool


def _fused_order(item: tuple[int, float]) -> tuple[float, int]:
    """Best fused score first, ties to the newer turn."""
    return -item[1], -item[0]


def _message_id(message: StoredMessage) -> int:
    return message.id


def chronological(candidates: Iterable[Candidate]) -> list[StoredMessage]:
    """The candidates' messages as one list in log order, the shape triage reads.

    A turn that lost its question (replies only) goes first, so it is never read as more replies
    to the turn before it.
    """
    ordered = sorted(candidates, key=lambda candidate: (candidate.messages[0].role == "user",
                                                        candidate.id))
    return [message for candidate in ordered for message in candidate.messages]
