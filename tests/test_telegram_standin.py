"""Tests of the Telegram Bot API stand-in, driven by the real python-telegram-bot."""

from __future__ import annotations

import asyncio
import datetime as dtm
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest
import telegram
from telegram import Update
from telegram.constants import ParseMode
from telegram.error import (
    BadRequest,
    ChatMigrated,
    EndPointNotFound,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
)
from telegram.ext import Application, CommandHandler, ContextTypes, MessageHandler, filters

from bot.testing.telegram_api import (
    EntityParseError,
    TelegramStandIn,
    command_entities,
    group_chat,
    mention_entities,
    message,
    parse_html,
    private_chat,
    user,
)
from channels.telegram.request import AiohttpRequest

TOKEN = "123456:TEST"
ANN = user(42, "Ann", username="ann")
ANN_CHAT = private_chat(ANN)

Callback = Callable[[Update, ContextTypes.DEFAULT_TYPE], Coroutine[Any, Any, None]]


@pytest.fixture
async def tg() -> AsyncIterator[TelegramStandIn]:
    async with TelegramStandIn(token=TOKEN, bot_id=1000, bot_username="switchboard_bot") as standin:
        yield standin


@pytest.fixture
async def bot(tg: TelegramStandIn) -> AsyncIterator[telegram.Bot]:
    async with telegram.Bot(TOKEN, base_url=tg.base_url) as client:
        yield client


@asynccontextmanager
async def polling(
    tg: TelegramStandIn, *handlers: Any
) -> AsyncIterator[Application[Any, Any, Any, Any, Any, Any]]:
    """An Application polling the stand-in, started and stopped by hand as the daemon does."""
    app = Application.builder().token(TOKEN).base_url(tg.base_url).build()
    for handler in handlers:
        app.add_handler(handler)
    assert app.updater is not None
    await app.initialize()
    await app.updater.start_polling(poll_interval=0, timeout=1)
    await app.start()
    try:
        yield app
    finally:
        await app.updater.stop()
        await app.stop()
        await app.shutdown()


