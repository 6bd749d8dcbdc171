"""Several daemons on one PostgreSQL database behind a round-robin load balancer: every message is
answered once and each chat's replies arrive in order, whichever instance received what; and what a
dead instance left (its lease, a stored reply it never sent, a request it never answered) is taken
over by the live ones."""

from __future__ import annotations

import asyncio
import base64
import os
import random
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.config import Config
from bot.core.media import Media
from bot.core.messages import ChatRef, InboundMessage, OutboundMessage
from bot.core.session_key import build
from bot.daemon.assembly import Daemon, build_channels
from bot.daemon.control import request, socket_path
from bot.delivery.resume import GONE_CHECK
from bot.models.brain import AnthropicBrain
from bot.store import Instance
from bot.store.postgres import PostgresStore
from bot.testing.anthropic_api import AnthropicStandIn, Text
from bot.testing.round_robin import RoundRobin
from bot.testing.telegram_api import TelegramStandIn, private_chat, user
from channels.telegram.channel import TelegramChannel
from tests.fakes import MovedClock
from tests.harness import API_KEY, MODEL, config_data, reply_requests, router_of, running
from tests.sql import execute
from tests.test_telegram_webhook import SECRET, SECRET_ENV, free_port

MakeConfig = Callable[[dict[str, Any]], Config]
MARKER = re.compile(r"\bm(\d+)-(\d+)\b")
FIRST_USER = 7_000


@pytest.fixture
def secrets(tg: TelegramStandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)
    monkeypatch.setenv(SECRET_ENV, SECRET)


def instance_config(api: AnthropicStandIn, tg: TelegramStandIn, make_config: MakeConfig, pg_url: str,
                    *, port: int, webhook_url: str, users: list[int], lease_ttl: float = 15.0) -> Config:
    """One instance's config: the shared database, its own webhook port, the balancer's URL."""
    telegram = {"enabled": True, "base_url": tg.base_url, "allow_from": users, "mode": "webhook",
                "webhook_listen": f"127.0.0.1:{port}", "webhook_url": webhook_url,
                "webhook_secret_env": SECRET_ENV}
    return make_config(config_data(api, database={"url": pg_url, "lease_ttl": lease_ttl},
                                   channels={"telegram": telegram}))


@asynccontextmanager
async def instances(configs: list[Config], **options: Any) -> AsyncIterator[list[Daemon]]:
    """The daemons as `switchboard run` assembles them (`options` go to each `Daemon`), each once
    Telegram has its webhook."""
    async with AsyncExitStack() as stack:
        daemons = []
        for config in configs:
            (channel,) = build_channels(config, console=False)
            assert isinstance(channel, TelegramChannel)
            daemon = await stack.enter_async_context(
                running(config, [channel], AnthropicBrain(config.anthropic, API_KEY), **options))
            await asyncio.wait_for(channel.ready.wait(), 5)
            daemons.append(daemon)
        yield daemons


async def settled(tg: TelegramStandIn, daemons: list[Daemon], pushed: list[dict[str, Any]]) -> None:
    """Return once every pushed update was taken (an instance answers the webhook only once it
    stored the update) and every instance ran every turn it queued, those it left to the holder of
    a chat included: after this, no answer is on its way."""
    for update in pushed:
        assert await tg.delivered(update) == 200
    for daemon in daemons:
        await asyncio.wait_for(router_of(daemon).idle(), 30)


async def nothing_left(url: str, state: Path, key: str, daemons: list[Daemon]) -> None:
    """Return once no request of the session waits for an answer, no reply waits to be sent, and
    every instance ran every turn it queued: only what still waits is ever taken up again, so after
    this nothing more is sent."""
    async with PostgresStore.connect(url, state_path=state, label=url) as view:
        async with asyncio.timeout(30):
            while True:  # polled: the store has no way to signal
                if not (await view.waiting_ids(key) or await view.pending_deliveries()):
                    break
                await asyncio.sleep(0.02)
    for daemon in daemons:
        await asyncio.wait_for(router_of(daemon).idle(), 30)


async def rounds_of_looking(url: str, state: Path, count: int) -> None:
    """Return once the live instances have finished `count` more rounds of looking for what dead
    ones left. Each round first forgets leases that expired a round ago, so a lease planted long
    expired is gone once a round has begun; the next one's going shows the round before it ended."""
    async with PostgresStore.connect(url, state_path=state, label=url) as view:
        for n in range(count + 1):
            probe = f"probe:{n}"
            assert await view.take_lease(probe, "probe:0:x", -3600.0)  # expired an hour ago
            async with asyncio.timeout(30):
                while True:  # polled: the store has no way to signal
                    rows = await view._conn.execute_fetchall(
                        "SELECT 1 FROM session_leases WHERE session_key = ?", (probe,))
                    if not list(rows):
                        break
                    await asyncio.sleep(0.05)


