"""Slack end to end: the daemon with the real slack-bolt (Socket Mode) against the Web API + Socket
Mode stand-in."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from bot.config import Config
from bot.core.messages import ChatRef, StoredMessage
from bot.daemon.assembly import Daemon
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.slack_api import SlackStandIn
from channels.slack.channel import SlackChannel
from tests.harness import API_KEY, config_data, reply_requests, request_text, router_of, running

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
