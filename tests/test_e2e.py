"""Full turns through the daemon and router, with the real SDK talking to the API stand-in."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.config import Config
from bot.core.messages import StoredMessage
from bot.daemon.assembly import Daemon
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, Error, RecordedRequest, Slow, Text
from bot.testing.fake_channel import FakeChannel
from bot.turn.runner import FALLBACK_REPLY
from tests.harness import (
    API_KEY,
    FAST,
    chat,
    config_data,
    daemon_with,
    echo,
    last_user_line,
    reply_requests,
    request_text,
    router_of,
    say,
    unstamped,
    wait_until,
)

MakeConfig = Callable[[dict[str, Any]], Config]
TOPICS = ["cats", "taxes", "weather", "lunch"]


async def seed(view: Store, channel: FakeChannel, topics: list[str]) -> list[StoredMessage]:
    """Store earlier exchanges (one question and one answer per topic) of the default DM."""
    stored: list[StoredMessage] = []
    for index, topic in enumerate(topics, start=1):
        message = channel.message(f"question about {topic}", message_id=f"seed-{index}")
        inbound = await view.append_inbound(message)
        assert inbound is not None
        stored.append(inbound)
        stored.append(await view.append_reply(str(message.session_key), f"answer about {topic}",
                                             request_id=inbound.id))
    return stored


def reasons(snapshot: dict[str, Any]) -> dict[int, str]:
    return {entry["id"]: entry["reason"] for entry in snapshot["entries"]}


async def test_a_dm_turn_is_answered_stored_and_snapshotted(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig, store_backend: str
) -> None:
    """A direct message gets the model's reply in the chat, both are stored, one snapshot is kept."""
    config = make_config(config_data(api))
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "hello there")

    assert [(m.chat, m.text) for m in channel.sent] == [(chat(channel), "re: hello there")]
    (request,) = reply_requests(api)
    assert [(m["role"], unstamped(m["content"])) for m in request.messages] == [("user", "hello there")]
    key = str(channel.key())
    history = await view.history(key, 10)
    assert [(m.role, m.text) for m in history] == [("user", "hello there"), ("assistant", "re: hello there")]
    assert history[1].provider_message_id == "out-1001"  # the id the channel sent it as
    (snapshot,) = await view.snapshots(key)
    assert (snapshot.request_message_id, snapshot.reply_message_id) == (history[0].id, history[1].id)


async def test_dm_history_limit_keeps_only_the_last_user_turns(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig
) -> None:
    """With dm_history_limit = 2 the model sees only the last two earlier exchanges of a DM."""
    channel = FakeChannel("telegram")
    config = make_config(config_data(api, channels={"telegram": {"dm_history_limit": 2}}))
    async with daemon_with(config, channel) as daemon:
        for n in range(1, 7):
            await say(daemon, channel, f"message {n}")

    sixth = reply_requests(api)[-1]
    users = [unstamped(m["content"]) for m in sixth.messages if m["role"] == "user"]
    assert users == ["message 4", "message 5", "message 6"]
    assert [m["content"] for m in sixth.messages if m["role"] == "assistant"] == [
        "re: message 4", "re: message 5"
    ]
    assert [m.text for m in channel.sent][-1] == "re: message 6"


async def test_triage_picks_the_older_turns_the_fast_model_names(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig
) -> None:
    """The fast model sees the older turns numbered, and only the one it picks joins the recent ones."""
    config = make_config(config_data(api, conversation={"always_include_recent": 2}))
    seeded = await seed(view, channel, TOPICS)
    api.script(Text('{"relevant": [1]}', input_tokens=50, output_tokens=7), model=FAST)
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "so what should I feed them?")

    (asked,) = api.requests_for(FAST)
    prompt = asked.messages[0]["content"]
    assert "what Ada said, then A: the assistant's reply" in prompt
    assert "\n[1] question about cats\n A: answer about cats\n" in prompt
    assert "\n[3] question about weather\n" in prompt
    assert "[4]" not in prompt and "lunch" not in prompt  # the guaranteed recent ones are not asked
    assert "New message: so what should I feed them?" in prompt

    (request,) = reply_requests(api)
    assert [unstamped(m["content"]) for m in request.messages] == [
        "question about cats", "answer about cats",
        "question about lunch", "answer about lunch",
        "so what should I feed them?",
    ]
    (snapshot,) = await view.snapshots(str(channel.key()))
    assert reasons(snapshot.snapshot) == {
        seeded[0].id: "triaged", seeded[1].id: "triaged",
        seeded[6].id: "recent", seeded[7].id: "recent",
    }
    triage = snapshot.snapshot["triage"]
    assert (triage["outcome"], triage["input_tokens"], triage["output_tokens"]) == ("selected", 50, 7)


