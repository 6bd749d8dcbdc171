"""Matrix events into our shape: the plain facts of an `m.room.message`, whose invites are taken,
who may be heard, sessions and commands; pure functions over the event's JSON.

Sessions: a room with the bot and one person is a direct chat, `…:matrix:direct:<@user:server>`;
any other room `…:matrix:room:<!room:server>`; a thread (`m.thread` relation) adds
`:thread:<$root>`, the event id of the thread's first message. A ChatRef's `chat_id` is the room
and its `thread_id` the thread root, so a reply goes into the thread it answers. A message's id is
its event id, unique on the homeserver: the store drops a second delivery of it.

In rooms every message the bot sees is stored; one starts a turn when it mentions the bot (its user
id or display name in the text, a matrix.to link to it, or the intentional mention `m.mentions`),
or the room needs no mention. A picture, file or audio message (`m.image`, `m.file`, `m.audio`,
`m.video`) carries its `mxc://` URL and what its `info` says (`MatrixFile`, fetched by
`channels.matrix.media`); its `body` is a caption only beside a `filename` of its own (Matrix 1.10),
else the file's name. Edits (`m.replace`) and other event types are not taken yet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from bot.config import MatrixConfig
from bot.core.messages import ChatRef, InboundMessage
from bot.core.session_key import SessionKey, build
from bot.intake.access import allows
from bot.intake.commands import is_known, parse_command

PLATFORM = "matrix"  # the default account's channel name; extra accounts are "matrix.<name>"

Verdict = Literal["accept", "refuse", "ignore", "pair"]
_TEXT_TYPES = frozenset({"m.text", "m.notice", "m.emote"})
_FILE_KINDS = {"m.image": "photo", "m.file": "document", "m.audio": "audio", "m.video": "video"}
# The quoted lines a reply carried before Matrix 1.13 dropped reply fallbacks.
_REPLY_FALLBACK = re.compile(r"\A(?:> [^\n]*\n)+\n", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class MatrixFile:
    """A picture, file, audio or video a message carries, as its `content` describes it."""

    kind: str  # "photo", "document", "audio", "voice" or "video"
    url: str  # mxc://server/media-id
    name: str | None = None
    mime: str | None = None
    size: int | None = None
    width: int | None = None
    height: int | None = None
    duration: int | None = None  # seconds


@dataclass(frozen=True, slots=True)
class MatrixMessage:
    """The plain facts of a message event that gating and normalisation read."""

    event_id: str
    room_id: str
    sender: str
    body: str
    direct: bool  # the room holds the bot and this one person
    sent_at: float
    thread_root: str | None = None
    reply_to: str | None = None
    mentions: tuple[str, ...] = ()  # m.mentions.user_ids
    formatted: str = ""  # org.matrix.custom.html, when the client sent it
    notice: bool = False  # m.notice: what bots send; never starts a turn
    file: MatrixFile | None = None


def read_event(event: dict[str, Any], room_id: str, *, direct: bool) -> MatrixMessage | None:
    """The facts of someone's text message; None for edits, other types and malformed events."""
    content = event.get("content")
    if event.get("type") != "m.room.message" or not isinstance(content, dict):
        return None
    event_id, sender, body = event.get("event_id"), event.get("sender"), content.get("body")
    if not (isinstance(event_id, str) and isinstance(sender, str) and isinstance(body, str)):
        return None
    file = file_of(content, body)
    if content.get("msgtype") not in _TEXT_TYPES and file is None:
        return None
    if file is not None:
        body = body if body != file.name else ""  # the name alone is no caption
    relates = content.get("m.relates_to")
    relates = relates if isinstance(relates, dict) else {}
    if relates.get("rel_type") == "m.replace":
        return None  # an edit: taken with streaming edits, in a later increment
    thread_root = relates.get("event_id") if relates.get("rel_type") == "m.thread" else None
    in_reply = relates.get("m.in_reply_to")
    reply_to = in_reply.get("event_id") if isinstance(in_reply, dict) else None
    if thread_root is not None and relates.get("is_falling_back"):
        reply_to = None  # a thread message's "reply" to the latest one is only for old clients
    if reply_to is not None:
        body = _REPLY_FALLBACK.sub("", body, count=1)
    mentions = content.get("m.mentions")
    users = mentions.get("user_ids") if isinstance(mentions, dict) else None
    formatted = content.get("formatted_body") if content.get("format") == "org.matrix.custom.html" else ""
    stamp = event.get("origin_server_ts")
    return MatrixMessage(
        event_id=event_id, room_id=room_id, sender=sender, body=body, direct=direct,
        sent_at=stamp / 1000 if isinstance(stamp, int | float) else 0.0,
        thread_root=thread_root if isinstance(thread_root, str) else None,
        reply_to=reply_to if isinstance(reply_to, str) else None,
        mentions=tuple(u for u in users if isinstance(u, str)) if isinstance(users, list) else (),
        formatted=formatted if isinstance(formatted, str) else "",
        notice=content.get("msgtype") == "m.notice",
        file=file,
    )


