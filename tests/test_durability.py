"""Nothing lost, nothing twice, in process: what a start picks up from the last run (requests still
waiting, replies still in the outbox, commands not yet run), a reply the database refuses, commands
that keep their session's order without holding up intake, and channels that crash and come back."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.config import Config
from bot.core.errors import DeliveryError
from bot.core.messages import ChatRef, InboundMessage, OutboundMessage
from bot.daemon.assembly import Daemon
from bot.intake.channel import ChunkSent, Intake
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest, Response, Slow, Text
from bot.testing.fake_channel import FakeChannel
from tests.harness import API_KEY, FAST, config_data, echo, last_user_line, router_of, running, wait_until

MakeConfig = Callable[[dict[str, Any]], Config]


class ChunkingChannel(FakeChannel):
    """A fake platform that splits a reply on blank lines and reports each chunk as it is sent."""

    def __init__(self, provider: str = "fake") -> None:
        super().__init__(provider)
        self.chunks: list[str] = []

    async def send(self, message: OutboundMessage, on_chunk: ChunkSent | None = None) -> list[str]:
        self.sent.append(message)
        ids = []
        for index, chunk in enumerate(message.text.split("\n\n")):
            if index < message.skip_chunks:
                continue
            self.chunks.append(chunk)
            self._next_id += 1
            ids.append(f"out-{self._next_id}")
            if on_chunk is not None:
                await on_chunk(index, ids[-1])
        return ids


@asynccontextmanager
async def daemon(config: Config, channel: FakeChannel) -> AsyncIterator[Daemon]:
    async with running(config, [channel], AnthropicBrain(config.anthropic, API_KEY)) as started:
        yield started


def said(channel: FakeChannel, text: str, *, peer: str = "42", message_id: str, sent_at: float | None = None
         ) -> InboundMessage:
    return channel.message(text, peer=peer, sender=peer, message_id=message_id, sent_at=sent_at)


def replies(channel: FakeChannel, peer: str = "42") -> list[str]:
    return [m.text for m in channel.sent if m.chat.chat_id == peer]


async def test_requests_left_waiting_are_answered_on_start_in_order_before_new_input(
    api: AnthropicStandIn, make_config: MakeConfig, view: Store, store_backend: str
) -> None:
    """Requests stored by a run that died before answering are answered at the next start, in
    their order and before anything that arrives after the start; none is left waiting."""
    channel = FakeChannel()
    for n in range(3):
        await view.append_inbound(said(channel, f"early {n}", message_id=f"e{n}"))
    await view.append_inbound(said(channel, "from bea", peer="7", message_id="b0"))

    async with daemon(make_config(config_data(api)), channel) as running_daemon:
        await channel.inject(said(channel, "after the start", message_id="n0"))
        await wait_until(lambda: len(channel.sent) == 5)
        await router_of(running_daemon).idle()

    assert replies(channel) == ["re: early 0", "re: early 1", "re: early 2", "re: after the start"]
    assert replies(channel, "7") == ["re: from bea"]
    assert await view.awaiting_requests() == []


async def test_requests_older_than_max_reply_age_are_marked_late_and_not_answered(
    api: AnthropicStandIn, make_config: MakeConfig, view: Store, tmp_path: Path
) -> None:
    """A waiting request older than its channel's max_reply_age is marked late (shown by
    `switchboard history`) instead of being answered hours later; a young one is answered."""
    channel = FakeChannel("telegram")
    await view.append_inbound(said(channel, "ancient question", message_id="1", sent_at=time.time() - 7200))
    await view.append_inbound(said(channel, "fresh question", message_id="2", sent_at=time.time() - 5))
    config = make_config(config_data(api, channels={"telegram": {"max_reply_age": 600}}))

    async with daemon(config, channel) as running_daemon:
        await wait_until(lambda: len(channel.sent) == 1)
        await router_of(running_daemon).idle()

    assert replies(channel) == ["re: fresh question"]
    history = await view.history("agent:main:telegram:direct:42", 10)
    assert [(m.text, m.unanswered) for m in history if m.role == "user"] == [
        ("ancient question", "late"), ("fresh question", None)]
    assert api.count == 1


async def test_a_reply_left_in_the_outbox_is_delivered_on_start_missing_chunks_only(
    api: AnthropicStandIn, make_config: MakeConfig, view: Store, store_backend: str
) -> None:
    """A stored reply whose first chunk reached the chat before the crash is completed at the next
    start with the chunks still missing, without asking the model again; every chunk's platform
    id then points at the stored reply."""
    channel = ChunkingChannel()
    request = await view.append_inbound(said(channel, "tell me three things", message_id="1"))
    assert request is not None
    chat = ChatRef("fake", "42")
    reply = await view.append_reply(
        str(channel.key()), "one\n\ntwo\n\nthree", request_id=request.id,
        deliver=OutboundMessage(chat, "one\n\ntwo\n\nthree"),
    )
    await view.record_chunk(reply.id, chat, 0, "out-first")

    async with daemon(make_config(config_data(api)), channel) as running_daemon:
        await wait_until(lambda: len(channel.chunks) == 2)
        await router_of(running_daemon).idle()

    assert channel.chunks == ["two", "three"]
    assert channel.sent[0].delivery_key == f"sb{reply.id}"
    assert api.count == 0
    assert await view.pending_deliveries() == []
    for platform_id in ("out-first", "out-1001", "out-1002"):
        found = await view.message_by_provider_id(chat, platform_id)
        assert found is not None and found.id == reply.id


async def test_a_reply_too_old_to_send_is_dropped_from_the_outbox(
    api: AnthropicStandIn, make_config: MakeConfig, view: Store, db: Path
) -> None:
    """An undelivered reply older than max_reply_age is not sent hours late, and leaves the outbox."""
    channel = ChunkingChannel("telegram")
    request = await view.append_inbound(said(channel, "hello?", message_id="1"))
    assert request is not None
    await view.append_reply(str(channel.key()), "hi!", request_id=request.id,
                            deliver=OutboundMessage(ChatRef("telegram", "42"), "hi!"))
    with sqlite3.connect(db) as conn:  # as if the daemon had been down for two hours since
        conn.execute("UPDATE outbox SET created_at = created_at - 7200")
    config = make_config(config_data(api, channels={"telegram": {"max_reply_age": 600}}))

    async with daemon(config, channel) as running_daemon:
        await router_of(running_daemon).idle()

    assert channel.chunks == []
    assert await view.pending_deliveries() == []


async def test_every_reply_of_a_run_leaves_the_outbox_once_delivered(
    api: AnthropicStandIn, make_config: MakeConfig, view: Store
) -> None:
    """Replies go through the outbox: stored with their row, gone from it once delivered."""
    channel = FakeChannel()
    async with daemon(make_config(config_data(api)), channel) as running_daemon:
        for n in range(3):
            await channel.inject(said(channel, f"q{n}", message_id=str(n)))
        await router_of(running_daemon).idle()
    assert replies(channel) == ["re: q0", "re: q1", "re: q2"]
    assert channel.sent[0].delivery_key is not None
    assert await view.pending_deliveries() == []


async def test_a_reply_clears_every_earlier_request_of_its_session(store: Store) -> None:
    """A reply answers its request and every earlier request of the session still waiting (its
    context held them), in the transaction that stores it; other sessions keep waiting."""
    channel = FakeChannel()
    first = await store.append_inbound(said(channel, "one", message_id="1"))
    other = await store.append_inbound(said(channel, "elsewhere", peer="7", message_id="2"))
    second = await store.append_inbound(said(channel, "two", message_id="3"))
    assert first is not None and other is not None and second is not None
    await store.append_reply(str(channel.key()), "both answered", request_id=second.id)
    assert [p.message.text for p in await store.awaiting_requests()] == ["elsewhere"]


def refuse_replies(db: Path, *, until: float | None = None) -> None:
    """Make the database refuse to store assistant messages (until a wall-clock time, if given),
    as a full disk or a failing drive would."""
    window = f"AND julianday('now') < julianday({until}, 'unixepoch')" if until is not None else ""
    with sqlite3.connect(db) as conn:
        conn.execute(
            f"CREATE TRIGGER refuse_replies BEFORE INSERT ON messages WHEN NEW.role = 'assistant' {window} "
            "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
        )


async def test_a_reply_the_database_refuses_is_still_delivered_once(
    api: AnthropicStandIn, make_config: MakeConfig, view: Store, db: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """When the reply cannot be stored however often it is tried, the user still gets it, once,
    and the log says so in one line."""
    refuse_replies(db)
    channel = FakeChannel()
    async with daemon(make_config(config_data(api)), channel) as running_daemon:
        await channel.inject(said(channel, "are you there?", message_id="1"))
        await router_of(running_daemon).idle()

    assert replies(channel) == ["re: are you there?"]
    assert api.count == 1
    assert capsys.readouterr().out.count("reply not stored; delivering it anyway") == 1


async def test_a_reply_the_database_refuses_once_is_stored_by_the_retry(
    api: AnthropicStandIn, make_config: MakeConfig, view: Store, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply the database refuses once (locked, briefly full) is stored by the retry and sent once."""
    monkeypatch.setattr("bot.turn.runner.STORE_RETRY_DELAY", 1.5)
    api.default = lambda request: Text(f"re: {last_user_line(request)}", delay=0.2)
    channel = FakeChannel()
    async with daemon(make_config(config_data(api)), channel) as running_daemon:
        # The model answers after 0.2 s, inside the window; the retry 1.5 s later is past it.
        # On a thread: a blocking write on the event loop the daemon shares can wait out its
        # busy timeout behind a daemon write that needs that loop to commit.
        await asyncio.to_thread(refuse_replies, db, until=time.time() + 0.9)
        await channel.inject(said(channel, "are you there?", message_id="1"))
        await router_of(running_daemon).idle()

    assert replies(channel) == ["re: are you there?"]
    history = await view.history(str(channel.key()), 10)
    assert [(m.role, m.text) for m in history] == [
        ("user", "are you there?"), ("assistant", "re: are you there?")]
    assert await view.awaiting_requests() == []


