"""The send window and sends in doubt: a chunk's platform id is committed ahead of the writes
already waiting, so a crash just after Telegram created the message (no idempotency key: a restart
would send it again) finds it recorded as often as the store can make it; and what the store knows
around a chunk whose id was never recorded."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from contextlib import closing, suppress
from pathlib import Path

from bot.core.messages import ChatRef, InboundMessage, OutboundMessage
from bot.core.session_key import build
from bot.store import Store
from bot.store.sqlite.connection import in_connection_thread
from bot.store.sqlite.store import SqliteStore

CHAT = ChatRef("telegram", "42")
DM = build("main", "telegram", "direct", 42)


async def test_a_sent_chunk_is_recorded_among_writes_already_waiting(store: Store) -> None:
    """Fifty turns' writes were queued before it; the chunk's id is committed, the outbox knows the
    chunk was sent and every write lands. (That the id does not wait behind them is the next
    test's, made certain by holding the store's thread: how many of fifty finish first is a race
    of two threads, and a loaded machine ran all fifty first.)"""
    request = await store.append_inbound(InboundMessage(DM, CHAT, "42", "Ada", "hello", "1"))
    assert request is not None
    reply = await store.append_reply(str(DM), "hi", request_id=request.id,
                                     deliver=OutboundMessage(CHAT, "hi"))
    others = [build("main", "telegram", "direct", 100 + n) for n in range(50)]
    writes = [asyncio.create_task(store.append_inbound(InboundMessage(
        key, ChatRef("telegram", key.peer), key.peer, "Someone", f"message {n}", str(n))))
        for n, key in enumerate(others)]
    for _ in range(5):  # every write reaches the store and waits its turn
        await asyncio.sleep(0)

    await store.record_chunk(reply.id, CHAT, 0, "900")
    assert all(stored is not None for stored in await asyncio.gather(*writes))

    (pending,) = await store.pending_deliveries(reply.id)
    assert pending.outbound.skip_chunks == 1
    assert [m.provider_message_id for m in await store.history(str(DM), 10)] == ["1", "900"]


async def test_what_the_store_knows_around_a_send_in_doubt(store: Store) -> None:
    """A reply's next chunk comes after its request's platform id (then after its own last chunk);
    the ids recorded nearby are known, and another reply of the chat still unsent is a doubt."""
    request = await store.append_inbound(InboundMessage(DM, CHAT, "42", "Ada", "hello", "7"))
    other = await store.append_inbound(InboundMessage(
        build("main", "telegram", "direct", 43), ChatRef("telegram", "43"), "43", "Bo", "hi", "8"))
    assert request is not None and other is not None
    reply = await store.append_reply(str(DM), "hi", request_id=request.id,
                                     deliver=OutboundMessage(CHAT, "hi"))

    nearby = await store.sends_nearby(reply.id, "telegram", "42")
    assert (nearby.floor, nearby.doubts) == (7, 0)
    assert {("42", 7), ("43", 8)} <= nearby.known

    await store.record_chunk(reply.id, CHAT, 0, "9")
    assert (await store.sends_nearby(reply.id, "telegram", "42")).floor == 9
    later = await store.append_inbound(InboundMessage(DM, CHAT, "42", "Ada", "and?", "10"))
    assert later is not None
    await store.append_reply(str(DM), "more", request_id=later.id, deliver=OutboundMessage(CHAT, "more"))
    assert (await store.sends_nearby(reply.id, "telegram", "42")).doubts == 1


async def test_a_waiting_request_is_a_doubt_only_once_the_reply_s_send_failed(store: Store) -> None:
    """Until a reply's send fails, the chat's next turn cannot have started, so a request waiting
    behind it posted no preview; after a failed send it may have, and the search must doubt it."""
    request = await store.append_inbound(InboundMessage(DM, CHAT, "42", "Ada", "hello", "7"))
    assert request is not None
    reply = await store.append_reply(str(DM), "hi", request_id=request.id,
                                     deliver=OutboundMessage(CHAT, "hi"))
    assert await store.append_inbound(InboundMessage(DM, CHAT, "42", "Ada", "and?", "8")) is not None

    assert (await store.sends_nearby(reply.id, "telegram", "42")).doubts == 0
    await store.note_delivery_failed(reply.id)
    assert (await store.sends_nearby(reply.id, "telegram", "42")).doubts == 1


class HeldThread:
    """The store's connection thread held by a long read until `release`: what is asked of the
    store meanwhile queues behind it."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store
        self._started, self._release = threading.Event(), threading.Event()
        self._busy: asyncio.Task[None] | None = None

    def _long_read(self, db: sqlite3.Connection) -> None:
        db.execute("SELECT COUNT(*) FROM messages").fetchall()
        self._started.set()
        self._release.wait(60)

    async def hold(self) -> None:
        self._busy = asyncio.create_task(in_connection_thread(self._store._conn, self._long_read))
        assert await asyncio.to_thread(self._started.wait, 60)

    async def release(self) -> None:
        self._release.set()
        if self._busy is not None:
            await self._busy


