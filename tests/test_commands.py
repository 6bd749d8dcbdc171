"""Chat commands, late messages and redelivered requests: the core every channel shares."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.config import Config
from bot.intake.commands import COMMANDS, parse_command
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest, Response, Text
from bot.testing.fake_channel import FakeChannel
from tests.harness import (
    config_data,
    daemon_with,
    echo,
    last_user_line,
    reply_requests,
    request_text,
    router_of,
    say,
    wait_until,
)

MakeConfig = Callable[[dict[str, Any]], Config]


@pytest.mark.parametrize(
    ("text", "bot", "expected"),
    [
        ("/reset", None, "reset"),
        ("/Status please", None, "status"),
        ("/help@MyBot", "mybot", "help"),
        ("/help@OtherBot", "mybot", None),
        ("/help@OtherBot", None, None),
        ("hello /reset", None, None),
        ("/", None, None),
        ("/ reset", None, None),
    ],
)
def test_parse_command(text: str, bot: str | None, expected: str | None) -> None:
    """A command is `/name` at the start, optionally addressed to this bot, never to another."""
    assert parse_command(text, bot) == expected


async def command(channel: FakeChannel, name: str, **kwargs: Any) -> str:
    """Send a command and return the text the bot answered with."""
    before = len(channel.sent)
    await channel.inject(channel.message(f"/{name}", command=name, **kwargs))
    await wait_until(lambda: len(channel.sent) > before)
    return channel.sent[-1].text


async def test_commands_answer_at_once_and_are_not_stored(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig
) -> None:
    """/help, /start and /whoami answer without the model, and leave no trace in the history."""
    channel = FakeChannel()
    async with daemon_with(make_config(config_data(api)), channel):
        help_text = await command(channel, "help")
        start_text = await command(channel, "start")
        whoami = await command(channel, "whoami", sender="42")

    assert all(f"/{c.name}" in help_text for c in COMMANDS)
    assert "Switchboard" in start_text
    assert "42" in whoami
    assert api.count == 0
    assert await view.list_sessions() == []


async def test_unknown_command_points_to_help(api: AnthropicStandIn, make_config: MakeConfig) -> None:
    """An unknown command gets a pointer to /help instead of going to the model."""
    channel = FakeChannel()
    async with daemon_with(make_config(config_data(api)), channel):
        assert "/help" in await command(channel, "frobnicate")
    assert api.count == 0


async def test_status_answers_while_a_turn_runs(api: AnthropicStandIn, make_config: MakeConfig) -> None:
    """/status is answered during a slow reply and shows the session, counts, limits and the queue."""
    channel = FakeChannel()
    release = asyncio.Event()
    api.default = lambda rec: Text("done", delay=1.0) if not release.is_set() else echo(rec)
    config = make_config(config_data(api, channels={"console": {"dm_history_limit": 7}}))
    async with daemon_with(config, channel) as daemon:
        await channel.inject(channel.message("first", message_id="1"))
        await channel.inject(channel.message("second", message_id="2"))
        await wait_until(lambda: api.count == 1)
        status = await command(channel, "status")
        assert channel.sent[-1].text == status  # answered before the slow reply
        release.set()
        await router_of(daemon).idle()

    assert f"Session: {channel.key()}" in status
    assert "Messages stored: 2" in status
    assert "History limit: unlimited" in status
    assert "writing a reply, 1 message waiting" in status


async def test_stop_abandons_the_running_turn_and_the_queue(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig
) -> None:
    """/stop abandons the reply being written and the messages queued behind it; later ones work."""
    channel = FakeChannel()
    api.default = lambda rec: Text("too slow", delay=5.0)
    async with daemon_with(make_config(config_data(api, anthropic={"timeout": 10.0})), channel) as daemon:
        await channel.inject(channel.message("write an essay", message_id="1"))
        await channel.inject(channel.message("and another", message_id="2"))
        await wait_until(lambda: api.count == 1)
        stopped = await command(channel, "stop")
        api.default = echo
        await say(daemon, channel, "quick one", message_id="3")
        nothing = await command(channel, "stop")

    assert stopped == "Stopped the reply I was working on and dropped 1 waiting message."
    assert "Nothing to stop" in nothing
    assert [m.text for m in channel.sent] == [stopped, "re: quick one", nothing]
    history = await view.history(str(channel.key()), 10)
    assert [m.text for m in history] == ["write an essay", "and another", "quick one", "re: quick one"]


async def test_reset_starts_a_fresh_context_but_keeps_history(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig
) -> None:
    """After /reset the model no longer sees earlier messages, yet the history keeps them."""
    channel = FakeChannel()
    async with daemon_with(make_config(config_data(api)), channel) as daemon:
        await say(daemon, channel, "my cat is called Miso")
        assert "Started a fresh context" in await command(channel, "reset")
        await say(daemon, channel, "what is my cat called?")

    last = reply_requests(api)[-1]
    assert "Miso" not in request_text(last)
    history = await view.history(str(channel.key()), 10)
    assert history[0].text == "my cat is called Miso"


async def test_group_reset_and_stop_are_for_admins_when_admins_are_configured(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig
) -> None:
    """In a group only a configured admin may /reset; in their own DM anyone may."""
    channel = FakeChannel(provider="telegram")
    config = make_config(config_data(api, channels={"telegram": {"admins": [1]}}))
    group = {"kind": "group", "peer": "-100"}
    async with daemon_with(config, channel):
        refused = await command(channel, "reset", sender="2", **group)
        allowed = await command(channel, "reset", sender="1", **group)
        own_dm = await command(channel, "reset", sender="2", peer="2")
        stop = await command(channel, "stop", sender="2", **group)

    assert refused == "Only an admin can use /reset in a shared chat."
    assert "fresh context" in allowed
    assert "fresh context" in own_dm
    assert stop == "Only an admin can use /stop in a shared chat."
    assert channel.sent[0].reply_to_id is None  # FakeChannel messages carry no id here


@pytest.mark.parametrize(("max_age", "answered"), [(3600, False), (0, True)])
async def test_a_late_message_is_stored_but_not_answered(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig, max_age: int, answered: bool
) -> None:
    """A message that reaches us two hours late is kept for context but not answered (unless uncapped)."""
    channel = FakeChannel(provider="telegram")
    config = make_config(config_data(api, channels={"telegram": {"max_reply_age": max_age}}))
    async with daemon_with(config, channel) as daemon:
        await channel.inject(channel.message("still there?", message_id="5", sent_at=time.time() - 7200))
        await router_of(daemon).idle()
        await say(daemon, channel, "fresh question", message_id="6")

    assert [m.text for m in channel.sent] == (
        ["re: still there?", "re: fresh question"] if answered else ["re: fresh question"]
    )
    texts = [m.text for m in await view.history(str(channel.key()), 10)]
    assert "still there?" in texts
    assert "still there?" in request_text(reply_requests(api)[-1])


async def test_a_redelivered_unanswered_message_is_answered_once_after_a_restart(
    api: AnthropicStandIn, tmp_path: Path, make_config: MakeConfig
) -> None:
    """A message stored before a stop that abandoned its turn is answered when the platform
    delivers it again, and only once however often it comes back."""
    config = make_config(config_data(api, router={"shutdown_grace": 0.1}, anthropic={"timeout": 10.0}))
    first = FakeChannel()

    def slow(rec: RecordedRequest) -> Response:
        return Text("never seen", delay=5.0)

    api.default = slow
    message = first.message("are you awake?", message_id="900")
    async with daemon_with(config, first):
        await first.inject(message)
        await wait_until(lambda: api.count == 1)
    assert first.sent == []

    api.default = echo
    second = FakeChannel()
    async with daemon_with(config, second) as daemon:
        for _ in range(3):
            await second.inject(message)
            await router_of(daemon).idle()

    assert [m.text for m in second.sent] == ["re: are you awake?"]
    assert last_user_line(reply_requests(api)[-1]) == "are you awake?"
    async with Store.open(tmp_path / "switchboard.db") as reopened:
        texts = [m.text for m in await reopened.history(str(first.key()), 10)]
    assert texts == ["are you awake?", "re: are you awake?"]
