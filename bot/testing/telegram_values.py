"""What the Telegram stand-in records (calls, sent messages, drafts) and builds: updates in plain
Bot API JSON (users, chats, messages, entities) that `telegram.Update.de_json` reads."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, TypeAlias

from aiohttp import web

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


def utf16_len(text: str) -> int:
    """Telegram offsets and lengths count UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2



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
    return [{"type": "bot_command", "offset": 0, "length": utf16_len(text.split(maxsplit=1)[0])}]


def mention_entities(text: str, username: str) -> list[JSON]:
    """A mention entity for every "@username" in text."""
    pattern = re.compile(rf"(?<!\w)@{re.escape(username.lstrip('@'))}\b", re.IGNORECASE)
    return [{"type": "mention", "offset": utf16_len(text[: m.start()]), "length": utf16_len(m.group())}
            for m in pattern.finditer(text)]


# -- HTML parse mode, after tdlib's parse_html (td/telegram/MessageEntity.cpp) ------------------------


_Handler: TypeAlias = Callable[[JSON], Coroutine[Any, Any, Any]]


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
