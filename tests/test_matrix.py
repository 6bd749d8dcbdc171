"""Matrix end to end: the daemon with mautrix-python against a real Synapse on 127.0.0.1 (installed
and started by bot/testing/synapse.py), people writing through the client-server API."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import pytest
from structlog.testing import capture_logs

from bot.config import Config
from bot.core.errors import DeliveryError
from bot.core.messages import ChatRef, InboundMessage, OutboundMessage
from bot.daemon.assembly import Daemon
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.matrix_user import MatrixUser
from bot.testing.recording_intake import RecordingIntake
from bot.testing.synapse import MatrixAccount, SynapseServer
from channels.matrix.channel import ENCRYPTED_NOTICE, MatrixChannel
from tests import sql
from tests.harness import API_KEY, config_data, reply_requests, router_of, running

Event = dict[str, Any]


@pytest.fixture
def bot_account(synapse: SynapseServer) -> MatrixAccount:
    return synapse.register()


@pytest.fixture
async def alice(synapse: SynapseServer) -> AsyncIterator[MatrixUser]:
    async with MatrixUser(synapse.base_url, synapse.register()) as user:
        yield user


@pytest.fixture
async def bob(synapse: SynapseServer) -> AsyncIterator[MatrixUser]:
    async with MatrixUser(synapse.base_url, synapse.register()) as user:
        yield user


@pytest.fixture
def matrix_config(
    api: AnthropicStandIn, synapse: SynapseServer, bot_account: MatrixAccount, alice: MatrixUser,
    make_config: Callable[[dict[str, Any]], Config], monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., Config]:
    """Configs with Matrix on: Alice may write and invite."""
    monkeypatch.setenv("MATRIX_ACCESS_TOKEN", bot_account.access_token)

    def make(**section: Any) -> Config:
        values = {"enabled": True, "homeserver": synapse.base_url, "user_id": bot_account.user_id,
                  "allow_from": [alice.user_id], **section}
        return make_config(config_data(api, channels={"matrix": values}))

    return make


def make_channel(config: Config, token: str) -> MatrixChannel:
    return MatrixChannel(config.channels.matrix, agent_id=config.agent.id, access_token=token)


@asynccontextmanager
async def matrix_daemon(
    config: Config, token: str, *, timeline_limit: int | None = None,
) -> AsyncIterator[Daemon]:
    """The daemon as `switchboard run` assembles it, with Matrix as its only channel."""
    channel = make_channel(config, token)
    if timeline_limit is not None:
        channel.timeline_limit = timeline_limit
    async with running(config, [channel], AnthropicBrain(config.anthropic, API_KEY)) as daemon:
        await asyncio.wait_for(channel.ready.wait(), 30)
        yield daemon


def name_of(user: MatrixUser) -> str:
    """A test user's display name: Synapse makes it the localpart at registration."""
    return user.user_id[1:].partition(":")[0]


async def joined(user: MatrixUser, room_id: str, bot: MatrixAccount) -> None:
    async def check() -> bool:
        return await user.membership(room_id, bot.user_id) == "join"

    await user.wait_for(check)


async def replies(user: MatrixUser, room_id: str, bot: MatrixAccount, count: int = 1) -> list[Event]:
    """The bot's messages in the room, once there are `count` of them."""
    async def check() -> list[Event] | None:
        found = await user.messages(room_id, sender=bot.user_id)
        return found if len(found) >= count else None

    return await user.wait_for(check)


async def test_a_dm_is_answered_in_the_room_it_came_from(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser,
    api: AnthropicStandIn,
) -> None:
    """Alice opens a direct chat: the bot joins, answers her message there, with HTML beside the
    plain body, and both are stored under her direct session."""
    config = matrix_config()
    async with matrix_daemon(config, bot_account.access_token) as daemon:
        room = await alice.create_room(invite=(bot_account.user_id,), direct=True)
        await joined(alice, room, bot_account)
        asked = await alice.send(room, "hello **there**")
        (reply,) = await replies(alice, room, bot_account)
        await router_of(daemon).idle()

    content = reply["content"]
    assert content["body"] == "re: hello **there**"
    assert content["format"] == "org.matrix.custom.html"
    assert "<strong>there</strong>" in content["formatted_body"]
    assert "m.relates_to" not in content  # a direct chat's reply quotes nothing, as on every platform
    async with Store.open(config.database_path()) as store:
        history = await store.history(f"agent:main:matrix:direct:{alice.user_id}", 10)
    assert [(m.role, m.text) for m in history] == [("user", "hello **there**"),
                                                   ("assistant", "re: hello **there**")]
    assert history[0].provider_message_id == asked
    assert history[1].provider_message_id == reply["event_id"]
    assert len(reply_requests(api)) == 1


