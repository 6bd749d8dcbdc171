"""What the Discord stand-in records and builds: users, files, sent and edited messages, the
requests it saw, and the gateway sessions and guilds it keeps."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, TypeVar

from aiohttp import web

Json = dict[str, Any]
T = TypeVar("T")
API = "/api/v10"
BODY: web.RequestKey[Any] = web.RequestKey("body", object)  # parsed once by the middleware
DISCORD_EPOCH_MS = 1_420_070_400_000
GUILD_MEMBERS, GUILD_PRESENCES, MESSAGE_CONTENT = 1 << 1, 1 << 8, 1 << 15
# Discord refuses a create with an already used nonce for "a few minutes" (enforce_nonce).
NONCE_WINDOW = 300.0
# Message edits: 5 per 5 s per channel (Discord's documented per-route limit for PATCH messages).
EDIT_LIMIT, EDIT_WINDOW = 5, 5.0


def _invalid(name: str, code: str, message: str) -> Json:
    """Discord's 50035 body naming the offending field."""
    return {"code": 50035, "errors": {name: {"_errors": [{"code": code, "message": message}]}},
            "message": "Invalid Form Body"}


_TOO_LONG = _invalid("content", "BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length.")


def file(filename: str, data: bytes, content_type: str | None = None, **fields: Any) -> Json:
    """An attachment to post with `message_create(attachments=[...])`: width, height for images;
    duration_secs and waveform (with flags 8192) for a voice message."""
    return {"filename": filename, "data": data, "content_type": content_type, **fields}


def user(id: int, username: str, bot: bool = False, global_name: str | None = None) -> Json:
    """A user object shaped as Discord sends it."""
    return {
        "id": str(id), "username": username, "discriminator": "0", "global_name": global_name,
        "avatar": None, "bot": bot, "public_flags": 0,
    }


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # Exactly "application/json": discord.py treats "application/json; charset=utf-8" as text.
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    return web.Response(body=json.dumps(body).encode(), status=status, headers=all_headers)


def _error(status: int, code: int = 0, message: str | None = None) -> web.Response:
    default = "Missing Permissions" if status == 403 else f"{status}: {HTTPStatus(status).phrase}"
    return _json({"message": message or default, "code": code}, status)


@dataclass(frozen=True)
class SentMessage:
    """A message the bot created through POST /channels/{id}/messages."""

    id: int
    channel_id: int
    content: str | None
    message_reference: Json | None
    allowed_mentions: Json | None
    embeds: list[Json]
    time: float  # time.monotonic()
    nonce: str | None = None


@dataclass(frozen=True)
class EditedMessage:
    """An edit the bot made through PATCH /channels/{id}/messages/{id}, as accepted."""

    id: int
    channel_id: int
    content: str | None
    time: float  # time.monotonic()


@dataclass(frozen=True)
class TypingCall:
    channel_id: int
    time: float


@dataclass(frozen=True)
class RecordedRequest:
    """One REST call as answered, failures included."""

    method: str
    path: str  # without the /api/v10 prefix
    body: Any
    status: int  # 0: carried out, but the connection was dropped unanswered (lose_next_response)
    time: float
    query: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status >= 400


@dataclass
class _Fault:
    route: str
    status: int
    retry_after: float | None
    is_global: bool
    code: int | None
    message: str | None
    times: int


@dataclass
class _Loss:
    route: str
    times: int


@dataclass
class _Guild:
    id: int
    name: str
    channels: list[Json]
    threads: list[Json]
    roles: list[Json]
    members: dict[int, tuple[Json, list[int]]]  # user id -> (user, role ids)


class _Connection:
    """One gateway socket; every frame goes through `outbox` so sends keep their order."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.outbox: asyncio.Queue[Json | tuple[int, str]] = asyncio.Queue()
        self.closing = False
        self.done = asyncio.Event()
        self.heard = 0  # the highest sequence a heartbeat of the client carried
        self.beat = asyncio.Event()  # set at each heartbeat

    def send(self, payload: Json) -> None:
        self.outbox.put_nowait(payload)

    def close(self, code: int, reason: str = "") -> None:
        self.outbox.put_nowait((code, reason))


@dataclass
class _Session:
    """One gateway session: the events of one shard (shard 0 of 1 when unsharded), logged so that a
    RESUME replays what its socket missed."""

    id: str
    shard: tuple[int, int]  # (shard id, shard count)
    intents: int
    live: _Connection | None
    resumable: bool = True
    seq: int = 0
    log: list[Json] = field(default_factory=list)

    def carries(self, guild_id: int | None) -> bool:
        """Discord's rule: a guild's events go to shard (guild_id >> 22) % count, DMs to shard 0."""
        shard_id, count = self.shard
        return shard_id == (0 if guild_id is None else (guild_id >> 22) % count)

    def dispatch(self, event: str, data: Json) -> None:
        """Log an event of the session; deliver it now if its socket is live, else on RESUME."""
        self.seq += 1
        payload = {"op": 0, "t": event, "s": self.seq, "d": data}
        self.log.append(payload)
        if self.live is not None:
            self.live.send(payload)


def _valid_shard(shard: Any) -> tuple[int, int] | None:
    """IDENTIFY's `shard` as (id, count) when Discord would accept it."""
    if not (isinstance(shard, list) and len(shard) == 2 and all(type(n) is int for n in shard)):
        return None
    shard_id, count = shard
    return (shard_id, count) if 0 <= shard_id < count else None


def _without_gateway_fields(msg: Json) -> Json:
    # `guild_id`, `member` and the mentions' `member` are extra fields of the gateway's MESSAGE_CREATE.
    out = {k: v for k, v in msg.items() if k not in ("guild_id", "member")}
    out["mentions"] = [{k: v for k, v in m.items() if k != "member"} for m in msg.get("mentions", ())]
    if isinstance(out.get("referenced_message"), dict):
        out["referenced_message"] = _without_gateway_fields(out["referenced_message"])
    return out


def _ratelimit_headers(bucket: str, *, remaining: int, reset_after: float, scope: str = "user") -> Json:
    return {
        "X-RateLimit-Bucket": bucket,
        "X-RateLimit-Limit": "5",
        "X-RateLimit-Remaining": str(remaining),
        "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
        "X-RateLimit-Reset-After": f"{reset_after:.3f}",
        "X-RateLimit-Scope": scope,
    }
