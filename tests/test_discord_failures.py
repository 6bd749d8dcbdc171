"""Discord when things go wrong, and the channel's start and stop: rate limits, a dropped gateway,
refused sends, a bad token or intent at start-up, a stop mid-turn."""

from __future__ import annotations

import asyncio
import gc
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yarl
from structlog.testing import capture_logs

from bot.config import Config
from bot.core.errors import ConfigError, DeliveryError
from bot.core.messages import ChatRef, OutboundMessage
from bot.daemon.assembly import build_channels
from bot.testing.anthropic_api import AnthropicStandIn, Text
from bot.testing.discord_api import DiscordStandIn
from bot.testing.recording_intake import RecordingIntake
from channels.discord.channel import DiscordChannel
from tests.test_discord import (
    ALICE,
    BOB,
    BOT_ID,
    DM_ALICE,
    DM_BOB,
    GENERAL,
    TOKEN,
    MakeConfig,
    all_messages,
    discord_daemon,
    make_channel,
    posts_to,
    settled,
    shut_down,
    texts_to,
)


async def test_a_429_is_waited_out_and_the_reply_delivered_once(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """discord.py sleeps through a 429's retry_after and the reply arrives exactly once."""
    config = discord_config()
    async with discord_daemon(config) as daemon:
        dc.fail_next(f"POST /channels/{DM_ALICE}/messages", status=429, retry_after=0.3)
        dc.message_create(DM_ALICE, ALICE, "busy?")
        await dc.wait_for(lambda: dc.sent)
        await settled(dc, daemon)

    assert texts_to(dc, DM_ALICE) == ["re: busy?"]
    posts = [r for r in dc.requests if r.method == "POST" and r.path == f"/channels/{DM_ALICE}/messages"]
    assert [r.status for r in posts] == [429, 200]
    assert posts[1].time - posts[0].time >= 0.3


async def test_a_gateway_disconnect_mid_conversation_resumes_and_answers_everything_once(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """After a dropped gateway the client RESUMEs, gets what was sent meanwhile, and nothing is
    answered twice; the daemon keeps running."""
    config = discord_config()
    async with discord_daemon(config) as daemon:
        dc.message_create(DM_ALICE, ALICE, "before")
        await dc.wait_for(lambda: dc.sent)
        await dc.disconnect(4000)
        dc.message_create(DM_ALICE, ALICE, "while down")
        await dc.wait_for(lambda: len(dc.sent) == 2)
        dc.message_create(DM_ALICE, ALICE, "after")
        await dc.wait_for(lambda: len(dc.sent) == 3)
        await settled(dc, daemon)

    assert texts_to(dc, DM_ALICE) == ["re: before", "re: while down", "re: after"]
    assert len(dc.identifies) == 1 and len(dc.resumes) == 1
    users = [m.text for m in await all_messages(config) if m.role == "user"]
    assert users == ["before", "while down", "after"]


async def test_a_forbidden_channel_is_logged_not_retried_and_others_carry_on(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """A 403 is tried once and logged; the reply stays stored and other chats are still answered."""
    config = discord_config()
    with capture_logs() as logs:
        async with discord_daemon(config) as daemon:
            dc.fail_next(f"POST /channels/{DM_BOB}/messages", status=403, code=50007,
                         message="Cannot send messages to this user")
            dc.message_create(DM_BOB, BOB, "bye forever")
            await dc.wait_for(lambda: posts_to(dc, DM_BOB))
            dc.message_create(DM_ALICE, ALICE, "still here")
            await dc.wait_for(lambda: texts_to(dc, DM_ALICE))
            await settled(dc, daemon)

    assert posts_to(dc, DM_BOB) == [403]
    assert texts_to(dc, DM_ALICE) == ["re: still here"]
    assert "re: bye forever" in [m.text for m in await all_messages(config)]
    (forbidden,) = [e for e in logs if e["event"].startswith("Discord forbids")]
    assert forbidden["code"] == 50007 and forbidden["log_level"] == "warning"
    (failed,) = [e for e in logs if e["event"] == "delivery failed"]
    assert failed["permanent"] is True


async def test_send_failures_are_delivery_errors_and_never_retried_by_us(
    dc: DiscordStandIn, make_config: MakeConfig
) -> None:
    """Unknown channels are permanent failures, server errors are not; neither is retried here."""
    channel = make_channel(make_config({}))
    reply = OutboundMessage(ChatRef("discord", str(GENERAL)), "hello")
    with pytest.raises(DeliveryError, match="not connected"):
        await channel.send(reply)
    task = asyncio.create_task(channel.run(RecordingIntake()))
    try:
        await asyncio.wait_for(channel.ready.wait(), 5)
        with pytest.raises(DeliveryError) as unknown:
            await channel.send(OutboundMessage(ChatRef("discord", "555"), "hello"))
        assert unknown.value.permanent and unknown.value.sent_ids == []
        dc.fail_next(f"POST /channels/{GENERAL}/messages", status=503)
        with pytest.raises(DeliveryError) as server:
            await channel.send(reply)
        assert not server.value.permanent
        assert posts_to(dc, GENERAL) == [503]
        assert len(await channel.send(reply)) == 1
    finally:
        await shut_down(channel, task)


def test_a_missing_token_is_a_config_error_naming_the_variable(make_config: MakeConfig) -> None:
    """Enabling Discord without its token names the key and the environment variable."""
    config = make_config({"channels": {"discord": {"enabled": True, "token_env": "MY_DC_TOKEN"}}})
    with pytest.raises(ConfigError) as info:
        build_channels(config, console=False)
    assert info.value.key == "channels.discord.token_env"
    assert "MY_DC_TOKEN" in str(info.value)


def test_build_channels_makes_the_discord_channel(
    make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With its token set, `[channels.discord] enabled = true` builds one DiscordChannel."""
    monkeypatch.setenv("DISCORD_BOT_TOKEN", TOKEN)
    (channel,) = build_channels(make_config({"channels": {"discord": {"enabled": True}}}), console=False)
    assert isinstance(channel, DiscordChannel) and channel.provider == "discord"


# -- start-up failures: the channel alone, no daemon ---------------------------------------


@contextmanager
def logged() -> Iterator[list[dict[str, Any]]]:
    with capture_logs() as logs:
        yield logs


async def test_a_rejected_token_turns_the_channel_off_without_leaking_it(
    dc: DiscordStandIn, make_config: MakeConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """A 401 at login is one clear warning naming the variable to fix; run() returns and the token
    is not logged."""
    channel = make_channel(make_config({}), token="WRONG.SECRET")
    with logged() as logs:
        await asyncio.wait_for(channel.run(RecordingIntake()), 5)
    assert [e for e in logs if e["log_level"] == "error"] == []
    (warning,) = [e for e in logs if e["log_level"] == "warning"]
    assert warning["event"].startswith("Discord rejected the bot token")
    assert "DISCORD_BOT_TOKEN" in warning["fix"]
    assert "WRONG.SECRET" not in repr(logs) + caplog.text
    assert not channel.ready.is_set()


async def test_a_missing_privileged_intent_turns_the_channel_off(
    monkeypatch: pytest.MonkeyPatch, make_config: MakeConfig
) -> None:
    """When the Message Content intent is not enabled for the bot, run() logs how to fix it and returns."""
    async with DiscordStandIn(token=TOKEN, bot_id=BOT_ID, message_content_intent=False) as standin:
        standin.patch(monkeypatch)
        channel = make_channel(make_config({}))
        with logged() as logs:
            await asyncio.wait_for(channel.run(RecordingIntake()), 5)
    (error,) = [e for e in logs if e["log_level"] == "error"]
    assert "Message Content intent" in error["event"]
    assert len(standin.identifies) == 1


async def test_a_failed_login_is_retried_with_back_off(dc: DiscordStandIn, make_config: MakeConfig) -> None:
    """A server error at login is retried after a pause until the channel connects."""
    dc.fail_next("GET /users/@me", status=503)
    channel = make_channel(make_config({}))
    with logged() as logs:
        task = asyncio.create_task(channel.run(RecordingIntake()))
        await asyncio.wait_for(channel.ready.wait(), 5)
        await shut_down(channel, task)
    assert [r.status for r in dc.requests if r.path == "/users/@me"] == [503, 200]
    assert any(e["event"] == "Discord unreachable; retrying" for e in logs)


async def test_an_unreachable_gateway_at_start_is_retried(
    dc: DiscordStandIn, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first gateway connection failing (discord.py #10520's path) is retried until it works."""
    import discord

    monkeypatch.setattr(discord.backoff.ExponentialBackoff, "delay", lambda self: 0.01)
    monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL("ws://127.0.0.1:9/gateway"))
    channel = make_channel(make_config({}))
    with logged() as logs:
        task = asyncio.create_task(channel.run(RecordingIntake()))
        await dc.wait_for(lambda: any(e["event"] == "Discord unreachable; retrying" for e in logs))
        monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(dc.gateway_url))
        await asyncio.wait_for(channel.ready.wait(), 5)
        await shut_down(channel, task)
    assert len(dc.identifies) == 1


async def test_stop_ends_run_and_closes_the_client(dc: DiscordStandIn, make_config: MakeConfig) -> None:
    """stop() then cancelling run() closes the gateway connection promptly."""
    channel = make_channel(make_config({}))
    task = asyncio.create_task(channel.run(RecordingIntake()))
    await asyncio.wait_for(channel.ready.wait(), 5)
    started = time.monotonic()
    await shut_down(channel, task)
    assert time.monotonic() - started < 2
    await dc.wait_for(lambda: not dc.connected.is_set())


async def test_a_stop_before_ready_leaves_no_event_behind(
    dc: DiscordStandIn, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A channel stopped after READY but before discord.py's wait for the guilds ended leaves
    nothing behind: that wait (ConnectionState._delay_ready) outlives the client's close and then
    dispatches `guild_available` and `ready`, whose `_run_event` coroutines were made and never
    scheduled (an unraisable warning at a later test's garbage collection: the catch-up flake)."""
    unraisable: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda hook: unraisable.append(f"{hook.exc_value!r}"))
    config = make_config({})
    channel = DiscordChannel(config.channels.discord, agent_id=config.agent.id, token=TOKEN,
                             guild_ready_timeout=60.0, retry_delay=0.05)
    task = asyncio.create_task(channel.run(RecordingIntake()))
    # READY parsed: discord.py's ConnectionState now waits for the guilds in its own task.
    await dc.wait_for(lambda: channel._client is not None and channel._client.guilds)
    client = channel._client
    assert client is not None
    state = client._connection
    waiting = state._ready_task
    assert waiting is not None and not channel.ready.is_set()
    await shut_down(channel, task)
    assert client.is_closed() and not waiting.done()

    # What a late GUILD_CREATE and the end of the wait do, now rather than in a minute (so the stop
    # falls inside the wait however loaded the machine): one more guild, then `ready` at once.
    state.guild_ready_timeout = 0
    state._ready_state.put_nowait(client.guilds[0])
    await asyncio.wait([waiting])
    failure = None if waiting.exception() is None else repr(waiting.exception())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del waiting  # its failure's traceback holds the coroutine that failure made
        gc.collect()
    left = [str(w.message) for w in caught] + unraisable
    assert not [line for line in left if "never awaited" in line], left
    assert failure is None, f"the wait for guilds failed after the stop: {failure}"
    assert not channel.ready.is_set()


async def test_a_stop_during_a_turn_still_delivers_its_reply(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """On shutdown, input stops first and the turn in flight still reaches Discord within the grace."""
    api.default = lambda rec: Text("worth the wait", delay=0.5)
    config = discord_config(router={"shutdown_grace": 5.0})
    async with discord_daemon(config):
        dc.message_create(DM_ALICE, ALICE, "take your time")
        await dc.wait_for(lambda: api.count == 1)

    assert texts_to(dc, DM_ALICE) == ["worth the wait"]
