"""Tests of the aiohttp transport for python-telegram-bot, against the Bot API stand-in."""

from __future__ import annotations

import asyncio
import datetime as dtm
import gc
import socket
import time
import warnings
from collections.abc import AsyncIterator
from typing import Any

import pytest
import telegram
from telegram import Update
from telegram.error import BadRequest, Forbidden, InvalidToken, NetworkError, RetryAfter, TimedOut
from telegram.ext import Application, ContextTypes, MessageHandler, filters

from bot.testing.telegram_api import TelegramStandIn, private_chat, user
from channels.telegram.request import AiohttpRequest

TOKEN = "123456:TEST"
ANN = user(42, "Ann", username="ann")
ANN_CHAT = private_chat(ANN)


@pytest.fixture
async def tg() -> AsyncIterator[TelegramStandIn]:
    async with TelegramStandIn(token=TOKEN) as standin:
        yield standin


def make_bot(base_url: str, token: str = TOKEN, **request: Any) -> telegram.Bot:
    return telegram.Bot(token, base_url=base_url, request=AiohttpRequest(**request),
                        get_updates_request=AiohttpRequest(connection_pool_size=1))


@pytest.fixture
async def bot(tg: TelegramStandIn) -> AsyncIterator[telegram.Bot]:
    async with make_bot(tg.base_url) as client:
        yield client


def url(tg: TelegramStandIn, method: str) -> str:
    return f"{tg.base_url}{TOKEN}/{method}"


async def test_get_me_and_send_message(bot: telegram.Bot, tg: TelegramStandIn) -> None:
    """A bot on the aiohttp transport initialises with getMe and sends a message that arrives intact."""
    sent = await bot.send_message(42, "<b>Hi</b> & bye", parse_mode="HTML")
    assert bot.username == "switchboard_bot"
    assert [c.method for c in tg.calls] == ["getMe", "sendMessage"]
    assert sent.text == "Hi & bye"
    assert (tg.sent[-1].chat_id, tg.sent[-1].text, tg.sent[-1].message_id) == (42, "<b>Hi</b> & bye",
                                                                                 sent.message_id)


async def test_parameters_are_form_encoded_like_httpx(bot: telegram.Bot, tg: TelegramStandIn) -> None:
    """Strings go raw and everything else as JSON in a form body, so "+", "&", "=" and emoji survive."""
    text = "a+b=c & d%20 ✓ 🙂"
    reply = telegram.ReplyParameters(7, allow_sending_without_reply=True)
    await bot.send_message(42, text, reply_parameters=reply)
    params = tg.calls_of("sendMessage")[-1].params
    assert params["text"] == text
    assert params["chat_id"] == 42
    assert params["reply_parameters"] == {"message_id": 7, "allow_sending_without_reply": True}


async def test_upload_is_multipart_with_every_parameter(bot: telegram.Bot, tg: TelegramStandIn) -> None:
    """A file goes out as multipart form data carrying the other parameters as fields too."""
    with pytest.raises(InvalidToken):  # the stand-in has no sendDocument; it records the call first
        await bot.send_document(42, b"file body", filename="notes.txt", caption="the notes")
    params = tg.calls_of("sendDocument")[-1].params
    assert params["document"] == b"file body"
    assert (params["chat_id"], params["caption"]) == (42, "the notes")


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ({"status": 400, "description": "Bad Request: chat not found"}, BadRequest),
        ({"status": 403, "description": "Forbidden: bot was blocked by the user"}, Forbidden),
        ({"status": 502, "description": "Bad Gateway"}, NetworkError),
    ],
)
async def test_error_envelopes_become_ptb_errors(
    bot: telegram.Bot, tg: TelegramStandIn, fault: dict[str, Any], error: type[Exception]
) -> None:
    """Error statuses and descriptions reach PTB, which raises its own exception for each."""
    tg.fail_next("sendMessage", **fault)
    # PTB drops a leading "Bad Request: " and capitalises what is left.
    with pytest.raises(error, match="(?i)" + fault["description"].split(": ")[-1]) as caught:
        await bot.send_message(42, "hello")
    assert type(caught.value) is error


async def test_429_raises_retry_after_with_the_delay(bot: telegram.Bot, tg: TelegramStandIn) -> None:
    """A 429 carrying parameters.retry_after raises RetryAfter with that delay."""
    tg.fail_next("sendMessage", retry_after=3)
    with pytest.raises(RetryAfter) as caught:
        await bot.send_message(42, "hello")
    assert caught.value.retry_after == dtm.timedelta(seconds=3)


async def test_a_rejected_token_fails_initialisation(tg: TelegramStandIn) -> None:
    """A 401 from getMe surfaces as InvalidToken when the bot initialises."""
    bot = make_bot(tg.base_url, token="999:WRONG")
    with pytest.raises(InvalidToken):
        await bot.initialize()
    await bot.shutdown()


