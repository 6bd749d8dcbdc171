"""The candidate pool through the daemon: lookback, lexical and semantic recall merged by rank, shown
to triage with dates, the ranked fallback, and replay, with the API stand-in and real SQLite files."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from bot.config import Config, parse_config
from bot.context.builder import ContextBuilder
from bot.context.embed_worker import embed_backlog
from bot.context.replay import replay
from bot.context.semantic_recall import SemanticRecall
from bot.core.messages import ChatRef, StoredMessage
from bot.models.brain import AnthropicBrain
from bot.ranking.budget import message_cost
from bot.ranking.embedding import Embedder, load_embedder, unavailable_reason
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, Error, RecordedRequest, Response, Text
from bot.testing.chatter import CHATTER
from bot.testing.fake_channel import FakeChannel
from tests.harness import FAST, config_data, daemon_with, echo, reply_requests, request_text, say

MakeConfig = Callable[[dict[str, Any]], Config]
SEMANTIC = unavailable_reason(parse_config({}, "<defaults>")) is None
needs_semantic = pytest.mark.skipif(not SEMANTIC, reason="the semantic extra is not installed")

FACT = "I spent the weekend looking into adoption agencies"
QUESTION = "What did I research lately about growing our family?"


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    if not SEMANTIC:
        pytest.skip("the semantic extra is not installed")
    loaded = load_embedder(parse_config({}, "<defaults>"))
    assert loaded is not None
    return loaded


async def exchange(view: Store, channel: FakeChannel, text: str, peer: str = "42") -> list[StoredMessage]:
    inbound = await view.append_inbound(channel.message(text, peer=peer))
    assert inbound is not None
    reply = await view.append_reply(str(inbound.session_key), f"noted: {text}", request_id=inbound.id)
    return [inbound, reply]


async def seed(view: Store, channel: FakeChannel, fact: str, *, after: int = 36, peer: str = "42") -> list[
        StoredMessage]:
    """The fact first, then `after` exchanges of chatter: the fact is far beyond the lookback."""
    fact_turn = await exchange(view, channel, fact, peer)
    for n in range(1, after + 1):
        await exchange(view, channel, CHATTER[n % len(CHATTER)] + f" ({n})", peer)
    return fact_turn


def picking(marker: str) -> Callable[[RecordedRequest], Response]:
    """The API stand-in: the fast model picks the numbered turns mentioning `marker`; the reply model
    echoes."""
    def respond(request: RecordedRequest) -> Response:
        if request.model != FAST:
            return echo(request)
        prompt = str(request.messages[0]["content"])
        units = re.findall(r"^\[(\d+)\] (.*)$", prompt, re.MULTILINE)
        return Text(json.dumps({"relevant": [int(n) for n, text in units if marker in text]}))
    return respond


def config_for(api: AnthropicStandIn, make_config: MakeConfig, **conversation: Any) -> Config:
    semantic = "on" if conversation.pop("semantic", False) else "off"
    return make_config(config_data(
        api, conversation={"lookback_count": 20, "always_include_recent": 4, **conversation},
        semantic={"enabled": semantic}, compaction={"enabled": False},
    ))


def candidate_of(snapshot: dict[str, Any], message_id: int) -> dict[str, Any]:
    (found,) = [c for c in snapshot["candidates"] if message_id in c["ids"]]
    return found


@needs_semantic
async def test_a_fact_asked_in_other_words_is_found_by_meaning(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig,
    embedder: Embedder,
) -> None:
    """No word in common with the question: only semantic recall brings the fact to triage, as a
    whole turn with its date, and the reply model sees it."""
    fact = await seed(view, channel, FACT)
    await embed_backlog(view, embedder, batch_size=32)
    api.default = picking("adoption")
    async with daemon_with(config_for(api, make_config, semantic=True), channel) as daemon:
        await say(daemon, channel, QUESTION)

    (asked,) = api.requests_for(FAST)
    prompt = asked.messages[0]["content"]
    assert "what Ada said, then A: the assistant's reply" in prompt.splitlines()[0]
    assert re.search(r"^(\d{4}-)?\d\d-\d\d\n\[\d+\] " + FACT, prompt, re.MULTILINE)
    assert "\n A: noted: " in prompt  # the reply's opening words
    assert FACT in request_text(reply_requests(api)[0])
    (record,) = await view.snapshots(str(channel.key()))
    found = candidate_of(record.snapshot, fact[0].id)
    assert found["ids"] == [fact[0].id, fact[1].id] and found["chosen"] is True
    assert "semantic" in found["sources"] and "lexical" not in found["sources"]
    assert record.snapshot["triaged"] == [fact[0].id, fact[1].id]


async def test_a_fact_sharing_words_is_found_lexically_without_the_extra(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig
) -> None:
    """Without embeddings, the question's words still find the fact beyond the lookback."""
    fact = await seed(view, channel, "my locker combination at the gym is 4711")
    api.default = picking("4711")
    async with daemon_with(config_for(api, make_config), channel) as daemon:
        await say(daemon, channel, "what was the gym locker combination?")

    assert "4711" in request_text(reply_requests(api)[0])
    (record,) = await view.snapshots(str(channel.key()))
    found = candidate_of(record.snapshot, fact[0].id)
    assert found["sources"]["lexical"]["rank"] == 1 and "semantic" not in found["sources"]
    assert found["chosen"] is True
    assert record.snapshot["counts"]["found_lexical"] >= 1
    assert record.snapshot["counts"]["found_semantic"] == 0


