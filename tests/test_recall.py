"""Recall: a session's older messages found by their words in per-session postings, with their turns."""

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

from bot.config import Config
from bot.context.builder import ContextBuilder
from bot.core.messages import ChatRef, StoredMessage
from bot.models.brain import AnthropicBrain
from bot.ranking.lexical import (
    MAX_TERMS,
    content_words,
    index_terms,
    query_terms,
    score,
    search_terms,
    session_tag,
    term_weight,
)
from bot.store import RECALL_COMMON, Store
from bot.store.schema import migrations
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.fake_channel import FakeChannel
from tests.harness import FAST, config_data, daemon_with, reply_requests, request_text, say, wait_until
from tests.sql import execute, rows, traced, value

MakeConfig = Callable[[dict[str, Any]], Config]
FACT = "my locker combination is 4711"
QUESTION = "what was my locker combination again?"
FAR = 10**9


async def user(store: Store, channel: FakeChannel, text: str, peer: str = "42") -> StoredMessage:
    stored = await store.append_inbound(channel.message(text, peer=peer))
    assert stored is not None
    return stored


async def ids(store: Store, key: str, text: str, before_id: int = FAR, limit: int = 10) -> list[int]:
    matches, _ = await store.lexical_turns(key, text, before_id=before_id, limit=limit)
    return [message_id for message_id, _ in matches]


# -- words -------------------------------------------------------------------------------------------


def test_content_words_are_stems_numbers_and_names() -> None:
    """Content words are stemmed, folded and free of stopwords; numbers of 2+ digits and names stay."""
    assert content_words("Adopting the adoption, ADOPTED!") == ["adopt"]
    assert content_words("Café crème at Ölmühle") == ["cafe", "creme", "olmuhl"]
    assert content_words("my locker code is 4711, not 7") == ["locker", "code", "4711"]
    assert content_words("ask Jo about the AI plans v2") == ["ask", "jo", "ai", "plan", "v2"]
    assert content_words("Jo said so. Ok.") == []  # a capital starting a sentence is no name
    assert content_words("a an is of to the") == []
    assert len(query_terms(" ".join(f"word{n}" for n in range(40)))) == MAX_TERMS


def test_index_terms_carry_the_session_tag() -> None:
    """Every indexed term is one token starting with its session's tag, once per message."""
    tag = session_tag("agent:main:fake:direct:42")
    assert len(tag) == 10 and tag != session_tag("agent:main:fake:direct:43")
    terms = index_terms("agent:main:fake:direct:42", "Adopting, adoption: 日本語 and straße 4711").split()
    assert terms == [tag + "xadopt", tag + "y" + "日本語".encode().hex(), tag + "xstrass", tag + "x4711"]
    assert all(term.isalnum() and term.isascii() for term in terms)
    assert index_terms("k", "the and of") == ""


def test_search_terms_are_quoted_and_longer_stems_are_prefixes() -> None:
    """A request's terms are quoted FTS5 strings; stems of five letters or more also match as prefixes."""
    tag = session_tag("k")
    found = [term.match() for term in search_terms("k", "photo of the cat, 4711")]
    assert found == [f'"{tag}xphoto"*', f'"{tag}xcat"', f'"{tag}x4711"']


def test_weights_favour_rare_terms_and_short_messages() -> None:
    """A rarer term weighs more; the same terms score higher in a shorter message; never negative."""
    assert term_weight(1, 100) > term_weight(10, 100) > term_weight(100, 100) > 0
    assert score(3.0, 5) > score(3.0, 30) > score(3.0, 300) > 0


# -- searching -------------------------------------------------------------------------------------------


