"""Tests of the Discord gateway + REST stand-in, driven by the real discord.py client."""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from bot.testing.discord_api import DiscordStandIn, user

with warnings.catch_warnings():
    # discord.py imports the stdlib audioop (deprecated since 3.11) for voice, which we never use.
    warnings.simplefilter("ignore", DeprecationWarning)
    import discord
    from discord import app_commands

TOKEN = "TEST.TOKEN"
BOT_ID = 9000
GUILD, GENERAL, THREAD, DM = 100, 101, 102, 200
ADMINS = 110
ALICE = user(1, "alice", global_name="Alice")
BOB = user(2, "bob")


@dataclass
class Running:
    client: discord.Client
    received: list[discord.Message] = field(default_factory=list)
    resumed: asyncio.Event = field(default_factory=asyncio.Event)

    async def next_message(self, count: int = 1) -> discord.Message:
        """Wait until `count` messages from users (not the bot's echoes) arrived; return the last."""
        deadline = time.monotonic() + 30
        while len(self.from_users) < count:
            assert time.monotonic() < deadline, f"only {len(self.from_users)} messages arrived"
            await asyncio.sleep(0.01)
        return self.from_users[count - 1]

    @property
    def from_users(self) -> list[discord.Message]:
        return [m for m in self.received if m.author.id != BOT_ID]


def default_intents() -> discord.Intents:
    intents = discord.Intents.default()
    intents.message_content = True
    return intents