async def test_reset_waits_behind_the_turn_being_written_and_status_does_not(
    api: AnthropicStandIn, make_config: MakeConfig
) -> None:
    """/reset sent while a reply is being written applies after it (in order); /status is answered
    at once; the next message starts from the fresh context."""
    api.default = lambda request: Text(f"re: {last_user_line(request)}", delay=0.5)
    channel = FakeChannel()
    async with daemon(make_config(config_data(api)), channel) as running_daemon:
        await channel.inject(said(channel, "remember the tulips", message_id="1"))
        await wait_until(lambda: api.count == 1)
        await channel.inject(channel.message("/reset", command="reset", message_id="2"))
        await channel.inject(channel.message("/status", command="status", message_id="3"))
        await wait_until(lambda: len(channel.sent) == 1)
        assert channel.sent[0].text.startswith("Session: ")  # /status did not wait for the turn
        await router_of(running_daemon).idle()
        await channel.inject(said(channel, "what flowers?", message_id="4"))
        await router_of(running_daemon).idle()

    assert [m.text.split("\n")[0] for m in channel.sent] == [
        "Session: agent:main:fake:direct:42", "re: remember the tulips",
        "Started a fresh context. Earlier messages stay stored but I won't use them.", "re: what flowers?"]
    assert "tulips" not in str(api.requests[-1].messages)