async def test_other_forms_of_a_word_numbers_and_names_are_found(store: Store) -> None:
    """'adopting' finds 'adoption', 'photo' finds 'photographs', and numbers and short names are found."""
    channel = FakeChannel()
    key = str(channel.key())
    adoption = await user(store, channel, "the adoption papers came")
    photos = await user(store, channel, "I framed the photographs")
    code = await user(store, channel, "the code is 4711")
    jo = await user(store, channel, "dinner with Jo on Friday")
    await user(store, channel, "something else entirely")
    assert await ids(store, key, "how is the adopting going?") == [adoption.id]
    assert await ids(store, key, "any photo left?") == [photos.id]
    assert await ids(store, key, "was it 4711?") == [code.id]
    assert await ids(store, key, "what did Jo say") == [jo.id]


async def test_a_short_stem_finds_only_itself_and_a_longer_one_also_the_words_it_begins(store: Store) -> None:
    """'plan' finds 'plans' but not 'planet' or 'plant'; 'garden' finds 'gardens' and 'gardenia'."""
    channel = FakeChannel()
    key = str(channel.key())
    plans = await user(store, channel, "my plans are set")
    await user(store, channel, "the planet is round")
    await user(store, channel, "we plant trees")
    gardenia = await user(store, channel, "a gardenia bloomed")
    gardens = await user(store, channel, "the gardens are big")
    assert await ids(store, key, "what about the plan?") == [plans.id]
    assert sorted(await ids(store, key, "how is the garden?")) == [gardenia.id, gardens.id]


async def test_matches_stay_in_their_session_and_above_the_reset_floor(store: Store) -> None:
    """Two users with the same words each find only their own messages, and nothing from before /reset."""
    channel = FakeChannel()
    mine, theirs = str(channel.key()), str(channel.key(peer="43"))
    old = await user(store, channel, "the pelican project")
    other = await user(store, channel, "the pelican project", peer="43")
    assert await ids(store, mine, "pelican") == [old.id]
    assert await ids(store, theirs, "pelican") == [other.id]
    assert await ids(store, mine, "pelican", before_id=old.id) == []
    await store.reset_context(mine)
    after = await user(store, channel, "pelican once more")
    assert await ids(store, mine, "pelican") == [after.id]
    assert await ids(store, theirs, "pelican") == [other.id]


async def test_fallback_replies_are_never_recalled(store: Store) -> None:
    """A reply marked as the fallback apology is never a match, whatever words it shares."""
    channel = FakeChannel()
    key = str(channel.key())
    question = await user(store, channel, "is the aquarium heater broken?")
    apology = await store.append_reply(key, "Sorry, aquarium heater trouble", request_id=question.id)
    await execute(store, "UPDATE messages SET fallback = 1 WHERE id = ?", (apology.id,))
    assert await ids(store, key, "aquarium heater") == [question.id]


async def test_rarer_and_more_words_rank_first_and_nothing_else_moves_scores(store: Store) -> None:
    """Messages with more, and rarer, words of the request rank first; scores stay exactly the same
    however many messages are stored later in the session or at any time in other sessions."""
    channel = FakeChannel()
    key = str(channel.key())
    both = await user(store, channel, "alpha plan and bravo plan")
    alpha = await user(store, channel, "the alpha plan")
    for n in range(4):
        await user(store, channel, f"bravo chatter {n}")
        await user(store, channel, f"alpha bravo elsewhere {n}", peer="43")
    request = await user(store, channel, "alpha or bravo?")
    first, _ = await store.lexical_turns(key, request.text, before_id=request.id, limit=3)
    assert [message_id for message_id, _ in first][:2] == [both.id, alpha.id]  # alpha is rarer
    # BM25 as bot.ranking.lexical computes it: alpha is in 2 of the 6 searched messages.
    assert dict(first)[alpha.id] == score(term_weight(2, 6), alpha.token_estimate)
    assert [s for _, s in first] == sorted((s for _, s in first), reverse=True)
    for n in range(10):
        await user(store, channel, f"alpha talk {n}", peer="43")
        await user(store, channel, f"alpha after {n}")
    assert (await store.lexical_turns(key, request.text, before_id=request.id, limit=3))[0] == first


