"""Recall: full-text search over a session's older messages, offered to triage beyond the lookback."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.brain import AnthropicBrain
from bot.config import Config
from bot.context import group_turns, triage_candidates
from bot.context_builder import ContextBuilder
from bot.messages import ChatRef, StoredMessage
from bot.recall import MAX_TERMS, fts_phrase, query_terms, rank_matches
from bot.store import RECALL_COMMON, Store
from tests.fakes import FakeChannel
from tests.harness import FAST, config_data, daemon_with, reply_requests, request_text, say, wait_until
from tests.standins.anthropic_api import AnthropicStandIn, Text

MakeConfig = Callable[[dict[str, Any]], Config]
FACT = "my locker combination is 4711"
QUESTION = "what was my locker combination again?"


async def user(store: Store, channel: FakeChannel, text: str, peer: str = "42") -> StoredMessage:
    stored = await store.append_inbound(channel.message(text, peer=peer))
    assert stored is not None
    return stored


async def seed_fact_then_chatter(
    store: Store, channel: FakeChannel, exchanges: int = 60, peer: str = "42"
) -> StoredMessage:
    """The fact, its answer, then `exchanges` unrelated exchanges (two messages each)."""
    key = str(channel.key(peer=peer))
    fact = await user(store, channel, FACT, peer)
    await store.append_reply(key, "noted", request_id=fact.id)
    for n in range(exchanges):
        said = await user(store, channel, f"chatter number {n}", peer)
        await store.append_reply(key, f"ok {n}", request_id=said.id)
    return fact


# -- the query: user text is never FTS5 syntax ------------------------------------------------------


def test_query_terms_are_the_content_words() -> None:
    """Recall searches for the request's content words: lower-cased, once each, no stopwords or short ones."""
    assert query_terms("What was my Locker combination? The LOCKER!") == ["locker", "combination"]
    assert query_terms("a an is of to") == []
    assert len(query_terms(" ".join(f"word{n}" for n in range(40)))) == MAX_TERMS


@pytest.mark.parametrize(
    "text",
    [
        'NEAR(alpha beta, 2)', "text:secret", "alpha AND beta OR NOT gamma", '"unbalanced quote',
        "prefix* ^start", "(paren", "-minus +plus", "{text}: col filter", "alpha''beta", "a:b:c",
    ],
)
async def test_fts_syntax_in_user_text_is_searched_as_words(store: Store, text: str) -> None:
    """Messages with FTS5 operators, quotes or column filters are searched as plain words, never as syntax."""
    channel = FakeChannel()
    stored = await user(store, channel, f"notes on {text} here")
    request = await user(store, channel, text)
    for term in query_terms(text):
        phrase = fts_phrase(term)
        assert phrase.startswith('"') and phrase.endswith('"')
        assert '"' not in phrase[1:-1].replace('""', "")
    found = await store.search_messages(str(channel.key()), text, before_id=request.id, limit=5)
    if query_terms(text):
        assert [m.id for m in found] == [stored.id]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=60))
def test_search_never_raises_for_any_text(tmp_path: Path, text: str) -> None:
    """Whatever a user writes, searching older messages for it never raises."""
    with asyncio.Runner() as runner:

        async def check() -> None:
            async with Store.open(tmp_path / "property.db") as store:
                channel = FakeChannel()
                await user(store, channel, text or "empty")
                request = await user(store, channel, "request")
                await store.search_messages(str(channel.key()), text, before_id=request.id + 1, limit=3)

        runner.run(check())


# -- the index follows the log ----------------------------------------------------------------------