async def a_look(clock: MovedClock) -> None:
    """Move the lease clock of one live instance on to its next look for what dead instances left
    (every GONE_CHECK seconds), and return once that look is over: it waits on the clock again,
    beside its heartbeat."""
    await clock.asleep(2)
    clock.advance(GONE_CHECK)
    await clock.asleep(2)


def replies_by_chat(tg: TelegramStandIn) -> dict[int, list[int]]:
    """The message numbers each chat's replies answered, in the order they arrived."""
    seen: dict[int, list[int]] = {}
    for sent in tg.sent:
        for _, n in MARKER.findall(sent.visible_text):
            seen.setdefault(sent.chat_id, []).append(int(n))
    return seen


async def test_three_instances_answer_every_message_once_and_in_order(
    api: AnthropicStandIn, tg: TelegramStandIn, make_config: MakeConfig, pg_url: str, secrets: None,
) -> None:
    """100 messages from 10 users, spread over three daemons by a round-robin balancer at random
    moments: each is answered exactly once, each user's replies in the order they wrote."""
    rng = random.Random(18)
    users = [FIRST_USER + n for n in range(10)]
    ports = [free_port() for _ in range(3)]
    async with RoundRobin(ports) as balancer:
        configs = [instance_config(api, tg, make_config, pg_url, port=port, webhook_url=balancer.url,
                                   users=users) for port in ports]
        async with instances(configs) as daemons:
            order = [(u, n) for n in range(10) for u in users]
            pushed = []
            for u, n in order:
                person = user(u, f"User{u}")
                pushed.append(tg.push_message(private_chat(person), person, f"note m{u}-{n}"))
                if rng.random() < 0.3:
                    await asyncio.sleep(rng.uniform(0, 0.02))  # arrivals spread out, not a wait
            await tg.wait_for(lambda: len(tg.sent) >= len(order), timeout=60)
            await settled(tg, daemons, pushed)

    assert all(count > 0 for count in balancer.forwarded.values())  # every instance took updates
    assert replies_by_chat(tg) == {u: list(range(10)) for u in users}


async def left_behind(url: str, state: Path, chat_id: int, *, reply_unsent: bool) -> None:
    """What an instance killed mid-work leaves: the session's lease held (for 1 s more), and
    (`reply_unsent`) message 1 answered with a reply stored but never sent, and message 2 stored
    and never answered."""
    chat = ChatRef("telegram", str(chat_id))
    key = build("main", "telegram", "direct", str(chat_id))

    def inbound(n: int) -> InboundMessage:
        return InboundMessage(key, chat, str(chat_id), "Ada", f"note m{chat_id}-{n}",
                              provider_message_id=f"900{n}")

    async with PostgresStore.connect(url, state_path=state, label=url) as dead:
        if reply_unsent:
            first = await dead.append_inbound(inbound(1))
            assert first is not None
            await dead.append_reply(str(key), f"re: note m{chat_id}-1", request_id=first.id,
                                    deliver=OutboundMessage(chat, f"re: note m{chat_id}-1"))
        assert await dead.append_inbound(inbound(2)) is not None
        assert await dead.take_lease(str(key), "gone:1:dead", 1.0)


async def test_a_dead_instance_s_lease_unsent_reply_and_waiting_request_are_taken_over_in_order(
    api: AnthropicStandIn, tg: TelegramStandIn, make_config: MakeConfig, pg_url: str, secrets: None,
    tmp_path: Path,
) -> None:
    """An instance died holding Ada's lease, with its reply to her message 1 stored but unsent and
    her message 2 unanswered; when she writes message 3 to a live instance, she gets the three
    replies once each, in order, once the lease has expired."""
    ada = user(FIRST_USER, "Ada")
    port = free_port()
    config = instance_config(api, tg, make_config, pg_url, port=port, users=[FIRST_USER],
                             webhook_url=f"http://127.0.0.1:{port}/telegram", lease_ttl=1.0)
    key = str(build("main", "telegram", "direct", str(FIRST_USER)))
    async with instances([config]) as daemons:
        await left_behind(pg_url, tmp_path / "dead.db", FIRST_USER, reply_unsent=True)
        tg.push_message(private_chat(ada), ada, f"note m{FIRST_USER}-3")
        await tg.wait_for(lambda: len(tg.sent) >= 3, timeout=30)
        await nothing_left(pg_url, tmp_path / "view.db", key, daemons)

    assert replies_by_chat(tg) == {FIRST_USER: [1, 2, 3]}