async def test_a_word_in_too_many_messages_is_left_out(store: Store) -> None:
    """A word found in more than RECALL_COMMON of the searched messages recalls nothing by itself, while
    the request's rarer words still find their message."""
    channel = FakeChannel()
    key = str(channel.key())
    texts = [f"dinner plans {n}" for n in range(RECALL_COMMON + 1)]
    # A bulk insert, the terms written as the store does.
    await execute(store, "INSERT INTO sessions (key, created_at, updated_at) VALUES (?, 0, 0)", (key,))
    for text in texts:
        inserted = await value(
            store, "INSERT INTO messages (session_key, role, origin, text, created_at, token_estimate) "
            "VALUES (?, 'user', 'interactive', ?, 0, 4) RETURNING id", (key, text))
        await execute(store, "INSERT INTO recall_terms (message_id, terms) VALUES (?, ?)",
                      (inserted, index_terms(key, text)))
    rare = await user(store, channel, "dinner at the lighthouse")
    request = await user(store, channel, "dinner")
    assert await ids(store, key, "dinner", before_id=request.id) == []
    assert await ids(store, key, "dinner lighthouse", before_id=request.id) == [rare.id]


@pytest.mark.parametrize(
    "text",
    ['NEAR(alpha beta, 2)', "text:secret", "alpha AND beta OR NOT gamma", '"unbalanced quote',
     "prefix* ^start", "(paren", "-minus +plus", "{text}: col filter", "alpha''beta", "a:b:c"],
)
async def test_fts_syntax_in_user_text_is_searched_as_words(store: Store, text: str) -> None:
    """Messages with FTS5 operators, quotes or column filters are searched as plain words, never as syntax."""
    channel = FakeChannel()
    stored = await user(store, channel, f"notes on {text} here")
    request = await user(store, channel, text)
    found = await ids(store, str(channel.key()), text, before_id=request.id)
    assert found == ([stored.id] if query_terms(text) else [])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=60))
def test_search_never_raises_for_any_text(tmp_path: Path, text: str) -> None:
    """Whatever a user writes, storing it and searching older messages for it never raises."""
    with asyncio.Runner() as runner:

        async def check() -> None:
            async with Store.open(tmp_path / "property.db") as store:
                channel = FakeChannel()
                await user(store, channel, text or "empty")
                request = await user(store, channel, "request")
                found = await ids(store, str(channel.key()), text, before_id=request.id + 1)
                assert all(message_id <= request.id for message_id in found)

        runner.run(check())


# -- the index follows the log ----------------------------------------------------------------------


async def test_a_deleted_message_leaves_no_postings(store: Store, store_backend: str) -> None:
    """Pruned or deleted by hand, a message is no longer found and the index stays consistent."""
    channel = FakeChannel()
    key = str(channel.key())
    old = await user(store, channel, "the aquarium needs cleaning")
    await store.append_reply(key, "the aquarium is clean now", request_id=old.id)
    for n in range(6):
        await user(store, channel, f"later message {n}")
    assert await ids(store, key, "aquarium") == [old.id + 1, old.id]
    report = await store.prune_interactive(time.time() + 1, keep_recent=6, keep_turns={})
    assert report.messages == 2
    assert await ids(store, key, "aquarium") == []
    await execute(store, "DELETE FROM messages WHERE text = 'later message 5'")
    assert await rows(store, "SELECT COUNT(*) FROM recall_terms") == [(5,)]
    if store_backend == "sqlite":
        await execute(store, "INSERT INTO recall_fts (recall_fts, rank) VALUES ('integrity-check', 1)")
    else:  # every remaining message's terms are postings, and nothing else is
        postings = await rows(store, "SELECT term, message_id FROM recall_postings")
        terms = await rows(store,
            "SELECT t, message_id FROM recall_terms, unnest(string_to_array(terms, ' ')) AS t")
        assert sorted(postings) == sorted(terms) and len(terms) > 5
    assert len(await ids(store, key, "later")) == 5