async def test_the_index_follows_inserts_updates_and_prune(store: Store, tmp_path: Path) -> None:
    """A stored message is found at once; once pruned (or its text changed) it is no longer found."""
    channel = FakeChannel()
    key = str(channel.key())
    old = await user(store, channel, "the aquarium needs cleaning")
    await store.append_reply(key, "the aquarium is clean now", request_id=old.id)
    for n in range(6):
        await user(store, channel, f"later message {n}")
    found = await store.search_messages(key, "aquarium", before_id=10**9, limit=5)
    assert [m.text for m in found] == ["the aquarium is clean now", "the aquarium needs cleaning"]

    with sqlite3.connect(tmp_path / "switchboard.db") as raw:  # an edit by hand keeps the index true
        raw.execute("UPDATE messages SET text = 'the terrarium needs cleaning' WHERE id = ?", (old.id,))
    assert [m.id for m in await store.search_messages(key, "terrarium", before_id=10**9, limit=5)] == [old.id]
    assert [m.id for m in await store.search_messages(key, "aquarium", before_id=10**9, limit=5)] == [
        old.id + 1
    ]

    report = await store.prune_interactive(time.time() + 1, keep_recent=6, keep_turns={})
    assert report.messages == 2
    assert await store.search_messages(key, "aquarium terrarium", before_id=10**9, limit=5) == []
    assert await store.search_messages(key, "later", before_id=10**9, limit=10)


async def test_search_stays_in_its_session_and_above_the_reset_floor(store: Store) -> None:
    """Search finds only the session's own messages, only before the given id, and nothing before /reset."""
    channel = FakeChannel()
    key = str(channel.key())
    mine = await user(store, channel, "the pelican project")
    await user(store, channel, "the pelican project", peer="43")
    later = await user(store, channel, "pelican again")
    found = await store.search_messages(key, "pelican", before_id=later.id, limit=5)
    assert [m.id for m in found] == [mine.id]
    await store.reset_context(key)
    after = await user(store, channel, "pelican once more")
    assert await store.search_messages(key, "pelican", before_id=after.id + 1, limit=5) == [after]


async def test_rarer_and_more_words_rank_first_and_later_messages_never_change_it(store: Store) -> None:
    """Messages matching more, and rarer, words of the request come first; the order stays the same however
    many messages (in this session later, or in other sessions) are stored after."""
    channel = FakeChannel()
    key = str(channel.key())
    both = await user(store, channel, "alpha plan and bravo plan")
    alpha = await user(store, channel, "the alpha plan")
    bravo = await user(store, channel, "the bravo plan")
    for n in range(4):
        await user(store, channel, f"bravo chatter {n}")
    request = await user(store, channel, "alpha or bravo?")
    first = await store.search_messages(key, request.text, before_id=request.id, limit=3)
    assert [m.id for m in first][:2] == [both.id, alpha.id]  # alpha is the rarer word
    assert bravo.id not in [m.id for m in first]  # newer bravo chatter ties it, and wins the tie
    for n in range(10):
        await user(store, channel, f"alpha talk {n}", peer="43")
        await user(store, channel, f"alpha after {n}")
    again = await store.search_messages(key, request.text, before_id=request.id, limit=3)
    assert again == first


async def test_a_word_in_most_messages_is_ignored(store: Store, tmp_path: Path) -> None:
    """A word found in more than RECALL_COMMON of the searched messages recalls nothing by itself, while
    the request's rarer words still find their message."""
    channel = FakeChannel()
    key = str(channel.key())
    rows = [(key, "user", "interactive", f"dinner plans {n}", 0.0, 4) for n in range(RECALL_COMMON + 1)]
    raw = sqlite3.connect(tmp_path / "switchboard.db")  # bulk insert; the triggers index them as usual
    with raw:
        raw.execute("INSERT INTO sessions (key, created_at, updated_at) VALUES (?, 0, 0)", (key,))
        raw.executemany("INSERT INTO messages (session_key, role, origin, text, created_at, "
                        "token_estimate) VALUES (?, ?, ?, ?, ?, ?)", rows)
    raw.close()
    rare = await user(store, channel, "dinner at the lighthouse")
    request = await user(store, channel, "dinner")
    assert await store.search_messages(key, "dinner", before_id=request.id, limit=3) == []
    found = await store.search_messages(key, "dinner lighthouse", before_id=request.id, limit=3)
    assert [m.id for m in found] == [rare.id]


