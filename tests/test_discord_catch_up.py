"""Discord's nothing lost, nothing twice: catch-up from history on every new session, and resends
that Discord deduplicates by nonce; the real discord.py against the gateway + REST stand-in."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

import pytest
from structlog.testing import capture_logs

from bot.config import Config
from bot.core.errors import DeliveryError, StoreError
from bot.core.messages import ChatRef, InboundMessage, OutboundMessage
from bot.intake.channel import CatchUpPoint
from bot.models.brain import AnthropicBrain
from bot.testing.anthropic_api import AnthropicStandIn, Text
from bot.testing.discord_api import DiscordStandIn
from bot.testing.recording_intake import RecordingIntake
from channels.discord.channel import DiscordChannel
from tests.harness import API_KEY, FAST, echo, reply_requests, request_text, running
from tests.test_discord import (
    ADMINS,
    ALICE,
    ALICE_ID,
    BOB,
    BOT_ID,
    DM_ALICE,
    GENERAL,
    GUILD,
    MENTION,
    RANDOM,
    THREAD,
    MakeConfig,
    all_messages,
    discord_daemon,
    make_channel,
    settled,
    shut_down,
    texts_to,
)


class CatchUpIntake(RecordingIntake):
    """A recording intake that names the chats to catch up; `gate` holds catch-up until it is set."""

    def __init__(self, points: Iterable[tuple[int, int]] = ()) -> None:
        super().__init__()
        self.points = [CatchUpPoint(str(chat), str(after)) for chat, after in points]
        self.asked: list[float] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def catch_up_points(self, provider: str, since: float) -> list[CatchUpPoint]:
        assert provider == "discord"
        self.asked.append(since)
        await self.gate.wait()
        return list(self.points)

    @property
    def texts(self) -> list[str]:
        return [m.text for m in self.received]


async def started(channel: DiscordChannel, intake: RecordingIntake) -> asyncio.Task[None]:
    task = asyncio.create_task(channel.run(intake))
    await asyncio.wait_for(channel.ready.wait(), 5)
    return task


def history_reads(dc: DiscordStandIn, channel_id: int) -> list[dict[str, str]]:
    path = f"/channels/{channel_id}/messages"
    return [r.query for r in dc.requests if r.method == "GET" and r.path == path]


# -- with the daemon -------------------------------------------------------------------------


async def test_messages_sent_while_the_daemon_was_down_are_answered_after_it_starts(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """DMs and a guild mention posted while no daemon ran are read from history at the next start,
    stored in the order they were sent and answered once each, in that order."""
    config = discord_config()
    async with discord_daemon(config):
        first = dc.message_create(DM_ALICE, ALICE, "first")
        dc.message_create(GENERAL, ALICE, f"{MENTION} hello guild", mentions=[BOT_ID])
        await dc.wait_for(lambda: len(dc.sent) == 2)

    offline = [
        dc.message_create(DM_ALICE, ALICE, "sent while you were away"),
        dc.message_create(GENERAL, BOB, f"{MENTION} you missed this", mentions=[BOT_ID]),
        dc.message_create(DM_ALICE, ALICE, "and this too"),
    ]
    async with discord_daemon(config) as daemon:
        await dc.wait_for(lambda: len(dc.sent) == 5)
        await settled(dc, daemon)

    assert texts_to(dc, DM_ALICE) == ["re: first", "re: sent while you were away", "re: and this too"]
    assert texts_to(dc, GENERAL) == ["re: [Alice]: @switchboard hello guild",
                                     "re: [bob]: @switchboard you missed this"]
    assert "first" in request_text(reply_requests(api)[-1]) + request_text(reply_requests(api)[-2])
    stored = {m.provider_message_id: m.id for m in await all_messages(config) if m.role == "user"}
    dm_ids = [stored[offline[0]["id"]], stored[offline[2]["id"]]]
    assert dm_ids == sorted(dm_ids) and offline[1]["id"] in stored
    # Each chat is read after the newest message received from it (our replies do not count).
    assert history_reads(dc, DM_ALICE) == [{"limit": "100", "after": first["id"]}]
    assert len(dc.identifies) == 2


async def test_messages_sent_while_the_gateway_could_not_resume_are_caught_up(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """When Discord refuses a RESUME (INVALID_SESSION, a new IDENTIFY) what was sent in between is
    read from history and answered once; a RESUMEd session needs no catch-up."""
    config = discord_config()
    async with discord_daemon(config) as daemon:
        dc.message_create(DM_ALICE, ALICE, "before")
        await dc.wait_for(lambda: dc.sent)
        await dc.disconnect(4000)  # resumable: the gateway replays what was missed
        dc.message_create(DM_ALICE, ALICE, "during a resume")
        await dc.wait_for(lambda: len(dc.sent) == 2)
        assert history_reads(dc, DM_ALICE) == []
        await dc.disconnect(4000, resumable=False)
        dc.message_create(DM_ALICE, ALICE, "lost by the gateway")
        assert len(dc.identifies) == 1  # posted before the new session: only history has it
        await dc.wait_for(lambda: len(dc.sent) == 3)
        dc.message_create(DM_ALICE, ALICE, "after")
        await dc.wait_for(lambda: len(dc.sent) == 4)
        await settled(dc, daemon)

    assert texts_to(dc, DM_ALICE) == [
        "re: before", "re: during a resume", "re: lost by the gateway", "re: after"]
    assert len(dc.identifies) == 2 and len(dc.resumes) == 2
    assert len(history_reads(dc, DM_ALICE)) == 1


async def test_a_message_sent_during_shutdown_is_caught_up_though_a_reply_followed_it(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """A message that arrives after stop(), while a turn in flight still delivers its reply, is read
    from history at the next start and answered."""
    config = discord_config(router={"shutdown_grace": 5.0})
    async with discord_daemon(config):
        dc.message_create(DM_ALICE, ALICE, "hello")
        await dc.wait_for(lambda: dc.sent)
    api.default = lambda rec: Text("slow answer", delay=0.8) if rec.model != FAST else echo(rec)
    channel = make_channel(config)
    async with running(config, [channel], AnthropicBrain(config.anthropic, API_KEY)) as daemon:
        dc.message_create(DM_ALICE, ALICE, "question")
        await dc.wait_for(lambda: len(reply_requests(api)) == 2)
        daemon.request_stop()
        await dc.wait_for(lambda: channel._stopped.is_set())
        dc.message_create(DM_ALICE, ALICE, "sent during shutdown")
    api.default = echo
    async with discord_daemon(config):
        await dc.wait_for(lambda: len(dc.sent) == 3, timeout=3)


async def test_a_command_answered_before_a_restart_is_not_answered_again(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """A `/whoami` answered in the last run is in the history the next start reads, and is not
    answered a second time."""
    config = discord_config()
    async with discord_daemon(config):
        dc.message_create(DM_ALICE, ALICE, "hello")
        await dc.wait_for(lambda: dc.sent)
        dc.message_create(DM_ALICE, ALICE, "/whoami")
        await dc.wait_for(lambda: len(dc.sent) == 2)
    async with discord_daemon(config) as daemon:
        await dc.wait_for(lambda: history_reads(dc, DM_ALICE))
        await settled(dc, daemon)
    assert len(texts_to(dc, DM_ALICE)) == 2


# -- the channel alone ------------------------------------------------------------------------


async def test_a_chunk_resent_with_the_same_delivery_key_posts_once(
    dc: DiscordStandIn, make_config: MakeConfig
) -> None:
    """Every chunk of a keyed reply carries the nonce `<key>.<index>`: sending again, or resuming
    after a chunk, gets the messages already posted; an unkeyed notice posts each time."""
    channel = make_channel(make_config({}))
    task = await started(channel, RecordingIntake())
    try:
        chat = ChatRef("discord", str(GENERAL))
        long_text = "\n".join(f"line {n}" for n in range(100))  # three chunks of at most 40 lines
        first = await channel.send(OutboundMessage(chat, long_text, delivery_key="sb12"))
        again = await channel.send(OutboundMessage(chat, long_text, delivery_key="sb12"))
        resumed = await channel.send(OutboundMessage(chat, long_text, delivery_key="sb12", skip_chunks=1))
        assert len(first) == 3 and again == first and resumed == first[1:]
        assert [s.nonce for s in dc.sent] == ["sb12.0", "sb12.1", "sb12.2"]
        notice = OutboundMessage(chat, "a notice")
        await channel.send(notice)
        await channel.send(notice)
        assert [s.content for s in dc.sent[3:]] == ["a notice", "a notice"]
    finally:
        await shut_down(channel, task)
    assert len(dc.channel_messages(GENERAL)) == 5


async def test_a_send_whose_response_was_lost_is_resent_without_a_duplicate(
    dc: DiscordStandIn, make_config: MakeConfig
) -> None:
    """Discord creates the message but the answer never arrives: the send fails as retryable, and
    the resend with the same key returns that message instead of posting it again."""
    channel = make_channel(make_config({}))
    task = await started(channel, RecordingIntake())
    try:
        reply = OutboundMessage(ChatRef("discord", str(GENERAL)), "exactly once", delivery_key="sb40")
        dc.lose_next_response(f"POST /channels/{GENERAL}/messages")
        with pytest.raises(DeliveryError) as lost:
            await channel.send(reply)
        assert not lost.value.permanent and lost.value.sent_ids == []
        (created,) = dc.sent
        assert await channel.send(reply) == [str(created.id)]
    finally:
        await shut_down(channel, task)
    assert [m["content"] for m in dc.channel_messages(GENERAL)] == ["exactly once"]
    assert [r.status for r in dc.requests if r.method == "POST"] == [0, 200]


async def test_backlog_is_handed_over_before_later_live_messages_and_only_once(
    dc: DiscordStandIn, make_config: MakeConfig
) -> None:
    """Catch-up runs first in the intake worker: a live message that arrives during it waits behind
    the backlog, and is taken once even though history had it too; the bot's own posts are skipped."""
    stored = dc.message_create(DM_ALICE, ALICE, "stored before")
    dc.message_create(DM_ALICE, ALICE, "missed one")
    dc.message_create(DM_ALICE, dc.bot_user, "our own reply")
    dc.message_create(DM_ALICE, ALICE, "missed two")
    intake = CatchUpIntake([(DM_ALICE, int(stored["id"]))])
    intake.gate.clear()
    channel = make_channel(make_config({"channels": {"discord": {"allow_from": [ALICE["id"]]}}}))
    task = await started(channel, intake)
    try:
        await dc.wait_for(lambda: intake.asked)
        dc.message_create(DM_ALICE, ALICE, "live")  # delivered now, queued behind the catch-up
        intake.gate.set()
        await dc.wait_for(lambda: len(intake.received) == 3)
        await settled(dc, channel)
    finally:
        await shut_down(channel, task)
    assert intake.texts == ["missed one", "missed two", "live"]
    assert abs(intake.asked[0] - (time.time() - 3600)) < 60  # the chats active within max_reply_age