@pytest.mark.parametrize("expansions", [16, 0])
async def test_a_fact_in_other_words_is_found_by_the_thesaurus_without_the_extra(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig, expansions: int
) -> None:
    """Without embeddings, the question's "guitar" finds the fact's "Fender" through the thesaurus
    made from the static table (`recall_expansions`); with 0 neighbours, nothing offers it."""
    fact = await seed(view, channel, "the Fender amp finally arrived")
    api.default = picking("Fender")
    async with daemon_with(config_for(api, make_config, recall_expansions=expansions), channel) as daemon:
        await say(daemon, channel, "how is my guitar setup coming along?")

    (record,) = await view.snapshots(str(channel.key()))
    offered = [c for c in record.snapshot["candidates"] if fact[0].id in c["ids"]]
    if expansions:
        assert offered[0]["sources"]["lexical"]["rank"] == 1 and offered[0]["chosen"] is True
        assert "Fender amp" in request_text(reply_requests(api)[0])
    else:
        assert offered == []
        assert "Fender amp" not in request_text(reply_requests(api)[0])


@pytest.mark.parametrize("encoder", ["static", pytest.param("minilm", marks=needs_semantic)])
async def test_beside_semantic_recall_the_thesaurus_is_not_searched(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig, encoder: str
) -> None:
    """With semantic recall on, by either encoder, the thesaurus' neighbours are not searched
    ("guitar" does not find "Fender" by words, as it does without semantic recall)."""
    fact = await seed(view, channel, "the Fender amp finally arrived")
    config = make_config(config_data(
        api, conversation={"lookback_count": 20, "always_include_recent": 4, "recall_expansions": 16},
        semantic={"enabled": "on", "encoder": encoder}, compaction={"enabled": False}))
    embedder = load_embedder(config)
    assert embedder is not None
    await embed_backlog(view, embedder, batch_size=32)
    api.default = picking("Fender")
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "how is my guitar setup coming along?")

    (record,) = await view.snapshots(str(channel.key()))
    offered = [c for c in record.snapshot["candidates"] if fact[0].id in c["ids"]]
    sources = offered[0]["sources"] if offered else {}
    assert "lexical" not in sources


@needs_semantic
async def test_candidates_never_cross_sessions(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig,
    embedder: Embedder,
) -> None:
    """Two users, the same words: each one's question finds only their own fact."""
    await seed(view, channel, FACT, peer="43")
    await seed(view, channel, "my locker combination at the gym is 4711", peer="43", after=0)
    await seed(view, channel, "the weekend was quiet", peer="42")
    await embed_backlog(view, embedder, batch_size=32)
    api.default = picking("adoption")
    async with daemon_with(config_for(api, make_config, semantic=True), channel) as daemon:
        await say(daemon, channel, QUESTION)
        await say(daemon, channel, "what was the gym locker combination?")

    for request in reply_requests(api):
        assert "adoption" not in request_text(request) and "4711" not in request_text(request)
    for record in await view.snapshots(str(channel.key())):
        messages = [await view.message_by_id(i) for c in record.snapshot["candidates"] for i in c["ids"]]
        assert all(m is not None and m.session_key == str(channel.key()) for m in messages)


