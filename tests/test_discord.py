"""Discord end to end: the daemon with the real discord.py against the gateway + REST stand-in."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from bot.config import Config
from bot.core.messages import ChatRef, StoredMessage
from bot.daemon.assembly import Daemon
from bot.intake.access import refused_dm_reply
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, Text
from bot.testing.discord_api import DiscordStandIn, file, user
from channels.discord.channel import DiscordChannel
from tests.harness import API_KEY, config_data, echo, reply_requests, request_text, router_of, running

MakeConfig = Callable[[dict[str, Any]], Config]
TOKEN = "TEST.TOKEN"
# Snowflake-sized ids: discord.py only renders <@id> mentions of 15 to 20 digits as @names.
BOT_ID = 900_000_000_000_000_000
ALICE_ID, BOB_ID = 100_000_000_000_000_001, 100_000_000_000_000_002
ADMINS = 110_000_000_000_000_000
GUILD, GENERAL, RANDOM, THREAD = 100, 101, 103, 102
DM_ALICE, DM_BOB, DM_STRANGER = 201, 202, 266
ALICE = user(ALICE_ID, "alice", global_name="Alice")
BOB = user(BOB_ID, "bob")
STRANGER = user(100_000_000_000_000_666, "mallory")
HELPER_BOT = user(100_000_000_000_000_050, "helperbot", bot=True)
MENTION = f"<@{BOT_ID}>"


@asynccontextmanager
async def standin_with_guilds(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[DiscordStandIn]:
    """The stand-in with the test guilds, patched into discord.py (the `dc` fixture of Discord tests)."""
    async with DiscordStandIn(token=TOKEN, bot_id=BOT_ID, bot_name="switchboard") as standin:
        standin.add_guild(
            GUILD, "Test Guild",
            channels=[(GENERAL, "general"), (RANDOM, "random")],
            threads=[(THREAD, GENERAL, "plans")],
            members=[{**ALICE, "roles": [ADMINS]}, BOB, STRANGER],
            roles=[(ADMINS, "admins")],
        )
        standin.add_guild(300, "Elsewhere", channels=[(301, "lobby")], members=[ALICE])
        standin.patch(monkeypatch)
        yield standin


def config_maker(
    api: AnthropicStandIn, dc: DiscordStandIn, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Config]:
    """Configs with Discord on (the `discord_config` fixture): Alice and Bob allowed, the test guild open."""
    monkeypatch.setenv("DISCORD_BOT_TOKEN", dc.token)

    def make(**discord: Any) -> Config:
        router = discord.pop("router", {})
        section = {"enabled": True, "allow_from": [ALICE_ID, BOB_ID], "guilds": {str(GUILD): {}}, **discord}
        return make_config(config_data(api, channels={"discord": section}, router=router))

    return make


def make_channel(config: Config, token: str = TOKEN) -> DiscordChannel:
    # As build_channels makes it, with a short wait for guilds (2 s by default) to keep tests fast.
    return DiscordChannel(config.channels.discord, agent_id=config.agent.id, token=token,
                          guild_ready_timeout=0.05, retry_delay=0.05)


@asynccontextmanager
async def discord_daemon(config: Config) -> AsyncIterator[Daemon]:
    """The daemon as `switchboard run` assembles it, with Discord as its only channel."""
    channel = make_channel(config)
    async with running(config, [channel], AnthropicBrain(config.anthropic, API_KEY)) as daemon:
        await asyncio.wait_for(channel.ready.wait(), 5)
        yield daemon


def texts_to(dc: DiscordStandIn, channel_id: int) -> list[str | None]:
    return [m.content for m in dc.sent if m.channel_id == channel_id]


def posts_to(dc: DiscordStandIn, channel_id: int) -> list[int]:
    """Statuses of every POST of a message to a channel, failures included."""
    path = f"/channels/{channel_id}/messages"
    return [r.status for r in dc.requests if r.method == "POST" and r.path == path]


async def all_messages(config: Config) -> list[StoredMessage]:
    async with Store.open(config.database_path()) as store:
        found = []
        for session in await store.list_sessions():
            found.extend(await store.history(session.key, 100))
        return found


async def shut_down(channel: DiscordChannel, task: asyncio.Task[None]) -> None:
    """As the daemon does: stop input, then cancel run(), which closes the client."""
    await channel.stop()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def settled(dc: DiscordStandIn, *running: Daemon | DiscordChannel) -> None:
    """Return once every event the stand-in dispatched has been handled: discord.py read it, the
    channel handed it over or refused it (its notice sent), and each daemon ran every turn and
    command it queued, the events those caused included. After this, nothing more is on its way."""
    while True:
        dispatched = dc.dispatched
        await dc.heard()
        for each in running:
            channels = [each] if isinstance(each, DiscordChannel) else each.channels
            for channel in channels:
                if isinstance(channel, DiscordChannel):
                    await channel.handled()
            if isinstance(each, Daemon):
                await router_of(each).idle()
        if dc.dispatched == dispatched:
            return


async def test_a_dm_is_answered_after_typing_and_stored_with_its_discord_ids(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """A DM gets typing, then the model's reply without a reference; both are stored with their ids."""
    config = discord_config()
    async with discord_daemon(config):
        asked = dc.message_create(DM_ALICE, ALICE, "hello there")
        await dc.wait_for(lambda: dc.sent)
        dc.message_create(DM_ALICE, ALICE, "and again")
        await dc.wait_for(lambda: len(dc.sent) == 2)

    first, second = dc.sent
    assert (first.channel_id, first.content, first.message_reference) == (DM_ALICE, "re: hello there", None)
    assert second.content == "re: and again"
    assert dc.typing_calls[0].channel_id == DM_ALICE and dc.typing_calls[0].time < first.time
    assert "hello there" in request_text(reply_requests(api)[1])  # the conversation carries on
    async with Store.open(config.database_path()) as store:
        history = await store.history(f"agent:main:discord:direct:{ALICE_ID}", 10)
        by_id = await store.message_by_provider_id(ChatRef("discord", str(DM_ALICE)), str(first.id))
    assert [(m.role, m.text, m.sender_name) for m in history] == [
        ("user", "hello there", "Alice"), ("assistant", "re: hello there", None),
        ("user", "and again", "Alice"), ("assistant", "re: and again", None)]
    assert history[0].provider_message_id == asked["id"]
    assert by_id is not None and by_id.id == history[1].id
    assert len(dc.identifies) == 1 and dc.identifies[0]["intents"] & (1 << 15)  # message content


