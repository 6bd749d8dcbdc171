"""Streamed replies on Matrix, against the real Synapse: the reply grows in one message edited with
`m.replace`, and the final edit (the outbox's, carrying the whole text in `m.new_content`) makes it
the reply's first chunk, sent with a transaction id so that a resend is no second edit."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from mautrix.api import HTTPAPI
from mautrix.client import ClientAPI
from mautrix.types import RoomID, UserID

from bot.config import Config
from bot.delivery.preview import PreviewSkipped
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, Text
from bot.testing.matrix_user import MatrixUser
from bot.testing.synapse import MatrixAccount, SynapseServer
from channels.matrix.preview import MatrixPreview
from channels.matrix.rate_limit import honour_rate_limits
from tests import sql
from tests.harness import reply_requests, router_of
from tests.test_matrix import alice, bot_account, joined, matrix_config, matrix_daemon, replies  # noqa: F401

Event = dict[str, Any]
ANSWER = ("Tides follow the moon. The moon pulls the sea toward it, and the earth turning under "
          "that bulge gives two high tides a day. The sun adds a smaller pull of its own.")


def edits_of(events: list[Event], event_id: str) -> list[Event]:
    return [e for e in events if (e["content"].get("m.relates_to") or {}).get("rel_type") == "m.replace"
            and e["content"]["m.relates_to"].get("event_id") == event_id]


async def streamed(
    config: Config, bot: MatrixAccount, user: MatrixUser, api: AnthropicStandIn,
) -> tuple[str, Event, list[Event]]:
    """Alice asks in a direct chat; the model writes its first words, then waits until she has
    seen them: the room, the first message she saw, and the bot's events at the end."""
    hold = asyncio.Event()
    api.script(Text(ANSWER, parts=6, delta_delay=0.3, hold=hold))
    async with matrix_daemon(config, bot.access_token) as daemon:
        room = await user.create_room(invite=(bot.user_id,), direct=True)
        await joined(user, room, bot)
        await user.send(room, "why are there tides?")
        (first,) = await replies(user, room, bot)  # while the model is held mid-answer
        hold.set()
        await router_of(daemon).idle()
    return room, first, await user.messages(room, sender=bot.user_id)


async def test_a_streamed_reply_is_one_event_and_its_edits_seen_before_the_model_is_done(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser,  # noqa: F811
    api: AnthropicStandIn,
) -> None:
    """The first words are in the room while the model is still writing; the rest comes as
    `m.replace` edits of that one event, the last one carrying the whole reply, and the stored
    reply's first chunk is that event."""
    config = matrix_config()
    room, first, events = await streamed(config, bot_account, alice, api)

    assert first["content"]["body"].startswith("Tides follow the moon.")
    assert first["content"]["body"] != ANSWER
    edits = edits_of(events, first["event_id"])
    # Nothing else posted: one event and its edits.
    assert [e["event_id"] for e in events if e not in edits] == [first["event_id"]]
    assert edits and edits[-1]["content"]["m.new_content"]["body"] == ANSWER
    assert edits[-1]["content"]["body"] == f"* {ANSWER}"
    async with Store.open(config.database_path()) as store:
        assert await store.pending_deliveries() == []
        (*_, reply) = await store.history(f"agent:main:matrix:direct:{alice.user_id}", 10)
    assert (reply.text, reply.provider_message_id) == (ANSWER, first["event_id"])
    assert len(reply_requests(api)) == 1
    assert room


async def test_a_final_edit_sent_again_after_a_crash_is_not_a_second_edit(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser,  # noqa: F811
    api: AnthropicStandIn,
) -> None:
    """The daemon died after the final edit reached the room but before it was recorded (the
    outbox row left, with its preview): the restart sends chunk 0 again with the same transaction
    id, Synapse answers with the edit already there, and the room gains no event."""
    config = matrix_config()
    room, first, before = await streamed(config, bot_account, alice, api)
    async with Store.open(config.database_path()) as store:
        reply_id = await sql.value(
            store, "SELECT message_id FROM provider_messages WHERE provider_message_id = ?",
            (first["event_id"],))
        await sql.execute(store, "DELETE FROM provider_messages WHERE message_id = ?", (reply_id,))
        await sql.execute(
            store, "INSERT INTO outbox (message_id, provider, chat_id, text, chunks_sent, created_at, "
            "preview_id) VALUES (?, 'matrix', ?, ?, 0, ?, ?)",
            (reply_id, room, ANSWER, time.time(), first["event_id"]))
    async with matrix_daemon(config, bot_account.access_token) as daemon:
        async with Store.open(config.database_path()) as store:
            async def resent() -> bool:
                return int(await sql.value(store, "SELECT COUNT(*) FROM outbox")) == 0

            await alice.wait_for(resent)
            recorded = await sql.value(
                store, "SELECT provider_message_id FROM provider_messages WHERE message_id = ?", (reply_id,))
        await router_of(daemon).idle()

    after = await alice.messages(room, sender=bot_account.user_id)
    assert [e["event_id"] for e in after] == [e["event_id"] for e in before]
    assert recorded == first["event_id"]