async def test_a_history_limit_still_means_no_recall(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig
) -> None:
    """With a DM history limit the model sees only the last turns: nothing is recalled from before."""
    await seed(view, channel, "my locker combination at the gym is 4711", after=8)
    api.default = picking("4711")
    async with daemon_with(config_for(api, make_config, history_limit=3), channel) as daemon:
        await say(daemon, channel, "what was the gym locker combination?")

    assert "4711" not in request_text(reply_requests(api)[0])
    (record,) = await view.snapshots(str(channel.key()))
    assert record.snapshot["history_limit"] == 3
    assert all(set(c["sources"]) == {"lookback"} for c in record.snapshot["candidates"])
    assert record.snapshot["recalled"] == []


async def test_the_ranked_fallback_keeps_the_best_candidates_that_fit(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig
) -> None:
    """Triage fails: the best-ranked turns go in (the lexical match first), at most
    ranked_fallback_turns, within the budget; the rest of the pool stays out."""
    fact = await seed(view, channel, "my locker combination at the gym is 4711")

    def respond(request: RecordedRequest) -> Response:
        return Error(500, "api_error", retry_after=0.01) if request.model == FAST else echo(request)

    api.default = respond
    config = config_for(api, make_config, ranked_fallback_turns=3)
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "what was the gym locker combination?")

    assert "4711" in request_text(reply_requests(api)[0])
    (record,) = await view.snapshots(str(channel.key()))
    snapshot = record.snapshot
    assert snapshot["triage"]["outcome"] == "error"
    chosen = [c for c in snapshot["candidates"] if c["chosen"]]
    assert [c["rank"] for c in chosen] == [1, 2, 3]
    assert fact[0].id in chosen[0]["ids"]
    ranked_ids = {e["id"] for e in snapshot["entries"] if e["reason"] == "ranked"}
    assert ranked_ids == {i for c in chosen for i in c["ids"]}
    assert snapshot["tokens"]["estimate"] <= snapshot["tokens"]["budget"]


async def test_the_ranked_fallback_stops_at_its_tokens(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig
) -> None:
    """Triage fails and ranked_fallback_tokens is set: the best-ranked turns go in (the lexical
    match first) while their tokens fit it, though the count would take the whole pool."""
    fact = await seed(view, channel, "my locker combination at the gym is 4711")

    def respond(request: RecordedRequest) -> Response:
        return Error(500, "api_error", retry_after=0.01) if request.model == FAST else echo(request)

    api.default = respond
    config = config_for(api, make_config, ranked_fallback_turns=40, ranked_fallback_tokens=100)
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "what was the gym locker combination?")

    assert "4711" in request_text(reply_requests(api)[0])
    (record,) = await view.snapshots(str(channel.key()))
    candidates = record.snapshot["candidates"]
    chosen = [c for c in candidates if c["chosen"]]
    assert fact[0].id in chosen[0]["ids"]
    assert 2 <= len(chosen) < len(candidates)
    spent = 0
    for candidate in chosen:
        for message_id in candidate["ids"]:
            message = await view.message_by_id(message_id)
            assert message is not None
            spent += message_cost(message)
    assert spent <= 100


