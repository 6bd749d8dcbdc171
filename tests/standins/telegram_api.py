"""Local aiohttp stand-in of the Telegram Bot API that the real python-telegram-bot talks to."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import re
import time
from collections import defaultdict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, TypeAlias

from aiohttp import web

from tests.standins.telegram_webhook import Webhook, WebhookAttempt, WebhookSender, webhook_refusal

__all__ = [
    "Call",
    "Draft",
    "EntityParseError",
    "SentMessage",
    "TelegramStandIn",
    "Webhook",
    "WebhookAttempt",
    "command_entities",
    "group_chat",
    "mention_entities",
    "message",
    "parse_html",
    "private_chat",
    "user",
]

JSON: TypeAlias = dict[str, Any]
MAX_TEXT = 4096
MAX_DOWNLOAD = 20 * 1024 * 1024  # getFile refuses bigger files ("file is too big")
# Values PTB sends raw that must stay strings even when they look like JSON ("42", "true").
_STRING_PARAMS = {"text", "caption", "parse_mode", "action", "language_code", "url", "emoji", "query"}
_CHAT_ACTIONS = {"typing", "upload_photo", "record_video", "upload_video", "record_voice", "upload_voice",
                 "upload_document", "choose_sticker", "find_location", "record_video_note",
                 "upload_video_note"}
# Telegram's default when allowed_updates was never set (or set to []).
_OPT_IN_UPDATES = {"chat_member", "message_reaction", "message_reaction_count"}


@dataclass
class Call:
    """One Bot API request as received; `failed` is set when it got an error or was dropped, and
    `result` holds what a successful call returned (for getUpdates, the updates handed out)."""

    method: str
    params: JSON
    time: float
    failed: bool = False
    result: Any = None


@dataclass(frozen=True)
class SentMessage:
    """A message the bot sent (or an edit), as the user would see it."""

    chat_id: int
    text: str
    visible_text: str
    parse_mode: str | None
    message_thread_id: int | None
    reply_to_message_id: int | None
    message_id: int
    time: float


@dataclass(frozen=True)
class Draft:
    """A message draft the bot streamed to a private chat (sendMessageDraft), as the user saw it."""

    chat_id: int
    draft_id: int
    visible_text: str
    message_thread_id: int | None
    time: float


@dataclass
class _Fault:
    method: str
    status: int
    description: str
    parameters: JSON
    chat_id: int | str | None
    times: int
    drop: bool = False
    # A raw answer instead of an error: any envelope (even a malformed one), or text that is no JSON.
    body: JSON | str | None = None
    delay: float = 0.0  # a slow answer: served normally after this many seconds
    # Served (a message is created), but the answer waits for this event: a crash meanwhile leaves
    # the bot without the id of a message the chat shows.
    hold: asyncio.Event | None = None


class _ApiError(Exception):
    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status, self.description = status, description


def _u16(text: str) -> int:
    """Telegram offsets and lengths count UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


# -- update builders: plain Telegram JSON, usable with telegram.Update.de_json -----------------------

_message_ids = itertools.count(1)


def user(id: int, first_name: str = "Test", username: str | None = None, is_bot: bool = False) -> JSON:
    named = {"username": username} if username else {}
    return {"id": id, "is_bot": is_bot, "first_name": first_name} | named


def private_chat(user: JSON) -> JSON:
    keys = ("first_name", "username")
    return {"id": user["id"], "type": "private"} | {k: user[k] for k in keys if k in user}


def group_chat(id: int, title: str, supergroup: bool = False, forum: bool = False) -> JSON:
    chat: JSON = {"id": id, "type": "supergroup" if supergroup or forum else "group", "title": title}
    return chat | ({"is_forum": True} if forum else {})


def message(
    chat: JSON, sender: JSON, text: str | None = None, *, message_id: int | None = None,
    date: int | None = None, entities: list[JSON] | None = None, caption: str | None = None,
    photo: bool | list[JSON] = False, sticker: bool = False, voice: bool | JSON = False,
    reply_to: JSON | None = None, thread_id: int | None = None, is_topic_message: bool | None = None,
    document: JSON | None = None, video: bool = False,
) -> JSON:
    """A Message dict; without message_id it takes the next id of a module-wide counter."""
    msg: JSON = {"message_id": next(_message_ids) if message_id is None else message_id,
                 "date": int(time.time()) if date is None else date, "chat": chat, "from": sender}
    optional: JSON = {"text": text, "caption": caption, "reply_to_message": reply_to,
                      "message_thread_id": thread_id, "is_topic_message": is_topic_message}
    msg |= {k: v for k, v in optional.items() if v is not None}
    if entities:
        msg["entities" if text is not None else "caption_entities"] = entities
    n = msg["message_id"]
    if isinstance(photo, list):
        msg["photo"] = photo
    elif photo:
        msg["photo"] = [{"file_id": f"photo-{n}-{w}", "file_unique_id": f"p{n}{w}", "width": w,
                         "height": w, "file_size": w * 40} for w in (90, 320, 1280)]
    if sticker:
        msg["sticker"] = {"file_id": f"sticker-{n}", "file_unique_id": f"s{n}", "type": "regular",
                          "width": 512, "height": 512, "is_animated": False, "is_video": False, "emoji": "🙂"}
    if isinstance(voice, dict):  # a voice note the bot can fetch (`TelegramStandIn.add_file`)
        msg["voice"] = voice
    elif voice:
        msg["voice"] = {"file_id": f"voice-{n}", "file_unique_id": f"v{n}", "duration": 42,
                        "mime_type": "audio/ogg", "file_size": 4000}
    if video:
        msg["video"] = {"file_id": f"video-{n}", "file_unique_id": f"m{n}", "width": 640, "height": 360,
                        "duration": 12, "mime_type": "video/mp4", "file_size": 900_000}
    if document is not None:
        msg["document"] = document
    return msg