async def test_a_sent_chunk_is_recorded_while_the_store_s_thread_is_busy(tmp_path: Path) -> None:
    """SQLite: the store's connection thread is held by a long read, a turn's write waits behind it
    holding the write lock; the chunk's id is committed all the same, on a path of its own, and the
    others see it once they run."""
    async with SqliteStore.open(tmp_path / "switchboard.db") as store:
        request = await store.append_inbound(InboundMessage(DM, CHAT, "42", "Ada", "hello", "1"))
        assert request is not None
        reply = await store.append_reply(str(DM), "hi", request_id=request.id,
                                         deliver=OutboundMessage(CHAT, "hi"))
        held = HeldThread(store)
        await held.hold()
        try:
            other = build("main", "telegram", "direct", 43)
            waiting = asyncio.create_task(store.append_inbound(InboundMessage(
                other, ChatRef("telegram", "43"), "43", "Bo", "meanwhile", "2")))
            for _ in range(5):  # it takes the write lock and queues its statements
                await asyncio.sleep(0)

            # A guard, not a timing: before the records had a connection of their own this never ended.
            await asyncio.wait_for(store.record_chunk(reply.id, CHAT, 0, "900"), 30)

            with closing(sqlite3.connect(tmp_path / "switchboard.db")) as outside:
                assert outside.execute("SELECT message_id FROM provider_messages "
                                       "WHERE provider_message_id = '900'").fetchall() == [(reply.id,)]
            assert not waiting.done()
        finally:
            await held.release()
        assert await waiting is not None
        (pending,) = await store.pending_deliveries(reply.id)
        assert pending.outbound.skip_chunks == 1


async def test_a_transaction_cancelled_while_it_begins_leaves_the_database_unlocked(tmp_path: Path) -> None:
    """SQLite: a write's BEGIN IMMEDIATE waits its turn on the store's thread and the write is
    cancelled meanwhile (a timeout, a stop): the BEGIN still runs on the thread, and must not leave
    a transaction open that holds the write lock for good (every other process then waits out
    its busy timeout: "database is locked"), nor one that later writes would join uncommitted."""
    db_path = tmp_path / "switchboard.db"
    async with SqliteStore.open(db_path) as store:
        held = HeldThread(store)
        await held.hold()
        # A note: a write of several statements (BEGIN, a count, an insert, COMMIT).
        write = asyncio.create_task(store.add_note("telegram", "42", "first", session_key=None, max_notes=5))
        for _ in range(5):  # it takes the write lock and queues its BEGIN behind the read
            await asyncio.sleep(0)
        write.cancel()
        await held.release()
        with suppress(asyncio.CancelledError):
            await write
        # The next write takes the lock after it.
        assert await store.add_note("telegram", "42", "second", session_key=None, max_notes=5) is not None

        with closing(sqlite3.connect(db_path, timeout=1, isolation_level=None)) as outside:
            outside.execute("BEGIN IMMEDIATE")
            outside.execute("ROLLBACK")
            assert outside.execute("SELECT note FROM user_notes").fetchall() == [("second",)]