async def test_catch_up_reads_on_from_the_last_message_it_took_not_from_a_later_reply(
    dc: DiscordStandIn, make_config: MakeConfig
) -> None:
    """After a session the gateway would not resume, a message posted before a reply of ours is still
    read, though the store's newest id for the chat is that reply."""
    intake = CatchUpIntake()
    channel = make_channel(make_config({"channels": {"discord": {"allow_from": [ALICE["id"]]}}}))
    task = await started(channel, intake)
    try:
        dc.message_create(DM_ALICE, ALICE, "question")
        await dc.wait_for(lambda: intake.received)
        intake.gate.clear()
        await dc.disconnect(4000, resumable=False)
        dc.message_create(DM_ALICE, ALICE, "sent while the gateway was away")
        await dc.wait_for(lambda: len(intake.asked) == 2)
        (reply_id,) = await channel.send(OutboundMessage(ChatRef("discord", str(DM_ALICE)), "answer"))
        intake.points = [CatchUpPoint(str(DM_ALICE), reply_id)]
        intake.gate.set()
        await dc.wait_for(lambda: len(intake.received) == 2)
    finally:
        await shut_down(channel, task)
    assert intake.texts == ["question", "sent while the gateway was away"]


async def test_a_gone_or_forbidden_channel_is_skipped_and_the_others_caught_up(
    dc: DiscordStandIn, make_config: MakeConfig
) -> None:
    """A 404 or 403 on a channel's history is logged at info and skipped; other chats (a thread, a DM
    known only by id) still catch up into their own sessions."""
    before = dc.message_create(GENERAL, ALICE, "old")
    dc.message_create(RANDOM, ALICE, f"{MENTION} not readable", mentions=[BOT_ID])
    dc.message_create(THREAD, ALICE, f"{MENTION} in a thread", mentions=[BOT_ID])
    dc.message_create(DM_ALICE, ALICE, "in a DM")
    dc.fail_next(f"GET /channels/{RANDOM}/messages", status=403, code=50001, message="Missing Access")
    after = int(before["id"])
    intake = CatchUpIntake([(555, after), (RANDOM, after), (THREAD, after), (DM_ALICE, after)])
    section = {"allow_from": [ALICE["id"]], "guilds": {str(GUILD): {}}}
    channel = make_channel(make_config({"channels": {"discord": section}}))
    with capture_logs() as logs:
        task = await started(channel, intake)
        try:
            await dc.wait_for(lambda: len(intake.received) == 2)
        finally:
            await shut_down(channel, task)
    assert intake.texts == ["@switchboard in a thread", "in a DM"]
    assert [str(m.session_key) for m in intake.received] == [
        f"agent:main:discord:channel:{GENERAL}:thread:{THREAD}", f"agent:main:discord:direct:{ALICE['id']}"]
    skipped = [e for e in logs if e["event"].startswith("catch-up skipped")]
    assert [(e["channel_id"], e["status"], e["log_level"]) for e in skipped] == [
        (555, 404, "info"), (RANDOM, 403, "info")]