async def test_a_room_message_starts_a_turn_only_when_it_mentions_the_bot(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser, bob: MatrixUser,
    api: AnthropicStandIn,
) -> None:
    """In a room of three, chatter is stored but not answered; a message naming the bot's id, or
    mentioning it intentionally (`m.mentions`), is, its reply quoting it (`m.in_reply_to`)."""
    config = matrix_config()
    async with matrix_daemon(config, bot_account.access_token) as daemon:
        room = await alice.create_room(invite=(bot_account.user_id, bob.user_id))
        await bob.join(room)
        await joined(alice, room, bot_account)
        await alice.send(room, "just chatting with bob")
        asked = await bob.send(room, f"{bot_account.user_id}: what time is it?")
        await replies(alice, room, bot_account, 1)
        await alice.send(room, "and you?", mentions=(bot_account.user_id,))
        answers = await replies(alice, room, bot_account, 2)
        await router_of(daemon).idle()

    # In a room the model reads each message under its sender's name (the display name).
    assert [a["content"]["body"] for a in answers] == [
        f"re: [{name_of(bob)}]: {bot_account.user_id}: what time is it?", f"re: [{name_of(alice)}]: and you?"]
    assert answers[0]["content"]["m.relates_to"] == {"m.in_reply_to": {"event_id": asked}}
    assert len(reply_requests(api)) == 2
    async with Store.open(config.database_path()) as store:
        history = await store.history(f"agent:main:matrix:room:{room}", 10)
    assert [m.text for m in history if m.role == "user"] == [
        "just chatting with bob", f"{bot_account.user_id}: what time is it?", "and you?"]


async def test_a_reply_to_a_thread_stays_in_the_thread(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser, bob: MatrixUser,
) -> None:
    """A mention inside a thread is answered inside that thread (`m.thread` to its root, replying
    to the message), in the thread's own session."""
    config = matrix_config()
    async with matrix_daemon(config, bot_account.access_token) as daemon:
        room = await alice.create_room(invite=(bot_account.user_id, bob.user_id))
        await bob.join(room)
        await joined(alice, room, bot_account)
        root = await alice.send(room, "a thread about tea")
        asked = await alice.send(room, "green or black?", thread_root=root, mentions=(bot_account.user_id,))
        (reply,) = await replies(alice, room, bot_account)
        await router_of(daemon).idle()

    assert reply["content"]["m.relates_to"] == {
        "rel_type": "m.thread", "event_id": root, "is_falling_back": False,
        "m.in_reply_to": {"event_id": asked}}
    async with Store.open(config.database_path()) as store:
        thread = await store.history(f"agent:main:matrix:room:{room}:thread:{root}", 10)
    assert [(m.role, m.text) for m in thread] == [("user", "green or black?"),
                                                  ("assistant", f"re: [{name_of(alice)}]: green or black?")]


async def test_invites_from_strangers_are_declined_and_from_allowed_users_accepted(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser, bob: MatrixUser,
) -> None:
    """Bob is on no list: the bot leaves his invite (declines it); Alice's it accepts."""
    config = matrix_config()
    async with matrix_daemon(config, bot_account.access_token):
        strangers = await bob.create_room(invite=(bot_account.user_id,))
        alices = await alice.create_room(invite=(bot_account.user_id,))
        await joined(alice, alices, bot_account)

        async def declined() -> bool:
            return await bob.membership(strangers, bot_account.user_id) == "leave"

        await bob.wait_for(declined)