async def test_guild_chatter_is_stored_and_only_a_mention_is_answered_as_a_reply(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """Unaddressed guild messages become context (with names); the @mention is answered, referenced."""
    config = discord_config()
    async with discord_daemon(config) as daemon:
        dc.message_create(GENERAL, BOB, "the meeting moved to Thursday")
        dc.message_create(GENERAL, BOB, "@everyone heads up", mention_everyone=True)
        dc.message_create(GENERAL, BOB, f"<@&{ADMINS}> heads up", mention_roles=[ADMINS])
        asked = dc.message_create(GENERAL, ALICE, f"{MENTION} when is the meeting?", mentions=[BOT_ID])
        await dc.wait_for(lambda: dc.sent)
        await settled(dc, daemon)

    (sent,) = dc.sent
    assert sent.channel_id == GENERAL and sent.content == "re: [Alice]: @switchboard when is the meeting?"
    assert sent.message_reference is not None
    assert int(sent.message_reference["message_id"]) == int(asked["id"])
    assert sent.message_reference["fail_if_not_exists"] is False
    (request,) = reply_requests(api)
    assert "[bob]: the meeting moved to Thursday" in request_text(request)
    stored = await all_messages(config)
    assert {m.session_key for m in stored} == {f"agent:main:discord:channel:{GENERAL}"}
    assert [m.role for m in stored] == ["user"] * 4 + ["assistant"]


async def test_a_thread_is_its_own_session_under_its_channel_and_answered_in_the_thread(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """A mention in a thread is answered in the thread; a channel allowlist admits its threads."""
    config = discord_config(guilds={str(GUILD): {"channels": [GENERAL]}})
    async with discord_daemon(config) as daemon:
        dc.message_create(THREAD, ALICE, f"{MENTION} plan it", mentions=[BOT_ID])
        await dc.wait_for(lambda: dc.sent)
        dc.message_create(RANDOM, ALICE, f"{MENTION} not here", mentions=[BOT_ID])
        await settled(dc, daemon)

    (sent,) = dc.sent
    assert sent.channel_id == THREAD and sent.content == "re: [Alice]: @switchboard plan it"
    assert dc.typing_calls[0].channel_id == THREAD
    sessions = {m.session_key for m in await all_messages(config)}
    assert sessions == {f"agent:main:discord:channel:{GENERAL}:thread:{THREAD}"}


async def test_a_reply_to_an_old_bot_message_brings_it_back_into_context(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """Replying to an old answer puts that answer in context even when it is long out of range."""
    config = discord_config(dm_history_limit=1)
    async with discord_daemon(config):
        for n in range(4):
            dc.message_create(DM_ALICE, ALICE, f"fact number {n}")
            await dc.wait_for(lambda n=n: len(dc.sent) == n + 1)
        dc.message_create(DM_ALICE, ALICE, "say that again?", reference_id=dc.sent[0].id)
        await dc.wait_for(lambda: len(dc.sent) == 5)

    last = request_text(reply_requests(api)[-1])
    assert "re: fact number 0" in last
    assert "fact number 1" not in last


async def test_a_long_reply_with_code_is_split_within_discord_limits_and_every_id_stored(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """A 9 000-character answer arrives as messages of at most 2 000 characters and 40 lines, the code
    fence reopened with its language, only the first referencing the question, every id stored."""
    code = "\n".join(f"print('line {n}')  # {'x' * 40}" for n in range(120))
    answer = "Here is the **script**:\n\n```python\n" + code + "\n```\n\n" + ("More words. " * 200).strip()
    api.default = lambda rec: Text(answer) if rec.model != "test-fast" else echo(rec)
    config = discord_config(channel_settings={str(GENERAL): {"require_mention": False}})
    async with discord_daemon(config) as daemon:
        asked = dc.message_create(GENERAL, ALICE, "write me a script")
        await dc.wait_for(lambda: len(dc.sent) >= 5)
        await settled(dc, daemon)

    contents = [m.content or "" for m in dc.sent]
    assert len(contents) >= 5
    assert all(len(c) <= 2000 and c.count("\n") < 40 for c in contents)
    assert contents[0].startswith("Here is the **script**")
    assert all(c.startswith("```python\n") for c in contents[1:4])
    joined = "\n".join(contents)
    assert all(f"print('line {n}')" in joined for n in range(120))
    refs = [m.message_reference for m in dc.sent]
    assert refs[0] is not None and int(refs[0]["message_id"]) == int(asked["id"])
    assert refs[1:] == [None] * (len(refs) - 1)
    async with Store.open(config.database_path()) as store:
        chat = ChatRef("discord", str(GENERAL))
        found = {await store.message_by_provider_id(chat, str(m.id)) for m in dc.sent}
    (reply,) = [m for m in await all_messages(config) if m.role == "assistant"]
    assert found == {reply} and reply.text == answer


async def test_refused_users_get_one_line_in_dms_and_nothing_in_guilds(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """A DM from someone not allowed gets one polite line ever; a guild user without the role, or an
    unlisted guild, gets silence and nothing is stored."""
    config = discord_config(guilds={str(GUILD): {"roles": [ADMINS]}})
    async with discord_daemon(config) as daemon:
        dc.message_create(DM_STRANGER, STRANGER, "let me in")
        dc.message_create(DM_STRANGER, STRANGER, "please?")
        dc.message_create(GENERAL, BOB, f"{MENTION} hi", mentions=[BOT_ID])
        dc.message_create(301, ALICE, f"{MENTION} hi", mentions=[BOT_ID])
        dc.message_create(GENERAL, ALICE, f"{MENTION} I am allowed", mentions=[BOT_ID])
        await dc.wait_for(lambda: texts_to(dc, GENERAL))
        await settled(dc, daemon)

    assert texts_to(dc, DM_STRANGER) == [refused_dm_reply(str(STRANGER["id"]))]
    assert texts_to(dc, 301) == []
    assert texts_to(dc, GENERAL) == ["re: [Alice]: @switchboard I am allowed"]
    assert [m.sender_name for m in await all_messages(config) if m.role == "user"] == ["Alice"]
    assert api.count == 1


async def test_own_echoes_are_ignored_and_other_bots_are_kept_but_not_answered(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """The bot's own messages never come back as input; another bot's mention is context only."""
    config = discord_config()
    async with discord_daemon(config) as daemon:
        # As if posted by an earlier run: not a reply we just stored, so only the channel can drop it.
        dc.message_create(GENERAL, dc.bot_user, f"{MENTION} talking to myself", mentions=[BOT_ID])
        dc.message_create(GENERAL, HELPER_BOT, f"{MENTION} ping from a bot", mentions=[BOT_ID])
        dc.message_create(GENERAL, ALICE, f"{MENTION} what did the bot say?", mentions=[BOT_ID])
        await dc.wait_for(lambda: dc.sent)
        await settled(dc, daemon)

    assert texts_to(dc, GENERAL) == ["re: [Alice]: @switchboard what did the bot say?"]
    assert "[helperbot]: @switchboard ping from a bot" in request_text(reply_requests(api)[0])
    users = [(m.sender_name, m.text) for m in await all_messages(config) if m.role == "user"]
    assert users == [
        ("helperbot", "@switchboard ping from a bot"), ("Alice", "@switchboard what did the bot say?")]


async def test_allow_bots_lets_another_bot_start_a_turn(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """With `allow_bots = true` another bot's mention is answered like a person's."""
    config = discord_config(allow_bots=True)
    async with discord_daemon(config):
        dc.message_create(GENERAL, HELPER_BOT, f"{MENTION} ping", mentions=[BOT_ID])
        await dc.wait_for(lambda: dc.sent)

    assert texts_to(dc, GENERAL) == ["re: [helperbot]: @switchboard ping"]


async def test_unread_attachments_get_a_note_in_dms_and_silence_in_guilds(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """A video-only DM is answered with a short note that videos are not read; in a guild it is kept
    for context without a word."""
    config = discord_config(require_mention=False)
    clip = [file("clip.mp4", b"\x00\x00\x00\x18ftypmp42", "video/mp4")]
    async with discord_daemon(config) as daemon:
        dc.message_create(DM_ALICE, ALICE, "", attachments=clip)
        dc.message_create(GENERAL, ALICE, "", attachments=clip)
        dc.message_create(GENERAL, ALICE, "text after the file")
        await dc.wait_for(lambda: texts_to(dc, GENERAL))
        await settled(dc, daemon)

    assert texts_to(dc, DM_ALICE) == ["I can't take videos yet; send me text, a picture or a file."]
    assert texts_to(dc, GENERAL) == ["re: [Alice]: text after the file"]
    assert api.count == 1
    assert dc.cdn_requests == []


async def test_model_output_cannot_ping_everyone_roles_or_users(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """The create-message JSON allows no mention at all, whatever the model wrote."""
    api.default = lambda rec: Text(f"@everyone @here <@&{ADMINS}> <@{BOB_ID}> look!")
    config = discord_config()
    async with discord_daemon(config):
        dc.message_create(GENERAL, ALICE, f"{MENTION} shout", mentions=[BOT_ID])
        await dc.wait_for(lambda: dc.sent)

    (sent,) = dc.sent
    assert sent.content == f"@everyone @here <@&{ADMINS}> <@{BOB_ID}> look!"
    assert sent.allowed_mentions == {"parse": []}


async def test_commands_are_answered_in_guilds_and_dms_and_stay_out_of_history(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """`@bot /status` and a bare `/help` in a guild are answered as replies; `/whoami` in a DM."""
    config = discord_config()
    async with discord_daemon(config) as daemon:
        status = dc.message_create(GENERAL, ALICE, f"{MENTION} /status", mentions=[BOT_ID])
        dc.message_create(GENERAL, BOB, "/help")
        dc.message_create(DM_BOB, BOB, "/whoami")
        await dc.wait_for(lambda: len(dc.sent) == 3)
        await settled(dc, daemon)

    # Read-only commands are answered beside the queue, so the two answers may come in either order.
    guild_help, guild_status = sorted((m for m in dc.sent if m.channel_id == GENERAL),
                                      key=lambda m: "Session:" in (m.content or ""))
    assert f"Session: agent:main:discord:channel:{GENERAL}" in (guild_status.content or "")
    assert guild_status.message_reference is not None
    assert int(guild_status.message_reference["message_id"]) == int(status["id"])
    assert (guild_help.content or "").startswith("/start - ")
    assert texts_to(dc, DM_BOB) == [f"Your user id is {BOB_ID} (chat {DM_BOB})."]
    assert api.count == 0
    assert await all_messages(config) == []


async def test_typing_is_refreshed_while_the_model_works_and_capped(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Typing is sent again while the model is slow, stops at the cap, and never after the reply."""
    monkeypatch.setattr("channels.discord.channel.TYPING_REFRESH", 0.05)
    monkeypatch.setattr("channels.discord.channel.TYPING_CAP", 0.6)
    api.default = lambda rec: Text("slow answer", delay=2.0)
    config = discord_config()
    async with discord_daemon(config) as daemon:
        dc.message_create(DM_ALICE, ALICE, "think hard")
        await dc.wait_for(lambda: dc.sent, timeout=5)
        await settled(dc, daemon)

    (sent,) = dc.sent
    calls = [t.time for t in dc.typing_calls if t.channel_id == DM_ALICE]
    # Refreshed at least once; at most once per refresh within the cap (about 40 over the 2 s
    # without it, however slow the machine: each refresh waits its 0.05 s).
    assert 2 <= len(calls) <= 0.6 / 0.05 + 1
    assert all(t < sent.time for t in calls)