def command_entities(text: str) -> list[JSON]:
    """The bot_command entity Telegram adds when a message starts with "/"."""
    if not text.startswith("/"):
        return []
    return [{"type": "bot_command", "offset": 0, "length": _u16(text.split(maxsplit=1)[0])}]


def mention_entities(text: str, username: str) -> list[JSON]:
    """A mention entity for every "@username" in text."""
    pattern = re.compile(rf"(?<!\w)@{re.escape(username.lstrip('@'))}\b", re.IGNORECASE)
    return [{"type": "mention", "offset": _u16(text[: m.start()]), "length": _u16(m.group())}
            for m in pattern.finditer(text)]


# -- HTML parse mode, after tdlib's parse_html (td/telegram/MessageEntity.cpp) ------------------------


class EntityParseError(ValueError):
    """Why Telegram rejects HTML, e.g. 'Unexpected end tag at byte offset 3'."""


_TAG_TYPES = {"b": "bold", "strong": "bold", "i": "italic", "em": "italic", "u": "underline",
              "ins": "underline", "s": "strikethrough", "strike": "strikethrough", "del": "strikethrough",
              "tg-spoiler": "spoiler", "span": "spoiler", "a": "text_link", "code": "code", "pre": "pre",
              "blockquote": "blockquote", "tg-emoji": "custom_emoji"}
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_ENTITY = re.compile(r"&(?:#x([0-9a-fA-F]*)|#([0-9]*)|([a-zA-Z]*));?")
_TAG_NAME = re.compile(r"</?([^\s>]*)")
_VALUE = r"(?:\"[^\"]*\"|'[^']*'|[A-Za-z0-9.-]*(?=[\s>]))"
_START_TAG = re.compile(rf"<[^\s>]+((?:\s+[^\s=>]+\s*=\s*{_VALUE}|\s+expandable)*)\s*>", re.IGNORECASE)
_ATTRIBUTE = re.compile(rf"([^\s=>]+)\s*=\s*({_VALUE})")
_END_TAG = re.compile(r"</[^\s>]*\s*>")


def _decode_entity(html: str, i: int) -> tuple[str, int] | None:
    """The character of the entity at html[i] ("&") and the index after it; None keeps '&' literal."""
    m = _ENTITY.match(html, i)
    if m is None:
        return None
    hexa, dec, name = m.groups()
    if name is not None:
        return (_NAMED[name], m.end()) if name in _NAMED else None
    code = int(hexa or dec, 16 if hexa is not None else 10) if hexa or dec else 0
    if 0xD800 <= code <= 0xDFFF:
        raise EntityParseError("Text contains invalid Unicode characters after decoding HTML entities, "
                               "check for unmatched surrogate code units")
    return (chr(code), m.end()) if 0 < code < 0x10FFFF else None


def _unescape(value: str) -> str:
    return _ENTITY.sub(lambda m: (_decode_entity(m.group(), 0) or (m.group(),))[0], value)


