"""What the Slack stand-in records and builds: users, message timestamps, the Web API calls it saw,
the messages posted and edited, the method-to-scope table, the rate tiers and the token a call
carries."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]

# The scopes a bot token of the channel's app manifest has (docs/channels.md lists the same).
BOT_SCOPES = frozenset({
    "app_mentions:read", "channels:history", "groups:history", "im:history", "mpim:history",
    "chat:write", "users:read", "files:read",
})
# Methods the stand-in answers: the scope a bot token needs for each (None: any valid token),
# "history" meaning the one of the conversation's kind (channels:, groups:, im: or mpim:history).
METHOD_SCOPES: dict[str, str | None] = {
    "auth.test": None,
    "chat.postMessage": "chat:write",
    "chat.update": "chat:write",
    "chat.delete": "chat:write",
    "conversations.history": "history",
    "conversations.replies": "history",
    "users.info": "users:read",
    "chat.startStream": "chat:write",
    "chat.appendStream": "chat:write",
    "chat.stopStream": "chat:write",
    "assistant.threads.setStatus": "assistant:write",
    "files.info": "files:read",
}
# Methods Slack refuses (`not_in_channel`) in a channel the bot is no member of.
MEMBERS_ONLY = frozenset({"chat.postMessage", "chat.startStream", "conversations.history",
                          "conversations.replies"})
# Slack's rate tiers per method (calls a minute, per workspace); chat.postMessage is "special":
# about one message a second per channel.
TIERS: dict[str, int] = {
    "auth.test": 4, "chat.update": 3, "chat.delete": 3, "conversations.history": 3,
    "conversations.replies": 3, "users.info": 4, "apps.connections.open": 1,
    # The stream methods' tiers as slack-morphism, a maintained client, paces them:
    # starting and stopping a stream tier 2, appending tier 4.
    "chat.startStream": 2, "chat.appendStream": 4, "chat.stopStream": 2,
    "assistant.threads.setStatus": 3, "files.info": 4,
}
TIER_PER_MINUTE = {1: 1, 2: 20, 3: 50, 4: 100}
# Slack refuses a text longer than this (msg_too_long); it truncates display after 4 000.
MAX_TEXT = 40_000
MAX_STREAM_TEXT = 12_000  # markdown_text per stream call


def user(user_id: str, name: str, real_name: str | None = None, *, is_bot: bool = False) -> Json:
    """A user object as users.info returns it."""
    shown = real_name or name
    return {
        "id": user_id, "team_id": "", "name": name, "real_name": shown, "deleted": False,
        "is_bot": is_bot, "is_app_user": False,
        "profile": {"real_name": shown, "display_name": name, "display_name_normalized": name},
    }


def stream_text(args: Json) -> str | None:
    """The Markdown a stream call adds: `markdown_text` and any markdown_text chunks; None past
    Slack's 12 000 characters a call."""
    text = str(args.get("markdown_text") or "")
    for chunk in args.get("chunks") or ():
        if isinstance(chunk, dict) and chunk.get("type") == "markdown_text":
            text += str(chunk.get("text") or "")
    return None if len(text) > MAX_STREAM_TEXT else text


def shown(message: Json) -> str:
    """What a person reads of a message: its blocks' text where it has blocks, else its text."""
    blocks = message.get("blocks") or []
    texts = [b.get("text") for b in blocks if isinstance(b, dict)]
    parts = [t if isinstance(t, str) else (t or {}).get("text", "") for t in texts]
    return "".join(parts) if blocks else str(message.get("text") or "")


def history_scope(channel: str) -> str:
    """The history scope a conversation needs, by the kind its id says (D, G or C)."""
    if channel.startswith("D"):
        return "im:history"
    if channel.startswith("G"):
        return "groups:history"
    return "channels:history"


def channel_type(channel: str) -> str:
    """The `channel_type` of a message event in a conversation of this id."""
    return {"D": "im", "G": "group"}.get(channel[:1], "channel")


class Timestamps:
    """Slack's message ids: "1700000000.000100"-style strings, unique and increasing per channel."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}

    def next(self, channel: str) -> str:
        micros = max(int(time.time() * 1_000_000), self._last.get(channel, 0) + 1)
        self._last[channel] = micros
        return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """One Web API call: the method, its arguments (query, form or JSON merged), the token kind
    ("bot", "app" or None) and the HTTP status answered."""

    method: str
    args: Json
    token: str | None
    status: int
    error: str | None = None
    time: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, slots=True)
class PostedMessage:
    """A message the bot posted with chat.postMessage."""

    channel: str
    ts: str
    text: str
    thread_ts: str | None
    args: Json
    time: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, slots=True)
class UpdatedMessage:
    """A chat.update of one of the bot's messages."""

    channel: str
    ts: str
    text: str
    time: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class Envelope:
    """An Events API envelope of Socket Mode, and what became of it."""

    event_id: str
    payload: Json
    attempts: int = 0
    sent_at: float = 0.0
    envelope_ids: list[str] = field(default_factory=list)
    acked: bool = False

    def frame(self, envelope_id: str, reason: str) -> Json:
        """The JSON Slack sends over the socket for this attempt."""
        return {"envelope_id": envelope_id, "payload": self.payload, "type": "events_api",
                "accepts_response_payload": False, "retry_attempt": self.attempts,
                "retry_reason": reason}


def token_of(headers: Mapping[str, str], args: Json) -> str | None:
    """The token a Web API call carries: its Bearer header, else its `token` argument."""
    header = headers.get("Authorization", "")
    token = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else args.get("token")
    return str(token) if token else None


def page(messages: list[Json], args: Json, *, newest_first: bool) -> Json:
    """One page of a history method's answer: `oldest`/`latest`/`inclusive` applied, `limit`
    messages from the `cursor` on, and the cursor of the next page."""
    oldest, latest = float(args.get("oldest") or 0), float(args.get("latest") or "inf")
    inclusive = str(args.get("inclusive", "")).lower() in ("1", "true")
    limit = int(args.get("limit") or 100)

    def within(ts: float) -> bool:
        return (oldest <= ts <= latest) if inclusive else (oldest < ts < latest)

    found = [m for m in messages if within(float(m["ts"]))]
    found = found[::-1] if newest_first else found
    start = 0
    if args.get("cursor"):
        try:
            start = int(base64.b64decode(str(args["cursor"])).decode().removeprefix("next:"))
        except ValueError:
            return {"ok": False, "error": "invalid_cursor"}
    has_more = len(found) > start + limit
    cursor = base64.b64encode(f"next:{start + limit}".encode()).decode() if has_more else ""
    return {"ok": True, "messages": json.loads(json.dumps(found[start:start + limit])),
            "has_more": has_more, "response_metadata": {"next_cursor": cursor}}

