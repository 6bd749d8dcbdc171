"""Unit tests of the candidate pool: turns from the lookback, lexical and semantic sources merged by rank."""

from __future__ import annotations

from bot.core.messages import Role, StoredMessage
from bot.ranking.candidates import RRF_K, chronological, fuse, lookback_turns, matched_turns

SESSION = "agent:main:fake:direct:1"


def msg(id: int, role: Role = "user") -> StoredMessage:
    return StoredMessage(id=id, session_key=SESSION, role=role, origin="interactive",
                         text=f"{role} {id}", created_at=1_700_000_000.0 + id)


def turn(*ids: int) -> tuple[StoredMessage, ...]:
    return tuple(msg(i, "user" if n == 0 else "assistant") for n, i in enumerate(ids))


def test_lookback_turns_are_whole_turns_newest_first() -> None:
    window = [msg(1, "assistant"), msg(2), msg(3, "assistant"), msg(4), msg(5, "assistant"), msg(6)]
    assert [[m.id for m in t] for t in lookback_turns(window)] == [[6], [4, 5], [2, 3], [1]]
    assert lookback_turns([]) == []


def test_matched_turns_rank_each_turn_once_at_its_best_match() -> None:
    turns = {10: list(turn(10, 11)), 11: list(turn(10, 11)), 20: list(turn(20, 21))}
    ranked = matched_turns([(11, 3.0), (20, 2.0), (10, 1.5), (99, 1.0)], turns)
    assert [([m.id for m in t], score) for t, score in ranked] == [([10, 11], 3.0), ([20, 21], 2.0)]


def test_a_turn_found_by_two_sources_outranks_one_found_by_one() -> None:
    """Reciprocal rank fusion: second in two sources beats first in one."""
    pool = fuse({
        "lexical": [(turn(10, 11), 5.0), (turn(20, 21), 4.0)],
        "semantic": [(turn(30, 31), 0.9), (turn(20, 21), 0.8)],
    }, limit=10)
    assert [c.id for c in pool] == [20, 30, 10]
    best = pool[0]
    assert best.rank == 1 and set(best.hits) == {"lexical", "semantic"}
    assert best.hits["lexical"].rank == 2 and best.hits["semantic"].rank == 2
    assert best.score == 2 / (RRF_K + 2)
    # Equal fused scores (both first in one source): the newer turn first.
    assert pool[1].score == pool[2].score


def test_fuse_keeps_the_best_and_drops_what_is_already_in_context() -> None:
    pool = fuse({
        "lookback": [(turn(50, 51), 0.0), (turn(40, 41), 0.0)],
        "lexical": [(turn(50, 51), 2.0), (turn(5, 6), 1.0)],
    }, exclude=[40, 41], limit=2)
    assert [c.id for c in pool] == [50, 5]
    # A turn whose every message is already in context is no candidate, and takes no rank.
    assert pool[1].hits["lexical"].rank == 2


def test_two_sources_cutting_one_turn_differently_give_its_union() -> None:
    pool = fuse({
        "lookback": [((msg(10), msg(11, "assistant")), 0.0)],
        "semantic": [((msg(10), msg(11, "assistant"), msg(12, "assistant")), 0.7)],
    }, limit=5)
    assert len(pool) == 1 and [m.id for m in pool[0].messages] == [10, 11, 12]


def test_candidate_record_says_who_found_it_and_whether_it_went_in() -> None:
    (candidate,) = fuse({"lexical": [(turn(7, 8), 1.23456789)]}, limit=5)
    assert candidate.record(True) == {
        "id": 7, "ids": [7, 8], "rank": 1, "score": round(1 / (RRF_K + 1), 6),
        "sources": {"lexical": {"rank": 1, "score": 1.234568}}, "chosen": True,
    }


def test_chronological_puts_a_questionless_turn_first() -> None:
    """Triage splits the list into turns at user messages: replies without their question go
    first, so they are never read as more replies to the turn before them."""
    pool = fuse({
        "lookback": [(turn(30, 31), 0.0), ((msg(3, "assistant"),), 0.0)],
        "lexical": [(turn(1, 2), 1.0)],
    }, limit=5)
    assert [m.id for m in chronological(pool)] == [3, 1, 2, 30, 31]