async def test_a_request_a_dead_instance_never_answered_is_answered_without_a_new_message(
    api: AnthropicStandIn, tg: TelegramStandIn, make_config: MakeConfig, pg_url: str, secrets: None,
    tmp_path: Path,
) -> None:
    """A request stored by an instance that then died, and no later message from its user: a live
    instance answers it once the dead one's lease has expired."""
    port = free_port()
    config = instance_config(api, tg, make_config, pg_url, port=port, users=[FIRST_USER],
                             webhook_url=f"http://127.0.0.1:{port}/telegram", lease_ttl=1.0)
    key = str(build("main", "telegram", "direct", str(FIRST_USER)))
    async with instances([config]) as daemons:
        await left_behind(pg_url, tmp_path / "dead.db", FIRST_USER, reply_unsent=False)
        await tg.wait_for(lambda: tg.sent, timeout=30)
        await nothing_left(pg_url, tmp_path / "view.db", key, daemons)

    assert replies_by_chat(tg) == {FIRST_USER: [2]}


async def test_a_picture_one_instance_received_reaches_the_model_when_another_answers(
    api: AnthropicStandIn, tg: TelegramStandIn, make_config: MakeConfig, pg_url: str, secrets: None,
    tmp_path: Path,
) -> None:
    """An instance on another host (a state folder of its own) kept Ada's photo and stored her
    message, then died: the live instance that answers her sends the model the photo itself, not a
    placeholder saying it is gone (the picture is kept in the shared database, not on that host's disk)."""
    port = free_port()
    config = instance_config(api, tg, make_config, pg_url, port=port, users=[FIRST_USER],
                             webhook_url=f"http://127.0.0.1:{port}/telegram", lease_ttl=1.0)
    key = build("main", "telegram", "direct", str(FIRST_USER))
    photo = b"\xff\xd8\xff\xe0" + b"ada's cat" * 20
    async with instances([config]):
        async with PostgresStore.connect(pg_url, state_path=tmp_path / "elsewhere" / "dead.db",
                                         label=pg_url) as dead:
            sha = await dead.kept_files().keep(photo)
            media = Media("photo", "kept", sha256=sha, mime="image/jpeg", size=len(photo), width=64,
                          height=48)
            request = InboundMessage(key, ChatRef("telegram", str(FIRST_USER)), str(FIRST_USER), "Ada",
                                     f"look m{FIRST_USER}-1", provider_message_id="9001", media=(media,))
            assert await dead.append_inbound(request) is not None
            assert await dead.take_lease(str(key), "gone:1:dead", 1.0)
        await tg.wait_for(lambda: tg.sent, timeout=10)

    (asked,) = reply_requests(api)
    images = [block["source"]["data"] for message in asked.messages if isinstance(message["content"], list)
              for block in message["content"] if block["type"] == "image"]
    assert images == [base64.b64encode(photo).decode("ascii")]
    assert replies_by_chat(tg) == {FIRST_USER: [1]}


async def test_a_turn_whose_request_another_instance_answered_meanwhile_sends_nothing(
    api: AnthropicStandIn, tg: TelegramStandIn, make_config: MakeConfig, pg_url: str, secrets: None,
    tmp_path: Path,
) -> None:
    """While the model is still writing this instance's reply, another instance (which took the
    chat over: this one stalled past its lease) answers Ada: this reply is dropped, not stored and
    not sent, so she gets one answer."""
    port = free_port()
    config = instance_config(api, tg, make_config, pg_url, port=port, users=[FIRST_USER],
                             webhook_url=f"http://127.0.0.1:{port}/telegram")
    key = build("main", "telegram", "direct", str(FIRST_USER))
    ada = user(FIRST_USER, "Ada")
    api.script(Text("the late answer", delay=1.0), model=MODEL)
    async with instances([config]) as (daemon,), \
            PostgresStore.connect(pg_url, state_path=tmp_path / "other.db", label=pg_url) as other:
        tg.push_message(private_chat(ada), ada, "are you there?")
        await tg.wait_for(lambda: api.requests_for(MODEL))  # the model is writing this instance's reply
        (waiting,) = await other.awaiting_requests(str(key))
        await other.append_reply(str(key), "yes (from the other instance)", request_id=waiting.message.id)
        await asyncio.wait_for(router_of(daemon).idle(), 30)  # the model's answer arrived, the turn ended
        history = await other.history(str(key), 10)

    assert tg.sent == []
    assert [m.text for m in history] == ["are you there?", "yes (from the other instance)"]