def file_of(content: dict[str, Any], body: str) -> MatrixFile | None:
    """The file of an `m.image`/`m.file`/`m.audio`/`m.video` content; None for any other, or one
    without an `mxc://` URL (an encrypted file's is under `file`, and the bot reads no encryption)."""
    kind, url = _FILE_KINDS.get(str(content.get("msgtype"))), content.get("url")
    if kind is None or not isinstance(url, str) or not url.startswith("mxc://"):
        return None
    info = content.get("info")
    info = info if isinstance(info, dict) else {}

    def number(key: str) -> int | None:
        value = info.get(key)
        return int(value) if isinstance(value, int | float) and value >= 0 else None

    if kind == "audio" and "org.matrix.msc3245.voice" in content:
        kind = "voice"
    filename = content.get("filename")
    mime = info.get("mimetype")
    duration = number("duration")  # milliseconds in Matrix
    return MatrixFile(
        kind=kind, url=url, name=filename if isinstance(filename, str) and filename else body or None,
        mime=mime.lower() if isinstance(mime, str) else None, size=number("size"),
        width=number("w"), height=number("h"),
        duration=round(duration / 1000) if duration is not None else None,
    )


def admit(msg: MatrixMessage, config: MatrixConfig, *, bot_user_id: str) -> Verdict:
    """Whether a message may be stored and answered; a refused DM may get one polite line."""
    if msg.sender == bot_user_id:
        return "ignore"
    if msg.direct:
        if allows(config.dm_policy, config.allow_from, msg.sender):
            return "accept"
        if msg.notice:
            return "ignore"
        return "pair" if config.dm_policy == "pairing" else "refuse"
    if config.room_policy == "disabled":
        return "ignore"
    if config.room_policy == "allowlist" and msg.room_id not in config.rooms:
        return "ignore"
    return "accept"


def admit_invite(inviter: str, config: MatrixConfig, *, direct: bool) -> bool:
    """Whether to join a room `inviter` invited the bot to (else the invite is declined)."""
    if config.invite_policy != "allowlist":
        return config.invite_policy == "open"
    if allows(config.dm_policy, [*config.allow_from, *config.admins], inviter):
        return True
    # Under pairing a stranger may open a direct chat: their first message gets them a code.
    return config.dm_policy == "pairing" and direct


def session_key_of(msg: MatrixMessage, agent_id: str, provider: str = PLATFORM) -> SessionKey:
    if msg.direct:
        return build(agent_id, provider, "direct", msg.sender, thread=msg.thread_root)
    return build(agent_id, provider, "room", msg.room_id, thread=msg.thread_root)


def mentions_bot(msg: MatrixMessage, bot_user_id: str, display_name: str) -> bool:
    """An intentional mention, a link to the bot's id, its id or its display name as a word."""
    if bot_user_id in msg.mentions or bot_user_id in msg.body or bot_user_id in msg.formatted:
        return True
    name = display_name.strip()
    return bool(name) and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", msg.body, re.IGNORECASE) is not None


def command_of(msg: MatrixMessage, *, bot_user_id: str, display_name: str) -> str | None:
    """The command in `/name args`, or after a leading mention ("Switchboard: /status"); in rooms
    only ours when bare."""
    text, explicit = msg.body.lstrip(), False
    for prefix in (bot_user_id, display_name):
        if prefix and text.lower().startswith(prefix.lower()):
            text, explicit = text[len(prefix):].lstrip(":, \t"), True
            break
    name = parse_command(text)
    if name is None:
        return None
    return name if msg.direct or explicit or is_known(name) else None


def to_inbound(
    msg: MatrixMessage, *, agent_id: str, bot_user_id: str, display_name: str, config: MatrixConfig,
    sender_name: str, provider: str = PLATFORM,
) -> InboundMessage | None:
    """Normalise an admitted message; None when it has no text and no file."""
    if not msg.body.strip() and msg.file is None:
        return None
    key = session_key_of(msg, agent_id, provider)
    addressed = (msg.direct or mentions_bot(msg, bot_user_id, display_name)
                 or not config.requires_mention(key))
    return InboundMessage(
        session_key=key,
        chat=ChatRef(provider, msg.room_id, msg.thread_root),
        sender_id=msg.sender,
        sender_name=sender_name,
        text=msg.body,
        provider_message_id=msg.event_id,
        reply_to_id=msg.reply_to,
        starts_turn=addressed and not msg.notice,
        sent_at=msg.sent_at or None,
        command=None if msg.notice else command_of(msg, bot_user_id=bot_user_id, display_name=display_name),
    )