def parse_html(html: str) -> tuple[str, list[JSON]]:
    """Text and entities of `html` under parse_mode HTML; raises EntityParseError with tdlib's words.

    Faithful to tdlib's parse_html for tags, entities and nesting; a malformed attribute list is
    reported as "Unclosed start tag" instead of tdlib's finer-grained reasons.
    """
    out: list[str] = []
    units = 0  # UTF-16 code units emitted so far
    open_tags: list[tuple[str, str, int, int]] = []  # tag, argument, start in units, index in out
    entities: list[JSON] = []
    i = 0

    def fail(reason: str, suffix: str = "") -> EntityParseError:
        return EntityParseError(f"{reason} at byte offset {len(html[:i].encode())}{suffix}")

    while i < len(html):
        ch = html[i]
        decoded = _decode_entity(html, i) if ch == "&" else None
        if decoded or ch != "<":
            text, i = decoded or (ch, i + 1)
            out.append(text)
            units += _u16(text)
            continue
        name_match = _TAG_NAME.match(html, i)
        assert name_match is not None
        tag = name_match.group(1).lower()
        if not html.startswith("</", i):
            if name_match.end() == len(html):
                raise fail("Unclosed start tag")
            if tag not in _TAG_TYPES:
                raise fail(f'Unsupported start tag "{tag}"')
            m = _START_TAG.match(html, i)
            if m is None:
                raise fail("Unclosed start tag")
            argument = ""
            for attr, raw in _ATTRIBUTE.findall(m.group(1) + ">"):  # ">" ends a bare value
                value = _unescape(raw[1:-1]) if raw[:1] in "'\"" and raw else raw.lower()
                if (tag, attr) in {("a", "href"), ("tg-emoji", "emoji-id")}:
                    argument = value
                elif (tag, attr) in {("code", "class"), ("span", "class")}:
                    argument = value.removeprefix("language-" if tag == "code" else "tg-")
            if tag == "blockquote" and re.search(r"\bexpandable\b", m.group(1), re.IGNORECASE):
                argument = "expandable"
            if tag == "span" and argument != "spoiler":
                raise fail('Tag "span" must have class "tg-spoiler"')
            open_tags.append((tag, argument, units, len(out)))
            i = m.end()
            continue
        if not open_tags:
            raise fail("Unexpected end tag")
        m = _END_TAG.match(html, i)
        if m is None:
            raise fail("Unclosed end tag")
        top, argument, start, out_index = open_tags[-1]
        if tag and tag != top:
            raise fail("Unmatched end tag", f', expected "</{top}>", found "</{tag}>"')
        open_tags.pop()
        i = m.end()
        if units == start:
            continue  # empty entities are dropped
        entity: JSON = {"type": _TAG_TYPES[top], "offset": start, "length": units - start}
        last = [entities[-1].get(k) for k in ("type", "offset", "length")] if entities else []
        if top == "tg-emoji" and not (argument.isdigit() and int(argument)):
            raise EntityParseError("Invalid custom emoji identifier specified")
        if top == "tg-emoji":
            entity["custom_emoji_id"] = argument
        elif top == "a":
            entity["url"] = argument or "".join(out[out_index:])
        elif top == "blockquote" and argument:
            entity["type"] = "expandable_blockquote"
        elif top == "code" and argument:
            entity["language"] = argument  # moved to the enclosing <pre> below, or dropped
        elif top == "pre" and last == ["code", start, units - start]:
            # <pre><code class="language-x">…</code></pre> is one pre entity with a language.
            entity |= {k: v for k, v in entities.pop().items() if k == "language"}
        entities.append(entity)
    if open_tags:
        raise EntityParseError(f'Can\'t find end tag corresponding to start tag "{open_tags[-1][0]}"')
    for entity in entities:
        if entity["type"] == "code":
            entity.pop("language", None)
    return "".join(out), sorted(entities, key=lambda e: (e["offset"], -e["length"]))


# -- the server ----------------------------------------------------------------------------------------

_Handler: TypeAlias = Callable[[JSON], Coroutine[Any, Any, Any]]


