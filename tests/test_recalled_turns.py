"""Recalled turns read for the pool: where turns start, and only the turns that can make triage's
cut read, the pool being the one every turn read gives (real stores, both backends)."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from bot.config import Config, parse_config
from bot.context.builder import ContextBuilder
from bot.context.recalled_turns import Plan, plan_reads, pool_of_recalled
from bot.context.semantic_recall import SemanticRecall
from bot.core.messages import ChatRef, StoredMessage
from bot.models.brain import AnthropicBrain
from bot.ranking.candidates import Candidate, fuse, lookback_turns, matched_turns
from bot.ranking.embedding import load_embedder
from bot.store import Store
from bot.store.turn_starts import TurnStarts
from bot.testing.fake_channel import FakeChannel
from tests.harness import wait_until
from tests.sql import execute, hand_offs, traced

FAR = 10**9


async def conversation(store: Store, channel: FakeChannel, turns: int) -> list[list[StoredMessage]]:
    """`turns` turns of a user message and one to three replies, every tenth reply a fallback."""
    key = str(channel.key())
    made: list[list[StoredMessage]] = []
    for n in range(turns):
        said = await store.append_inbound(channel.message(f"walrus fact {n}"))
        assert said is not None
        turn = [said]
        for k in range(1 + n % 3):  # the first one answers the request (it waits no more after it)
            answers = said.id if k == 0 else None
            turn.append(await store.append_reply(key, f"noted {n}.{k}", request_id=answers))
        if n % 10 == 9:
            await execute(store, "UPDATE messages SET fallback = 1 WHERE id = ?", (turn[-1].id,))
            turn.pop()
        made.append(turn)
    return made


async def test_a_match_s_turn_is_placed_by_the_starts_read_with_the_matches(store: Store) -> None:
    """lexical_matches gives the session's turn starts (its user messages); a match's turn runs
    from its user message to the next one, turns_at reads it as turns_of gives it, and a cut-short
    list of starts (the newest of a very long session) does not speak for older ids."""
    channel = FakeChannel()
    key = str(channel.key())
    made = await conversation(store, channel, 30)
    request = made[-1][0]
    matches, starts = await store.lexical_matches(key, "walrus", before_id=request.id, limit=20)
    assert list(starts.ids) == [turn[0].id for turn in made[:-1]] and starts.complete
    assert len(matches) == 20
    reply = made[4][-1]
    assert starts.span(reply.id) == (made[4][0].id, made[5][0].id)
    assert starts.span(made[-2][0].id) == (made[-2][0].id, request.id)

    every = [message.id for turn in made[:-1] for message in turn]
    expected = await store.turns_of(key, every, before_id=request.id)
    newest = TurnStarts(starts.ids[-5:], False, request.id)
    assert not newest.knows(made[0][0].id) and newest.knows(made[-3][-1].id)
    assert await store.turns_at(key, [starts.span(made[7][0].id) or (0, 0)]) == {
        made[7][0].id: expected[made[7][0].id]}


async def test_the_words_search_then_the_planned_turns_come_in_one_call(store: Store) -> None:
    """lexical_then_turns gives the matches and starts lexical_matches gives, calls the planner it
    is given (once given: the builder gives it once the pool knows the window) with them, and
    reads the turns the plan wants as turns_at reads them; a plan that wants none reads none."""
    channel = FakeChannel()
    key = str(channel.key())
    made = await conversation(store, channel, 30)
    request = made[-1][0]
    matches, starts = await store.lexical_matches(key, "walrus", before_id=request.id, limit=8)
    seen: list[tuple[list[tuple[int, float]], TurnStarts]] = []

    def plan(found: list[tuple[int, float]], read: TurnStarts) -> Plan:
        seen.append((found, read))
        return plan_reads({"lexical": found}, read, limit=3, lookback=[], edge=None, lead=None)

    planner: asyncio.Future[Callable[[list[tuple[int, float]], TurnStarts], Plan]] = (
        asyncio.get_running_loop().create_future())
    searched = asyncio.ensure_future(store.lexical_then_turns(
        key, "walrus", before_id=request.id, limit=8, plan=planner))
    await asyncio.sleep(0)  # the search under way (on PostgreSQL), its planner not given yet
    assert not searched.done() and not seen
    planner.set_result(plan)
    found, read, planned, turns = await searched
    assert (found, read) == (matches, starts) and seen == [(matches, starts)]
    assert len(planned.wanted) == 3  # the best three of eight turns
    assert turns == await store.turns_at(key, sorted(planned.wanted))
    assert set(turns) == {start for start, _ in planned.wanted}

    nothing = Plan({}, [], frozenset())
    assert await store.lexical_then_turns(key, "walrus", before_id=request.id, limit=8,
                                          plan=_given(lambda found, read: nothing)) == (
        matches, starts, nothing, {})


async def _given(plan: Callable[[list[tuple[int, float]], TurnStarts], Plan]) -> Callable[
        [list[tuple[int, float]], TurnStarts], Plan]:
    return plan


async def test_a_malformed_row_leaves_only_itself_out_of_the_turns_read(store: Store) -> None:
    """A row no write path stores (actions that are not a JSON list) is left out of its turn; the
    turn's other messages and the other turns stay where they belong."""
    channel = FakeChannel()
    key = str(channel.key())
    made = await conversation(store, channel, 6)
    request = made[-1][0]
    _, starts = await store.lexical_matches(key, "walrus", before_id=request.id, limit=5)
    spans = [span for turn in made[1:4] if (span := starts.span(turn[0].id)) is not None]
    whole = await store.turns_at(key, spans)
    bad = made[2][1]
    await execute(store, "UPDATE messages SET actions = '{\"a\": 1}' WHERE id = ?", (bad.id,))
    read = await store.turns_at(key, spans)
    assert read[made[2][0].id] == [m for m in whole[made[2][0].id] if m.id != bad.id]
    assert read[made[1][0].id] == whole[made[1][0].id] == made[1]
    assert read[made[3][0].id] == whole[made[3][0].id] == made[3]