async def test_without_a_key_every_older_message_is_kept_and_the_reply_is_the_fallback(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig
) -> None:
    """No API key: no triage, the ranked fallback keeps the best-ranked older turns (all three fit
    here), and the user gets the fallback text."""
    config = make_config(config_data(api, conversation={"always_include_recent": 2}))
    seeded = await seed(view, channel, TOPICS)
    async with daemon_with(config, channel, api_key=None) as daemon:
        await say(daemon, channel, "anyone home?")

    assert [m.text for m in channel.sent] == [FALLBACK_REPLY]
    assert api.count == 0
    key = str(channel.key())
    assert [m.text for m in await view.history(key, 2)] == ["anyone home?", FALLBACK_REPLY]
    (snapshot,) = await view.snapshots(key)
    chosen = reasons(snapshot.snapshot)
    assert sorted(chosen) == [m.id for m in seeded]
    assert [chosen[m.id] for m in seeded] == ["ranked"] * 6 + ["recent"] * 2
    assert snapshot.snapshot["triage"]["outcome"] == "fail_open"


@pytest.mark.parametrize(
    ("fallback", "failure", "expected_topics"),
    [
        ("recent", "errors", ["lunch"]),
        ("all", "errors", TOPICS),
        ("ranked", "errors", ["taxes", "weather", "lunch"]),
        ("recent", "timeout", ["lunch"]),
    ],
)
async def test_triage_failure_falls_back_as_configured(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig,
    fallback: str, failure: str, expected_topics: list[str],
) -> None:
    """When triage errors or times out the reply keeps the recent turns ("recent"), every one
    ("all"), or the best-ranked that fit (here the two newest: nothing matches "and now?")."""
    config = make_config(config_data(api, conversation={
        "always_include_recent": 2, "selection_fallback": fallback, "ranked_fallback_turns": 2,
    }))
    await seed(view, channel, TOPICS)
    if failure == "errors":
        api.script(*[Error(500, "api_error", retry_after=0.01)] * 2, model=FAST)
    else:
        api.script(Slow(3.0, Text('{"relevant": [1, 2, 3]}')), model=FAST)
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "and now?")

    (request,) = reply_requests(api)
    sent = request_text(request)
    for topic in TOPICS:
        assert (f"question about {topic}" in sent) is (topic in expected_topics)
    assert [m.text for m in channel.sent] == ["re: and now?"]
    (snapshot,) = await view.snapshots(str(channel.key()))
    assert snapshot.snapshot["triage"]["outcome"] in ("error", "timeout")


async def test_a_reply_brings_back_an_old_bot_message(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig
) -> None:
    """Replying to an old bot message puts that message in context even beyond the lookback."""
    config = make_config(config_data(api, conversation={"lookback_count": 4}))
    async with daemon_with(config, channel) as daemon:
        for text in ("recipe for soup", "second", "third", "fourth"):
            await say(daemon, channel, text)
        first_reply = (await view.history(str(channel.key()), 10))[1]
        assert first_reply.text == "re: recipe for soup"
        assert first_reply.provider_message_id is not None
        await say(daemon, channel, "more salt?", reply_to=first_reply.provider_message_id)

    last = reply_requests(api)[-1]
    assert {"role": "assistant", "content": "re: recipe for soup"} in last.messages
    assert "re: second" not in request_text(last)  # outside the lookback of 4
    snapshot = (await view.snapshots(str(channel.key())))[-1].snapshot
    assert snapshot["reply_to"] == first_reply.id
    assert reasons(snapshot)[first_reply.id] == "reply_to"