class TelegramStandIn:
    """`async with TelegramStandIn() as tg:` serves the Bot API at `tg.base_url` on 127.0.0.1.

    Like api.telegram.org, one server answers every bot by the token in the URL: `tg.add_bot(...)`
    gives another bot on the same server, with its own identity, updates, offset and sent messages.

    While a webhook is set (setWebhook), getUpdates answers 409 and every pending or pushed update
    is POSTed to it as Telegram does (`tests.standins.telegram_webhook`), until deleteWebhook.
    """

    def __init__(self, *, token: str = "123456:TEST", bot_id: int = 1000,
                 bot_username: str = "switchboard_bot", bot_first_name: str = "Switchboard") -> None:
        self.token = token
        self.bot_user: JSON = {"id": bot_id, "is_bot": True, "first_name": bot_first_name,
                               "username": bot_username}
        self.calls: list[Call] = []
        self.sent: list[SentMessage] = []
        self.edits: list[SentMessage] = []
        self.deleted: list[tuple[int, int]] = []  # (chat id, message id) the bot deleted
        self.drafts: list[Draft] = []
        # Chats where drafts are refused (an error description per chat), see `refuse_drafts`.
        self.draft_refusals: dict[int, str] = {}
        self.blocked: set[int] = set()
        self.confirmed_offset = 0
        self.commands: dict[tuple[str, str], list[JSON]] = {}  # (scope JSON, language) -> commands
        self._faults: list[_Fault] = []
        self._pending: list[JSON] = []
        self._allowed: set[str] | None = None
        self._last_update_id = 0
        self._last_ids: defaultdict[int, int] = defaultdict(int)
        self._messages: dict[tuple[int, int], JSON] = {}
        self._chats: dict[int, JSON] = {}
        self._pushed = asyncio.Event()
        self._inflight: set[asyncio.Task[Any]] = set()
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._bots: dict[str, TelegramStandIn] = {token: self}  # by token; the server's own first
        # Files the bot may download: file_id -> (file_unique_id, file_path, bytes).
        self.files: dict[str, tuple[str, str, bytes]] = {}
        self.downloads: list[str] = []  # file paths fetched from /file/bot<token>/<path>
        self._file_ids = itertools.count(1)
        self.webhook: Webhook | None = None
        self.webhook_sender = WebhookSender()
        self._methods: dict[str, _Handler] = {
            "getme": self._get_me, "deletewebhook": self._delete_webhook, "getupdates": self._get_updates,
            "sendmessage": self._send_message, "editmessagetext": self._edit_message_text,
            "deletemessage": self._delete_message, "editmessagereplymarkup": self._edit_reply_markup,
            "sendmessagedraft": self._send_message_draft,
            "sendchataction": self._send_chat_action, "setmycommands": self._set_my_commands,
            "getmycommands": self._get_my_commands, "close": self._true, "logout": self._true,
            "getfile": self._get_file, "setwebhook": self._set_webhook,
            "getwebhookinfo": self._get_webhook_info,
        }

    def add_bot(self, *, token: str, bot_id: int, bot_username: str,
                bot_first_name: str = "Switchboard") -> TelegramStandIn:
        """Another bot served by this server (same `base_url`), sharing nothing with the others
        but the server: script it and read what it sent through the object returned."""
        if token in self._bots:
            raise ValueError(f"a bot with token {token!r} is already served")
        bot = TelegramStandIn(token=token, bot_id=bot_id, bot_username=bot_username,
                              bot_first_name=bot_first_name)
        bot._port = self._port
        self._bots[token] = bot
        return bot

    async def __aenter__(self) -> TelegramStandIn:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download_for)
        # handler_cancellation: a long poll whose client went away must not linger until its timeout.
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self._port = int(self._runner.addresses[0][1])
        for bot in self._bots.values():
            bot._port = self._port
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Cancel in-flight requests (long polls) and stop the server; safe to call twice."""
        for bot in self._bots.values():
            await bot.webhook_sender.close()
        inflight = list(self._inflight)
        for task in inflight:
            task.cancel()
        if inflight:
            await asyncio.wait(inflight)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/bot"

    # -- scripting and inspection

    def calls_of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method.lower() == method.lower()]

    def fail_next(self, method: str, *, status: int | None = None, description: str | None = None,
                  retry_after: int | None = None, migrate_to_chat_id: int | None = None, times: int = 1,
                  chat_id: int | str | None = None) -> None:
        """Answer the next `times` calls of `method` (to `chat_id`, if given) with an error envelope."""
        status = status or (429 if retry_after is not None else 400)
        if description is None and migrate_to_chat_id is not None:
            description = "Bad Request: group chat was upgraded to a supergroup chat"
        elif description is None:
            description = HTTPStatus(status).phrase + (f": retry after {retry_after}" if retry_after else "")
        parameters = {k: v for k, v in (("retry_after", retry_after),
                                        ("migrate_to_chat_id", migrate_to_chat_id)) if v is not None}
        self._faults.append(_Fault(method.lower(), status, description, parameters, chat_id, times))

    def answer_next(self, method: str, body: JSON | str, *, status: int = 200, times: int = 1) -> None:
        """Answer the next `times` calls of `method` (or "file", a download) with `body` as it is, e.g.
        `{"ok": True}` without a result, a getMe user without `is_bot`, or a text that is no JSON:
        what a broken proxy, a newer API or a web server's error page might send."""
        self._faults.append(_Fault(method.lower(), status, "", {}, None, times, body=body))

    def delay_next(self, method: str, seconds: float, *, times: int = 1) -> None:
        """Answer the next `times` calls of `method` normally, but only after `seconds`."""
        self._faults.append(_Fault(method.lower(), 200, "", {}, None, times, delay=seconds))

    def hold_next(self, method: str) -> asyncio.Event:
        """Serve the next call of `method` (sendMessage creates its message) but hold the answer
        until the event returned is set."""
        release = asyncio.Event()
        self._faults.append(_Fault(method.lower(), 200, "", {}, None, 1, hold=release))
        return release

    def drop_next(self, method: str, times: int = 1) -> None:
        """Abort the connection of the next `times` calls of `method` without answering."""
        self._faults.append(_Fault(method.lower(), 0, "", {}, None, times, drop=True))

    def block(self, chat_id: int) -> None:
        """The user of `chat_id` blocked the bot: sends and chat actions there get 403."""
        self.blocked.add(chat_id)

    def refuse_drafts(self, chat_id: int, description: str = "Bad Request: TEXTDRAFT_PEER_INVALID") -> None:
        """Answer every sendMessageDraft to `chat_id` with a 400, as where drafts are unavailable."""
        self.draft_refusals[chat_id] = description

    def next_message_id(self, chat_id: int) -> int:
        """Message ids are shared by inbound and outbound messages, like Telegram's: one sequence
        across the bot's private chats and basic groups, one per supergroup or channel."""
        sequence = _sequence(chat_id)
        self._last_ids[sequence] += 1
        return self._last_ids[sequence]

    def push(self, update_kind: str, msg: JSON) -> JSON:
        """Queue an update carrying `msg` under `update_kind` and wake long polls; returns the update."""
        chat_id = msg["chat"]["id"]
        self._chats[chat_id] = msg["chat"]
        self._messages[(chat_id, msg["message_id"])] = msg
        sequence = _sequence(chat_id)
        self._last_ids[sequence] = max(self._last_ids[sequence], msg["message_id"])
        return self.push_raw({update_kind: msg})

    def push_raw(self, update: JSON) -> JSON:
        """Queue an update as it is, possibly malformed, and wake long polls; returns it.

        It gets the next update id unless it carries an integer one (later pushes then count on
        from the highest). As on Telegram, an id below the confirmed offset is never handed out.
        """
        update = dict(update)
        given = update.get("update_id")
        if given is None:
            update = {"update_id": self._last_update_id + 1} | update
        elif not isinstance(given, int) or isinstance(given, bool):
            raise ValueError(f"update_id must be an integer, not {given!r}")
        self._last_update_id = max(self._last_update_id, update["update_id"])
        if update["update_id"] >= self.confirmed_offset:
            self._pending.append(update)
            self._pending.sort(key=lambda u: u["update_id"])
        self._pushed.set()
        self._pushed = asyncio.Event()  # waiters hold the old, now set, event
        if self.webhook is not None and update in self._pending:
            self._deliver_soon(update)
        return update

    # -- the webhook side

    @property
    def webhook_attempts(self) -> list[WebhookAttempt]:
        """Every POST of an update to a webhook so far, with the answer's status."""
        return self.webhook_sender.attempts

    async def delivered(self, update: JSON) -> int | None:
        """Wait until the webhook delivery of a pushed update has ended: its last status (2xx: taken;
        anything else after every try: still pending, as on Telegram)."""
        await self.wait_for(lambda: self.webhook_sender.sending(update))
        return await self.webhook_sender.outcome(update)

    async def post_to_webhook(self, update: JSON, *, secret: str | None, tries: int = 1) -> int | None:
        """POST an update to the registered webhook URL with another secret token, or none (a forged
        request, or a stale secret); the last status. Telegram itself never does this."""
        assert self.webhook is not None, "no webhook is set"
        forged = dataclasses.replace(self.webhook, secret_token=secret)
        return await self.webhook_sender.post(forged, update, tries=tries)

    def _deliver_soon(self, update: JSON) -> None:
        webhook = self.webhook
        assert webhook is not None
        kinds = update.keys() - {"update_id"}
        if webhook.allowed_updates is not None and kinds and not kinds & webhook.allowed_updates:
            return  # Telegram never sends an update kind the webhook did not ask for
        self.webhook_sender.post_soon(webhook, update, still_wanted=lambda: self.webhook == webhook,
                                      on_delivered=self._taken)

    def _taken(self, update: JSON) -> None:
        self._pending = [u for u in self._pending if u["update_id"] != update["update_id"]]

    def add_file(self, data: bytes, folder: str = "documents", extension: str = "") -> JSON:
        """Keep bytes the bot can fetch (getFile, then the file URL); the fields every file object has."""
        n = next(self._file_ids)
        file_id, unique = f"AgACAgIAAxk-{n:06d}", f"AQAD{n:06d}"
        self.files[file_id] = (unique, f"{folder}/file_{n}{extension}", data)
        return {"file_id": file_id, "file_unique_id": unique, "file_size": len(data)}

    def photo_sizes(self, *sizes: tuple[int, int, bytes]) -> list[JSON]:
        """A message's `photo`: one PhotoSize per (width, height, JPEG bytes), smallest first."""
        return [self.add_file(data, "photos", ".jpg") | {"width": w, "height": h} for w, h, data in sizes]

    def document(self, data: bytes, file_name: str, mime_type: str | None = None) -> JSON:
        """A message's `document` (the file_size Telegram states is the real one)."""
        doc = self.add_file(data, "documents", "") | {"file_name": file_name}
        return doc | ({"mime_type": mime_type} if mime_type else {})

    def push_message(self, chat: JSON, sender: JSON, text: str | None = None, **fields: Any) -> JSON:
        """Build a message (see `message()`) with the chat's next message id and push it."""
        if fields.get("message_id") is None:
            fields["message_id"] = self.next_message_id(chat["id"])
        return self.push("message", message(chat, sender, text, **fields))

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
        """Poll `predicate` until it is truthy and return its value; TimeoutError after `timeout` s."""
        async with asyncio.timeout(timeout):
            # Polling, not an event: predicates often read client-side state the server never sees.
            while not (result := predicate()):  # noqa: ASYNC110
                await asyncio.sleep(0.005)
        return result

    # -- HTTP

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        if task is not None:
            self._inflight.add(task)
        try:
            # Each bot keeps its own state; an unknown token is answered by this one (401).
            return await self._bots.get(request.match_info["token"], self)._serve(request)
        finally:
            if task is not None:
                self._inflight.discard(task)

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        form = dict(request.query) | dict(await request.post())
        params = {k: _decode_value(k, v) for k, v in form.items()}
        call = Call(method, params, time.monotonic())
        self.calls.append(call)
        handler = self._methods.get(method.lower())
        if request.match_info["token"] != self.token:
            return _error(call, 401, "Unauthorized")
        if handler is None:
            return _error(call, 404, "Not Found")
        fault = self._take_fault(method.lower(), params.get("chat_id"))
        if fault is not None and fault.delay:
            await asyncio.sleep(fault.delay)
            fault = None
        held = fault.hold if fault is not None else None
        if held is not None:
            fault = None
        if fault is not None and fault.drop:
            call.failed = True
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)  # never written: the client sees a dropped connection
        if fault is not None and isinstance(fault.body, str):
            return _raw(call, fault.status, fault.body)
        if fault is not None and fault.body is not None:
            call.failed = fault.status >= 300 or fault.body.get("ok") is not True
            call.result = fault.body.get("result")
            return web.json_response(fault.body, status=fault.status)
        if fault is not None:
            return _error(call, fault.status, fault.description, fault.parameters)
        try:
            result = await handler(params)
        except _ApiError as exc:
            return _error(call, exc.status, exc.description)
        if held is not None:
            await held.wait()
        call.result = result
        return web.json_response({"ok": True, "result": result})

    def _take_fault(self, method: str, chat_id: Any) -> _Fault | None:
        for fault in self._faults:
            if fault.method == method and (fault.chat_id is None or str(fault.chat_id) == str(chat_id)):
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    # -- methods

    async def _true(self, p: JSON) -> bool:
        return True

    async def _get_me(self, p: JSON) -> JSON:
        return self.bot_user | {"can_join_groups": True, "can_read_all_group_messages": False,
                                "supports_inline_queries": False, "can_connect_to_business": False,
                                "has_main_web_app": False}

    async def _delete_webhook(self, p: JSON) -> bool:
        self.webhook = None
        if p.get("drop_pending_updates"):
            self._pending.clear()
        return True

    async def _set_webhook(self, p: JSON) -> bool:
        url = str(p.get("url") or "")
        if not url:  # an empty URL removes the webhook, as deleteWebhook does
            return await self._delete_webhook(p)
        refusal = webhook_refusal(url, p.get("secret_token"))
        if refusal is not None:
            raise _ApiError(400, refusal)
        if p.get("drop_pending_updates"):
            self._pending.clear()
        if "allowed_updates" in p:
            self._allowed = set(p["allowed_updates"] or ()) or None
        allowed = frozenset(self._allowed) if self._allowed is not None else None
        self.webhook = Webhook(url, p.get("secret_token"), allowed, int(p.get("max_connections") or 40))
        for update in list(self._pending):  # what waited for a poll now comes by webhook
            self._deliver_soon(update)
        return True

    async def _get_webhook_info(self, p: JSON) -> JSON:
        info: JSON = {"url": "", "has_custom_certificate": False, "pending_update_count": len(self._pending)}
        if self.webhook is not None:
            info |= {"url": self.webhook.url, "max_connections": self.webhook.max_connections}
            if self.webhook.allowed_updates is not None:
                info["allowed_updates"] = sorted(self.webhook.allowed_updates)
            info |= self._last_webhook_error(self.webhook.url)
        return info

    def _last_webhook_error(self, url: str) -> JSON:
        """Telegram's `last_error_date` (unix time) and `last_error_message` of the newest failed
        delivery to `url`, kept after later successes as Telegram keeps them; {} when none failed.
        An attempt without an answer reads "Connection refused" (the sender cannot tell a refused
        connection from a dropped one)."""
        failed = [a for a in self.webhook_attempts if a.url == url and not a.ok]
        if not failed:
            return {}
        last = failed[-1]
        message = ("Connection refused" if last.status is None
                   else f"Wrong response from the webhook: {last.status} {_phrase(last.status)}")
        return {"last_error_date": int(time.time() - (time.monotonic() - last.time)),
                "last_error_message": message}

    async def _get_updates(self, p: JSON) -> list[JSON]:
        if self.webhook is not None:
            raise _ApiError(409, "Conflict: can't use getUpdates method while webhook is active; "
                                 "use deleteWebhook to delete the webhook first")
        offset = int(p.get("offset") or 0)
        if offset > 0:
            self.confirmed_offset = max(self.confirmed_offset, offset)
        elif offset < 0 and self._pending[offset:]:
            # The last -offset updates are kept; everything before them is forgotten.
            self.confirmed_offset = max(self.confirmed_offset, self._pending[offset:][0]["update_id"])
        # Below the confirmed offset an update is gone for good, whatever later calls ask for.
        self._pending = [u for u in self._pending if u["update_id"] >= self.confirmed_offset]
        if "allowed_updates" in p:
            self._allowed = set(p["allowed_updates"] or ()) or None  # Telegram remembers the last list
        limit = min(max(int(p.get("limit") or 100), 1), 100)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(p.get("timeout") or 0)
        while True:
            pushed = self._pushed
            ready = [u for u in self._pending if self._is_allowed(u)][:limit]
            if ready or loop.time() >= deadline:
                return ready
            try:
                async with asyncio.timeout_at(deadline):
                    await pushed.wait()
            except TimeoutError:
                pass

    def _is_allowed(self, update: JSON) -> bool:
        kind = next((k for k in update if k != "update_id"), None)
        if kind is None:  # a malformed update pushed with push_raw: nothing to filter it by
            return True
        return kind in self._allowed if self._allowed is not None else kind not in _OPT_IN_UPDATES

    def _chat(self, p: JSON, *, sending: bool = True) -> JSON:
        """A pushed chat, or one made up from the id's sign; "@channel" names are not supported."""
        chat_id = p.get("chat_id")
        if not isinstance(chat_id, int):
            raise _ApiError(400, "Bad Request: chat not found")
        chat = self._chats.get(chat_id) or (
            {"id": chat_id, "type": "private", "first_name": "User"} if chat_id > 0
            else {"id": chat_id, "type": "supergroup", "title": "Group"})
        if sending and chat["id"] in self.blocked:
            raise _ApiError(403, "Forbidden: bot was blocked by the user")
        return chat

    def _render(self, p: JSON) -> tuple[str, list[JSON]]:
        text, mode = str(p.get("text") or ""), p.get("parse_mode")
        visible, entities = text, list[JSON]()
        if isinstance(mode, str) and mode.lower() == "html":
            try:
                visible, entities = parse_html(text)
            except EntityParseError as exc:
                raise _ApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        elif mode not in (None, "", "Markdown", "MarkdownV2"):  # Markdown is passed through unparsed
            raise _ApiError(400, "Bad Request: unsupported parse_mode")
        if not visible.strip():
            raise _ApiError(400, "Bad Request: message text is empty")
        if len(visible) > MAX_TEXT:
            raise _ApiError(400, "Bad Request: message is too long")
        return visible, entities

    def _record(self, msg: JSON, p: JSON, reply_to: int | None) -> SentMessage:
        return SentMessage(msg["chat"]["id"], str(p.get("text")), msg["text"], p.get("parse_mode"),
                           msg.get("message_thread_id"), reply_to, msg["message_id"], time.monotonic())

    async def _send_message(self, p: JSON) -> JSON:
        chat = self._chat(p)
        visible, entities = self._render(p)
        reply = p.get("reply_parameters")
        reply = reply if isinstance(reply, dict) else {"message_id": p.get("reply_to_message_id"),
                                                       "allow_sending_without_reply":
                                                       p.get("allow_sending_without_reply")}
        reply_to, target = reply.get("message_id"), None
        if reply_to is not None:
            target = self._messages.get((chat["id"], int(reply_to)))
            if target is None and not reply.get("allow_sending_without_reply"):
                raise _ApiError(400, "Bad Request: message to be replied not found")
        msg: JSON = {"message_id": self.next_message_id(chat["id"]), "date": int(time.time()), "chat": chat,
                     "from": self.bot_user, "text": visible}
        if entities:
            msg["entities"] = entities
        if p.get("message_thread_id") is not None:
            msg["message_thread_id"] = p["message_thread_id"]
            if chat.get("is_forum"):
                msg["is_topic_message"] = True
        if target is not None:
            msg["reply_to_message"] = {k: v for k, v in target.items() if k != "reply_to_message"}
        self._messages[(chat["id"], msg["message_id"])] = msg
        self.sent.append(self._record(msg, p, reply_to))
        return msg

    def _own_message(self, p: JSON, doing: str, done: str) -> tuple[JSON, JSON]:
        """The chat and the bot's own message `p` names, as editMessageText and deleteMessage
        find it (`doing`, `done`: "edit", "edited" or "delete", "deleted", as Telegram words its
        refusals)."""
        chat = self._chat(p, sending=False)
        old = self._messages.get((chat["id"], int(p.get("message_id") or 0)))
        if old is None:
            raise _ApiError(400, f"Bad Request: message to {doing} not found")
        if old["from"]["id"] != self.bot_user["id"]:
            raise _ApiError(400, f"Bad Request: message can't be {done}")
        return chat, old

    async def _edit_message_text(self, p: JSON) -> JSON:
        chat, old = self._own_message(p, "edit", "edited")
        visible, entities = self._render(p)
        if (visible, entities) == (old.get("text"), old.get("entities", [])):
            raise _ApiError(400, "Bad Request: message is not modified: specified new message content and "
                                 "reply markup are exactly the same as a current content and reply markup "
                                 "of the message")
        msg = {k: v for k, v in old.items() if k != "entities"}
        msg |= {"text": visible, "edit_date": int(time.time())}
        if entities:
            msg["entities"] = entities
        self._messages[(chat["id"], msg["message_id"])] = msg
        self.edits.append(self._record(msg, p, None))
        return msg

    async def _edit_reply_markup(self, p: JSON) -> JSON:
        """editMessageReplyMarkup: the bot's own message only; the same markup again (none on a
        message without one) is refused as not modified, as Telegram does."""
        chat, old = self._own_message(p, "edit", "edited")
        markup = p.get("reply_markup") or None
        if markup == old.get("reply_markup"):
            raise _ApiError(400, "Bad Request: message is not modified: specified new message content and "
                                 "reply markup are exactly the same as a current content and reply markup "
                                 "of the message")
        msg = {k: v for k, v in old.items() if k != "reply_markup"} | {"edit_date": int(time.time())}
        if markup is not None:
            msg["reply_markup"] = markup
        self._messages[(chat["id"], msg["message_id"])] = msg
        self.edits.append(self._record(msg, p, None))
        return msg

    async def _delete_message(self, p: JSON) -> bool:
        """deleteMessage: a bot deletes its own messages in any chat (others' only as an admin,
        which this bot never is); a second delete finds nothing."""
        chat, old = self._own_message(p, "delete", "deleted")
        del self._messages[(chat["id"], old["message_id"])]
        self.deleted.append((chat["id"], old["message_id"]))
        return True

    async def _send_message_draft(self, p: JSON) -> bool:
        """Bot API 10.0: a private chat's draft; empty text shows "Thinking…"; nothing is stored."""
        chat = self._chat(p)
        draft_id = p.get("draft_id")
        if not isinstance(draft_id, int) or isinstance(draft_id, bool) or draft_id == 0:
            raise _ApiError(400, "Bad Request: invalid draft_id specified")
        if chat["type"] != "private":
            raise _ApiError(400, "Bad Request: TEXTDRAFT_PEER_INVALID")
        if chat["id"] in self.draft_refusals:
            raise _ApiError(400, self.draft_refusals[chat["id"]])
        visible = ""
        if p.get("text"):
            visible, _ = self._render(p)
        self.drafts.append(Draft(chat["id"], draft_id, visible, p.get("message_thread_id"), time.monotonic()))
        return True

    async def _send_chat_action(self, p: JSON) -> bool:
        self._chat(p)
        if p.get("action") not in _CHAT_ACTIONS:
            raise _ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    async def _get_file(self, p: JSON) -> JSON:
        found = self.files.get(str(p.get("file_id") or ""))
        if found is None:
            raise _ApiError(400, "Bad Request: invalid file_id")
        unique, path, data = found
        if len(data) > MAX_DOWNLOAD:
            raise _ApiError(400, "Bad Request: file is too big")
        return {"file_id": p["file_id"], "file_unique_id": unique, "file_size": len(data), "file_path": path}

    async def _download_for(self, request: web.Request) -> web.StreamResponse:
        return await self._bots.get(request.match_info["token"], self)._download(request)

    async def _download(self, request: web.Request) -> web.StreamResponse:
        """GET /file/bot<token>/<file_path>: the file's bytes, as api.telegram.org serves them."""
        path = request.match_info["path"]
        call = Call("file", {"path": path}, time.monotonic())
        self.calls.append(call)
        if request.match_info["token"] != self.token:
            return _error(call, 401, "Unauthorized")
        fault = self._take_fault("file", None)
        if fault is not None and isinstance(fault.body, str):
            return _raw(call, fault.status, fault.body)
        if fault is not None:
            return _error(call, fault.status, fault.description)
        data = next((d for _, p, d in self.files.values() if p == path), None)
        if data is None:
            return _error(call, 404, "Not Found")
        self.downloads.append(path)
        return web.Response(body=data, content_type="application/octet-stream")

    @staticmethod
    def _commands_key(p: JSON) -> tuple[str, str]:
        scope = p.get("scope") or {"type": "default"}
        return json.dumps(scope, sort_keys=True), str(p.get("language_code") or "")

    async def _set_my_commands(self, p: JSON) -> bool:
        commands = p.get("commands")
        if not isinstance(commands, list) or not all(
            re.fullmatch(r"[a-z0-9_]{1,32}", str(c.get("command"))) for c in commands
        ):
            raise _ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
        self.commands[self._commands_key(p)] = commands
        return True

    async def _get_my_commands(self, p: JSON) -> list[JSON]:
        return self.commands.get(self._commands_key(p), [])


def _decode_value(key: str, value: Any) -> Any:
    """PTB JSON-encodes every non-string value; uploads arrive as multipart file fields."""
    if not isinstance(value, str):
        return value.file.read() if isinstance(value, web.FileField) else value
    if key in _STRING_PARAMS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _sequence(chat_id: int) -> int:
    """Whose message ids a chat's are: its own (a supergroup or channel, -100…) or the bot's one
    sequence across private chats and basic groups (0)."""
    return chat_id if str(chat_id).startswith("-100") else 0


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _raw(call: Call, status: int, text: str) -> web.Response:
    """A scripted answer that is no JSON at all (an HTML or plain-text error page)."""
    call.failed = status >= 300
    return web.Response(text=text, status=status)


def _error(call: Call, status: int, description: str, parameters: JSON | None = None) -> web.Response:
    call.failed = True
    body: JSON = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return web.json_response(body, status=status)