def collector(into: list[Update]) -> Callback:
    async def collect(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        into.append(update)

    return collect


async def test_get_me_returns_the_configured_bot(tg: TelegramStandIn, bot: telegram.Bot) -> None:
    """getMe answers with the bot user PTB needs (is_bot, username) and the call is recorded."""
    me = await bot.get_me()
    assert (me.id, me.is_bot, me.username, me.can_join_groups) == (1000, True, "switchboard_bot", True)
    assert [c.method for c in tg.calls_of("getMe")] == ["getMe", "getMe"]  # initialize() + ours


async def test_wrong_token_raises_invalid_token(tg: TelegramStandIn) -> None:
    """A request with another token gets 401 Unauthorized, which PTB raises as InvalidToken."""
    with pytest.raises(InvalidToken):
        async with telegram.Bot("999:WRONG", base_url=tg.base_url):  # shuts its client down on failure
            pass
    assert tg.calls[-1].failed


async def test_unknown_method_is_not_found(tg: TelegramStandIn, bot: telegram.Bot) -> None:
    """A method the stand-in does not serve answers 404, which PTB reports as EndPointNotFound."""
    with pytest.raises(EndPointNotFound):
        await bot.do_api_request("noSuchMethod")


async def test_pushed_messages_reach_message_and_command_handlers(tg: TelegramStandIn) -> None:
    """Pushed updates are long-polled by a real Application; a bot_command entity makes a command."""
    texts: list[Update] = []
    commands: list[Update] = []
    handlers = (
        CommandHandler("start", collector(commands)),
        MessageHandler(filters.TEXT & ~filters.COMMAND, collector(texts)),
    )
    async with polling(tg, *handlers):
        tg.push_message(ANN_CHAT, ANN, "/start now", entities=command_entities("/start now"))
        tg.push_message(ANN_CHAT, ANN, "hello")
        await tg.wait_for(lambda: texts and commands)
    assert [u.effective_message.text for u in commands + texts if u.effective_message] == [
        "/start now",
        "hello",
    ]
    assert texts[0].effective_chat is not None and texts[0].effective_chat.id == 42
    assert tg.calls_of("deleteWebhook")


async def test_confirmed_offset_stops_redelivery_to_the_next_run(tg: TelegramStandIn) -> None:
    """The offset confirmed when the first run stops keeps its update from reaching a second run."""
    first: list[Update] = []
    async with polling(tg, MessageHandler(filters.TEXT, collector(first))):
        pushed = tg.push_message(ANN_CHAT, ANN, "one")
        await tg.wait_for(lambda: first)
    assert tg.confirmed_offset == pushed["update_id"] + 1
    second: list[Update] = []
    async with polling(tg, MessageHandler(filters.TEXT, collector(second))):
        tg.push_message(ANN_CHAT, ANN, "two")
        await tg.wait_for(lambda: second)
    assert [u.effective_message.text for u in second if u.effective_message] == ["two"]


async def test_long_poll_returns_promptly_when_an_update_is_pushed(
    tg: TelegramStandIn, bot: telegram.Bot
) -> None:
    """getUpdates blocks while nothing is pending and returns as soon as an update is pushed."""
    poll = asyncio.create_task(bot.get_updates(timeout=dtm.timedelta(seconds=120),
                                               read_timeout=130))
    await tg.wait_for(lambda: tg.calls_of("getUpdates"))
    await asyncio.sleep(0.05)
    assert not poll.done()
    tg.push_message(ANN_CHAT, ANN, "wake up")
    updates = await asyncio.wait_for(poll, 60)  # woken by the push, long before the poll's 120 s
    assert [u.effective_message.text for u in updates if u.effective_message] == ["wake up"]


async def test_get_updates_honours_offset_limit_and_allowed_updates(
    tg: TelegramStandIn, bot: telegram.Bot
) -> None:
    """Updates below the offset are dropped, at most `limit` come back, filtered by allowed_updates."""
    first = tg.push_message(ANN_CHAT, ANN, "a")
    tg.push("edited_message", first["message"] | {"text": "a!", "edit_date": 1})
    tg.push_message(ANN_CHAT, ANN, "b")
    assert len(await bot.get_updates(timeout=0, limit=2)) == 2
    only_messages = await bot.get_updates(timeout=0, allowed_updates=["message"])
    assert [u.message.text for u in only_messages if u.message] == ["a", "b"]
    rest = await bot.get_updates(offset=first["update_id"] + 1, timeout=0, allowed_updates=[])
    assert [u.update_id for u in rest] == [first["update_id"] + 1, first["update_id"] + 2]
    assert tg.confirmed_offset == first["update_id"] + 1


async def test_send_message_with_html_returns_a_full_message(tg: TelegramStandIn, bot: telegram.Bot) -> None:
    """A valid HTML reply comes back as a Message with ids, entities and the replied-to message."""
    inbound = tg.push_message(ANN_CHAT, ANN, "question")["message"]
    sent = await bot.send_message(
        42,
        "<b>Hi</b> &amp; <i>bye</i> 🏟",
        parse_mode=ParseMode.HTML,
        reply_to_message_id=inbound["message_id"],
    )
    assert sent.message_id == inbound["message_id"] + 1  # one counter per chat, shared
    assert (sent.chat.id, sent.text, sent.from_user and sent.from_user.id) == (42, "Hi & bye 🏟", 1000)
    assert [(e.type, e.offset, e.length) for e in sent.entities] == [("bold", 0, 2), ("italic", 5, 3)]
    assert sent.reply_to_message is not None and sent.reply_to_message.text == "question"
    record = tg.sent[0]
    assert (record.visible_text, record.parse_mode, record.reply_to_message_id) == (
        "Hi & bye 🏟",
        "HTML",
        inbound["message_id"],
    )


async def test_send_message_keeps_the_forum_topic(tg: TelegramStandIn, bot: telegram.Bot) -> None:
    """A message sent into a forum topic carries message_thread_id back."""
    forum = group_chat(-100500, "Forum", forum=True)
    tg.push_message(forum, ANN, "in topic", thread_id=7, is_topic_message=True)
    sent = await bot.send_message(-100500, "answer", message_thread_id=7)
    assert (sent.message_thread_id, sent.is_topic_message, tg.sent[0].message_thread_id) == (7, True, 7)


@pytest.mark.parametrize(
    ("html", "reason"),
    [
        ("<b>bold", 'can\'t find end tag corresponding to start tag "b"'),
        ("<div>x</div>", 'unsupported start tag "div" at byte offset 0'),
        ("x</b>", "unexpected end tag at byte offset 1"),
        ("<b><i>x</b></i>", 'unmatched end tag at byte offset 7, expected "</i>", found "</b>"'),
        ("1 < 2", 'unsupported start tag "" at byte offset 2'),
    ],
)
async def test_invalid_html_raises_bad_request(
    tg: TelegramStandIn, bot: telegram.Bot, html: str, reason: str
) -> None:
    """Malformed HTML is refused with Telegram's "can't parse entities" reason and is not sent."""
    with pytest.raises(BadRequest, match=r"(?i)can't parse entities") as caught:
        await bot.send_message(42, html, parse_mode=ParseMode.HTML)
    # PTB strips "Bad Request: " and lower-cases the rest of the description.
    assert caught.value.message == "Can't parse entities: " + reason
    assert tg.sent == [] and tg.calls_of("sendMessage")[0].failed


async def test_text_length_and_emptiness_are_checked_after_parsing(
    tg: TelegramStandIn, bot: telegram.Bot
) -> None:
    """4096 visible characters pass even with markup; 4097 or an empty result are refused."""
    await bot.send_message(42, "<b>" + "a" * 4096 + "</b>", parse_mode=ParseMode.HTML)
    with pytest.raises(BadRequest, match="Message is too long"):
        await bot.send_message(42, "a" * 4097)
    with pytest.raises(BadRequest, match="Message text is empty"):
        await bot.send_message(42, "<b></b>", parse_mode=ParseMode.HTML)
    assert len(tg.sent) == 1 and tg.sent[0].visible_text == "a" * 4096


async def test_fail_next_429_raises_retry_after(tg: TelegramStandIn, bot: telegram.Bot) -> None:
    """A scripted 429 with parameters.retry_after raises RetryAfter once; the next call succeeds."""
    tg.fail_next("sendMessage", status=429, retry_after=7)
    with pytest.raises(RetryAfter) as caught:
        await bot.send_message(42, "hi")
    assert caught.value.retry_after == dtm.timedelta(seconds=7)
    await bot.send_message(42, "hi again")
    assert [c.failed for c in tg.calls_of("sendMessage")] == [True, False]
    assert [s.text for s in tg.sent] == ["hi again"]


async def test_fail_next_targets_one_chat_for_n_calls(tg: TelegramStandIn, bot: telegram.Bot) -> None:
    """A fault scoped to a chat leaves other chats alone and expires after `times` calls."""
    tg.fail_next("sendMessage", description="Bad Request: chat not found", chat_id=7, times=2)
    await bot.send_message(8, "fine")
    for _ in range(2):
        with pytest.raises(BadRequest, match="Chat not found"):
            await bot.send_message(7, "nope")
    await bot.send_message(7, "fine now")
    assert [s.chat_id for s in tg.sent] == [8, 7]


async def test_fail_next_with_migration_raises_chat_migrated(tg: TelegramStandIn, bot: telegram.Bot) -> None:
    """parameters.migrate_to_chat_id becomes ChatMigrated with the new chat id."""
    tg.fail_next("sendMessage", migrate_to_chat_id=-1001234)
    with pytest.raises(ChatMigrated) as caught:
        await bot.send_message(-5, "hi")
    assert caught.value.new_chat_id == -1001234


async def test_drop_next_is_a_network_error(tg: TelegramStandIn, bot: telegram.Bot) -> None:
    """A dropped connection reaches PTB as NetworkError and is recorded as a failed call."""
    tg.drop_next("sendChatAction")
    with pytest.raises(NetworkError):
        await bot.send_chat_action(42, "typing")
    assert await bot.send_chat_action(42, "typing")
    assert [c.failed for c in tg.calls_of("sendChatAction")] == [True, False]


async def test_blocked_chat_raises_forbidden(tg: TelegramStandIn, bot: telegram.Bot) -> None:
    """After block(), messages and chat actions to that chat fail with 403 Forbidden."""
    tg.block(42)
    with pytest.raises(Forbidden, match="bot was blocked by the user"):
        await bot.send_message(42, "hi")
    with pytest.raises(Forbidden):
        await bot.send_chat_action(42, "typing")
    assert tg.sent == []


async def test_edit_message_text_replaces_the_text(tg: TelegramStandIn, bot: telegram.Bot) -> None:
    """editMessageText changes a sent message and refuses an edit that changes nothing."""
    sent = await bot.send_message(42, "draft")
    edited = await bot.edit_message_text(
        "<i>final</i>", chat_id=42, message_id=sent.message_id, parse_mode=ParseMode.HTML
    )
    assert isinstance(edited, telegram.Message) and edited.text == "final" and edited.edit_date
    assert [(e.message_id, e.visible_text) for e in tg.edits] == [(sent.message_id, "final")]
    with pytest.raises(BadRequest, match="not modified"):
        await bot.edit_message_text(
            "<i>final</i>", chat_id=42, message_id=sent.message_id, parse_mode=ParseMode.HTML
        )


async def test_commands_round_trip(tg: TelegramStandIn, bot: telegram.Bot) -> None:
    """setMyCommands stores the list getMyCommands returns; invalid command names are refused."""
    await bot.set_my_commands([("reset", "Start over"), ("why", "Explain the context")])
    assert [(c.command, c.description) for c in await bot.get_my_commands()] == [
        ("reset", "Start over"),
        ("why", "Explain the context"),
    ]
    with pytest.raises(BadRequest, match="Bot_command_invalid"):
        await bot.set_my_commands([("/Reset", "bad")])


async def test_builders_make_real_updates(bot: telegram.Bot) -> None:
    """The module-level builders produce JSON that PTB parses into the expected objects."""
    group = group_chat(-42, "Friends", supergroup=True)
    asked = message(group, ANN, "hello", message_id=3)
    photo = message(group, ANN, caption="look", photo=True, reply_to=asked)
    update = Update.de_json({"update_id": 1, "message": photo}, bot)
    assert update is not None and update.message is not None
    assert (update.message.chat.type, update.message.caption, len(update.message.photo)) == (
        "supergroup",
        "look",
        3,
    )
    assert update.message.reply_to_message is not None and update.message.reply_to_message.message_id == 3
    sticker = Update.de_json({"update_id": 2, "message": message(ANN_CHAT, ANN, sticker=True)}, bot)
    voice = Update.de_json({"update_id": 3, "message": message(ANN_CHAT, ANN, voice=True)}, bot)
    assert sticker is not None and sticker.message is not None and sticker.message.sticker is not None
    assert voice is not None and voice.message is not None and voice.message.voice is not None
    text = "/why@switchboard_bot please, @Switchboard_Bot"
    command = Update.de_json(
        {
            "update_id": 3,
            "message": message(
                group, ANN, text, entities=command_entities(text) + mention_entities(text, "switchboard_bot")
            ),
        },
        bot,
    )
    assert command is not None and filters.COMMAND.check_update(command)
    assert command.message is not None
    assert list(command.message.parse_entities(["mention"]).values()) == ["@Switchboard_Bot"]


def test_parse_html_matches_tdlib() -> None:
    """The HTML parser gives tdlib's results: UTF-16 offsets, byte offsets, literal '&', pre languages."""
    assert parse_html("🏟 🏟<i>🏟 &lt🏟</i>") == ("🏟 🏟🏟 <🏟", [{"type": "italic", "offset": 5, "length": 6}])
    assert parse_html("Tom & Jerry &laquo;") == ("Tom & Jerry &laquo;", [])
    assert parse_html('<pre><code class="language-py">x</code></pre>') == (
        "x",
        [{"type": "pre", "offset": 0, "length": 1, "language": "py"}],
    )
    assert parse_html('<a href="https://x.org/?a=1&amp;b=2">x</a>')[1][0]["url"] == "https://x.org/?a=1&b=2"
    with pytest.raises(EntityParseError, match=r"^Unmatched end tag at byte offset 17, expected \"</i>\""):
        parse_html("🏟 🏟&lt;<i>a</em   >")
    with pytest.raises(EntityParseError, match=r'^Tag "span" must have class "tg-spoiler" at byte offset 0$'):
        parse_html("<span>x</span>")


async def test_push_raw_queues_any_shape_with_the_next_update_id(tg: TelegramStandIn) -> None:
    """push_raw keeps an update as it is, numbered after the others unless it brings an id, and
    getUpdates hands it out as Telegram would, its answer recorded on the call."""
    first = tg.push_message(ANN_CHAT, ANN, "ok")
    bad = tg.push_raw({"message": [1, 2]})
    numbered = tg.push_raw({"update_id": 50, "message": {"date": "yesterday"}})
    after = tg.push_message(ANN_CHAT, ANN, "after")
    assert [u["update_id"] for u in (first, bad, numbered, after)] == [1, 2, 50, 51]
    assert bad == {"update_id": 2, "message": [1, 2]}
    async with AiohttpRequest(connection_pool_size=1) as request:
        result = await request.post(f"{tg.base_url}{TOKEN}/getUpdates?timeout=0")
    assert result == [first, bad, numbered, after]
    assert tg.calls_of("getUpdates")[-1].result == result
    with pytest.raises(ValueError, match="update_id must be an integer"):
        tg.push_raw({"update_id": "3", "message": {}})


async def test_an_update_below_the_confirmed_offset_is_gone_for_good(
    tg: TelegramStandIn, bot: telegram.Bot
) -> None:
    """Once an offset is confirmed, no later call brings back what lies below it, not even one
    without an offset, and an update pushed below it is never handed out."""
    one, two = tg.push_message(ANN_CHAT, ANN, "one"), tg.push_message(ANN_CHAT, ANN, "two")
    only_two = [two["update_id"]]
    assert [u.update_id for u in await bot.get_updates(offset=two["update_id"], timeout=0)] == only_two
    assert [u.update_id for u in await bot.get_updates(timeout=0)] == only_two
    tg.push_raw({"update_id": one["update_id"], "message": one["message"]})
    assert [u.update_id for u in await bot.get_updates(timeout=0)] == only_two
    assert tg.confirmed_offset == two["update_id"]


async def test_answer_next_and_delay_next_script_odd_and_slow_answers(
    tg: TelegramStandIn, bot: telegram.Bot
) -> None:
    """answer_next sends a body as it is (here an envelope without a result); delay_next answers
    normally, only later."""
    tg.answer_next("getMyCommands", {"ok": True})
    with pytest.raises(KeyError):
        await bot.get_my_commands()
    assert tg.calls_of("getMyCommands")[-1].failed is False
    tg.delay_next("getMyCommands", 0.2)
    started = time.monotonic()
    assert await bot.get_my_commands() == ()
    assert time.monotonic() - started >= 0.2


async def test_get_file_then_the_file_url_serves_the_bytes_and_refuses_as_telegram_does(
    tg: TelegramStandIn,
) -> None:
    """getFile gives a path under /file/bot<token>/ that PTB downloads; an unknown id and a file over
    the bots' 20 MB download limit are BadRequests, as on Telegram."""
    file_url = tg.base_url.replace("/bot", "/file/bot")
    async with telegram.Bot(TOKEN, base_url=tg.base_url, base_file_url=file_url) as bot:
        doc = tg.document(b"hello file", "a.txt", "text/plain")
        found = await bot.get_file(doc["file_id"])
        assert found.file_size == 10 and found.file_unique_id == doc["file_unique_id"]
        assert bytes(await found.download_as_bytearray()) == b"hello file"
        assert tg.downloads == [tg.files[doc["file_id"]][1]]
        with pytest.raises(BadRequest, match=r"(?i)invalid file_id"):
            await bot.get_file("no-such-file")
        huge = tg.add_file(b"\0" * (20 * 1024 * 1024 + 1))
        with pytest.raises(BadRequest, match=r"(?i)file is too big"):
            await bot.get_file(huge["file_id"])


@asynccontextmanager
async def receiver(statuses: list[int]) -> AsyncIterator[tuple[str, list[tuple[int, str | None]]]]:
    """A webhook endpoint on 127.0.0.1 answering `statuses` in turn (then 200); yields its URL and
    what it received: (update_id, secret header) per request."""
    from aiohttp import web

    received: list[tuple[int, str | None]] = []

    async def take(request: web.Request) -> web.Response:
        update = await request.json()
        received.append((update["update_id"], request.headers.get("X-Telegram-Bot-Api-Secret-Token")))
        return web.Response(status=statuses.pop(0) if statuses else 200)

    app = web.Application()
    app.router.add_post("/hook", take)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/hook", received
    finally:
        await runner.cleanup()


async def test_a_webhook_gets_updates_as_telegram_posts_them_and_polling_gets_a_conflict(
    tg: TelegramStandIn, bot: telegram.Bot
) -> None:
    """While a webhook is set getUpdates is a 409; pending and new updates are posted with the secret,
    a non-2xx answer is retried, a chat's next update waits for its last, and deleteWebhook brings
    polling back with what was never taken."""
    waiting = tg.push_message(ANN_CHAT, ANN, "waited for a poll")
    with pytest.raises(BadRequest, match=r"(?i)https url must be provided"):
        await bot.set_webhook("http://bot.example.com/hook")
    async with receiver([500, 502]) as (url, received):
        assert await bot.set_webhook(url, secret_token="s3cret", allowed_updates=["message"])
        info = await bot.get_webhook_info()
        assert (info.url, info.allowed_updates) == (url, ("message",))
        with pytest.raises(telegram.error.Conflict, match="webhook is active"):
            await bot.get_updates()
        following = tg.push_message(ANN_CHAT, ANN, "sent next")
        assert await tg.delivered(waiting) == 200
        assert await tg.delivered(following) == 200
        assert (await bot.get_webhook_info()).pending_update_count == 0
    ids = (waiting["update_id"], following["update_id"])
    assert received == [(ids[0], "s3cret")] * 3 + [(ids[1], "s3cret")]
    assert [a.status for a in tg.webhook_attempts] == [500, 502, 200, 200]

    unanswered = tg.push_message(ANN_CHAT, ANN, "nobody listens")
    assert await tg.delivered(unanswered) is None  # the server is gone: kept, as on Telegram
    assert await bot.delete_webhook()
    assert [u.update_id for u in await bot.get_updates()] == [unanswered["update_id"]]