async def test_scheduled_output_is_not_indexed(store: Store, tmp_path: Path) -> None:
    """Only interactive messages get terms: scheduled output is never a lexical match."""
    channel = FakeChannel()
    key = str(channel.key())
    await user(store, channel, "hello there")
    await store.append_reply(key, "your weekly aquarium reminder", origin="scheduled", job_id="fish")
    assert await ids(store, key, "aquarium") == []


async def test_a_schema_5_database_gets_its_terms_when_opened(tmp_path: Path) -> None:
    """Interactive messages stored before migration 6 are indexed when the store first opens it, and the
    backlog row goes; scheduled output stays unindexed."""
    path = tmp_path / "old.db"
    channel = FakeChannel()
    key = str(channel.key())
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
        for version, sql in enumerate(migrations("sqlite")[:5], start=1):
            raw.executescript(sql)
            raw.execute("INSERT INTO schema_migrations VALUES (?, 0)", (version,))
        raw.execute("INSERT INTO sessions (key, created_at, updated_at) VALUES (?, 0, 0)", (key,))
        rows = [("user", "interactive", f"the lighthouse keeper number {n}") for n in range(10, 22)]
        rows += [("assistant", "scheduled", "lighthouse news"), ("user", "interactive", "nothing")]
        raw.executemany("INSERT INTO messages (session_key, role, origin, text, created_at, token_estimate) "
                        "VALUES (?, ?, ?, ?, 0, 5)", [(key, *row) for row in rows])
    async with Store.open(path) as store:
        assert await store.schema_version() == len(migrations("sqlite"))
        assert len(await ids(store, key, "lighthouse", limit=20)) == 12
        assert await ids(store, key, "keeper number 17", limit=4) == [8, 12, 11, 10]
        new = await user(store, channel, "a new lighthouse")
        assert await ids(store, key, "lighthouse", limit=1) == [new.id]
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT COUNT(*) FROM index_backlog").fetchone() == (0,)
        assert raw.execute("SELECT COUNT(*) FROM recall_terms").fetchone() == (14,)


async def test_a_backlog_fill_cut_short_goes_on_where_it_stopped(tmp_path: Path) -> None:
    """The backlog row records how far the fill got: the next open indexes only what is left."""
    path = tmp_path / "cut.db"
    async with Store.open(path):
        pass
    key = str(FakeChannel().key())
    with sqlite3.connect(path) as raw:
        raw.execute("INSERT INTO sessions (key, created_at, updated_at) VALUES (?, 0, 0)", (key,))
        raw.executemany("INSERT INTO messages (session_key, role, origin, text, created_at, token_estimate) "
                        "VALUES (?, 'user', 'interactive', ?, 0, 5)",
                        [(key, f"kayak trip {n}") for n in range(10)])
        raw.execute("INSERT INTO index_backlog (name, upto) VALUES ('lexical', 6)")  # 7..10 done
        raw.execute("INSERT INTO recall_terms (message_id, terms) SELECT id, ? FROM messages WHERE id > 6",
                    (index_terms(key, "canoe"),))
    async with Store.open(path) as store:
        assert await ids(store, key, "kayak") == list(range(6, 0, -1))
        assert await ids(store, key, "canoe") == [10, 9, 8, 7]


async def test_each_search_and_turn_read_is_one_statement(store: Store) -> None:
    """lexical_turns (matches with their turns) and turns_of (here for 60 ids) each run a single
    SQL statement, and the turns lexical_turns gives are those turns_of gives for its matches."""
    channel = FakeChannel()
    key = str(channel.key())
    asked = []
    for n in range(60):
        said = await user(store, channel, f"walrus fact {n}")
        asked.append((await store.append_reply(key, f"noted {n}", request_id=said.id)).id)
    async with traced(store) as statements:
        found, found_turns = await store.lexical_turns(key, "walrus", before_id=FAR, limit=20)
        turns = await store.turns_of(key, asked, before_id=FAR)
    assert len(found) == 20 and len(found_turns) == 20 and len(turns) == 60
    assert len([sql for sql in statements if not sql.startswith("--")]) == 2  # "--": FTS5's own reads
    assert found_turns == await store.turns_of(key, [i for i, _ in found], before_id=FAR)