async def test_scheduled_output_stays_out_unless_just_sent_or_replied_to(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig
) -> None:
    """Briefings stay out of context, except those since the user's last message and a replied-to one."""
    config = make_config(config_data(api))
    key = str(channel.key())

    async def briefing(n: int) -> StoredMessage:
        stored = await view.append_reply(key, f"briefing-{n:02d}: news", origin="scheduled", job_id="news")
        await view.mark_delivered(stored.id, chat(channel), [f"s{n}"])
        return stored

    def briefings_in(request: RecordedRequest) -> set[str]:
        return set(re.findall(r"briefing-\d\d", request_text(request)))

    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "good morning")
        ten = [await briefing(n) for n in range(1, 11)]
        await say(daemon, channel, "thanks")
        await say(daemon, channel, "what's new?")
        moved_past = reply_requests(api)[-1]
        eleventh = await briefing(11)
        await say(daemon, channel, "tell me more")
        right_after = reply_requests(api)[-1]
        await say(daemon, channel, "why this one?", reply_to="s3")
        replying = reply_requests(api)[-1]

    assert briefings_in(moved_past) == set()
    assert briefings_in(right_after) == {"briefing-11"}
    assert "[Scheduled messages you sent in this chat since the user's previous message:]" in (
        right_after.messages[-1]["content"]
    )
    assert briefings_in(replying) == {"briefing-03"}
    snapshots = [s.snapshot for s in await view.snapshots(key)]
    assert snapshots[2]["scheduled_block"] == [] and snapshots[2]["reply_to"] is None
    assert snapshots[3]["scheduled_block"] == [eleventh.id]
    assert (snapshots[4]["scheduled_block"], snapshots[4]["reply_to"]) == ([], ten[2].id)


async def test_the_same_platform_message_is_stored_and_answered_once(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig, store_backend: str
) -> None:
    """A platform message delivered twice (same provider id) is stored once and answered once."""
    config = make_config(config_data(api))
    message = channel.message("only once please", message_id="777")
    async with daemon_with(config, channel) as daemon:
        await channel.inject(message)
        await channel.inject(message)
        await router_of(daemon).idle()

    assert [m.text for m in channel.sent] == ["re: only once please"]
    assert api.count == 1
    history = await view.history(str(channel.key()), 10)
    assert [m.text for m in history] == ["only once please", "re: only once please"]


async def test_a_burst_is_answered_in_order_while_other_sessions_proceed(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig
) -> None:
    """Messages sent in a burst are answered one at a time in order; another chat is not held up."""
    config = make_config(config_data(api, conversation={"use_selection": False}))

    def slow_echo(request: RecordedRequest) -> Text:
        return Text(f"re: {last_user_line(request)}", delay=0.05)

    api.default = slow_echo
    async with daemon_with(config, channel) as daemon:
        for n in range(1, 6):
            await channel.inject(channel.message(f"a{n}"))
        await channel.inject(channel.message("b1", peer="7", sender="7", name="Bea"))
        await router_of(daemon).idle()

    to_ada = [m.text for m in channel.sent if m.chat.chat_id == "42"]
    assert to_ada == [f"re: a{n}" for n in range(1, 6)]
    assert [m.text for m in channel.sent if m.chat.chat_id == "7"] == ["re: b1"]
    ada_requests = [r for r in api.requests if last_user_line(r).startswith("a")]
    assert [last_user_line(r) for r in ada_requests] == [f"a{n}" for n in range(1, 6)]
    for n, request in enumerate(ada_requests[1:], start=2):
        # the model is asked about message n only once its answer to message n-1 is stored
        answers = [m["content"] for m in request.messages if m["role"] == "assistant"]
        assert any(f"re: a{n - 1}" in answer for answer in answers)
        assert f"a{n + 1}" not in request_text(request)
    order = [last_user_line(r) for r in api.requests]
    assert order.index("b1") < order.index("a2")
    history = await view.history(str(channel.key()), 20)
    assert [m.text for m in history if m.role == "assistant"] == to_ada