async def test_what_a_killed_instance_left_is_taken_over_at_once_not_when_its_lease_expires(
    api: AnthropicStandIn, tg: TelegramStandIn, make_config: MakeConfig, pg_url: str, secrets: None,
    tmp_path: Path,
) -> None:
    """An instance that lived (its lock held, a heartbeat) dies holding Ada's lease with her message
    unanswered: while it lives, the live instance looks and leaves her to it; once PostgreSQL ends
    its connection, the live instance answers her at its next look, long before the 60 s lease
    would have expired."""
    port = free_port()
    config = instance_config(api, tg, make_config, pg_url, port=port, users=[FIRST_USER],
                             webhook_url=f"http://127.0.0.1:{port}/telegram", lease_ttl=60.0)
    chat = ChatRef("telegram", str(FIRST_USER))
    key = build("main", "telegram", "direct", str(FIRST_USER))
    clock = MovedClock()
    async with instances([config], lease_clock=clock) as (daemon,), \
            PostgresStore.connect(pg_url, state_path=tmp_path / "dying.db", label=pg_url) as dying:
        living = dying.living("h:1:dying")
        await living.__aenter__()  # never left: the process dies with its lock held
        await dying.heartbeat(Instance("h:1:dying", "h", 1, time.time(), time.time()))
        request = InboundMessage(key, chat, str(FIRST_USER), "Ada", f"note m{FIRST_USER}-1",
                                 provider_message_id="9001")
        assert await dying.append_inbound(request) is not None
        assert await dying.take_lease(str(key), "h:1:dying", 60.0)
        await a_look(clock)
        await asyncio.wait_for(router_of(daemon).idle(), 30)
        assert tg.sent == []  # it lives: its lease holds
        # What a SIGKILL does to a process's connections: the server ends their backends.
        await execute(dying,
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
            "AND objsubid = 2 AND objid = hashtext('h:1:dying')::oid")
        await living.__aexit__(None, None, None)  # the process is gone: nothing takes the lock again
        await a_look(clock)
        await tg.wait_for(lambda: tg.sent, timeout=30)

    assert replies_by_chat(tg) == {FIRST_USER: [1]}


async def test_a_command_a_dead_instance_never_ran_is_run_once_without_a_new_message(
    api: AnthropicStandIn, tg: TelegramStandIn, make_config: MakeConfig, pg_url: str, secrets: None,
    tmp_path: Path,
) -> None:
    """A /reset recorded by an instance that then died holding the chat's lease: a live instance
    runs it (and answers it) once the lease has expired, once however often it looks again."""
    port = free_port()
    config = instance_config(api, tg, make_config, pg_url, port=port, users=[FIRST_USER],
                             webhook_url=f"http://127.0.0.1:{port}/telegram", lease_ttl=1.0)
    chat = ChatRef("telegram", str(FIRST_USER))
    key = build("main", "telegram", "direct", str(FIRST_USER))
    async with instances([config]) as daemons:
        async with PostgresStore.connect(pg_url, state_path=tmp_path / "dead.db", label=pg_url) as dead:
            reset = InboundMessage(key, chat, str(FIRST_USER), "Ada", "/reset", provider_message_id="9001",
                                   command="reset")
            assert await dead.append_command(reset, "reset") is not None
            assert await dead.take_lease(str(key), "gone:1:dead", 1.0)
        await tg.wait_for(lambda: tg.sent, timeout=30)
        await rounds_of_looking(pg_url, tmp_path / "probe.db", 2)  # two more rounds of looking
        for daemon in daemons:
            await asyncio.wait_for(router_of(daemon).idle(), 30)  # and what they queued has run
        async with PostgresStore.connect(pg_url, state_path=tmp_path / "view.db", label=pg_url) as view:
            assert await view.pending_commands() == []

    assert [sent.visible_text for sent in tg.sent] == [
        "Started a fresh context. Earlier messages stay stored but I won't use them."]


async def test_a_daemon_on_postgresql_answers_status_on_a_fresh_host(
    api: AnthropicStandIn, tg: TelegramStandIn, make_config: MakeConfig, pg_url: str, secrets: None,
    tmp_path: Path,
) -> None:
    """With no state folder yet (a new host), a daemon on PostgreSQL still makes one for its
    control socket: `switchboard status` reaches it and lists it among the instances."""
    assert not (tmp_path / "state").exists()
    port = free_port()
    config = instance_config(api, tg, make_config, pg_url, port=port,
                             webhook_url=f"http://127.0.0.1:{port}/telegram", users=[FIRST_USER])
    async with instances([config]):
        for _ in range(100):  # the first heartbeat is written just after the start
            status = await asyncio.to_thread(request, socket_path(config.database_path()), "status")
            if status.get("instances"):
                break
            await asyncio.sleep(0.05)

    assert status["ok"] and status["pid"] == os.getpid()
    assert [i["pid"] for i in status["instances"]] == [os.getpid()]
