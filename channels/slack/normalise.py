"""Slack events into our shape: the plain facts of a `message` or `app_mention` event, who may be
heard, sessions and commands; pure functions over the event's JSON, testable without a socket.

Sessions: a DM is `…:slack:direct:<userId>`, a channel (public, private or a group DM)
`…:slack:channel:<channelId>`, and a thread under either `…:thread:<thread_ts>`, the ts of the
thread's first message. A ChatRef's `chat_id` is the conversation id (D…, C…, G…) and its
`thread_id` the thread_ts, so a reply goes into the thread it answers. A message's id is its `ts`,
unique within its conversation: the store drops a second delivery of it (Slack's redelivered
envelope, or the `app_mention` that comes beside a channel's `message` event).

In channels every message the bot sees is stored; one starts a turn when it mentions the bot
(`<@Ubot>`, or it came as `app_mention`), or the channel needs no mention. Edits, deletions, joins
and other subtypes are ignored; files shared with a message (`file_share`) come as `SlackFile`s.
Commands are `/name` at the start of a message or right after a
leading mention of the bot ("@Switchboard /status"), as on Discord.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from bot.config import SlackConfig
from bot.core.messages import ChatRef, InboundMessage
from bot.core.session_key import SessionKey, build
from bot.intake.access import allows
from bot.intake.commands import is_known, parse_command

PLATFORM = "slack"  # the default app's channel name; extra accounts are "slack.<name>"

Verdict = Literal["accept", "refuse", "ignore", "pair"]
# Subtypes that are someone writing: a plain message has none ("bot_message": a legacy bot's post).
_WRITTEN = frozenset({None, "thread_broadcast", "file_share", "me_message", "bot_message"})
_LEADING_MENTION = re.compile(r"\s*<@([A-Z0-9]+)(?:\|[^>]*)?>\s*")
_USER_MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|([^>]*))?>")
_CHANNEL_REF = re.compile(r"<#([A-Z0-9]+)(?:\|([^>]*))?>")
_SPECIAL = re.compile(r"<!(\w+)(?:\^[^|>]*)?(?:\|([^>]*))?>")
_LINK = re.compile(r"<((?:https?|mailto):[^|>]+)(?:\|([^>]*))?>")


@dataclass(frozen=True, slots=True)
class SlackMessage:
    """The plain facts of a message event that gating and normalisation read."""

    ts: str
    channel: str
    user: str
    text: str  # Slack's raw text, with <@U…> mentions and &amp; entities
    direct: bool
    thread_ts: str | None = None  # set on a reply in a thread (never on the thread's first message)
    is_bot: bool = False
    mentioned: bool = False  # it came as app_mention
    files: tuple[SlackFile, ...] = ()


@dataclass(frozen=True, slots=True)
class SlackFile:
    """A file shared with a message, as the event describes it (`url` None: ask files.info)."""

    id: str
    name: str | None = None
    mime: str | None = None
    size: int | None = None
    url: str | None = None  # url_private: fetched with the bot token
    width: int | None = None
    height: int | None = None
    kind: str | None = None  # Slack's `subtype` of the file ("slack_audio", "slack_video"…)


def read_file(found: dict[str, Any]) -> SlackFile | None:
    """One entry of a message's `files`; None for a file removed or without an id."""
    file_id = found.get("id")
    if not isinstance(file_id, str) or found.get("mode") == "tombstone":
        return None

    def number(key: str) -> int | None:
        value = found.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    url = found.get("url_private_download") or found.get("url_private")
    kind = found.get("subtype")
    return SlackFile(
        id=file_id, name=found.get("name") or found.get("title"), mime=found.get("mimetype") or None,
        size=number("size"), url=url if isinstance(url, str) else None, width=number("original_w"),
        height=number("original_h"), kind=kind if isinstance(kind, str) else None,
    )