async def test_a_chunk_sent_again_with_its_transaction_id_is_posted_once(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser,
) -> None:
    """A reply's chunk sent, then sent again (the outbox resending what it never saw confirmed,
    as after a crash): the homeserver answers the second with the first event; one event in the
    room. Another reply with the same text is a new event."""
    config = matrix_config()
    room = await alice.create_room(invite=(bot_account.user_id,))
    channel = make_channel(config, bot_account.access_token)
    intake = RecordingIntake()
    task = asyncio.create_task(channel.run(intake))
    try:
        await asyncio.wait_for(channel.ready.wait(), 30)
        await joined(alice, room, bot_account)
        reply = OutboundMessage(ChatRef("matrix", room), "the one answer", delivery_key="sb7")
        first = await channel.send(reply)
        again = await channel.send(reply)
        other = await channel.send(OutboundMessage(ChatRef("matrix", room), "the one answer",
                                                   delivery_key="sb8"))
        bots = await replies(alice, room, bot_account, 2)
    finally:
        await channel.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    assert first == again and first != other
    assert [e["event_id"] for e in bots] == [*first, *other]
    assert intake.cursors["matrix"]  # the sync token was kept


async def test_an_invite_to_an_encrypted_room_is_refused_with_one_line(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser,
) -> None:
    """Even Alice's invite to an end-to-end encrypted room is refused, never silently: the bot
    says so in the room, once, and leaves."""
    config = matrix_config()
    with capture_logs() as logs:
        async with matrix_daemon(config, bot_account.access_token):
            room = str((await alice.call("POST", "/createRoom", {
            "invite": [bot_account.user_id], "preset": "private_chat",
            "initial_state": [{"type": "m.room.encryption", "state_key": "",
                               "content": {"algorithm": "m.megolm.v1.aes-sha2"}}]}))["room_id"])

            async def left() -> bool:
                return await alice.membership(room, bot_account.user_id) == "leave"

            await alice.wait_for(left)
    (notice,) = await alice.messages(room, sender=bot_account.user_id)
    assert notice["content"]["body"] == ENCRYPTED_NOTICE
    assert [(e["log_level"], e.get("room_id")) for e in logs if "encrypted" in e["event"]] == [
        ("warning", room)]


async def test_a_room_that_turns_encryption_on_is_left_with_one_line(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser,
    api: AnthropicStandIn,
) -> None:
    """Alice turns encryption on in a direct chat the bot is in and goes on writing: the bot says
    once that it cannot read encrypted rooms and leaves; what came after is neither answered nor
    stored, encrypted or not."""
    config = matrix_config()
    with capture_logs() as logs:
        async with matrix_daemon(config, bot_account.access_token) as daemon:
            room = await alice.create_room(invite=(bot_account.user_id,), direct=True)
            await joined(alice, room, bot_account)
            await alice.send(room, "in plain text")
            await replies(alice, room, bot_account, 1)
            await alice.call("PUT", f"/rooms/{quote(room)}/state/m.room.encryption/",
                             {"algorithm": "m.megolm.v1.aes-sha2"})
            await alice.send_content(room, {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgA",
                                            "sender_key": "k", "device_id": "D", "session_id": "s"},
                                     kind="m.room.encrypted")
            await alice.send(room, "after encryption")

            async def left() -> bool:
                return await alice.membership(room, bot_account.user_id) == "leave"

            await alice.wait_for(left)
            await router_of(daemon).idle()
    said = [e["content"]["body"] for e in await alice.messages(room, sender=bot_account.user_id)]
    async with Store.open(config.database_path()) as store:
        history = await store.history(f"agent:main:matrix:direct:{alice.user_id}", 10)

    assert said == ["re: in plain text", ENCRYPTED_NOTICE]
    assert [(e["log_level"], e.get("room_id")) for e in logs if "encrypted" in e["event"]] == [
        ("warning", room)]
    assert [(m.role, m.text) for m in history] == [("user", "in plain text"),
                                                   ("assistant", "re: in plain text")]
    assert len(reply_requests(api)) == 1


