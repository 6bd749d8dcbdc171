"""Leases that wake (issue 39, item 3): on PostgreSQL, work waiting on a lease another instance
holds wakes when it is dropped (NOTIFY, received by one listening connection per instance), and a
lease no notice frees (its holder killed) is found by one look per instance for every session
waited on, never one query per waiting chat."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.core.messages import ChatRef, InboundMessage, StoredMessage
from bot.core.session_key import build
from bot.intake.router import Router
from bot.intake.session_lease import SessionLeases
from bot.store.postgres import PostgresStore
from tests.fakes import MovedClock
from tests.harness import wait_until
from tests.sql import rows, traced


@pytest.fixture
async def two_stores(pg_url: str, tmp_path: Path) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two instances' connections to one PostgreSQL database."""
    async with PostgresStore.connect(pg_url, state_path=tmp_path / "a.db", label=pg_url) as first, \
            PostgresStore.connect(pg_url, state_path=tmp_path / "b.db", label=pg_url) as second:
        yield first, second


def key_of(peer: int) -> str:
    return str(build("main", "telegram", "direct", str(peer)))


async def test_work_waiting_on_another_instance_s_lease_wakes_when_it_is_dropped(
    two_stores: tuple[PostgresStore, PostgresStore],
) -> None:
    """B's command waits for the lease A holds; B's clock never moves, so no look of its own can
    find the lease free: only A's notice wakes it, and B takes the lease."""
    a, b = two_stores
    key = key_of(1)
    assert await a.take_lease(key, "h:1:a", 60.0)
    leases = SessionLeases(b, "h:2:b", clock=MovedClock(), fallback=60.0)
    held, done = asyncio.Event(), asyncio.Event()

    async def command() -> None:
        async with leases.hold(key):
            held.set()
            await done.wait()

    async with leases.listening():
        waiting = asyncio.create_task(command())
        await wait_until(lambda: key in leases.waited_on)
        assert not held.is_set()
        await a.drop_lease(key, "h:1:a")
        await asyncio.wait_for(held.wait(), 30)  # woken by the notice, well within the 60 s look
        assert not await a.take_lease(key, "h:1:a", 60.0)  # B's now
        done.set()
        await asyncio.wait_for(waiting, 30)


async def test_a_lease_its_killed_holder_left_is_taken_over_by_the_periodic_look(
    two_stores: tuple[PostgresStore, PostgresStore],
) -> None:
    """A holder killed drops nothing, so nothing is told: B's one look, once the lease expired,
    finds it free, queues again the message it had left to the holder, and runs its command."""
    a, b = two_stores
    clock = MovedClock()
    key = key_of(2)
    assert await a.take_lease(key, "dead:1:x", 5.0, now=clock.time())  # never dropped: it died
    answered: list[int] = []
    ran: list[str] = []

    async def answer(request: StoredMessage, inbound: InboundMessage) -> None:
        answered.append(request.id)
        await b.append_reply(request.session_key, "ok", request_id=request.id)

    async def command() -> None:
        ran.append("reset")

    leases = SessionLeases(b, "h:2:b", clock=clock, fallback=2.0)
    async with leases.listening():
        router = Router(b, answer, max_concurrent=2, leases=leases)
        request = await router.submit(InboundMessage(
            session_key=build("main", "telegram", "direct", "2"), chat=ChatRef("telegram", "2"),
            sender_id="2", sender_name="Ada", text="hi", provider_message_id="1"))
        router.enqueue_work(key, "/reset", command)
        await wait_until(lambda: key in leases.waited_on)
        await clock.asleep()  # the look waits for its time
        assert answered == [] and ran == []
        clock.advance(6.0)  # past the dead holder's expiry: the next look finds the lease free
        await asyncio.wait_for(router.idle(), 30)
        assert request is not None and answered == [request.id] and ran == ["reset"]
        await router.close(1.0)


async def test_fifty_waiting_chats_cost_one_look_per_period_not_one_query_each(
    two_stores: tuple[PostgresStore, PostgresStore],
) -> None:
    """Fifty of B's commands wait on leases A holds: each look is one query for all of them, and
    when A lets go, every one of them wakes and runs."""
    a, b = two_stores
    keys = [key_of(peer) for peer in range(100, 150)]
    for key in keys:
        assert await a.take_lease(key, "h:1:a", 600.0)
    clock = MovedClock()
    leases = SessionLeases(b, "h:2:b", clock=clock, fallback=1.0)
    taken: list[str] = []

    async def wait_for_lease(key: str) -> None:
        async with leases.hold(key):
            taken.append(key)

    async with leases.listening(), traced(b) as statements:
        waiting = [asyncio.create_task(wait_for_lease(key)) for key in keys]
        await wait_until(lambda: leases.waited_on == set(keys))
        await clock.asleep()
        statements.clear()
        for _ in range(5):
            clock.advance(1.0)
            await clock.asleep()  # the look ran and waits for the next
        lease_statements = [s for s in statements if "session_leases" in s]
        assert len(lease_statements) == 5, lease_statements  # one per look, none per chat
        for key in keys:
            await a.drop_lease(key, "h:1:a")
        await asyncio.wait_for(asyncio.gather(*waiting), 30)
    assert sorted(taken) == sorted(keys)


async def test_the_leases_an_instance_holds_are_renewed_in_one_statement(
    two_stores: tuple[PostgresStore, PostgresStore],
) -> None:
    """Work on twenty chats at once: every third of the ttl one statement renews all twenty
    leases, and they hold past the ttl they were taken with."""
    a, b = two_stores
    clock = MovedClock()
    leases = SessionLeases(a, "h:1:a", ttl=3.0, clock=clock)
    keys = [key_of(peer) for peer in range(200, 220)]
    release = asyncio.Event()
    held: list[str] = []

    async def work(key: str) -> None:
        async with leases.hold(key):
            held.append(key)
            await release.wait()

    async with traced(a) as statements:
        tasks = [asyncio.create_task(work(key)) for key in keys]
        await wait_until(lambda: len(held) == len(keys))
        await clock.asleep()  # the one renewer waits for its time
        statements.clear()
        for _ in range(3):
            clock.advance(1.0)
            await clock.asleep()
        assert len([s for s in statements if "session_leases" in s]) == 3
        for key in keys:  # past the ttl they were taken with (3 s, at 0): still A's
            assert not await b.take_lease(key, "h:2:b", 3.0, now=clock.time() + 0.5)
        release.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
    for key in keys:
        assert await b.take_lease(key, "h:2:b", 3.0, now=clock.time())


async def test_a_notice_lost_with_the_listening_connection_is_made_up_for_on_reconnecting(
    two_stores: tuple[PostgresStore, PostgresStore],
) -> None:
    """B's listening connection is cut and A lets go meanwhile, a notice B never receives: on
    listening again B's waiters look at once, and its command takes the lease (its own look is
    60 s away on a clock that never moves)."""
    a, b = two_stores
    key = key_of(3)
    assert await a.take_lease(key, "h:1:a", 60.0)
    leases = SessionLeases(b, "h:2:b", clock=MovedClock(), fallback=60.0)
    held = asyncio.Event()

    async def command() -> None:
        async with leases.hold(key):
            held.set()

    async with leases.listening():
        waiting = asyncio.create_task(command())
        await wait_until(lambda: key in leases.waited_on)
        cut = await rows(a, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE query LIKE 'LISTEN %'")
        assert [row[0] for row in cut] == [True]
        await a.drop_lease(key, "h:1:a")
        await asyncio.wait_for(held.wait(), 30)
        await asyncio.wait_for(waiting, 30)