async def test_role_gated_guilds_are_caught_up_with_the_authors_roles(
    dc: DiscordStandIn, make_config: MakeConfig
) -> None:
    """History has no member data, so authors are looked up: a member with an allowed role is taken
    with the role, one without it is not."""
    before = dc.message_create(GENERAL, ALICE, "old")
    dc.message_create(GENERAL, BOB, f"{MENTION} no role", mentions=[BOT_ID])
    dc.message_create(GENERAL, ALICE, f"{MENTION} admin here", mentions=[BOT_ID])
    dc.message_create(GENERAL, ALICE, f"{MENTION} again", mentions=[BOT_ID])
    intake = CatchUpIntake([(GENERAL, int(before["id"]))])
    config = make_config({"channels": {"discord": {"guilds": {str(GUILD): {"roles": [ADMINS]}}}}})
    channel = make_channel(config)
    task = await started(channel, intake)
    try:
        await dc.wait_for(lambda: len(intake.received) == 2)
        await settled(dc, channel)
    finally:
        await shut_down(channel, task)
    assert intake.texts == ["@switchboard admin here", "@switchboard again"]
    assert intake.received[0].starts_turn and intake.received[0].sender_name == "Alice"
    lookups = [r.path for r in dc.requests if "/members/" in r.path]
    assert lookups == [f"/guilds/{GUILD}/members/{BOB['id']}", f"/guilds/{GUILD}/members/{ALICE['id']}"]