async def test_what_was_written_while_the_daemon_was_down_is_answered_once_after_a_restart(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser,
    api: AnthropicStandIn,
) -> None:
    """The sync token is kept in the database: after a restart the daemon resumes from it, so the
    messages written meanwhile are answered, each once, and what was answered before is not."""
    config = matrix_config()
    async with matrix_daemon(config, bot_account.access_token) as daemon:
        room = await alice.create_room(invite=(bot_account.user_id,), direct=True)
        await joined(alice, room, bot_account)
        await alice.send(room, "before")
        await replies(alice, room, bot_account, 1)
        await router_of(daemon).idle()
    async with Store.open(config.database_path()) as store:
        kept = await store.channel_cursor("matrix")
    for text in ("while down 1", "while down 2", "while down 3"):
        await alice.send(room, text)
    async with matrix_daemon(config, bot_account.access_token) as daemon:
        await replies(alice, room, bot_account, 4)
        await router_of(daemon).idle()
    answers = await alice.messages(room, sender=bot_account.user_id)
    async with Store.open(config.database_path()) as store:
        later = await store.channel_cursor("matrix")

    assert [a["content"]["body"] for a in answers] == [
        "re: before", "re: while down 1", "re: while down 2", "re: while down 3"]
    assert len(reply_requests(api)) == 4
    assert kept is not None and later is not None and later != kept


async def test_a_batch_not_stored_keeps_the_token_and_comes_again(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser,
) -> None:
    """When the core cannot store an event, the token stays where it was: the next sync returns
    the same events, and the token moves once they are stored."""
    config = matrix_config()
    room = await alice.create_room(invite=(bot_account.user_id,), direct=True)
    failures = [RuntimeError("database is locked")]

    async def flaky(inbound: InboundMessage) -> None:
        if failures:
            raise failures.pop()

    intake = RecordingIntake(flaky)
    channel = make_channel(config, bot_account.access_token)
    task = asyncio.create_task(channel.run(intake))
    try:
        await asyncio.wait_for(channel.ready.wait(), 30)
        await joined(alice, room, bot_account)
        before = intake.cursors["matrix"]
        sent = await alice.send(room, "keep me")

        async def stored() -> bool:
            return len(intake.received) == 2 and intake.cursors["matrix"] != before

        await alice.wait_for(stored)
    finally:
        await channel.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    assert [m.provider_message_id for m in intake.received] == [sent, sent]  # refused once, then taken


async def test_a_rate_limited_send_waits_as_the_homeserver_asks(
    synapse: SynapseServer, matrix_config: Callable[..., Config], bot_account: MatrixAccount,
    alice: MatrixUser,
) -> None:
    """With the bot limited to one message a second, three replies sent at once all arrive: each
    429 (`M_LIMIT_EXCEEDED`) is waited out for its `retry_after_ms` and the send repeated."""
    config = matrix_config()
    room = await alice.create_room(invite=(bot_account.user_id,))
    channel = make_channel(config, bot_account.access_token)
    task = asyncio.create_task(channel.run(RecordingIntake()))
    try:
        await asyncio.wait_for(channel.ready.wait(), 30)
        await joined(alice, room, bot_account)
        synapse.limit_messages(bot_account.user_id, per_second=1, burst_count=1)
        sent = [await channel.send(OutboundMessage(ChatRef("matrix", room), f"part {n}",
                                                   delivery_key=f"sb{n}")) for n in range(3)]
    finally:
        await channel.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    bots = await alice.messages(room, sender=bot_account.user_id)
    assert [e["content"]["body"] for e in bots] == ["part 0", "part 1", "part 2"]
    assert [e["event_id"] for e in bots] == [ids[0] for ids in sent]


async def test_a_timeline_cut_short_after_an_absence_is_filled_in_order(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser,
    api: AnthropicStandIn,
) -> None:
    """Syncs carry at most two events a room here: the five messages written while the daemon was
    away come back `limited`, and the three the sync left out are fetched, so all five are
    answered, in order."""
    config = matrix_config()
    async with matrix_daemon(config, bot_account.access_token, timeline_limit=2) as daemon:
        room = await alice.create_room(invite=(bot_account.user_id,), direct=True)
        await joined(alice, room, bot_account)
        await router_of(daemon).idle()
    for n in range(5):
        await alice.send(room, f"missed {n}")
    async with matrix_daemon(config, bot_account.access_token, timeline_limit=2) as daemon:
        await replies(alice, room, bot_account, 5)
        await router_of(daemon).idle()

    answers = await alice.messages(room, sender=bot_account.user_id)
    assert [a["content"]["body"] for a in answers] == [f"re: missed {n}" for n in range(5)]
    assert len(reply_requests(api)) == 5


