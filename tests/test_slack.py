"""Slack end to end: the daemon with the real slack-bolt (Socket Mode) against the Web API + Socket
Mode stand-in."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from bot.config import Config, SlackConfig
from bot.core.messages import ChatRef, InboundMessage, StoredMessage
from bot.daemon.assembly import Daemon
from bot.intake.access import APPROVED_REPLY
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, Text
from bot.testing.recording_intake import RecordingIntake
from bot.testing.slack_api import SlackStandIn
from channels.slack.channel import SlackChannel
from tests.harness import API_KEY, config_data, echo, reply_requests, request_text, router_of, running
from tests.test_pairing import cli

MakeConfig = Callable[[dict[str, Any]], Config]
ALICE, BOB, STRANGER = "U0ALICE", "U0BOB", "U0MALLORY"
DM_ALICE, DM_STRANGER = "D0ALICE", "D0MALLORY"
GENERAL, RANDOM = "C0GENERAL", "C0RANDOM"


@pytest.fixture
async def slack() -> AsyncIterator[SlackStandIn]:
    async with SlackStandIn(ack_timeout=1.0) as standin:
        standin.add_user(ALICE, "alice", "Alice Liddell")
        standin.add_user(BOB, "bob")
        standin.add_user(STRANGER, "mallory")
        yield standin


@pytest.fixture
def slack_config(
    api: AnthropicStandIn, slack: SlackStandIn, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Config]:
    """Configs with Slack on: Alice and Bob may DM, #general is allowed."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", slack.bot_token)
    monkeypatch.setenv("SLACK_APP_TOKEN", slack.app_token)

    def make(**section: Any) -> Config:
        values = {"enabled": True, "base_url": slack.base_url, "allow_from": [ALICE, BOB],
                  "channels": [GENERAL], **section}
        return make_config(config_data(api, channels={"slack": values}))

    return make


def make_channel(config: Config) -> SlackChannel:
    return SlackChannel(config.channels.slack, agent_id=config.agent.id, bot_token="xoxb-test-token",
                        app_token="xapp-test-token")


@asynccontextmanager
async def slack_daemon(config: Config) -> AsyncIterator[Daemon]:
    """The daemon as `switchboard run` assembles it, with Slack as its only channel."""
    channel = make_channel(config)
    async with running(config, [channel], AnthropicBrain(config.anthropic, API_KEY)) as daemon:
        await asyncio.wait_for(channel.ready.wait(), 10)
        yield daemon


async def settled(slack: SlackStandIn, daemon: Daemon) -> None:
    """Return once every envelope was acknowledged (stored or refused) and every turn it started ran,
    the bot's own messages those turns posted included."""
    while True:
        count = len(slack.envelopes)
        await slack.all_acked()
        await router_of(daemon).idle()
        if len(slack.envelopes) == count:
            return


async def all_messages(config: Config) -> list[StoredMessage]:
    async with Store.open(config.database_path()) as store:
        found = []
        for session in await store.list_sessions():
            found.extend(await store.history(session.key, 100))
        return found


