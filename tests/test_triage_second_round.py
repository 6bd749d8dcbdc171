"""Triage's second round through the daemon (issue 38): when the fast model picks 1-3 turns, the
turns nearest them by their stored vectors are offered in a second call, with the API stand-in,
the shipped static encoder and real SQLite files."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.cli.context_view import context_lines
from bot.config import Config, parse_config
from bot.context.embed_worker import embed_backlog
from bot.context.replay import replay
from bot.core.errors import ConfigError
from bot.core.messages import StoredMessage
from bot.models.brain import AnthropicBrain
from bot.ranking.embedding import Embedder, embedding_text, load_embedder, unavailable_reason, vector_bytes
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, Error, RecordedRequest, Response, Text
from bot.testing.chatter import CHATTER
from bot.testing.fake_channel import FakeChannel
from tests.harness import FAST, config_data, daemon_with, echo, reply_requests, request_text, say
from tests.test_web import browser, free_port, log_in, with_account

MakeConfig = Callable[[dict[str, Any]], Config]
STATIC = {"enabled": "on", "encoder": "static"}
pytestmark = pytest.mark.skipif(
    unavailable_reason(parse_config({"semantic": STATIC}, "<static>")) is not None,
    reason="the static encoder is not available")

FACT = "I spent the weekend looking into adoption agencies"
NEIGHBOUR = "my grandmother taught me her recipe for plum dumplings"
QUESTION = "What did I find out about adoption agencies?"


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    loaded = load_embedder(parse_config({"semantic": STATIC}, "<static>"))
    assert loaded is not None
    return loaded


async def exchange(view: Store, channel: FakeChannel, text: str) -> list[StoredMessage]:
    inbound = await view.append_inbound(channel.message(text))
    assert inbound is not None
    reply = await view.append_reply(str(inbound.session_key), f"noted: {text}", request_id=inbound.id)
    return [inbound, reply]


async def seed(view: Store, channel: FakeChannel, embedder: Embedder) -> tuple[list[StoredMessage], ...]:
    """The neighbour's turn first, the fact's turn ten exchanges later, then 26 more: both far
    beyond the lookback. The fact's message is stored with the neighbour's vector, so that (and
    nothing the question says) makes the neighbour the nearest turn to the fact."""
    neighbour = await exchange(view, channel, NEIGHBOUR)
    for n in range(10):
        await exchange(view, channel, f"{CHATTER[n % len(CHATTER)]} ({n})")
    fact = await exchange(view, channel, FACT)
    for n in range(10, 36):
        await exchange(view, channel, f"{CHATTER[n % len(CHATTER)]} ({n})")
    (vector,) = embedder.encode([embedding_text(neighbour[0])])
    await view.save_embeddings(embedder.model_id, [
        (fact[0].id, str(channel.key()), vector_bytes(vector), FACT)])
    await embed_backlog(view, embedder, batch_size=32)
    return neighbour, fact


def picking(*markers: str, second: Response | None = None) -> Callable[[RecordedRequest], Response]:
    """The API stand-in: the fast model picks the numbered turns mentioning a marker (with
    `second`, it answers that whenever the fact is not among the turns shown); the reply model
    echoes."""
    def respond(request: RecordedRequest) -> Response:
        if request.model != FAST:
            return echo(request)
        prompt = str(request.messages[0]["content"])
        if second is not None and FACT not in prompt:
            return second
        units = re.findall(r"^\[(\d+)\] (.*)$", prompt, re.MULTILINE)
        chosen = [int(n) for n, text in units if any(marker in text for marker in markers)]
        return Text(json.dumps({"relevant": chosen}))
    return respond


def config_for(api: AnthropicStandIn, make_config: MakeConfig, **conversation: Any) -> Config:
    """Three turns in the first pool, two found by meaning: the neighbour is not among them."""
    return make_config(config_data(
        api, conversation={"lookback_count": 20, "always_include_recent": 4, "triage_max_candidates": 3,
                           "semantic_count": 2, **conversation},
        semantic=STATIC, compaction={"enabled": False},
    ))


async def test_the_picks_neighbours_are_offered_in_a_second_call(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig,
    embedder: Embedder,
) -> None:
    """The fast model picks the fact alone; the turns nearest the fact's stored vector (the
    neighbour first) go to it in a second call, which picks the neighbour; both reach the reply,
    and the two calls' tokens are counted as the turn's triage."""
    neighbour, fact = await seed(view, channel, embedder)
    api.default = picking("adoption", "dumplings")
    async with daemon_with(config_for(api, make_config, triage_second_round=2), channel) as daemon:
        await say(daemon, channel, QUESTION)

    first, second = (str(r.messages[0]["content"]) for r in api.requests_for(FAST))
    assert FACT in first and NEIGHBOUR not in first
    assert NEIGHBOUR in second and FACT not in second
    assert len(re.findall(r"^\[\d+\] ", second, re.MULTILINE)) == 2
    sent = request_text(reply_requests(api)[0])
    assert FACT in sent and NEIGHBOUR in sent
    (record,) = await view.snapshots(str(channel.key()))
    assert sorted(record.snapshot["triaged"]) == sorted(m.id for m in neighbour + fact)
    (offered,) = [c for c in record.snapshot["candidates"] if neighbour[0].id in c["ids"]]
    assert list(offered["sources"]) == ["neighbour"] and offered["chosen"] is True
    shown = context_lines(record, 1, {m.id: m for m in neighbour + fact}, full=False)
    pool = shown[next(i for i, line in enumerate(shown) if line.startswith("candidates (")):]
    (row,) = [line for line in pool if f"#{neighbour[0].id} " in line]
    assert re.search(r"  2:1 1\.000\s+yes  ", row), row  # the second round's first, as the CLI shows it
    assert record.snapshot["triage"]["input_tokens"] == 20  # 10 a call from the stand-in
    (triage,) = [u for u in await view.usage_since(0) if u.kind == "triage"]
    assert (triage.input_tokens, triage.output_tokens) == (20, 10)


async def test_a_failing_second_call_keeps_the_first_picks(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig,
    embedder: Embedder,
) -> None:
    """The second call fails: the first round's pick still reaches the reply, and the report
    says the second round failed."""
    _, fact = await seed(view, channel, embedder)
    api.default = picking("adoption", "dumplings",
                          second=Error(400, "invalid_request_error", "second call refused"))
    async with daemon_with(config_for(api, make_config, triage_second_round=2), channel) as daemon:
        await say(daemon, channel, QUESTION)

    assert any(NEIGHBOUR in str(r.messages[0]["content"]) for r in api.requests_for(FAST))
    sent = request_text(reply_requests(api)[0])
    assert FACT in sent and NEIGHBOUR not in sent
    (record,) = await view.snapshots(str(channel.key()))
    assert record.snapshot["triaged"] == [m.id for m in fact]
    triage = record.snapshot["triage"]
    assert triage["outcome"] == "selected" and triage["error"].startswith("second round error")


@pytest.mark.parametrize("setting", [{}, {"triage_second_round": 0}])
async def test_off_by_default_triage_is_one_call(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig,
    embedder: Embedder, setting: dict[str, int],
) -> None:
    """Unset (or 0), the fact alone picked is all: one call, the neighbour never shown."""
    await seed(view, channel, embedder)
    api.default = picking("adoption", "dumplings")
    async with daemon_with(config_for(api, make_config, **setting), channel) as daemon:
        await say(daemon, channel, QUESTION)

    (asked,) = api.requests_for(FAST)
    assert FACT in str(asked.messages[0]["content"])
    assert NEIGHBOUR not in request_text(reply_requests(api)[0])


@pytest.mark.parametrize("markers", [("nothing said",), ("",)], ids=["none", "every"])
async def test_no_second_call_when_the_first_picks_none_or_more_than_three(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig,
    embedder: Embedder, markers: tuple[str, ...],
) -> None:
    """A first round that picks nothing has nothing to seed a second; one that picks more than
    three (here all six turns shown) found enough: one call either way."""
    await seed(view, channel, embedder)
    api.default = picking(*markers)
    config = config_for(api, make_config, triage_second_round=4, triage_max_candidates=6)
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, QUESTION)

    (asked,) = api.requests_for(FAST)
    assert len(re.findall(r"^\[\d+\] ", str(asked.messages[0]["content"]), re.MULTILINE)) == 6
    (record,) = await view.snapshots(str(channel.key()))
    assert record.snapshot["triage"]["selected"] == (6 if markers == ("",) else 0)


async def test_replay_rebuilds_the_second_round(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig,
    embedder: Embedder,
) -> None:
    """Replay answers both rounds from the snapshot and rebuilds the same two pools and entries."""
    neighbour, _ = await seed(view, channel, embedder)
    api.default = picking("adoption", "dumplings")
    config = config_for(api, make_config, triage_second_round=2)
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, QUESTION)

    brain = AnthropicBrain(config.anthropic, None)
    result = await replay(config, view, brain, str(channel.key()), 1)
    await brain.aclose()
    assert result.matches, (result.recorded_ids, result.rebuilt_ids)
    assert neighbour[0].id in result.rebuilt_ids


async def test_the_console_marks_the_second_rounds_turns(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig,
    embedder: Embedder, db: Path,
) -> None:
    """The turn's page shows the neighbour in the semantic column as the second round's, kept."""
    neighbour, _ = await seed(view, channel, embedder)
    api.default = picking("adoption", "dumplings")
    await with_account(db)
    port = free_port()
    config = config_for(api, make_config, triage_second_round=2)
    config = make_config({**config_data(api, web={"enabled": True, "listen": f"127.0.0.1:{port}"}),
                          "conversation": config.conversation.model_dump(), "semantic": STATIC,
                          "compaction": {"enabled": False}})
    async with daemon_with(config, channel) as daemon, browser() as client:
        await say(daemon, channel, QUESTION)
        url = f"http://127.0.0.1:{port}{config.web.base_path}"
        await log_in(client, url)
        async with client.get(f"{url}/sessions/{channel.key()}/turns/-1") as page:
            html = await page.text()
    row = html[html.index(f"<td>#{neighbour[0].id}</td>"):]
    row = row[:row.index("</tr>")]
    assert re.search(r"<td>2nd round 1 <span class=\"muted\">1\.000</span></td>", row), row
    assert "<td>yes</td>" in row


def test_the_setting_is_checked() -> None:
    """A negative or oversized second pool is refused, naming the key."""
    for value in (-1, 61):
        with pytest.raises(ConfigError, match=r"conversation\.triage_second_round"):
            parse_config({"conversation": {"triage_second_round": value}}, "config.toml")


async def test_the_store_finds_a_messages_neighbours_older_and_newer(store: Store) -> None:
    """By a message's stored vector: the nearest first, older and newer alike, itself and
    anything from `before_id` on left out; nothing for a message without a vector."""
    channel = FakeChannel()
    said = [await store.append_inbound(channel.message(f"message {n}")) for n in range(6)]
    ids = [message.id for message in said if message is not None]
    directions = [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.9, 0.1, 0.0), (0.0, 0.0, 1.0), (0.8, 0.3, 0.0)]
    await store.save_embeddings("test@1", [
        (message_id, str(channel.key()), vector_bytes(vector), f"message {n}")
        for n, (message_id, vector) in enumerate(zip(ids, directions, strict=False))])
    found = await store.semantic_neighbours(
        str(channel.key()), [ids[2], ids[5]], model="test@1", before_id=ids[5], limit=2)
    assert [[i for i, _ in matches] for matches in found] == [[ids[0], ids[4]], []]
    assert (await store.semantic_neighbours(
        str(channel.key()), [ids[2]], model="test@1", before_id=ids[4], limit=5))[0][-1][0] == ids[3]