def read_event(event: dict[str, Any]) -> SlackMessage | None:
    """The facts of someone's message; None for edits, deletions, joins and what names nobody."""
    if event.get("subtype") not in _WRITTEN or event.get("hidden"):
        return None
    ts, channel = event.get("ts"), event.get("channel")
    user = event.get("user") or event.get("bot_id")
    if not isinstance(ts, str) or not isinstance(channel, str) or not isinstance(user, str):
        return None
    thread_ts = event.get("thread_ts")
    kind = event.get("channel_type")
    return SlackMessage(
        ts=ts, channel=channel, user=user, text=str(event.get("text") or ""),
        direct=kind == "im" or (kind is None and channel.startswith("D")),
        thread_ts=thread_ts if isinstance(thread_ts, str) and thread_ts != ts else None,
        is_bot=bool(event.get("bot_id")) or event.get("subtype") == "bot_message",
        mentioned=event.get("type") == "app_mention",
        files=tuple(f for f in map(read_file, event.get("files") or ()) if f is not None),
    )


def admit(msg: SlackMessage, config: SlackConfig, *, bot_user_id: str) -> Verdict:
    """Whether a message may be stored and answered; a refused DM may get one polite line."""
    if msg.user == bot_user_id:
        return "ignore"
    if msg.direct:
        if allows(config.dm_policy, config.allow_from, msg.user):
            return "accept"
        if msg.is_bot:
            return "ignore"
        return "pair" if config.dm_policy == "pairing" else "refuse"
    if config.channel_policy == "disabled":
        return "ignore"
    if config.channel_policy == "allowlist" and msg.channel not in config.channels:
        return "ignore"
    return "accept"


def session_key_of(msg: SlackMessage, agent_id: str, provider: str = PLATFORM) -> SessionKey:
    if msg.direct:
        return build(agent_id, provider, "direct", msg.user, thread=msg.thread_ts)
    return build(agent_id, provider, "channel", msg.channel, thread=msg.thread_ts)


def mentions_bot(msg: SlackMessage, bot_user_id: str) -> bool:
    return msg.mentioned or any(m.group(1) == bot_user_id for m in _USER_MENTION.finditer(msg.text))


def command_of(msg: SlackMessage, *, bot_user_id: str) -> str | None:
    """The command in `/name args` or `<@bot> /name args` (in channels only ours when bare)."""
    text = msg.text.lstrip()
    mention = _LEADING_MENTION.match(text)
    explicit = mention is not None and mention.group(1) == bot_user_id
    if mention is not None:
        if not explicit:
            return None
        text = text[mention.end():]
    name = parse_command(text)
    if name is None:
        return None
    return name if msg.direct or explicit or is_known(name) else None


def readable(text: str, names: dict[str, str]) -> str:
    """Slack's text as a person reads it: `<@U1>` as @name, `<#C1|general>` as #general,
    `<https://x|label>` as "label (https://x)", `<!here>` as @here, entities decoded."""
    text = _USER_MENTION.sub(lambda m: "@" + (names.get(m.group(1)) or m.group(2) or m.group(1)), text)
    text = _CHANNEL_REF.sub(lambda m: "#" + (m.group(2) or m.group(1)), text)
    text = _SPECIAL.sub(lambda m: "@" + (m.group(2) or m.group(1)).lstrip("@"), text)

    def link(m: re.Match[str]) -> str:
        url, label = m.group(1), m.group(2)
        return url if not label or label == url else f"{label} ({url})"

    text = _LINK.sub(link, text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def mentioned_users(text: str) -> list[str]:
    """The user ids `<@U…>` in a message's raw text, for looking up their names."""
    return [m.group(1) for m in _USER_MENTION.finditer(text)]


def to_inbound(
    msg: SlackMessage, *, agent_id: str, bot_user_id: str, config: SlackConfig, sender_name: str,
    names: dict[str, str], provider: str = PLATFORM,
) -> InboundMessage | None:
    """Normalise an admitted message (its files are taken in by `channels.slack.media`); None
    when it has neither text nor files."""
    text = readable(msg.text, names)
    if not text.strip() and not msg.files:
        return None
    key = session_key_of(msg, agent_id, provider)
    may_start = not msg.is_bot or config.allow_bots
    addressed = msg.direct or mentions_bot(msg, bot_user_id) or not config.requires_mention(key)
    return InboundMessage(
        session_key=key,
        chat=ChatRef(provider, msg.channel, msg.thread_ts),
        sender_id=msg.user,
        sender_name=sender_name,
        text=text,
        provider_message_id=msg.ts,
        starts_turn=addressed and may_start,
        sent_at=float(msg.ts),
        command=command_of(msg, bot_user_id=bot_user_id) if may_start else None,
    )