async def test_under_pairing_a_stranger_may_open_a_direct_chat_and_is_given_a_code(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, bob: MatrixUser,
    api: AnthropicStandIn,
) -> None:
    """`dm_policy = "pairing"`: Bob's invite to a direct chat is accepted, his message is not
    answered by the model but with his pairing code and id; his invite to a room is declined."""
    config = matrix_config(dm_policy="pairing")
    async with matrix_daemon(config, bot_account.access_token) as daemon:
        direct = await bob.create_room(invite=(bot_account.user_id,), direct=True)
        await joined(bob, direct, bot_account)
        await bob.send(direct, "hello?")
        (notice,) = await replies(bob, direct, bot_account)
        group = await bob.create_room(invite=(bot_account.user_id,))

        async def declined() -> bool:
            return await bob.membership(group, bot_account.user_id) == "leave"

        await bob.wait_for(declined)
        await router_of(daemon).idle()
        async with Store.open(config.database_path()) as store:
            pending = await store.pairings(provider="matrix")

    assert "pairing code" in notice["content"]["body"] and bob.user_id in notice["content"]["body"]
    assert [(p.user_id, p.status) for p in pending] == [(bob.user_id, "pending")]
    assert reply_requests(api) == []


async def test_a_message_to_a_person_goes_to_their_direct_chat(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser, bob: MatrixUser,
) -> None:
    """A scheduled job's `matrix:@alice:server` names a person: the message lands in the room the
    bot shares with her alone, not in a room with others; someone with no direct chat is a
    permanent failure saying so."""
    config = matrix_config()
    shared = await alice.create_room(invite=(bot_account.user_id, bob.user_id))
    await bob.join(shared)
    direct = await alice.create_room(invite=(bot_account.user_id,), direct=True)
    channel = make_channel(config, bot_account.access_token)
    task = asyncio.create_task(channel.run(RecordingIntake()))
    try:
        await asyncio.wait_for(channel.ready.wait(), 30)
        await joined(alice, shared, bot_account)
        await joined(alice, direct, bot_account)
        (sent,) = await channel.send(OutboundMessage(ChatRef("matrix", alice.user_id), "your briefing"))
        with pytest.raises(DeliveryError, match="no direct chat") as refused:
            await channel.send(OutboundMessage(ChatRef("matrix", "@nobody:localhost"), "hello"))
    finally:
        await channel.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    assert [e["event_id"] for e in await alice.messages(direct, sender=bot_account.user_id)] == [sent]
    assert await alice.messages(shared, sender=bot_account.user_id) == []
    assert refused.value.permanent


async def test_a_reply_sent_just_before_a_crash_is_not_posted_again_on_restart(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser,
    api: AnthropicStandIn,
) -> None:
    """The reply reached the room but the daemon died before recording it (its outbox row left,
    its event id unknown): the restart resends it through the outbox with the same transaction
    id, Synapse answers with the event already there, and the room still shows it once."""
    config = matrix_config()
    async with matrix_daemon(config, bot_account.access_token) as daemon:
        room = await alice.create_room(invite=(bot_account.user_id,), direct=True)
        await joined(alice, room, bot_account)
        await alice.send(room, "say it once")
        (posted,) = await replies(alice, room, bot_account)
        await router_of(daemon).idle()
    async with Store.open(config.database_path()) as store:
        reply_id = await sql.value(
            store, "SELECT message_id FROM provider_messages WHERE provider_message_id = ?",
            (posted["event_id"],))
        await sql.execute(store, "DELETE FROM provider_messages WHERE message_id = ?", (reply_id,))
        await sql.execute(
            store, "INSERT INTO outbox (message_id, provider, chat_id, text, chunks_sent, created_at) "
            "VALUES (?, 'matrix', ?, ?, 0, ?)", (reply_id, room, "re: say it once", time.time()))
    async with matrix_daemon(config, bot_account.access_token) as daemon:
        async with Store.open(config.database_path()) as store:
            async def resent() -> bool:
                return int(await sql.value(store, "SELECT COUNT(*) FROM outbox")) == 0

            await alice.wait_for(resent)
            recorded = await sql.value(
                store, "SELECT provider_message_id FROM provider_messages WHERE message_id = ?", (reply_id,))
        await router_of(daemon).idle()

    bots = await alice.messages(room, sender=bot_account.user_id)
    assert [e["event_id"] for e in bots] == [posted["event_id"]]
    assert recorded == posted["event_id"]
    assert len(reply_requests(api)) == 1