async def test_a_stop_cuts_catch_up_short_and_the_next_start_takes_what_it_left(
    dc: DiscordStandIn, make_config: MakeConfig
) -> None:
    """A history read held up by a long rate limit does not hold up stop(); the chat's live messages
    queued behind it are left in history, so the next start takes the backlog and them, in order."""
    stored = dc.message_create(DM_ALICE, ALICE, "stored")
    dc.message_create(DM_ALICE, ALICE, "missed")
    dc.fail_next(f"GET /channels/{DM_ALICE}/messages", status=429, retry_after=30)
    config = make_config({"channels": {"discord": {"allow_from": [ALICE["id"]]}}})
    points = [(DM_ALICE, int(stored["id"]))]
    first = CatchUpIntake(points)
    channel = make_channel(config)
    task = await started(channel, first)
    await dc.wait_for(lambda: history_reads(dc, DM_ALICE))
    dc.message_create(DM_ALICE, ALICE, "live, behind the catch-up")
    await dc.wait_for(lambda: channel._intake.qsize() == 1)  # received, waiting behind the catch-up
    started_stop = time.monotonic()
    await shut_down(channel, task)
    assert time.monotonic() - started_stop < 1
    assert first.received == []

    second = CatchUpIntake(points)
    channel = make_channel(config)
    task = await started(channel, second)
    try:
        await dc.wait_for(lambda: len(second.received) == 2)
    finally:
        await shut_down(channel, task)
    assert second.texts == ["missed", "live, behind the catch-up"]


class RefusingIntake(RecordingIntake):
    """An intake whose store refuses the first `failures` messages handed over (a locked database)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def submit(self, inbound: InboundMessage) -> None:
        if self.failures:
            self.failures -= 1
            raise StoreError("database is locked")
        await super().submit(inbound)


async def test_a_message_the_core_could_not_store_is_handed_over_again_before_later_ones(
    dc: DiscordStandIn, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live message the store refused is handed over again until it is stored, and the messages
    after it wait behind it, so they are stored in order and none is lost."""
    monkeypatch.setattr("channels.discord.channel.SUBMIT_RETRY_DELAY", 0.01)
    channel = make_channel(make_config({"channels": {"discord": {"allow_from": [ALICE_ID]}}}))
    intake = RefusingIntake(failures=2)
    task = await started(channel, intake)
    try:
        dc.message_create(DM_ALICE, ALICE, "one")
        dc.message_create(DM_ALICE, ALICE, "two")
        await dc.wait_for(lambda: len(intake.received) == 2)
    finally:
        await shut_down(channel, task)
    assert [m.text for m in intake.received] == ["one", "two"]