async def test_a_match_is_recalled_with_its_whole_turn(store: Store) -> None:
    """A matching message comes with the question it answers and that question's replies, never past the
    lookback's start, and a reply whose question was before /reset comes with nothing."""
    channel = FakeChannel()
    key = str(channel.key())
    question = await user(store, channel, "which plant?")
    first = await store.append_reply(key, "the fern", request_id=question.id)
    second = await store.append_reply(key, "or the cactus")
    nxt = await user(store, channel, "thanks")
    whole = [question.id, first.id, second.id]
    for message in (question, first, second):
        assert [m.id for m in await store.turn_of(key, message.id, before_id=10**9)] == whole
    assert [m.id for m in await store.turn_of(key, question.id, before_id=second.id)] == whole[:2]
    assert [m.id for m in await store.turn_of(key, nxt.id, before_id=10**9)] == [nxt.id]
    await store.reset_context(key)
    late = await store.append_reply(key, "you are welcome")
    assert await store.turn_of(key, late.id, before_id=10**9) == []


def _msg(message_id: int, role: str) -> StoredMessage:
    return StoredMessage(message_id, "agent:main:fake:direct:42", role, "interactive", "x", 0.0)  # type: ignore[arg-type]


def test_triage_candidates_keep_leading_replies_apart_from_recalled_turns() -> None:
    """The lookback's leading replies are offered alone, before recalled turns, never glued to them."""
    recalled = [_msg(3, "user"), _msg(4, "assistant")]
    window = [_msg(20, "assistant"), _msg(21, "assistant"), _msg(22, "user"), _msg(23, "assistant")]
    order = [m.id for m in triage_candidates(recalled, window)]
    assert order == [20, 21, 3, 4, 22, 23]
    assert [[m.id for m in unit] for unit in group_turns(triage_candidates(recalled, window))] == [
        [20, 21], [3, 4], [22, 23]
    ]
    assert triage_candidates([], window) == window


def test_rank_matches_is_deterministic() -> None:
    """Ranking depends only on which messages match which words: the same hits give the same order."""
    hits = [{1, 2, 3, 4}, {2, 9}, set()]
    assert rank_matches(hits, total=20, limit=10) == [2, 9, 4, 3, 1]
    assert rank_matches(hits, total=20, limit=2) == [2, 9]
    assert rank_matches([], total=20, limit=2) == []


# -- recall in the context pipeline, end to end ------------------------------------------------------


def _recall_config(api: AnthropicStandIn, make_config: MakeConfig, recall_count: int) -> Config:
    return make_config(config_data(
        api,
        conversation={"lookback_count": 20, "always_include_recent": 4, "recall_count": recall_count},
        compaction={"enabled": False},
    ))


async def test_a_fact_from_long_ago_is_offered_to_triage_and_used_when_picked(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig
) -> None:
    """With recall on, a fact stated 120 messages ago (far past the lookback) is shown to triage, and when
    triage picks it the model gets it with the question."""
    fact = await seed_fact_then_chatter(view, channel)
    api.script(Text('{"relevant": [1]}'), model=FAST)
    async with daemon_with(_recall_config(api, make_config, 3), channel) as daemon:
        await say(daemon, channel, QUESTION)

    (asked,) = api.requests_for(FAST)
    lines = asked.messages[0]["content"].splitlines()
    assert lines[1].startswith("[1] Ada (") and lines[1].endswith(FACT)
    assert lines[2] == "    assistant replied: noted"  # a match comes with its whole turn
    assert lines[3].startswith("[2] Ada (") and lines[3].endswith("chatter number 50")
    (request,) = reply_requests(api)
    assert [m["content"] for m in request.messages[:2]] == [FACT, "noted"]
    assert request.messages[-1]["content"] == QUESTION
    (record,) = await view.snapshots(str(channel.key()))
    assert record.snapshot["recalled"] == [fact.id, fact.id + 1]
    assert record.snapshot["triaged"] == [fact.id, fact.id + 1]
    assert {e["id"]: e["reason"] for e in record.snapshot["entries"]}[fact.id] == "triaged"