async def test_a_dm_is_answered_and_stored_with_its_slack_ids(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """A DM gets the model's reply in the same DM, top level; both are stored with their ts."""
    config = slack_config()
    async with slack_daemon(config) as daemon:
        asked = slack.message(DM_ALICE, ALICE, "hello there")
        await slack.wait_for(lambda: slack.sent)
        slack.message(DM_ALICE, ALICE, "and again")
        await slack.wait_for(lambda: len(slack.sent) == 2)
        await settled(slack, daemon)

    first, second = slack.sent
    assert (first.channel, first.text, first.thread_ts) == (DM_ALICE, "re: hello there", None)
    assert second.text == "re: and again"
    assert "hello there" in request_text(reply_requests(api)[1])
    async with Store.open(config.database_path()) as store:
        history = await store.history(f"agent:main:slack:direct:{ALICE}", 10)
        by_ts = await store.message_by_provider_id(ChatRef("slack", DM_ALICE), first.ts)
    assert [(m.role, m.text, m.sender_name) for m in history] == [
        ("user", "hello there", "alice"), ("assistant", "re: hello there", None),
        ("user", "and again", "alice"), ("assistant", "re: and again", None)]
    assert history[0].provider_message_id == asked["ts"]
    assert by_ts is not None and by_ts.id == history[1].id
    assert not slack.unacked and len(slack.calls_of("auth.test")) >= 1


async def test_channel_chatter_is_stored_and_only_a_mention_is_answered_once(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """Unaddressed channel messages become context (with names); the @mention, which Slack sends as
    both `message` and `app_mention`, is stored once and answered once, at the top level; a channel
    not allowed is ignored."""
    config = slack_config()
    async with slack_daemon(config) as daemon:
        slack.message(GENERAL, BOB, "the meeting moved to Thursday")
        slack.message(GENERAL, BOB, "<!here> heads up")
        slack.message(RANDOM, ALICE, f"<@{slack.bot_user_id}> not here")
        slack.message(GENERAL, ALICE, f"<@{slack.bot_user_id}> when is the meeting?")
        await slack.wait_for(lambda: slack.sent)
        await settled(slack, daemon)

    (sent,) = slack.sent
    assert (sent.channel, sent.thread_ts) == (GENERAL, None)
    assert sent.text == "re: [alice]: @switchboard when is the meeting?"
    (request,) = reply_requests(api)
    assert "[bob]: the meeting moved to Thursday" in request_text(request)
    stored = await all_messages(config)
    assert {m.session_key for m in stored} == {f"agent:main:slack:channel:{GENERAL}"}
    assert [m.role for m in stored] == ["user"] * 3 + ["assistant"]
    assert [e.payload["event"]["type"] for e in slack.envelopes].count("app_mention") == 2


async def test_a_thread_reply_stays_in_its_thread_and_its_session(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """A mention inside a thread is answered in that thread, in the thread's own session, with the
    channel's top-level chatter kept out of it."""
    config = slack_config()
    async with slack_daemon(config) as daemon:
        top = slack.message(GENERAL, BOB, "plans for the offsite")
        slack.message(GENERAL, ALICE, "lunch anyone?")
        slack.message(GENERAL, ALICE, f"<@{slack.bot_user_id}> what should we plan?", thread_ts=top["ts"])
        await slack.wait_for(lambda: slack.sent)
        await settled(slack, daemon)

    (sent,) = slack.sent
    assert (sent.channel, sent.thread_ts) == (GENERAL, top["ts"])
    thread_key = f"agent:main:slack:channel:{GENERAL}:thread:{top['ts']}"
    sessions = {m.session_key: [x.text for x in await all_messages(config) if x.session_key == m.session_key]
                for m in await all_messages(config)}
    assert sessions[thread_key] == ["@switchboard what should we plan?", sent.text]
    assert "lunch anyone?" not in request_text(reply_requests(api)[0])


async def test_an_envelope_sent_again_is_answered_once(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """Slack sends an envelope again when its acknowledgement is lost: the message is stored and
    answered once, and every attempt is acknowledged."""
    config = slack_config()
    async with slack_daemon(config) as daemon:
        slack.max_retries = 10  # room to spare on a slow machine: acks are dropped until we say
        slack.drop_acks = True  # acknowledgements lost on the way: Slack retries each envelope
        slack.message(DM_ALICE, ALICE, "are you there?")
        await slack.wait_for(lambda: slack.envelopes[0].attempts >= 2)  # sent three times
        slack.drop_acks = False  # the next acknowledgement arrives
        await settled(slack, daemon)

    asked = slack.envelopes[0]
    assert asked.acked and asked.attempts >= 2
    assert slack.texts_to(DM_ALICE) == ["re: are you there?"]
    assert len(reply_requests(api)) == 1
    stored = await all_messages(config)
    assert [m.text for m in stored] == ["are you there?", "re: are you there?"]


async def test_a_429_is_waited_out_and_the_reply_posted_once(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """chat.postMessage answered 429 with Retry-After: the reply waits it out and is posted once,
    its Markdown as mrkdwn."""
    api.default = lambda rec: Text("**noted**") if rec.model != "test-fast" else echo(rec)
    config = slack_config()
    async with slack_daemon(config) as daemon:
        slack.throttle("chat.postMessage", retry_after=1)
        slack.message(DM_ALICE, ALICE, "note this")
        await slack.wait_for(lambda: slack.sent)
        await settled(slack, daemon)

    assert [c.status for c in slack.calls_of("chat.postMessage")] == [429, 200]
    assert slack.texts_to(DM_ALICE) == ["*noted*"]


async def test_an_envelope_is_acknowledged_only_once_its_message_is_stored(slack: SlackStandIn) -> None:
    """While the core has not stored a message (its store is slow, or fails and is tried again), its
    envelope stays unacknowledged, so Slack would send it again; once stored, it is acknowledged."""
    stored = asyncio.Event()
    failures = [RuntimeError("database is locked")]

    async def slow_store(inbound: InboundMessage) -> None:
        if failures:
            raise failures.pop()
        await stored.wait()

    config = SlackConfig(enabled=True, base_url=slack.base_url, allow_from=[ALICE])
    channel = SlackChannel(config, agent_id="main", bot_token=slack.bot_token, app_token=slack.app_token)
    intake = RecordingIntake(slow_store)
    task = asyncio.create_task(channel.run(intake))
    try:
        await asyncio.wait_for(channel.ready.wait(), 10)
        slack.message(DM_ALICE, ALICE, "keep this")
        await slack.wait_for(lambda: len(intake.received) >= 2)  # failed once, tried again
        assert not slack.envelopes[0].acked
        stored.set()
        await slack.all_acked()
    finally:
        await channel.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    assert {m.text for m in intake.received} == {"keep this"}
    assert slack.envelopes[0].acked


async def test_a_scheduled_job_is_delivered_to_a_channel_and_to_a_members_dm(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config], make_config: MakeConfig
) -> None:
    """`deliver_to = "slack:C…"` posts in the channel, `"slack:U…"` in the app's DM with the member,
    each stored in its session as scheduled output."""
    base = slack_config()
    jobs = [{"id": "standup", "cron": "0 9 * * *", "prompt": "Post the standup reminder.",
             "deliver_to": f"slack:{GENERAL}"},
            {"id": "digest", "cron": "0 8 * * *", "prompt": "Write Alice's digest.",
             "deliver_to": f"slack:{ALICE}"}]
    config = make_config({**config_data(api, channels={"slack": base.channels.slack.model_dump()}),
                          "schedules": jobs})
    async with slack_daemon(config) as daemon:
        scheduler = daemon.scheduler
        assert scheduler is not None
        for job in ("standup", "digest"):
            await scheduler.run_job(scheduler.jobs[job], time.time())
        await settled(slack, daemon)

    assert [(m.channel, m.thread_ts) for m in slack.sent] == [(GENERAL, None), (slack.dm_of(ALICE), None)]
    stored = {m.session_key: m.origin for m in await all_messages(config)}
    assert stored == {f"agent:main:slack:channel:{GENERAL}": "scheduled",
                      f"agent:main:slack:direct:{ALICE}": "scheduled"}


async def test_other_events_and_edits_are_acknowledged_and_dropped(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """An edit, a join and an event the channel has no use for are acknowledged (Slack does not send
    them again) and neither stored nor answered."""
    config = slack_config()
    async with slack_daemon(config) as daemon:
        said = slack.message(GENERAL, BOB, "the meeting is Thursday")
        slack.dispatch({"type": "message", "subtype": "message_changed", "channel": GENERAL,
                        "message": {**said, "text": "the meeting is Friday"}, "ts": "1.000001"})
        slack.dispatch({"type": "message", "subtype": "channel_join", "channel": GENERAL, "user": ALICE,
                        "text": f"<@{ALICE}> has joined the channel", "ts": "1.000002"})
        slack.dispatch({"type": "reaction_added", "user": ALICE, "reaction": "eyes",
                        "item": {"type": "message", "channel": GENERAL, "ts": said["ts"]}})
        await settled(slack, daemon)

    assert all(e.acked and e.attempts == 0 for e in slack.envelopes)
    assert [m.text for m in await all_messages(config)] == ["the meeting is Thursday"]
    assert not slack.sent and not reply_requests(api)


async def test_a_stranger_pairs_by_slack_member_id(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """Under `dm_policy = "pairing"` a stranger's DM gets their code and member id; `switchboard
    pairing approve --user slack:U…` lets them in and tells them in that DM; their next DM is answered."""
    config = slack_config(dm_policy="pairing")
    async with slack_daemon(config) as daemon:
        slack.message(DM_STRANGER, STRANGER, "let me in")
        (notice,) = await slack.wait_for(lambda: slack.texts_to(DM_STRANGER))
        assert STRANGER in notice
        assert await cli(config, "pairing", "approve", "--user", f"slack:{STRANGER}") == 0
        await slack.wait_for(lambda: len(slack.texts_to(DM_STRANGER)) == 2)
        slack.message(DM_STRANGER, STRANGER, "thank you")
        await slack.wait_for(lambda: len(slack.texts_to(DM_STRANGER)) == 3)
        await settled(slack, daemon)

    assert slack.texts_to(DM_STRANGER)[1:] == [APPROVED_REPLY, "re: thank you"]


async def test_a_refreshed_connection_is_replaced_and_messages_keep_coming(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """Slack's `disconnect` (refresh_requested): the client opens a new socket with a new ticket,
    and a message sent after it is answered."""
    config = slack_config()
    async with slack_daemon(config) as daemon:
        slack.message(DM_ALICE, ALICE, "before")
        await slack.wait_for(lambda: slack.sent)
        slack.disconnect("refresh_requested")
        await slack.connected(2)
        slack.message(DM_ALICE, ALICE, "after")
        await slack.wait_for(lambda: len(slack.sent) == 2)
        await settled(slack, daemon)

    assert slack.texts_to(DM_ALICE) == ["re: before", "re: after"]
    # The SDK reconnects for the disconnect frame and again for the close that follows it.
    assert len(slack.calls_of("apps.connections.open")) >= 2


async def test_messages_of_a_conversation_are_stored_in_the_order_they_arrived(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """Three quick lines from Bob in a channel, the first held up (his name looked up slowly): they
    are stored, and the mention among them answered, in the order Slack sent them."""
    config = slack_config()
    slack.delay("users.info", 1.0)  # the first lookup, for Bob's first line
    async with slack_daemon(config) as daemon:
        for text in ("one", "two", f"<@{slack.bot_user_id}> three"):
            slack.message(GENERAL, BOB, text)
        await slack.wait_for(lambda: slack.sent)
        await settled(slack, daemon)

    stored = [m.text for m in await all_messages(config) if m.role == "user"]
    assert stored == ["one", "two", "@switchboard three"]
