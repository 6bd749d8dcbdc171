"""Two daemons on one store: each session's requests are answered once and in arrival order, whichever
instance received them, and a lease a killed instance held is taken over when it expires."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from bot.core.errors import AlreadyAnsweredError
from bot.core.messages import ChatRef, InboundMessage, OutboundMessage, StoredMessage
from bot.core.session_key import build
from bot.intake.router import LEFT_CHECK, Router, TurnHandler
from bot.intake.session_lease import SessionLeases, lease_lapsed, lease_retaken
from bot.store import Instance, Store
from tests.fakes import MovedClock
from tests.sql import execute, rows


@pytest.fixture
def connect(
    tmp_path: Path, store_backend: str, request: pytest.FixtureRequest
) -> Callable[[str], AbstractAsyncContextManager[Store]]:
    """Opens a connection to one database, given a name for the instance it stands for (a file,
    as daemons on one host would share, or one PostgreSQL database, as daemons on several hosts)."""
    if store_backend == "postgres":
        from bot.store.postgres import PostgresStore

        url = request.getfixturevalue("pg_url")
        return lambda name: PostgresStore.connect(url, state_path=tmp_path / f"{name}.db", label=url)
    return lambda name: Store.open(tmp_path / "shared.db")


@pytest.fixture
async def two_stores(
    connect: Callable[[str], AbstractAsyncContextManager[Store]],
) -> AsyncIterator[tuple[Store, Store]]:
    """Two connections to one database."""
    async with connect("a") as first, connect("b") as second:
        yield first, second


def answering(store: Store, name: str, answered: list[tuple[str, str, int]]) -> TurnHandler:
    """A turn handler that takes a moment and stores its reply, as the turn runner does."""

    async def handle(request: StoredMessage, inbound: InboundMessage) -> None:
        await asyncio.sleep(random.uniform(0, 0.01))
        answered.append((name, request.session_key, request.id))
        await store.append_reply(request.session_key, f"re: {request.text}", request_id=request.id)

    return handle


def message(peer: str, n: int) -> InboundMessage:
    return InboundMessage(session_key=build("main", "telegram", "direct", peer),
                          chat=ChatRef("telegram", peer), sender_id=peer, sender_name="Ada",
                          text=f"{peer}-{n}", provider_message_id=f"{n}")


async def test_requests_spread_over_two_instances_are_answered_once_in_order(
    two_stores: tuple[Store, Store],
) -> None:
    random.seed(7)
    answered: list[tuple[str, str, int]] = []
    # A ttl no stall of a loaded machine outlasts: what this test watches is the order, not expiry.
    routers = [
        Router(store, answering(store, name, answered), max_concurrent=4,
               leases=SessionLeases(store, f"host:{pid}:x", ttl=60.0))
        for name, store, pid in (("a", two_stores[0], 1), ("b", two_stores[1], 2))
    ]
    peers = [str(p) for p in range(1, 6)]
    for n in range(12):  # round robin: each instance gets every other message of each chat
        for peer in peers:
            await routers[(n + int(peer)) % 2].submit(message(peer, n))
        await asyncio.sleep(0.003)
    for router in routers:
        await router.idle()

    ids = [request_id for _, _, request_id in answered]
    assert len(ids) == len(set(ids)) == 12 * len(peers)  # every request once, none twice
    for peer in peers:
        key = str(build("main", "telegram", "direct", peer))
        mine = [request_id for _, session, request_id in answered if session == key]
        assert mine == sorted(mine)  # in arrival order
    assert {name for name, _, _ in answered} == {"a", "b"}  # both instances worked
    for router in routers:
        await router.close(1.0)


async def test_a_lease_left_by_a_killed_instance_is_taken_over_when_it_expires(
    two_stores: tuple[Store, Store],
) -> None:
    store, other = two_stores
    clock = MovedClock()
    key = str(build("main", "telegram", "direct", "9"))
    # Taken, never dropped: its daemon died.
    assert await other.take_lease(key, "dead:1:x", 0.3, now=clock.time())
    answered: list[tuple[str, str, int]] = []
    router = Router(store, answering(store, "a", answered), max_concurrent=2,
                    leases=SessionLeases(store, "host:2:y", ttl=2.0, clock=clock))
    await router.submit(message("9", 1))
    await clock.asleep()  # found the lease held, left the request to its holder, waits to look again
    assert answered == []  # the dead instance's lease still holds
    clock.advance(LEFT_CHECK)  # the next look: the lease has expired
    await asyncio.wait_for(router.idle(), 30)
    assert [name for name, _, _ in answered] == ["a"]
    await router.close(1.0)


async def test_work_that_stalled_past_its_lease_takes_it_for_lost_even_once_renewed(
    two_stores: tuple[Store, Store],
) -> None:
    """A daemon that stalls mid-work (its loop blocked, its renewals with it) past the lease's ttl
    cannot know whether another instance answered meanwhile: its work finds the lease lapsed, and
    still does after a renewal found the lease free and took it again. Work under no lease (a
    daemon with a store of its own) never lapses."""
    store, other = two_stores
    clock = MovedClock()
    key = str(build("main", "telegram", "direct", "5"))
    assert not lease_lapsed()
    async with SessionLeases(store, "host:1:a", ttl=1.5, clock=clock).hold(key):
        await clock.asleep()  # the renewal waits for its time (every 0.5 s)
        clock.advance(0.8)
        await clock.asleep()  # renewed, and waiting for the next
        assert not lease_lapsed()
        clock.advance(1.6)  # the stall: this loop blocked (no await), its renewals with it
        assert lease_lapsed()
        await clock.asleep()  # the renewal due during the stall ran: the lease had expired, so
        assert not await other.take_lease(key, "host:2:b", 5.0, now=clock.time())  # it took it again
        assert lease_lapsed()
    assert not lease_lapsed()
    assert await other.take_lease(key, "host:2:b", 5.0, now=clock.time())  # let go at the end


async def test_work_whose_lease_lapsed_takes_it_again_only_while_no_other_instance_holds_it(
    two_stores: tuple[Store, Store],
) -> None:
    """After a stall past the ttl, work asks before acting in the chat: while another instance
    holds the lease the chat is that one's (False); once it let go, the work takes the lease again
    (True, and the other cannot take it then). Work whose lease never lapsed needs no asking."""
    store, other = two_stores
    clock = MovedClock()
    key = str(build("main", "telegram", "direct", "6"))
    assert await lease_retaken()  # no lease at all
    async with SessionLeases(store, "host:1:a", ttl=1.5, clock=clock).hold(key):
        assert await lease_retaken()
        # This loop stalls for 1.6 s past the ttl (its renewals with it); another instance takes the
        # chat over meanwhile, on its own clock, 1.6 s on.
        assert await other.take_lease(key, "host:2:b", 5.0, now=clock.time() + 1.6)
        clock.advance(1.6)
        assert not await lease_retaken()
        await other.drop_lease(key, "host:2:b")
        assert await lease_retaken()
        assert not await other.take_lease(key, "host:2:b", 5.0, now=clock.time())


async def test_instances_are_listed_by_their_heartbeats(two_stores: tuple[Store, Store]) -> None:
    store, _ = two_stores
    await store.heartbeat(Instance("h:1:a", "h", 1, 100.0, 200.0))
    await store.heartbeat(Instance("h:2:b", "h", 2, 150.0, 300.0))
    await store.heartbeat(Instance("h:1:a", "h", 1, 100.0, 400.0))
    assert [(i.id, i.seen_at) for i in await store.instances(250.0)] == [("h:1:a", 400.0), ("h:2:b", 300.0)]


async def test_a_reply_to_a_request_another_instance_answered_is_refused_and_not_stored(
    two_stores: tuple[Store, Store],
) -> None:
    """Two instances both answering one request (one stalled past its lease while the other took
    the chat over): the second reply is refused with nothing stored, so nothing is sent twice."""
    first, second = two_stores
    chat = ChatRef("telegram", "5")
    request = await first.append_inbound(message("5", 1))
    assert request is not None
    await second.append_reply(request.session_key, "re: from b", request_id=request.id,
                              deliver=OutboundMessage(chat, "re: from b"))
    with pytest.raises(AlreadyAnsweredError):
        await first.append_reply(request.session_key, "re: from a", request_id=request.id,
                                 deliver=OutboundMessage(chat, "re: from a"))

    history = await first.history(request.session_key, 10)
    assert [m.text for m in history] == ["5-1", "re: from b"]
    assert [d.outbound.text for d in await first.pending_deliveries()] == ["re: from b"]


async def test_a_preview_is_taken_while_a_reply_is_to_be_edited_into_it_or_was_sent_as_it(
    two_stores: tuple[Store, Store],
) -> None:
    """The instance whose reply was refused may delete its preview message only when the reply
    that answered took no hold of it: waiting in the outbox to be edited into it, or sent as it,
    it is taken; another message, or another chat's, is not."""
    first, second = two_stores
    chat, other_chat = ChatRef("telegram", "5"), ChatRef("telegram", "6")
    request = await first.append_inbound(message("5", 1))
    assert request is not None
    assert not await first.preview_taken(chat, "77")
    reply = await second.append_reply(request.session_key, "re: from b", request_id=request.id,
                                      deliver=OutboundMessage(chat, "re: from b", preview_id="77"))
    assert await first.preview_taken(chat, "77")
    assert not await first.preview_taken(chat, "78") and not await first.preview_taken(other_chat, "77")
    await second.mark_delivered(reply.id, chat, ["77"])
    await second.finish_delivery(reply.id)
    assert await first.preview_taken(chat, "77")