async def test_model_outage_gets_a_fallback_reply_and_the_daemon_carries_on(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig
) -> None:
    """When the model stays overloaded the user gets a short stored fallback, and later turns work."""
    config = make_config(config_data(api))
    api.default = lambda rec: Error(529, "overloaded_error", "Overloaded", retry_after=0.01)
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "are you there?")
        assert api.count == 2  # max_retries = 1
        api.default = echo
        await say(daemon, channel, "and now?")

    assert [m.text for m in channel.sent] == [FALLBACK_REPLY, "re: and now?"]
    history = await view.history(str(channel.key()), 10)
    assert [m.text for m in history] == ["are you there?", FALLBACK_REPLY, "and now?", "re: and now?"]
    # The apology is not something the agent said: the next request holds the unanswered question,
    # never the apology as the agent's earlier reply.
    (answered,) = [r for r in reply_requests(api) if last_user_line(r) == "and now?"]
    assert FALLBACK_REPLY not in request_text(answered)
    assert [m["role"] for m in answered.messages] == ["user"]
    assert "are you there?" in request_text(answered)


async def test_briefings_from_before_a_reset_stay_out_of_the_next_request(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig
) -> None:
    """/reset starts afresh: a briefing delivered before it is not shown as "sent since the user's
    previous message" in the first request after it; one delivered after it is."""
    config = make_config(config_data(api))
    key = str(channel.key())

    async def briefing(text: str, sent_as: str) -> None:
        stored = await view.append_reply(key, text, origin="scheduled", job_id="news")
        await view.mark_delivered(stored.id, chat(channel), [sent_as])

    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "good morning")
        await briefing("briefing-old: markets", "s1")
        await say(daemon, channel, "/reset", command="reset")
        await wait_until(lambda: any("fresh" in m.text.lower() or "reset" in m.text.lower()
                                     for m in channel.sent))
        await say(daemon, channel, "hello again")
        after_reset = reply_requests(api)[-1]
        await briefing("briefing-new: weather", "s2")
        await say(daemon, channel, "anything new?")
        later = reply_requests(api)[-1]

    assert last_user_line(after_reset) == "hello again"
    assert "briefing-old" not in request_text(after_reset)
    assert "good morning" not in request_text(after_reset)
    assert "briefing-new" in request_text(later) and "briefing-old" not in request_text(later)


@pytest.mark.parametrize(("delay", "grace", "finished"), [(0.2, 2.0, True), (5.0, 0.1, False)])
async def test_stop_finishes_or_abandons_the_turn_in_flight_and_closes_the_database(
    api: AnthropicStandIn, channel: FakeChannel, db: Path, make_config: MakeConfig,
    delay: float, grace: float, finished: bool,
) -> None:
    """A stop during a turn finishes it within the grace period (or abandons it), losing no input."""
    config = make_config(
        config_data(api, router={"shutdown_grace": grace}, anthropic={"timeout": 10.0})
    )
    api.default = lambda rec: Text("slow answer", delay=delay)
    brain = AnthropicBrain(config.anthropic, API_KEY)
    daemon = Daemon(config, [channel], brain=brain)
    task = asyncio.create_task(daemon.run())
    try:
        await channel.inject(channel.message("take your time"))
        await wait_until(lambda: api.count == 1)
        daemon.request_stop()
        await asyncio.wait_for(task, timeout=5)
    finally:
        await brain.aclose()

    assert [m.text for m in channel.sent] == (["slow answer"] if finished else [])
    async with Store.open(db) as reopened:
        history = await reopened.history(str(channel.key()), 10)
    expected = ["take your time", "slow answer"] if finished else ["take your time"]
    assert [m.text for m in history] == expected