@needs_semantic
async def test_replay_matches_with_recall_and_embeddings(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig,
    embedder: Embedder,
) -> None:
    """Turns built with lexical and semantic candidates (and the request embedded on the turn) are
    rebuilt exactly: same pool, same scores, same entries."""
    await seed(view, channel, FACT, after=20)
    await embed_backlog(view, embedder, batch_size=32)
    api.default = picking("adoption")
    config = config_for(api, make_config, semantic=True)
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, QUESTION)
        await say(daemon, channel, "and what about the heating, is it fixed?")

    brain = AnthropicBrain(config.anthropic, None)
    key = str(channel.key())
    records = await view.snapshots(key)
    assert any("semantic" in c["sources"] for r in records for c in r.snapshot["candidates"])
    for turn in range(1, len(records) + 1):
        result = await replay(config, view, brain, key, turn)
        assert result.matches, (turn, result.recorded_ids, result.rebuilt_ids)
        assert [c.get("score") for c in result.record.snapshot["candidates"]] == [
            c["score"] for c in result.rebuilt.candidates
        ]
    await brain.aclose()


class BrokenModel:
    """A sentence model that fails whenever it is asked to encode."""

    model_id = "broken@0"

    def encode(self, texts: Any) -> Any:
        raise RuntimeError("the model fell over")


async def test_a_failing_semantic_model_leaves_lexical_recall_working(
    channel: FakeChannel, view: Store, make_config: MakeConfig
) -> None:
    """Semantic recall is optional: when the model fails, the turn goes on with lexical recall."""
    fact = await seed(view, channel, "my locker combination at the gym is 4711")
    request = await view.append_inbound(channel.message("what was the gym locker combination?"))
    assert request is not None
    config = make_config({"conversation": {"lookback_count": 20, "always_include_recent": 4}})
    builder = ContextBuilder(config, view, AnthropicBrain(config.anthropic, None),
                             semantic=SemanticRecall(view, BrokenModel()))  # type: ignore[arg-type]
    with capture_logs() as logs:
        context = await builder.build(channel.key(), request, ChatRef("fake", "42"))
    assert context.status == "ok"
    assert context.counts["found_semantic"] == 0
    assert any(fact[0].id in c["ids"] and "lexical" in c["sources"] for c in context.candidates)
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
        "semantic recall failed; this turn uses lexical recall only"
    ]


class CountingModel:
    """The real sentence model, counting the texts it is asked to encode."""

    def __init__(self, embedder: Embedder) -> None:
        self.model_id = embedder.model_id
        self.encoded: list[str] = []
        self._embedder = embedder

    def encode(self, texts: Any) -> Any:
        self.encoded.extend(texts)
        return self._embedder.encode(texts)


@needs_semantic
async def test_a_request_is_not_encoded_while_the_window_holds_the_whole_chat(
    channel: FakeChannel, view: Store, make_config: MakeConfig, embedder: Embedder
) -> None:
    """A chat's first message, and every one while the chat is shorter than the window, is built
    without encoding the request (nothing older to find by meaning); once the chat is longer, the
    request is encoded and its meaning finds the fact beyond the window."""
    config = make_config({"conversation": {"lookback_count": 20, "always_include_recent": 4}})
    model = CountingModel(embedder)
    builder = ContextBuilder(config, view, AnthropicBrain(config.anthropic, None),
                             semantic=SemanticRecall(view, model))  # type: ignore[arg-type]
    first = await view.append_inbound(channel.message(QUESTION))
    assert first is not None
    context = await builder.build(channel.key(), first, ChatRef("fake", "42"))
    assert context.entries == [] and model.encoded == []

    await view.append_reply(str(first.session_key), "noted", request_id=first.id)
    fact = await seed(view, channel, FACT, after=7)  # 18 messages in all: fewer than the window's 20
    request = await view.append_inbound(channel.message(QUESTION))
    assert request is not None
    context = await builder.build(channel.key(), request, ChatRef("fake", "42"))
    assert model.encoded == [] and context.counts["found_semantic"] == 0
    assert {m.id for m in fact} <= {e.message.id for e in context.entries}  # fail-open: all in

    await view.append_reply(str(request.session_key), "noted", request_id=request.id)
    await seed(view, channel, "the weekend was quiet", after=6)
    await embed_backlog(view, embedder, batch_size=32)
    request = await view.append_inbound(channel.message(QUESTION))
    assert request is not None
    context = await builder.build(channel.key(), request, ChatRef("fake", "42"))
    assert model.encoded == [f"Ada: {QUESTION}"]
    assert "semantic" in candidate_of({"candidates": context.candidates}, fact[0].id)["sources"]