async def test_the_pool_is_the_one_every_turn_read_gives_and_only_its_turns_are_read(
    store: Store, store_backend: str,
) -> None:
    """With more recalled turns than triage is shown, the pool (ranks, scores, messages) is what
    fusing every matched turn gives, for cuts of 5 to 60 turns, with the context's recent messages
    taking some turns away and the window led by replies whose question is older; only the
    turns in the cut are read (and those the context's messages or the window's lead reach)."""
    channel = FakeChannel()
    key = str(channel.key())
    made = await conversation(store, channel, 80)
    request = made[-1][0]
    _, starts = await store.lexical_matches(key, "walrus", before_id=request.id, limit=20)
    older = [message for turn in made[:-1] for message in turn]
    rng = random.Random(3)
    for limit in (5, 12, 40, 60):
        for recent in (0, 3, 8):
            window = older[-20:]  # led by replies whose question is older
            exclude = window[len(window) - recent:] if recent else []
            lexical = [(m.id, 1.0 / (n + 1)) for n, m in enumerate(rng.sample(older, 20))]
            semantic = [(m.id, 1.0 / (n + 1)) for n, m in enumerate(rng.sample(older, 40))]
            looked_back = lookback_turns(window[: len(window) - recent])
            lead = looked_back[-1][0].id if looked_back[-1][0].role == "assistant" else None

            def rank(turns: Mapping[int, Sequence[StoredMessage]],
                     looked_back: list[tuple[StoredMessage, ...]] = looked_back,
                     lexical: list[tuple[int, float]] = lexical,
                     semantic: list[tuple[int, float]] = semantic, exclude: list[StoredMessage] = exclude,
                     limit: int = limit, lead: int | None = lead) -> list[Candidate]:
                lookback = looked_back
                whole = next((turn for turn in turns.values() if any(m.id == lead for m in turn)), None)
                if whole is not None:
                    lookback = [*looked_back[:-1], tuple(whole)]
                return fuse({"lookback": [(turn, 0.0) for turn in lookback],
                             "lexical": matched_turns(lexical, turns),
                             "semantic": matched_turns(semantic, turns)},
                            exclude=[m.id for m in exclude], limit=limit)

            every = await store.turns_of(key, [i for i, _ in lexical + semantic], before_id=request.id)
            expected = rank(every)
            kept = {m.id for m in exclude}
            async with traced(store) as statements:
                pool = await pool_of_recalled(
                    store, key, {"lexical": lexical, "semantic": semantic}, starts, rank,
                    limit=limit, edge=min(kept, default=None), lead=lead,
                    lookback=[turn[0].id for turn in looked_back if any(m.id not in kept for m in turn)],
                )
            assert [(c.messages, c.hits, c.score, c.rank) for c in pool] == [
                (c.messages, c.hits, c.score, c.rank) for c in expected]
            reads = [sql for sql in statements if "t(start, stop)" in sql or "turns(start, stop)" in sql]
            assert len(reads) == 1
            if limit < 40 and store_backend == "sqlite":  # fewer turns read than matched
                distinct = {starts.span(i) for i, _ in lexical + semantic}
                assert reads[0].count("), (") + 1 < len(distinct)