# -- turns -------------------------------------------------------------------------------------------------


async def test_turns_of_gives_each_id_its_whole_turn(store: Store) -> None:
    """Each id comes with the user message it is or answers and that message's replies, oldest first:
    never at or past before_id, never a fallback reply, at most max_len messages, nothing for a reply
    whose user message is below the context floor."""
    channel = FakeChannel()
    key = str(channel.key())
    question = await user(store, channel, "which plant?")
    first = await store.append_reply(key, "the fern", request_id=question.id)
    apology = await store.append_reply(key, "Sorry, something went wrong")
    second = await store.append_reply(key, "or the cactus")
    await store.append_reply(key, "weekly watering", origin="scheduled", job_id="plants")
    nxt = await user(store, channel, "thanks")
    await execute(store, "UPDATE messages SET fallback = 1 WHERE id = ?", (apology.id,))
    whole = [question.id, first.id, second.id]

    turns = await store.turns_of(key, [question.id, second.id, first.id, nxt.id], before_id=FAR)
    assert {asked: [m.id for m in turn] for asked, turn in turns.items()} == {
        question.id: whole, first.id: whole, second.id: whole, nxt.id: [nxt.id]
    }
    cut = await store.turns_of(key, [question.id, nxt.id], before_id=second.id)
    assert {asked: [m.id for m in turn] for asked, turn in cut.items()} == {question.id: whole[:2]}
    short = await store.turns_of(key, [second.id], before_id=FAR, max_len=2)
    assert [m.id for m in short[second.id]] == whole[:2]
    assert await store.turns_of(key, [question.id], before_id=FAR) == {question.id: turns[question.id]}
    assert await store.turns_of(key, [], before_id=FAR) == {}

    await store.reset_context(key)
    late = await store.append_reply(key, "you are welcome")
    after = await user(store, channel, "new question")
    turns = await store.turns_of(key, [late.id, nxt.id, after.id], before_id=FAR)
    assert {asked: [m.id for m in turn] for asked, turn in turns.items()} == {after.id: [after.id]}


# -- recall in the context pipeline, end to end ------------------------------------------------------


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


def _recall_config(api: AnthropicStandIn, make_config: MakeConfig, recall_count: int) -> Config:
    return make_config(config_data(
        api,
        conversation={"lookback_count": 20, "always_include_recent": 4, "recall_count": recall_count,
                      "semantic_count": 0},
        compaction={"enabled": False},
    ))


async def test_without_recall_the_old_fact_is_not_offered(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig
) -> None:
    """With recall_count = 0 a fact older than the lookback reaches neither triage nor model."""
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
    config = make_config({"conversation": {"lookback_count": 20, "recall_count": 5, "semantic_count": 0}})
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


@pytest.mark.sqlite_only
async def test_merging_the_index_brings_its_segments_down_and_finds_the_same(store: Store) -> None:
    """Each stored message adds a small index segment; the daemon's merge steps bring them down
    to one (searches look a term up in every segment) and change no search result."""
    channel = FakeChannel()
    for n in range(400):
        await user(store, channel, f"note {n} about the lighthouse keeper and word{n % 37} things")
    key = str(channel.key())
    before = await ids(store, key, "the lighthouse keeper's word12")

    async def segments() -> int:
        return int(await value(store, "SELECT COUNT(DISTINCT segid) FROM recall_fts_idx"))

    assert await segments() > 2
    for _ in range(20):
        await store.merge_recall_index()
    assert await segments() == 1
    assert await ids(store, key, "the lighthouse keeper's word12") == before