async def test_a_recalled_turn_is_never_shown_with_someone_else_s_reply(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig
) -> None:
    """When the lookback starts with a reply whose question is older, triage sees that reply on its own,
    not as the answer to the recalled fact."""
    await seed_fact_then_chatter(view, channel)
    config = make_config(config_data(
        api, conversation={"lookback_count": 21, "always_include_recent": 4, "recall_count": 3},
        compaction={"enabled": False},
    ))
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, QUESTION)

    (asked,) = api.requests_for(FAST)
    lines = asked.messages[0]["content"].splitlines()
    assert lines[1].startswith("[1] assistant (") and lines[1].endswith("ok 49")
    assert lines[2].startswith("[2] Ada (") and lines[2].endswith(FACT)
    assert lines[3] == "    assistant replied: noted"
    assert lines[4].startswith("[3] Ada (") and lines[4].endswith("chatter number 50")
    assert sum(line.startswith("    assistant replied:") for line in lines) == 9


async def test_without_recall_the_old_fact_is_not_offered(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig
) -> None:
    """With recall_count = 0 (the default) a fact older than the lookback reaches neither triage nor model."""
    await seed_fact_then_chatter(view, channel)
    async with daemon_with(_recall_config(api, make_config, 0), channel) as daemon:
        await say(daemon, channel, QUESTION)

    (asked,) = api.requests_for(FAST)
    assert "4711" not in asked.messages[0]["content"]
    assert "4711" not in request_text(reply_requests(api)[0])
    (record,) = await view.snapshots(str(channel.key()))
    assert record.snapshot["recalled"] == []


async def test_recall_stops_at_reset(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig
) -> None:
    """After /reset, recall no longer finds what was said before it."""
    await seed_fact_then_chatter(view, channel, exchanges=12)
    async with daemon_with(_recall_config(api, make_config, 3), channel) as daemon:
        before = len(channel.sent)
        await channel.inject(channel.message("/reset", command="reset"))
        await wait_until(lambda: len(channel.sent) > before)
        await say(daemon, channel, QUESTION)

    assert "4711" not in request_text(reply_requests(api)[-1])
    assert api.requests_for(FAST) == []  # nothing older to triage after the reset
    record = (await view.snapshots(str(channel.key())))[-1]
    assert record.snapshot["recalled"] == []


async def test_recall_never_crosses_sessions(
    make_config: MakeConfig, store: Store
) -> None:
    """A fact told in another chat is never recalled into this one."""
    config = make_config({"conversation": {"lookback_count": 20, "recall_count": 5}})
    channel = FakeChannel()
    await seed_fact_then_chatter(store, channel, exchanges=15, peer="43")
    await seed_fact_then_chatter(store, channel, exchanges=0, peer="44")
    for n in range(30):
        await user(store, channel, f"chatter number {n}")
    request = await user(store, channel, QUESTION)
    # No API key: triage fails open and every candidate (recalled ones too) goes in.
    builder = ContextBuilder(config, store, AnthropicBrain(config.anthropic, None))
    context = await builder.build(channel.key(), request, ChatRef("fake", "42"))
    assert context.recalled == []
    assert all("4711" not in entry.message.text for entry in context.entries)

    other = await user(store, channel, QUESTION, peer="43")
    context = await builder.build(channel.key(peer="43"), other, ChatRef("fake", "43"))
    assert [m.text for m in (e.message for e in context.entries) if m.id in context.recalled] == [
        FACT, "noted"
    ]