async def test_matches_older_than_the_starts_read_are_placed_by_their_own_read(store: Store) -> None:
    """In a session longer than the starts one read gives (only the newest are read), a match
    older than every start read gets its turn by id, once even when both sources found it, and
    the pool is still the one every matched turn gives."""
    channel = FakeChannel()
    key = str(channel.key())
    made = await conversation(store, channel, 40)
    request = made[-1][0]
    _, every_start = await store.lexical_matches(key, "walrus", before_id=request.id, limit=5)
    starts = TurnStarts(every_start.ids[-10:], False, request.id)  # as a cut-short read gives them
    old, new = made[:25], made[-11:-1]
    lexical = [(old[3][1].id, 0.9), (new[2][0].id, 0.8), (old[7][0].id, 0.7)]
    semantic = [(old[3][1].id, 0.5), (new[5][-1].id, 0.4), (old[12][0].id, 0.3)]

    spans, unknown = starts.spans(message_id for message_id, _ in lexical + semantic)
    assert unknown == [old[3][1].id, old[7][0].id, old[12][0].id]
    assert set(spans) == {new[2][0].id, new[5][-1].id}

    def rank(turns: Mapping[int, Sequence[StoredMessage]]) -> list[Candidate]:
        return fuse({"lexical": matched_turns(lexical, turns), "semantic": matched_turns(semantic, turns)},
                    limit=40)

    expected = rank(await store.turns_of(key, [i for i, _ in lexical + semantic], before_id=request.id))
    pool = await pool_of_recalled(store, key, {"lexical": lexical, "semantic": semantic}, starts, rank,
                                  limit=40, edge=None, lead=None, lookback=[])
    assert [(c.messages, c.hits, c.score, c.rank) for c in pool] == [
        (c.messages, c.hits, c.score, c.rank) for c in expected]
    assert {c.id for c in pool} == {old[3][0].id, old[7][0].id, old[12][0].id, new[2][0].id, new[5][0].id}


def semantic_builder(store: Any, make_config: Callable[[dict[str, Any]], Config]) -> ContextBuilder:
    """A builder with semantic recall by the shipped static table, its fast model unreachable (no
    API key: the ranked fallback keeps what the pool offers)."""
    config = make_config({"conversation": {"lookback_count": 20, "always_include_recent": 4}})
    embedder = load_embedder(parse_config({"semantic": {"encoder": "static"}}, "<static>"))
    assert embedder is not None
    return ContextBuilder(config, store, AnthropicBrain(config.anthropic, None),
                          semantic=SemanticRecall(store, embedder))