class HeldChat:
    """Two instances, A holding a chat while its first turn waits for `release`."""

    def __init__(self, stores: tuple[Store, Store]) -> None:
        first, second = stores
        self.clock = MovedClock()  # B's: it looks again at what it left to A when the test moves it
        self.answered: list[tuple[str, str, int]] = []
        self.started, self.release = asyncio.Event(), asyncio.Event()
        plain = answering(first, "a", self.answered)

        async def slow(request: StoredMessage, inbound: InboundMessage) -> None:
            self.started.set()
            await self.release.wait()
            await plain(request, inbound)

        self.a = Router(first, slow, max_concurrent=2, leases=SessionLeases(first, "host:1:a", ttl=5.0))
        self.b = Router(second, answering(second, "b", self.answered), max_concurrent=2,
                        leases=SessionLeases(second, "host:2:b", ttl=5.0, clock=self.clock))


async def test_a_request_left_to_the_holder_is_answered_by_it_after_its_own(
    two_stores: tuple[Store, Store],
) -> None:
    """B receives a message while A works on the chat's previous one: B leaves it to A (no waiting,
    no polling), and A answers it right after, in order."""
    held = HeldChat(two_stores)
    a, b, answered, started, release = held.a, held.b, held.answered, held.started, held.release
    await a.submit(message("5", 1))
    await asyncio.wait_for(started.wait(), 5)
    await b.submit(message("5", 2))
    await held.clock.asleep()  # B left it to A, and watches it until answered
    assert b.queued_requests() != set()
    release.set()
    await asyncio.wait_for(a.idle(), 30)
    held.clock.advance(LEFT_CHECK)  # B looks again: answered
    await asyncio.wait_for(b.idle(), 30)
    assert [name for name, _, _ in answered] == ["a", "a"]  # B never ran a turn of the chat
    assert answered[0][2] < answered[1][2]  # in arrival order
    assert b.queued_requests() == set()
    for router in (a, b):
        await router.close(1.0)