async def test_long_poll_returns_when_an_update_is_pushed(bot: telegram.Bot, tg: TelegramStandIn) -> None:
    """getUpdates with a timeout waits at the server and returns as soon as an update arrives."""
    started = time.monotonic()
    poll = asyncio.create_task(bot.get_updates(timeout=5))
    await tg.wait_for(lambda: tg.calls_of("getUpdates"))
    tg.push_message(ANN_CHAT, ANN, "wake up")
    updates = await asyncio.wait_for(poll, 3)
    assert [u.message.text for u in updates if u.message] == ["wake up"]
    assert time.monotonic() - started < 3


async def test_long_poll_outlasts_the_read_timeout(tg: TelegramStandIn) -> None:
    """PTB adds the poll's timeout to the transport's read timeout, so an empty poll is no TimedOut."""
    bot = telegram.Bot(TOKEN, base_url=tg.base_url, get_updates_request=AiohttpRequest(1, read_timeout=0.5))
    async with bot:
        started = time.monotonic()
        assert await bot.get_updates(timeout=1) == ()
    assert time.monotonic() - started >= 1


async def test_a_slow_answer_times_out(tg: TelegramStandIn) -> None:
    """No answer within the read timeout raises TimedOut."""
    async with AiohttpRequest() as request:
        started = time.monotonic()
        with pytest.raises(TimedOut):
            await request.post(url(tg, "getUpdates?timeout=2"), read_timeout=0.05)
    assert time.monotonic() - started < 1


async def test_a_full_pool_times_out_without_sending(tg: TelegramStandIn) -> None:
    """With every pooled connection busy, a call waits pool_timeout and fails before reaching Telegram."""
    async with AiohttpRequest(connection_pool_size=1, pool_timeout=0.05, connect_timeout=0.05) as request:
        poll = asyncio.create_task(request.post(url(tg, "getUpdates?timeout=2")))
        await tg.wait_for(lambda: tg.calls_of("getUpdates"))
        with pytest.raises(TimedOut, match="not\\* sent"):
            await request.post(url(tg, "getMe"))
        poll.cancel()
        with pytest.raises(asyncio.CancelledError):
            await poll
    assert not tg.calls_of("getMe")


async def test_a_dropped_connection_is_a_network_error(bot: telegram.Bot, tg: TelegramStandIn) -> None:
    """A connection the server drops without answering raises a plain NetworkError."""
    tg.drop_next("sendMessage")
    with pytest.raises(NetworkError, match="aiohttp") as caught:
        await bot.send_message(42, "hello")
    assert type(caught.value) is NetworkError
    await bot.send_message(42, "again")  # the pool recovers
    assert [m.text for m in tg.sent] == ["again"]


async def test_a_refused_connection_is_a_network_error() -> None:
    """Nothing listening on the port raises NetworkError."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with AiohttpRequest() as request:
        with pytest.raises(NetworkError, match="ClientConnectorError") as caught:
            await request.post(f"http://127.0.0.1:{port}/bot{TOKEN}/getMe")
    assert type(caught.value) is NetworkError


async def test_a_garbled_answer_is_a_network_error_without_the_token() -> None:
    """A response aiohttp cannot parse raises NetworkError whose message leaves out the bot token."""

    async def garble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 abc\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garble, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, AiohttpRequest() as request:
        with pytest.raises(NetworkError, match="aiohttp") as caught:
            await request.post(f"http://127.0.0.1:{port}/bot{TOKEN}/getMe")
    assert TOKEN not in str(caught.value)


async def test_an_application_polls_and_replies(tg: TelegramStandIn) -> None:
    """A real Application on the aiohttp transport polls updates, replies, and confirms the offset on stop."""

    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None and update.message.text is not None
        await context.bot.send_message(update.message.chat.id, update.message.text.upper())

    app = (Application.builder().token(TOKEN).base_url(tg.base_url)
           .request(AiohttpRequest()).get_updates_request(AiohttpRequest(connection_pool_size=1)).build())
    app.add_handler(MessageHandler(filters.TEXT, echo))
    assert app.updater is not None
    await app.initialize()
    await app.updater.start_polling(timeout=dtm.timedelta(seconds=5), poll_interval=0)
    await app.start()
    try:
        update = tg.push_message(ANN_CHAT, ANN, "ping")
        await tg.wait_for(lambda: tg.sent)
    finally:
        await app.updater.stop()
        await app.stop()
        await app.shutdown()
    assert [m.text for m in tg.sent] == ["PING"]
    assert tg.confirmed_offset == update["update_id"] + 1


async def test_shutdown_closes_the_session(tg: TelegramStandIn) -> None:
    """After shutdown nothing is left open to warn about when collected, and initialize() reopens it."""
    request = AiohttpRequest()
    await request.initialize()
    await request.post(url(tg, "getMe"))
    await request.shutdown()
    await request.shutdown()  # twice is harmless
    with pytest.raises(NetworkError, match="not initialized"):
        await request.post(url(tg, "getMe"))
    await request.initialize()  # as PTB does when a bot that failed to start is started again
    me = await request.post(url(tg, "getMe"))
    assert isinstance(me, dict) and me["is_bot"] is True
    await request.shutdown()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del request
        gc.collect()
    assert [str(w.message) for w in caught] == []
