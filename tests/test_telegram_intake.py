"""Telegram's durable intake: the channel with the real python-telegram-bot against the Bot API stand-in,
handing updates to a recording intake."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
from structlog.testing import capture_logs

from bot.config import TelegramConfig
from bot.core.messages import InboundMessage
from bot.intake.access import refused_dm_reply
from bot.testing.recording_intake import RecordingIntake
from bot.testing.telegram_api import Call, TelegramStandIn, message, private_chat, user
from channels.telegram.channel import TelegramChannel

ADA = user(42, "Ada", "ada")
STRANGER = user(666, "Mallory")
JSON = dict[str, Any]

POLL = {
    "id": "5", "question": "Lunch?", "total_voter_count": 0, "is_closed": False, "is_anonymous": True,
    "type": "regular", "allows_multiple_answers": False, "allows_revoting": False,
    "options": [{"persistent_id": "y", "text": "Yes", "voter_count": 0},
                {"persistent_id": "n", "text": "No", "voter_count": 0}],
}


def _without(msg: JSON, *keys: str) -> JSON:
    return {k: v for k, v in msg.items() if k not in keys}


# Shapes seen in the wild that python-telegram-bot 22.8 cannot parse, and the error each gives.
MALFORMED: list[Any] = [
    pytest.param(lambda m: _without(m, "date"), "KeyError", id="no date"),
    pytest.param(lambda m: m | {"date": "yesterday"}, "TypeError", id="date not a number"),
    pytest.param(lambda m: m | {"entities": {"type": "bold", "offset": 0, "length": 3}}, "AttributeError",
                 id="entities not a list"),
    pytest.param(lambda m: m | {"entities": [{"type": "bold", "length": 3}]}, "TypeError",
                 id="entity without offset"),
    pytest.param(lambda m: m | {"from": {"is_bot": False, "first_name": "Ghost"}}, "TypeError",
                 id="sender without id"),
    pytest.param(lambda m: m | {"reply_to_message": 17}, "AttributeError", id="reply not an object"),
    pytest.param(lambda m: _without(m, "text") | {"poll": POLL}, "TypeError", id="poll without members_only"),
    pytest.param(lambda m: [m], "TypeError", id="message is a list"),
]


@pytest.fixture
async def tg() -> AsyncIterator[TelegramStandIn]:
    async with TelegramStandIn() as standin:
        yield standin


def make_channel(tg: TelegramStandIn, **section: Any) -> TelegramChannel:
    config = TelegramConfig.model_validate({"base_url": tg.base_url, "allow_from": [42], **section})
    return TelegramChannel(config, agent_id="main", token=tg.token)


@asynccontextmanager
async def running(
    tg: TelegramStandIn, intake: RecordingIntake, channel: TelegramChannel | None = None
) -> AsyncIterator[TelegramChannel]:
    """The channel running as the daemon runs it: connected on entry, stopped then cancelled on exit."""
    channel = channel or make_channel(tg)
    task = asyncio.create_task(channel.run(intake))
    try:
        ready = asyncio.create_task(channel.ready.wait())
        await asyncio.wait([ready, task], timeout=5, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if task.done():
            task.result()
        assert channel.ready.is_set()
        yield channel
    finally:
        await channel.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def texts(intake: RecordingIntake) -> list[str]:
    return [m.text for m in intake.received]


def handed_out(tg: TelegramStandIn, update_id: int) -> list[Call]:
    """The getUpdates calls whose answer carried this update."""
    return [c for c in tg.calls_of("getUpdates")
            if any(isinstance(u, dict) and u.get("update_id") == update_id for u in c.result or ())]


def push_text(tg: TelegramStandIn, text: str, sender: JSON = ADA) -> JSON:
    return tg.push_message(private_chat(sender), sender, text)


@contextmanager
def warnings_logged(caplog: pytest.LogCaptureFixture) -> Iterator[list[dict[str, Any]]]:
    """Every structlog event at warning or above, and every stdlib record (python-telegram-bot's)."""
    caplog.set_level(logging.WARNING)
    found: list[dict[str, Any]] = []
    with capture_logs() as logs:
        yield found
    found.extend(e for e in logs if e["log_level"] in ("warning", "error", "critical"))
    found.extend({"event": r.getMessage(), "log_level": r.levelname.lower(), "logger": r.name}
                 for r in caplog.records)


@pytest.mark.parametrize(("malform", "error"), MALFORMED)
async def test_an_unparseable_update_is_quarantined_and_the_rest_of_its_batch_goes_on(
    tg: TelegramStandIn, caplog: pytest.LogCaptureFixture, malform: Callable[[JSON], Any], error: str
) -> None:
    """One malformed update among good ones is quarantined as it came, fetched once, with no log line
    from the channel or the library (the intake logs it), and the updates around and after it go on."""
    intake = RecordingIntake()
    with warnings_logged(caplog) as logged:
        async with running(tg, intake):
            push_text(tg, "before")
            bad = tg.push_raw({"message": malform(message(private_chat(ADA), ADA, "bad",
                                                          message_id=tg.next_message_id(42)))})
            push_text(tg, "after")
            await tg.wait_for(lambda: len(intake.received) == 2 and intake.quarantined)
            # A retry loop over the bad batch would fetch it again before "later" got through.
            push_text(tg, "later")
            await tg.wait_for(lambda: len(intake.received) == 3)
        last = tg.calls_of("getUpdates")[-1].params["offset"]

    assert texts(intake) == ["before", "after", "later"]
    ((provider, ref, raw, reason),) = intake.quarantined
    assert (provider, ref, json.loads(raw)) == ("telegram", str(bad["update_id"]), bad)
    assert reason.startswith(f"{error}: ")
    assert len(handed_out(tg, bad["update_id"])) == 1
    assert len(tg.calls_of("getUpdates")) <= 5  # connect, the batch, "later", the poll stop cancels, confirm
    assert logged == []  # the intake logs the quarantine, once; the channel and the library nothing
    assert tg.confirmed_offset == last > bad["update_id"]


class FlakyIntake(RecordingIntake):
    """Fails to store the message with text `failing` once with each of `errors`, in turn."""

    def __init__(self, failing: str, *errors: Exception) -> None:
        super().__init__()
        self.failing, self.errors, self.failures = failing, list(errors), 0

    async def submit(self, inbound: InboundMessage) -> None:
        if inbound.text == self.failing and self.errors:
            self.failures += 1
            raise self.errors.pop(0)
        await super().submit(inbound)


async def test_an_update_the_intake_could_not_store_is_not_confirmed_and_comes_again(
    tg: TelegramStandIn,
) -> None:
    """While submit fails, each time for another reason (a failure that is not the update's own),
    the offset stays at that update; once it works, it and the rest are submitted once each, in
    order, and nothing is quarantined."""
    intake = FlakyIntake("second", RuntimeError("database is locked"), OSError("disk I/O error"))
    with capture_logs() as logs:
        async with running(tg, intake):
            first, second, *_ = [push_text(tg, text) for text in ("first", "second", "third", "fourth")]
            await tg.wait_for(lambda: intake.failures == 2)
            assert tg.confirmed_offset <= second["update_id"]
            assert all(c.params.get("offset", 0) <= second["update_id"] for c in tg.calls_of("getUpdates"))
            await tg.wait_for(lambda: len(intake.received) == 4)

    assert texts(intake) == ["first", "second", "third", "fourth"]
    assert intake.quarantined == []
    assert len(handed_out(tg, second["update_id"])) == 3
    assert len(handed_out(tg, first["update_id"])) == 1
    retries = [e for e in logs if e["event"] == "telegram update not stored; fetching it again"]
    assert [(e["update_id"], e["error"]) for e in retries] == [
        (second["update_id"], "RuntimeError: database is locked"),
        (second["update_id"], "OSError: disk I/O error"),
    ]


class ClosingIntake(RecordingIntake):
    """Holds the first submission until `release`, and refuses everything once `closed` is set, as
    the daemon's intake does while it shuts down; checks that nothing is confirmed before it is taken."""

    def __init__(self, tg: TelegramStandIn) -> None:
        super().__init__()
        self.tg = tg
        self.update_ids: dict[str, int] = {}  # message id -> update id
        self.entered, self.release, self.closed = asyncio.Event(), asyncio.Event(), False

    async def submit(self, inbound: InboundMessage) -> None:
        assert inbound.provider_message_id is not None
        assert self.tg.confirmed_offset <= self.update_ids[inbound.provider_message_id]
        if not self.received:
            self.entered.set()
            await self.release.wait()
        elif self.closed:
            raise RuntimeError("the daemon is shutting down")
        await super().submit(inbound)


async def test_updates_fetched_but_not_submitted_when_the_channel_stops_come_again(
    tg: TelegramStandIn,
) -> None:
    """stop() waits for the submission in hand; what the intake then refuses is not confirmed and
    reaches the next run, and what it took does not."""
    intake = ClosingIntake(tg)
    async with running(tg, intake) as channel:
        pushed = [push_text(tg, f"message {n}") for n in range(5)]
        intake.update_ids = {str(u["message"]["message_id"]): u["update_id"] for u in pushed}
        await asyncio.wait_for(intake.entered.wait(), 5)
        stopping = asyncio.create_task(channel.stop())
        await asyncio.sleep(0)
        intake.closed = True
        intake.release.set()
        await asyncio.wait_for(stopping, 5)
        assert texts(intake) == ["message 0"]
        assert tg.confirmed_offset == pushed[1]["update_id"]

    again = RecordingIntake()
    async with running(tg, again):
        await tg.wait_for(lambda: len(again.received) == 4)
    assert texts(again) == [f"message {n}" for n in range(1, 5)]
    assert tg.confirmed_offset == pushed[-1]["update_id"] + 1


async def test_the_channel_starts_as_the_updater_did_and_is_ready_once_getupdates_answers(
    tg: TelegramStandIn,
) -> None:
    """getMe, the command menu, deleteWebhook keeping pending updates, then getUpdates: `ready` is
    set by the first one that succeeds, and long polls follow."""
    tg.fail_next("getUpdates", status=502, description="Bad Gateway")
    channel = make_channel(tg)
    task = asyncio.create_task(channel.run(RecordingIntake()))
    try:
        await asyncio.wait_for(channel.ready.wait(), 5)
        polls = tg.calls_of("getUpdates")
        assert [(c.failed, c.params["timeout"]) for c in polls[:2]] == [(True, 0), (False, 0)]
        await tg.wait_for(lambda: len(tg.calls_of("getUpdates")) == 3)
    finally:
        await channel.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    methods = [c.method for c in tg.calls]
    assert methods[:4] == ["getMe", "setMyCommands", "deleteWebhook", "getUpdates"]
    assert tg.calls_of("deleteWebhook")[0].params == {}
    long_poll = {"timeout": 30, "limit": 100, "allowed_updates": ["message"]}
    assert tg.calls_of("getUpdates")[2].params == long_poll


async def test_stop_cancels_a_waiting_long_poll_and_confirms_the_offset(tg: TelegramStandIn) -> None:
    """stop() does not wait out a 30-second long poll; one short getUpdates confirms what was taken."""
    intake = RecordingIntake()
    async with running(tg, intake) as channel:
        pushed = push_text(tg, "hello")
        await tg.wait_for(lambda: intake.received)
        offset = pushed["update_id"] + 1
        await tg.wait_for(lambda: [c for c in tg.calls_of("getUpdates")
                                   if c.params.get("offset") == offset and c.params["timeout"] == 30])
        await asyncio.wait_for(channel.stop(), 2)
        assert channel.ready.is_set()

    confirm = tg.calls_of("getUpdates")[-1]
    assert (confirm.params["offset"], confirm.params["timeout"], confirm.params["limit"]) == (offset, 0, 1)
    assert tg.confirmed_offset == offset


async def test_a_slow_refusal_notice_does_not_hold_up_intake(tg: TelegramStandIn) -> None:
    """A refused DM's notice is sent in the background: the messages after it are submitted meanwhile."""
    intake = RecordingIntake()
    async with running(tg, intake):
        tg.delay_next("sendMessage", 30)
        push_text(tg, "let me in", sender=STRANGER)
        push_text(tg, "I am allowed")
        await tg.wait_for(lambda: intake.received)
        await tg.wait_for(lambda: tg.calls_of("sendMessage"))
        assert tg.sent == []
    assert texts(intake) == ["I am allowed"]
    assert tg.calls_of("sendMessage")[0].params == {"chat_id": 666, "text": refused_dm_reply("666")}


@pytest.mark.parametrize(
    ("fault", "event"),
    [
        ({"status": 409, "description": "Conflict: terminated by other getUpdates request; make sure "
                                        "that only one bot instance is running"},
         "another getUpdates or a webhook uses this bot token; retrying"),
        ({"retry_after": 1}, "Telegram asks to wait before polling again"),
        ({"status": 502, "description": "Bad Gateway"}, "telegram polling failed; retrying"),
    ],
)
async def test_polling_errors_are_waited_out_with_one_line_each(
    tg: TelegramStandIn, fault: dict[str, Any], event: str
) -> None:
    """A conflict, a flood wait or a server error is logged once as a warning and polling goes on."""
    intake = RecordingIntake()
    with capture_logs() as logs:
        async with running(tg, intake):
            tg.fail_next("getUpdates", **fault)
            push_text(tg, "still there?")
            await tg.wait_for(lambda: intake.received, timeout=5)
    failed = [c for c in tg.calls_of("getUpdates") if c.failed]
    assert len(failed) == 1
    (line,) = [e for e in logs if e["log_level"] not in ("debug", "info")]
    assert (line["event"], line["log_level"]) == (event, "warning")
    assert "exc_info" not in line
    assert texts(intake) == ["still there?"]


async def test_a_token_revoked_while_polling_turns_the_channel_off(tg: TelegramStandIn) -> None:
    """A 401 from getUpdates ends the channel with one warning saying where to put a new token;
    its HTTP clients are closed."""
    channel = make_channel(tg)
    intake = RecordingIntake()
    with capture_logs() as logs:
        task = asyncio.create_task(channel.run(intake))
        await asyncio.wait_for(channel.ready.wait(), 5)
        tg.fail_next("getUpdates", status=401, description="Unauthorized")
        tg.push_message(private_chat(ADA), ADA, "anyone?")
        await asyncio.wait_for(task, 5)
    assert [e for e in logs if e["log_level"] == "error"] == []
    (line,) = [e for e in logs if e["log_level"] == "warning"]
    assert line["event"].startswith("Telegram rejected the bot token") and "stays off" in line["event"]
    assert "TELEGRAM_BOT_TOKEN" in line["fix"]
    await channel.stop()  # after the end, stop() has nothing to wait for
    with no_unclosed_session():
        del channel, task


@contextmanager
def no_unclosed_session() -> Iterator[None]:
    """What is dropped inside leaves no aiohttp session or connector open to warn about."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
        gc.collect()
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize(
    ("method", "body", "error"),
    [
        ("getMe", {"ok": True}, KeyError),
        ("getMe", {"ok": True, "result": {"id": 1000, "first_name": "Switchboard"}}, TypeError),
        ("setMyCommands", {"ok": True}, KeyError),
    ],
    ids=["getMe without result", "getMe without is_bot", "setMyCommands without result"],
)
async def test_a_start_up_failure_closes_the_telegram_client(
    tg: TelegramStandIn, method: str, body: JSON, error: type[Exception]
) -> None:
    """Whatever fails while the channel starts, it leaves no HTTP session open behind it."""
    tg.answer_next(method, body)
    channel = make_channel(tg)
    with pytest.raises(error):
        await channel.run(RecordingIntake())
    assert not channel.ready.is_set()
    with no_unclosed_session():
        del channel