async def test_a_killed_instance_s_lease_is_free_at_once_where_the_store_can_tell(
    two_stores: tuple[Store, Store], store_backend: str,
) -> None:
    """PostgreSQL ends a killed daemon's connection, and with it the lock its instance held: its
    lease is taken over at once instead of when it expires. SQLite cannot tell: the lease holds."""
    store, other = two_stores
    key = str(build("main", "telegram", "direct", "11"))
    living = store.living("h:1:dying")
    await living.__aenter__()
    await store.heartbeat(Instance("h:1:dying", "h", 1, 100.0, 200.0))
    assert await store.take_lease(key, "h:1:dying", 60.0)
    assert not await other.take_lease(key, "h:2:b", 60.0)  # alive: its lease holds
    if store_backend == "postgres":
        # What a SIGKILL does to its connections: the server ends their backends.
        await execute(other,
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
            "AND objid = hashtext('h:1:dying')::oid")
        await living.__aexit__(None, None, None)  # the process is gone: nothing takes the lock again
        assert await other.take_lease(key, "h:2:b", 60.0)
    else:
        await living.__aexit__(None, None, None)
        assert not await other.take_lease(key, "h:2:b", 60.0)  # until it expires


async def test_leases_expired_long_ago_are_forgotten_and_live_ones_kept(
    two_stores: tuple[Store, Store],
) -> None:
    store, other = two_stores
    gone, held = (str(build("main", "telegram", "direct", peer)) for peer in ("21", "22"))
    assert await store.take_lease(gone, "dead:1:x", -10.0)  # expired ten seconds ago
    assert await store.take_lease(held, "host:1:a", 60.0)
    await other.forget_leases(expired_before=time.time() - 5)
    leased = await rows(store, "SELECT session_key FROM session_leases ORDER BY session_key")
    assert [row[0] for row in leased] == [held]