async def test_a_direct_chat_a_third_person_joins_becomes_a_room(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser, bob: MatrixUser,
    api: AnthropicStandIn,
) -> None:
    """The bot counts a room's members once and keeps the count while the syncs bring only the
    memberships lazy loading sends; Bob joining Alice's direct chat is a change in the timeline:
    her next message belongs to the room's session, not her direct one."""
    config = matrix_config(require_mention=False)
    async with matrix_daemon(config, bot_account.access_token) as daemon:
        room = await alice.create_room(invite=(bot_account.user_id,), direct=True)
        await joined(alice, room, bot_account)
        await alice.send(room, "just us")
        await replies(alice, room, bot_account)
        await alice.invite(room, bob.user_id)
        await bob.join(room)
        await alice.send(room, "now with Bob")
        await replies(alice, room, bot_account, 2)
        await router_of(daemon).idle()

    async with Store.open(config.database_path()) as store:
        direct = await store.history(f"agent:main:matrix:direct:{alice.user_id}", 10)
        shared = await store.history(f"agent:main:matrix:room:{room}", 10)
    assert [m.text for m in direct if m.role == "user"] == ["just us"]
    assert [m.text for m in shared if m.role == "user"] == ["now with Bob"]


async def test_a_room_message_naming_the_bot_by_its_display_name_starts_a_turn(
    synapse: SynapseServer, matrix_config: Callable[..., Config], bot_account: MatrixAccount,
    alice: MatrixUser, bob: MatrixUser, api: AnthropicStandIn,
) -> None:
    """The bot's display name, read from its profile at start, is a mention as a word of the
    text (any case), without its user id or `m.mentions`; a word merely containing it is not."""
    async with MatrixUser(synapse.base_url, bot_account) as bot:
        await bot.call("PUT", f"/profile/{quote(bot_account.user_id)}/displayname",
                       {"displayname": "Tidewatch"})
    config = matrix_config()
    async with matrix_daemon(config, bot_account.access_token) as daemon:
        room = await alice.create_room(invite=(bot_account.user_id, bob.user_id))
        await bob.join(room)
        await joined(alice, room, bot_account)
        await alice.send(room, "the tidewatchers met today")
        await alice.send(room, "tidewatch, when is high tide?")
        (answer,) = await replies(alice, room, bot_account, 1)
        await router_of(daemon).idle()

    assert answer["content"]["body"] == f"re: [{name_of(alice)}]: tidewatch, when is high tide?"
    assert len(reply_requests(api)) == 1


async def test_a_thread_in_a_room_of_version_1_is_answered_in_its_own_session(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser, bob: MatrixUser,
    api: AnthropicStandIn,
) -> None:
    """Rooms of versions 1 and 2 name events `$id:server`, colon included: a thread there is a
    session of its own (the root's id whole in the key), answered in the thread, and the
    message after it is taken too (the batch is not retried forever)."""
    config = matrix_config()
    async with matrix_daemon(config, bot_account.access_token) as daemon:
        room = str((await alice.call("POST", "/createRoom", {
            "invite": [bot_account.user_id, bob.user_id], "preset": "private_chat",
            "room_version": "1"}))["room_id"])
        await bob.join(room)
        await joined(alice, room, bot_account)
        root = await alice.send(room, "a thread about tea")
        await alice.send(room, "green or black?", thread_root=root, mentions=(bot_account.user_id,))
        (reply,) = await replies(alice, room, bot_account)
        await alice.send(room, "and coffee?", mentions=(bot_account.user_id,))
        await replies(alice, room, bot_account, 2)
        await router_of(daemon).idle()

    assert ":" in root
    assert reply["content"]["m.relates_to"]["event_id"] == root
    async with Store.open(config.database_path()) as store:
        thread = await store.history(f"agent:main:matrix:room:{room}:thread:{root}", 10)
        main = await store.history(f"agent:main:matrix:room:{room}", 10)
    assert [m.text for m in thread if m.role == "user"] == ["green or black?"]
    assert [m.text for m in main if m.role == "user"] == ["a thread about tea", "and coffee?"]
    assert len(reply_requests(api)) == 2