async def test_a_command_received_but_not_run_runs_after_a_restart(
    api: AnthropicStandIn, make_config: MakeConfig, view: Store, store_backend: str
) -> None:
    """A /reset recorded by a run that died before running it runs at the next start, once."""
    channel = FakeChannel()
    first = await view.append_inbound(said(channel, "old topic", message_id="1"))
    assert first is not None
    await view.append_reply(str(channel.key()), "noted", request_id=first.id)
    reset = channel.message("/reset", command="reset", message_id="2")
    assert await view.append_command(reset, "reset") is not None
    assert await view.append_command(reset, "reset") is None  # a redelivery is recorded once

    async with daemon(make_config(config_data(api)), channel) as running_daemon:
        await router_of(running_daemon).idle()
        await channel.inject(said(channel, "new topic", message_id="3"))
        await router_of(running_daemon).idle()

    assert [m.text.split(".")[0] for m in channel.sent] == ["Started a fresh context", "re: new topic"]
    assert "old topic" not in str(api.requests[-1].messages)
    assert await view.pending_commands() == []


async def test_another_chat_is_answered_while_a_compact_waits_on_the_model(
    api: AnthropicStandIn, make_config: MakeConfig, view: Store
) -> None:
    """A /compact held by the model in one chat neither holds up intake nor another chat's reply."""
    channel = FakeChannel()
    for n in range(30):
        request = await view.append_inbound(said(channel, f"fact {n} " + "x" * 200, message_id=f"s{n}"))
        assert request is not None
        await view.append_reply(str(channel.key()), f"ok {n}", request_id=request.id)

    def held_summary(request: RecordedRequest) -> Response:
        if request.model == FAST:
            return Slow(30, Text("a summary"))  # held until the daemon stops
        return echo(request)

    api.default = held_summary
    async with daemon(make_config(config_data(api, compaction={"keep_recent": 2})), channel):
        await channel.inject(channel.message("/compact", command="compact", message_id="c1"))
        await wait_until(lambda: api.requests_for(FAST) != [])
        await asyncio.wait_for(channel.inject(said(channel, "hello from bea", peer="7", message_id="b1")), 1)
        await wait_until(lambda: replies(channel, "7") == ["re: hello from bea"])
        assert replies(channel) == []  # the compact is still waiting on the model