async def test_a_semantic_build_reads_the_recalled_turns_whole_on_either_store(
    store: Store, store_backend: str, make_config: Callable[[dict[str, Any]], Config],
) -> None:
    """With semantic recall the words' search waits for the pool's plan, then its turns are read
    (on SQLite in the same hand-off): a turn far beyond the window that the request's words find
    comes into the pool whole, its user message and its replies, on both stores."""
    channel = FakeChannel()
    made = await conversation(store, channel, 30)
    request = await store.append_inbound(channel.message("which walrus fact came fourth?"))
    assert request is not None
    context = await semantic_builder(store, make_config).build(channel.key(), request, ChatRef("fake", "42"))
    assert context.counts["found_lexical"] > 0
    turns = {turn[0].id: tuple(m.id for m in turn) for turn in made}
    window = {entry.message.id for entry in context.entries if entry.reason == "recent"}
    found = [tuple(c["ids"]) for c in context.candidates if "lexical" in c["sources"]]
    assert turns[made[4][0].id] in found  # from before the window (its last 20 messages)
    # Each turn read whole, none standing in as its user message alone (but for the messages
    # the context holds already).
    assert all(ids == tuple(i for i in turns[ids[0]] if i not in window) for ids in found)


class FailingHistory:
    """The store, its history read failing (after the build started its searches)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def context_reads(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the history read fell over")


async def test_a_build_that_fails_before_its_pool_leaves_no_search_waiting(
    store: Store, make_config: Callable[[dict[str, Any]], Config],
) -> None:
    """The words' search waits for a plan only the pool gives: a build that fails before (here its
    history read) gives it up, and the search ends instead of waiting for ever."""
    channel = FakeChannel()
    await conversation(store, channel, 30)
    request = await store.append_inbound(channel.message("which walrus fact came fourth?"))
    assert request is not None
    before = asyncio.all_tasks()
    builder = semantic_builder(FailingHistory(store), make_config)
    with pytest.raises(RuntimeError, match="fell over"):
        await builder.build(channel.key(), request, ChatRef("fake", "42"))
    searches = [task for task in asyncio.all_tasks() - before
                if "lexical_then_turns" in task.get_coro().__qualname__]  # type: ignore[union-attr]
    assert searches
    _, waiting = await asyncio.wait(searches, timeout=30)  # a guard: without the fix, for ever
    assert not waiting and all(task.cancelled() for task in searches)


@pytest.fixture(params=["one CPU", "several CPUs"])
def cpus(request: pytest.FixtureRequest) -> Iterator[str]:
    """The test's thread (the event loop's) on one CPU, or on every CPU it may use (then at least
    two: the case needs them)."""
    every = os.sched_getaffinity(0)
    if request.param == "several CPUs" and len(every) < 2:
        pytest.skip("this machine gives the tests one CPU")
    if request.param == "one CPU":
        os.sched_setaffinity(0, {min(every)})
    try:
        yield request.param
    finally:
        os.sched_setaffinity(0, every)


async def test_on_sqlite_the_words_search_starts_at_once_only_beside_another_cpu(
    tmp_path: Path, cpus: str
) -> None:
    """On one CPU, SQLite's thread could not search beside the event loop anyway: the search waits
    for the planner and runs with the turns' read in one hand-off. With another CPU it starts at
    once, before the planner is given, and the turns are read after it (issue 38: on two cores
    the build took ~0.7 ms longer when the search waited)."""
    async with Store.open(tmp_path / "switchboard.db") as store:
        channel = FakeChannel()
        key = str(channel.key())
        await conversation(store, channel, 30)
        request = await store.append_inbound(channel.message("which walrus fact came fourth?"))
        assert request is not None
        planner: asyncio.Future[Callable[[list[tuple[int, float]], TurnStarts], Plan]] = (
            asyncio.get_running_loop().create_future())
        async with traced(store) as statements, hand_offs(store) as items:
            searched = asyncio.ensure_future(store.lexical_then_turns(
                key, "walrus", before_id=request.id, limit=8, plan=planner))
            if cpus == "several CPUs":
                await wait_until(lambda: any("recall_fts" in sql for sql in statements), timeout=10)
            planner.set_result(lambda found, read: plan_reads(
                {"lexical": found}, read, limit=3, lookback=[], edge=None, lead=None))
            _, _, planned, turns = await searched
        assert len(planned.wanted) == 3 and len(turns) == 3
        assert len(items) == (1 if cpus == "one CPU" else 2)
