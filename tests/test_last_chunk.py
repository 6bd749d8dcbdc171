"""A reply's last chunk: its record takes the reply out of the outbox in the same write, on both
backends, when the channel says it is the last; otherwise (or when that record fails) the outbox
is cleared after the send, as before."""

from __future__ import annotations

import itertools
from typing import Any

from structlog.testing import capture_logs

from bot.core.messages import ChatRef, InboundMessage, OutboundMessage, StoredMessage
from bot.core.session_key import build
from bot.delivery.outbox import Outbox
from bot.intake.channel import ChunkSent
from bot.store import Store
from bot.testing.fake_channel import FakeChannel
from tests.sql import hand_offs

CHAT = ChatRef("fake", "42")
DM = build("main", "fake", "direct", 42)
TEXT = "one\n\ntwo\n\nthree"


class SaysLast(FakeChannel):
    """Sends a reply a paragraph per message and says which chunk is the last, as Telegram's
    channel does."""

    async def send(self, message: OutboundMessage, on_chunk: ChunkSent | None = None) -> list[str]:
        self.sent.append(message)
        chunks, ids = message.text.split("\n\n"), []
        for index in range(message.skip_chunks, len(chunks)):
            self._next_id += 1
            ids.append(f"out-{self._next_id}")
            if on_chunk is not None:
                await on_chunk(index, ids[-1], last=index == len(chunks) - 1)
        return ids


class LastRecordFails:
    """A store whose record of a last chunk fails (its other methods are the real store's)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def record_chunk(self, *args: Any, last: bool = False) -> None:
        if last:
            raise OSError("disk full")
        await self._store.record_chunk(*args)


_IDS = itertools.count(1)


async def stored_reply(store: Store, text: str = TEXT) -> StoredMessage:
    request = await store.append_inbound(InboundMessage(DM, CHAT, "42", "Ada", "hello", str(next(_IDS))))
    assert request is not None
    return await store.append_reply(str(DM), text, request_id=request.id, deliver=OutboundMessage(CHAT, text))


async def test_the_last_chunks_record_takes_the_reply_out_of_the_outbox(store: Store) -> None:
    """Chunks before the last are counted; the last is recorded and the reply leaves the outbox,
    as `record_chunk` and `finish_delivery` apart leave it."""
    reply = await stored_reply(store)
    await store.record_chunk(reply.id, CHAT, 0, "900")
    await store.record_chunk(reply.id, CHAT, 1, "901")
    (pending,) = await store.pending_deliveries(reply.id)
    assert pending.outbound.skip_chunks == 2
    await store.record_chunk(reply.id, CHAT, 2, "902", last=True)
    assert await store.pending_deliveries() == []
    for sent in ("900", "901", "902"):
        found = await store.message_by_provider_id(CHAT, sent)
        assert found is not None and found.id == reply.id
    assert (await store.history(str(DM), 10))[-1].provider_message_id == "900"

    apart = await stored_reply(store, "four")
    await store.record_chunk(apart.id, CHAT, 0, "903")
    await store.finish_delivery(apart.id)
    together = await stored_reply(store, "five")
    await store.record_chunk(together.id, CHAT, 0, "904", last=True)
    assert await store.pending_deliveries() == []
    replies = [m for m in await store.history(str(DM), 10) if m.role == "assistant"]
    assert [m.provider_message_id for m in replies][-2:] == ["903", "904"]


async def test_a_reply_sent_whole_is_cleared_with_its_last_record(store: Store) -> None:
    """Through the outbox: every chunk recorded, the reply out of the outbox, and no write after
    the last chunk's (SQLite: one hand-off per chunk)."""
    reply = await stored_reply(store)
    channel = SaysLast()
    outbox = Outbox(store, {"fake": channel})
    if store.dialect.name == "sqlite":
        async with hand_offs(store) as items:
            sent = await outbox.deliver(reply.id, OutboundMessage(CHAT, TEXT))
        assert len(items) == 3
    else:
        sent = await outbox.deliver(reply.id, OutboundMessage(CHAT, TEXT))
    assert len(sent) == 3 and await store.pending_deliveries() == []
    for platform_id in sent:
        assert (await store.message_by_provider_id(CHAT, platform_id)) is not None


async def test_without_a_last_chunk_the_outbox_is_cleared_after_the_send(store: Store) -> None:
    """A channel that does not say which chunk is the last, and a last record that fails: the
    reply still leaves the outbox once sent, as before."""
    reply = await stored_reply(store, "one")
    assert await Outbox(store, {"fake": FakeChannel()}).deliver(reply.id, OutboundMessage(CHAT, "one"))
    assert await store.pending_deliveries() == []

    reply = await stored_reply(store)
    with capture_logs() as logs:
        failing = Outbox(LastRecordFails(store), {"fake": SaysLast()})  # type: ignore[arg-type]
        sent = await failing.deliver(reply.id, OutboundMessage(CHAT, TEXT))
    errors = [log["event"] for log in logs if log["log_level"] == "error"]
    assert errors == ["chunk delivered but not recorded"]
    assert len(sent) == 3 and await store.pending_deliveries() == []
    assert await store.message_by_provider_id(CHAT, sent[1]) is not None