class CrashingOnce(FakeChannel):
    """A channel whose first run dies with an unexpected error; the next one works."""

    def __init__(self) -> None:
        super().__init__()
        self.runs = 0

    async def run(self, intake: Intake) -> None:
        self.runs += 1
        if self.runs == 1:
            raise RuntimeError("socket went away in a way nobody expected")
        await super().run(intake)


async def test_a_channel_that_stops_with_an_error_is_restarted_and_status_says_so(
    api: AnthropicStandIn, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A channel whose run dies unexpectedly is started again; status shows its restarts and last
    error, and it answers afterwards."""
    monkeypatch.setattr("bot.daemon.supervisor.RESTART_DELAY", 0.01)
    channel = CrashingOnce()
    async with daemon(make_config(config_data(api)), channel) as running_daemon:
        await channel.inject(said(channel, "still there?", message_id="1"))
        await router_of(running_daemon).idle()
        status = await running_daemon.status()

    assert channel.runs == 2
    assert replies(channel) == ["re: still there?"]
    assert status["channels"] == [{"provider": "fake", "state": "connected", "restarts": 1,
                                   "error": "RuntimeError: socket went away in a way nobody expected"}]


class FailingFirst(FakeChannel):
    """A platform that fails its first send for a passing reason (a server error), then works."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts = 0

    async def send(self, message: OutboundMessage, on_chunk: ChunkSent | None = None) -> list[str]:
        self.attempts += 1
        if self.attempts == 1:
            raise DeliveryError("502 Bad Gateway")
        return await super().send(message, on_chunk)


async def test_a_reply_a_passing_failure_kept_from_the_chat_is_sent_again_while_running(
    api: AnthropicStandIn, make_config: MakeConfig, view: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply whose send failed for a passing reason stays in the outbox and is sent again by the
    running daemon (no restart, no new model call), once."""
    monkeypatch.setattr("bot.delivery.resume.SWEEP_INTERVAL", 0.05)
    channel = FailingFirst()
    async with daemon(make_config(config_data(api)), channel) as running_daemon:
        await channel.inject(said(channel, "anyone home?", message_id="1"))
        await wait_until(lambda: replies(channel) == ["re: anyone home?"])
        # Marked delivered: no sweep from now on finds it pending, and a resend one already queued
        # has run once the router is idle.
        async with asyncio.timeout(30):
            while True:  # polled: the store has no way to signal
                if not await view.pending_deliveries():
                    break
                await asyncio.sleep(0.01)
        await router_of(running_daemon).idle()

    assert channel.attempts == 2 and replies(channel) == ["re: anyone home?"]
    assert api.count == 1
    assert await view.pending_deliveries() == []