async def test_stop_on_another_instance_drops_what_it_left_to_the_holder(
    two_stores: tuple[Store, Store],
) -> None:
    """/stop reaches B while A works on the chat and B has left it the newer message: that message
    is abandoned, and A does not answer it after its own."""
    held = HeldChat(two_stores)
    a, b, answered, started, release = held.a, held.b, held.answered, held.started, held.release
    second = two_stores[1]
    own = await a.submit(message("6", 1))
    await asyncio.wait_for(started.wait(), 5)
    newer = await b.submit(message("6", 2))
    await held.clock.asleep()  # B left it to A
    assert own is not None and newer is not None
    key = str(build("main", "telegram", "direct", "6"))
    assert [m.id for m in await b.stop_session(key)] == [newer.id]
    await second.abandon_request(newer.id, "stopped")
    release.set()
    await asyncio.wait_for(a.idle(), 30)
    held.clock.advance(LEFT_CHECK)
    await asyncio.wait_for(b.idle(), 30)
    assert [request_id for _, _, request_id in answered] == [own.id]
    for router in (a, b):
        await router.close(1.0)


async def test_an_instance_whose_lock_connection_broke_takes_its_lock_again(
    pg_url: str, tmp_path: Path,
) -> None:
    """A network blip ends the connection holding a live instance's lock (PostgreSQL's; SQLite has
    none): the instance takes it again on a new connection within seconds, so it is not taken
    for gone."""
    from bot.store.postgres import PostgresStore

    lock = ("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
            "AND objid = hashtext('h:1:blip')::oid")
    async with PostgresStore.connect(pg_url, state_path=tmp_path / "a.db", label=pg_url) as store, \
            PostgresStore.connect(pg_url, state_path=tmp_path / "b.db", label=pg_url) as other, \
            store.living("h:1:blip"):
        await store.heartbeat(Instance("h:1:blip", "h", 1, time.time(), time.time()))
        (before,) = [row[0] for row in await rows(other, lock)]
        await execute(other, f"SELECT pg_terminate_backend({before})")
        for _ in range(600):  # a generous 30 s: the check runs every few seconds
            now = [row[0] for row in await rows(other, lock)]
            if now and now != [before]:
                break
            await asyncio.sleep(0.05)
        assert now and now != [before]  # held again, by another connection
        assert await other.gone_instances(0.0) == []