async def test_typing_shows_while_the_model_works_and_stops_at_the_first_text(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser,  # noqa: F811
    api: AnthropicStandIn,
) -> None:
    """While the model has written no sentence yet, Alice sees the bot typing; once the reply's
    first words are in the room, typing stops though the model is still writing."""
    before_text, after_text = asyncio.Event(), asyncio.Event()
    api.script(Text("Tides follow the moon and the sun.", parts=3, hold=before_text),
               Text(ANSWER, parts=6, delta_delay=0.3, hold=after_text))
    async with matrix_daemon(matrix_config(), bot_account.access_token) as daemon:
        room = await alice.create_room(invite=(bot_account.user_id,), direct=True)
        await joined(alice, room, bot_account)
        await alice.send(room, "why are there tides?")

        async def typing() -> bool:
            return bot_account.user_id in await alice.typing(room)

        await alice.wait_for(typing)  # the model held before its first sentence
        before_text.set()
        await replies(alice, room, bot_account, 1)
        await router_of(daemon).idle()
        await alice.send(room, "and why two a day?")
        await replies(alice, room, bot_account, 2)  # the first words, the model held mid-answer

        async def not_typing() -> bool:
            return bot_account.user_id not in await alice.typing(room)

        await alice.wait_for(not_typing, timeout=20)
        after_text.set()
        await router_of(daemon).idle()

    assert len(reply_requests(api)) == 2


async def test_streaming_off_posts_the_reply_once_complete(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser,  # noqa: F811
    api: AnthropicStandIn,
) -> None:
    """With `streaming = "off"` the reply is one event, posted whole, never edited."""
    config = matrix_config(streaming="off")
    api.script(Text(ANSWER, parts=6, delta_delay=0.3))
    async with matrix_daemon(config, bot_account.access_token) as daemon:
        room = await alice.create_room(invite=(bot_account.user_id,), direct=True)
        await joined(alice, room, bot_account)
        await alice.send(room, "why are there tides?")
        (reply,) = await replies(alice, room, bot_account)
        await router_of(daemon).idle()

    assert reply["content"]["body"] == ANSWER
    events = await alice.messages(room, sender=bot_account.user_id)
    assert [e["event_id"] for e in events] == [reply["event_id"]]


async def test_a_preview_edit_the_homeserver_rate_limits_is_skipped_not_waited_for(
    synapse: SynapseServer, bot_account: MatrixAccount, alice: MatrixUser,  # noqa: F811
) -> None:
    """With the bot limited to a message a second, preview edits sent faster are answered 429 and
    raise PreviewSkipped at once (a reply's own sends wait a 429 out; a preview must not hold
    them up)."""
    room = await alice.create_room(invite=(bot_account.user_id,))
    session = aiohttp.ClientSession(middlewares=(honour_rate_limits,))
    client = ClientAPI(mxid=UserID(bot_account.user_id),
                       api=HTTPAPI(base_url=synapse.base_url, token=bot_account.access_token,
                                   client_session=session))
    try:
        await client.join_room_by_id(RoomID(room))
        # The join counted too: a burst of 2 lets the preview's first post through.
        synapse.limit_messages(bot_account.user_id, per_second=1, burst_count=2)
        preview = MatrixPreview(lambda: client, room, thread_root=None, reply_to_id=None, resume_id=None)
        posted = await preview.show("Tides follow the moon.")
        skipped = 0
        for n in range(5):  # faster than one a second: some are refused
            try:
                await preview.show(f"Tides follow the moon. The moon pulls the sea {n} times.")
            except PreviewSkipped:
                skipped += 1
    finally:
        await session.close()

    assert skipped >= 1
    events = await alice.messages(room, sender=bot_account.user_id)
    assert events[0]["event_id"] == posted
    assert len(events) == 1 + 5 - skipped  # each edit either posted or skipped, none waited for