@asynccontextmanager
async def running(
    dc: DiscordStandIn, intents: discord.Intents | None = None, client: discord.Client | None = None
) -> AsyncIterator[Running]:
    """Start a real client against the stand-in, wait for ready, close it cleanly afterwards."""
    client = client or discord.Client(intents=intents or default_intents(), guild_ready_timeout=0.05)
    run = Running(client)

    async def on_message(message: discord.Message) -> None:
        run.received.append(message)

    async def on_resumed() -> None:
        run.resumed.set()

    client.event(on_message)
    client.event(on_resumed)
    async with client:
        task = asyncio.create_task(client.start(TOKEN))
        ready = asyncio.create_task(client.wait_until_ready())
        await asyncio.wait([task, ready], timeout=30, return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            ready.cancel()
            await client.close()
            await task  # re-raises the start-up failure
            raise AssertionError("client never became ready")
        try:
            yield run
        finally:
            await client.close()
            await asyncio.wait_for(task, 5)


@pytest.fixture
async def dc(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[DiscordStandIn]:
    async with DiscordStandIn(token=TOKEN, bot_id=BOT_ID, bot_name="switchboard") as stand_in:
        stand_in.add_guild(
            GUILD,
            "Test Guild",
            channels=[(GENERAL, "general")],
            threads=[(THREAD, GENERAL, "a thread")],
            members=[{**ALICE, "roles": [ADMINS]}, BOB],
            roles=[(ADMINS, "admins")],
        )
        stand_in.patch(monkeypatch)
        yield stand_in


async def test_login_and_ready(dc: DiscordStandIn) -> None:
    """The client logs in over REST, identifies once and sees the guild, its channels and members."""
    async with running(dc) as run:
        assert run.client.user is not None and run.client.user.id == BOT_ID
        guild = run.client.get_guild(GUILD)
        assert guild is not None and guild.name == "Test Guild"
        assert isinstance(guild.get_channel(GENERAL), discord.TextChannel)
        # Without the members intent Discord sends only the bot's own member.
        assert guild.member_count == 3 and [m.id for m in guild.members] == [BOT_ID]
        assert len(dc.identifies) == 1 and dc.identifies[0]["intents"] & (1 << 15)
        assert dc.resumes == [] and dc.connected.is_set()
        assert run.client.latency < 1  # the first heartbeat was acknowledged
        # A guild added while connected arrives as GUILD_CREATE, as when the bot joins one.
        dc.add_guild(300, "Second Guild", channels=[(301, "lobby")])
        await dc.wait_for(lambda: run.client.get_guild(300))
    paths = [r.path for r in dc.requests]
    assert paths[:2] == ["/users/@me", "/oauth2/applications/@me"]
    assert dc.gateway_urls[0].startswith("/gateway?v=10&encoding=json")


async def test_bad_token_fails_login(dc: DiscordStandIn) -> None:
    """A wrong token gets 401 from GET /users/@me, which discord.py turns into LoginFailure."""
    client = discord.Client(intents=default_intents())
    async with client:
        with pytest.raises(discord.LoginFailure):
            await client.start("WRONG.TOKEN")
    assert dc.requests[0].status == 401 and dc.identifies == []


async def test_guild_message_dm_and_thread(dc: DiscordStandIn) -> None:
    """Guild, thread and DM messages reach on_message with the right channel types and author."""
    async with running(dc) as run:
        dc.message_create(GENERAL, ALICE, "hello guild")
        guild_msg = await run.next_message(1)
        assert guild_msg.content == "hello guild" and isinstance(guild_msg.channel, discord.TextChannel)
        assert isinstance(guild_msg.author, discord.Member) and guild_msg.guild is not None
        assert [r.id for r in guild_msg.author.roles] == [GUILD, ADMINS]

        dc.message_create(THREAD, BOB, "in a thread")
        thread_msg = await run.next_message(2)
        assert isinstance(thread_msg.channel, discord.Thread) and thread_msg.channel.parent_id == GENERAL

        dc.message_create(DM, ALICE, "hello dm")
        dm_msg = await run.next_message(3)
        assert dm_msg.guild is None and isinstance(dm_msg.channel, discord.DMChannel)
        assert dm_msg.content == "hello dm" and dm_msg.author.id == 1
        # Creating the DM from the user's side finds the same channel.
        dm = await dm_msg.author.create_dm()
        assert dm.id == DM


async def test_mention_of_the_bot(dc: DiscordStandIn) -> None:
    """A message mentioning the bot lists client.user in message.mentions; a reply to the bot pings it."""
    async with running(dc) as run:
        dc.message_create(GENERAL, ALICE, f"<@{BOT_ID}> hi", mentions=[BOT_ID])
        mentioned = await run.next_message(1)
        assert run.client.user in mentioned.mentions
        channel = run.client.get_channel(GENERAL)
        assert isinstance(channel, discord.TextChannel)
        sent = await channel.send("answer")
        dc.message_create(GENERAL, ALICE, "a reply", reference_id=sent.id)
        reply = await run.next_message(2)
        assert reply.reference is not None and reply.reference.message_id == sent.id
        assert run.client.user in reply.mentions
        dc.message_create(GENERAL, BOB, "no mention")
        assert run.client.user not in (await run.next_message(3)).mentions


async def test_send_is_recorded_and_echoed(dc: DiscordStandIn) -> None:
    """channel.send and message.reply are recorded with allowed_mentions and reference, then echoed back."""
    async with running(dc) as run:
        dc.message_create(GENERAL, ALICE, "question")
        question = await run.next_message(1)
        channel = run.client.get_channel(GENERAL)
        assert isinstance(channel, discord.TextChannel)
        first = await channel.send("plain", allowed_mentions=discord.AllowedMentions.none())
        second = await question.reply("answer", mention_author=False)
        await channel.typing()
        assert [s.content for s in dc.sent] == ["plain", "answer"]
        assert dc.sent[0].id == first.id < dc.sent[1].id == second.id
        assert dc.sent[0].allowed_mentions == {"parse": []}
        assert (dc.sent[1].allowed_mentions or {})["replied_user"] is False
        reference = dc.sent[1].message_reference
        assert reference is not None and reference["message_id"] == question.id
        assert second.author.id == BOT_ID and second.reference is not None
        assert [t.channel_id for t in dc.typing_calls] == [GENERAL]
        # Discord sends the bot its own messages too.
        await dc.wait_for(lambda: sum(m.author.id == BOT_ID for m in run.received) == 2)


async def test_content_limits(dc: DiscordStandIn) -> None:
    """Over-long and empty messages fail with Discord's 50035 and 50006 errors and are not recorded."""
    async with running(dc) as run:
        channel = run.client.get_channel(GENERAL)
        assert isinstance(channel, discord.TextChannel)
        with pytest.raises(discord.HTTPException) as too_long:
            await channel.send("x" * 2001)
        assert too_long.value.status == 400 and too_long.value.code == 50035
        with pytest.raises(discord.HTTPException) as empty:
            await channel.send()
        assert empty.value.code == 50006
        await channel.send("x" * 2000)
        assert len(dc.sent) == 1
        with pytest.raises(discord.NotFound):
            await run.client.http.send_message(555, params=discord.http.handle_message_parameters("x"))


async def test_rate_limit_is_waited_out(dc: DiscordStandIn) -> None:
    """A 429 with Via and retry_after is slept through by discord.py and the message is delivered once."""
    async with running(dc) as run:
        channel = run.client.get_channel(GENERAL)
        assert isinstance(channel, discord.TextChannel)
        dc.fail_next(f"POST /channels/{GENERAL}/messages", status=429, retry_after=0.3)
        started = time.monotonic()
        await channel.send("patient")
        assert time.monotonic() - started >= 0.3
        assert [s.content for s in dc.sent] == ["patient"]
        posts = [r for r in dc.requests if r.method == "POST" and r.path.endswith("/messages")]
        assert [r.status for r in posts] == [429, 200] and posts[0].failed
        dc.fail_next("/typing", status=429, retry_after=0.1, is_global=True)
        started = time.monotonic()
        await channel.typing()
        assert time.monotonic() - started >= 0.1 and len(dc.typing_calls) == 1


async def test_forbidden(dc: DiscordStandIn) -> None:
    """A scripted 403 raises discord.Forbidden with Discord's Missing Permissions code."""
    async with running(dc) as run:
        channel = run.client.get_channel(GENERAL)
        assert isinstance(channel, discord.TextChannel)
        dc.fail_next("/messages", status=403)
        with pytest.raises(discord.Forbidden) as denied:
            await channel.send("nope")
        assert denied.value.code == 50013 and dc.sent == []


async def test_resume_replays_missed_events(dc: DiscordStandIn) -> None:
    """After a resumable disconnect the client RESUMEs and gets the missed event exactly once."""
    async with running(dc) as run:
        dc.message_create(GENERAL, ALICE, "before")
        await run.next_message(1)
        await dc.disconnect(4000)
        dc.message_create(GENERAL, ALICE, "while down")
        await asyncio.wait_for(run.resumed.wait(), 5)
        dc.message_create(GENERAL, ALICE, "after")
        await run.next_message(3)
        assert [m.content for m in run.from_users] == ["before", "while down", "after"]
        assert len(dc.identifies) == 1 and len(dc.resumes) == 1
        # READY, GUILD_CREATE and "before" were seen: the RESUME asks for everything after seq 3.
        assert dc.resumes[0]["seq"] == 3 and dc.resumes[0]["session_id"]
        assert dc.gateway_urls[1].startswith("/resume?")


async def test_invalid_session_reidentifies(dc: DiscordStandIn) -> None:
    """A non-resumable disconnect answers RESUME with INVALID_SESSION, the client IDENTIFYs again."""
    async with running(dc) as run:
        await dc.disconnect(1001, resumable=False)
        dc.message_create(GENERAL, ALICE, "lost")
        await dc.wait_for(lambda: len(dc.identifies) == 2 and dc.connected.is_set())
        dc.message_create(GENERAL, ALICE, "after")
        assert (await run.next_message(1)).content == "after"
        assert len(dc.resumes) == 1 and not run.resumed.is_set()


async def test_message_content_intent_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the intent, guild messages arrive blank unless they mention the bot; DMs keep content."""
    async with DiscordStandIn(token=TOKEN, bot_id=BOT_ID, message_content_intent=False) as dc:
        dc.add_guild(GUILD, "g", channels=[(GENERAL, "general")], members=[ALICE])
        dc.patch(monkeypatch)
        async with running(dc, intents=discord.Intents.default()) as run:
            assert dc.message_create(GENERAL, ALICE, "secret")["content"] == ""
            dc.message_create(GENERAL, ALICE, f"<@{BOT_ID}> visible", mentions=[BOT_ID])
            dc.message_create(DM, ALICE, "dm visible", attachments=1)
            await run.next_message(3)
            assert [m.content for m in run.from_users] == ["", f"<@{BOT_ID}> visible", "dm visible"]
            assert len(run.from_users[2].attachments) == 1


async def test_privileged_intent_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requesting message content when it is not enabled closes the gateway with 4014."""
    async with DiscordStandIn(token=TOKEN, message_content_intent=False) as dc:
        dc.patch(monkeypatch)
        client = discord.Client(intents=default_intents(), guild_ready_timeout=0.05)
        async with client:
            with pytest.raises(discord.PrivilegedIntentsRequired):
                await asyncio.wait_for(client.start(TOKEN), 5)
        assert len(dc.identifies) == 1


async def test_command_sync_and_unknown_route(dc: DiscordStandIn) -> None:
    """tree.sync() bulk-overwrites commands into dc.commands; an unknown route gets Discord's 404."""
    client = discord.Client(intents=default_intents(), guild_ready_timeout=0.05)
    tree = app_commands.CommandTree(client)

    @tree.command(name="ping", description="Check the bot")
    async def ping(interaction: discord.Interaction) -> None:
        await interaction.response.send_message("pong")

    async with running(dc, client=client):
        synced = await tree.sync()
        assert [c.name for c in synced] == ["ping"] and [c["name"] for c in dc.commands[None]] == ["ping"]
        guild_synced = await tree.sync(guild=discord.Object(GUILD))
        assert guild_synced == [] and dc.commands[GUILD] == []
        with pytest.raises(discord.NotFound) as missing:
            await client.http.request(discord.http.Route("GET", "/nowhere"))
        assert missing.value.text == "404: Not Found"


# -- idempotent creates, history, offline messages ------------------------------------------


def text_channel(run: Running, channel_id: int = GENERAL) -> discord.TextChannel:
    channel = run.client.get_channel(channel_id)
    assert isinstance(channel, discord.TextChannel)
    return channel


async def raw(dc: DiscordStandIn, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    """One REST call without discord.py, for what it never sends (no enforce_nonce, bad limits)."""
    headers = {"Authorization": f"Bot {TOKEN}"}
    async with aiohttp.ClientSession() as session, session.request(
        method, f"{dc.base_url}/api/v10{path}", headers=headers, **kwargs
    ) as response:
        return response.status, await response.json(content_type=None)


async def test_a_create_with_a_used_nonce_returns_the_first_message(dc: DiscordStandIn) -> None:
    """With enforce_nonce (discord.py always sets it), a repeated nonce returns the first message and
    posts or echoes nothing; once the window has passed, or without enforce_nonce, it posts again."""
    async with running(dc) as run:
        channel = text_channel(run)
        first = await channel.send("once", nonce="sb1.0")
        again = await channel.send("once more?", nonce="sb1.0")
        assert again.id == first.id and again.content == "once" and again.nonce == "sb1.0"
        assert [(s.content, s.nonce) for s in dc.sent] == [("once", "sb1.0")]
        other = await channel.send("different nonce", nonce="sb1.1")
        await dc.wait_for(lambda: len(run.received) == 2)  # echoes of the two posts only
        assert [m.id for m in run.received] == [first.id, other.id]
        nonces = [r.body["nonce"] for r in dc.requests if r.method == "POST"]
        assert nonces == ["sb1.0", "sb1.0", "sb1.1"]

        status, body = await raw(dc, "POST", f"/channels/{GENERAL}/messages",
                                 json={"content": "loose", "nonce": "sb1.0"})
        assert status == 200 and int(body["id"]) > other.id  # no enforce_nonce: posted
        dc.nonce_window = 0.0
        assert (await channel.send("expired", nonce="sb1.0")).id != first.id
        with pytest.raises(discord.HTTPException) as too_long:
            await channel.send("x", nonce="n" * 26)
        assert too_long.value.code == 50035
    assert [s.content for s in dc.sent] == ["once", "different nonce", "loose", "expired"]


async def test_a_lost_response_still_creates_the_message(dc: DiscordStandIn) -> None:
    """lose_next_response carries the create out, then drops the connection unanswered; a resend
    with the same nonce gets that message back."""
    async with running(dc) as run:
        channel = text_channel(run)
        dc.lose_next_response(f"POST /channels/{GENERAL}/messages")
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await channel.send("lost", nonce="sb2.0")
        (created,) = dc.sent
        resent = await channel.send("lost", nonce="sb2.0")
        assert resent.id == created.id
        assert [r.status for r in dc.requests if r.method == "POST"] == [0, 200]
        assert [m["content"] for m in dc.channel_messages(GENERAL)] == ["lost"]


async def test_history_pages_as_discord_answers(dc: DiscordStandIn) -> None:
    """GET …/messages answers newest first with limit, before, after and around as Discord does, so
    discord.py's history() pages through it; ids are snowflakes of the creation time."""
    posted = [int(dc.message_create(GENERAL, ALICE, f"m{n}")["id"]) for n in range(150)]
    assert abs(discord.utils.snowflake_time(posted[0]).timestamp() - time.time()) < 5
    async with running(dc) as run:
        assert run.from_users == []  # posted before any session: never delivered
        channel = text_channel(run)
        after = [m.content async for m in channel.history(after=discord.Object(posted[9]), limit=None)]
        assert after == [f"m{n}" for n in range(10, 150)]
        pages = [r.query for r in dc.requests if r.path == f"/channels/{GENERAL}/messages"]
        assert pages == [{"limit": "100", "after": str(posted[n])} for n in (9, 109)]
        newest = [m.content async for m in channel.history(limit=120)]
        assert newest == [f"m{n}" for n in range(149, 29, -1)]
        around = [m.content async for m in channel.history(around=discord.Object(posted[50]), limit=5)]
        assert sorted(around) == ["m48", "m49", "m50", "m51", "m52"]
        before = [m.content async for m in channel.history(before=discord.Object(posted[3]))]
        assert before == ["m2", "m1", "m0"]

    path = f"/channels/{GENERAL}/messages"
    status, body = await raw(dc, "GET", path)
    assert status == 200 and [m["content"] for m in body] == [f"m{n}" for n in range(149, 99, -1)]
    status, body = await raw(dc, "GET", path, params={"after": str(posted[0]), "limit": "3"})
    assert [m["content"] for m in body] == ["m3", "m2", "m1"]  # the oldest after, newest first
    status, body = await raw(dc, "GET", path, params={"around": str(posted[50]), "limit": "4"})
    assert [m["content"] for m in body] == ["m52", "m51", "m50", "m49", "m48"]  # even: limit + 1
    for bad in ({"limit": "0"}, {"limit": "101"}, {"before": str(posted[5]), "after": str(posted[1])}):
        status, body = await raw(dc, "GET", path, params=bad)
        assert (status, body["code"]) == (400, 50035)
    assert (await raw(dc, "GET", "/channels/555/messages"))[1]["code"] == 10003


async def test_history_messages_are_rest_shaped_and_blanked_without_the_intent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """REST messages carry no guild_id or member (authors are plain users); without the intent guild
    content is blank except mentions of the bot and its own messages, and DMs keep theirs."""
    async with DiscordStandIn(token=TOKEN, bot_id=BOT_ID, message_content_intent=False) as dc:
        dc.add_guild(GUILD, "g", channels=[(GENERAL, "general")], members=[{**ALICE, "roles": [ADMINS]}],
                     roles=[(ADMINS, "admins")])
        dc.patch(monkeypatch)
        dc.message_create(GENERAL, ALICE, "secret")
        dc.message_create(GENERAL, ALICE, f"<@{BOT_ID}> visible", mentions=[BOT_ID])
        dc.message_create(DM, ALICE, "dm visible")
        async with running(dc, intents=discord.Intents.default()) as run:
            await text_channel(run).send("bot text")
            history = [m async for m in text_channel(run).history(oldest_first=True)]
            assert [m.content for m in history] == ["", f"<@{BOT_ID}> visible", "bot text"]
            assert not isinstance(history[0].author, discord.Member)
            dm = await run.client.fetch_channel(DM)
            assert isinstance(dm, discord.DMChannel)
            assert [m.content async for m in dm.history()] == ["dm visible"]
            guild = run.client.get_guild(GUILD)
            assert guild is not None
            member = await guild.fetch_member(1)
            assert [r.id for r in member.roles] == [GUILD, ADMINS]
            with pytest.raises(discord.NotFound):
                await guild.fetch_member(BOB["id"])
        _, body = await raw(dc, "GET", f"/channels/{GENERAL}/messages")
        assert all("guild_id" not in m and "member" not in m for m in body)


async def test_messages_posted_while_offline_are_never_delivered(dc: DiscordStandIn) -> None:
    """Posted with no session, or after the client closed, a message (a new DM included) is only in
    history: the next client IDENTIFYs a new session, which does not replay it."""
    dc.message_create(DM, ALICE, "before any session")
    async with running(dc):
        pass
    dc.message_create(DM, ALICE, "after the client closed")
    async with running(dc) as run:
        dc.message_create(DM, ALICE, "live")
        assert (await run.next_message(1)).content == "live"
        dm = await run.client.fetch_channel(DM)
        assert isinstance(dm, discord.DMChannel)
        contents = [m.content async for m in dm.history(oldest_first=True)]
        assert contents == ["before any session", "after the client closed", "live"]
        assert len(run.from_users) == 1
    assert len(dc.identifies) == 2 and dc.resumes == []
