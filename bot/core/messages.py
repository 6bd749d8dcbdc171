"""The normalised message shapes every channel and the core exchange: pure values, no library objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from bot.core.media import Media
from bot.core.session_key import SessionKey
from bot.core.session_key import parse as parse_session_key

Role = Literal["user", "assistant"]
# The provider of sessions between agents: `agent:<to>:agent:direct:<from>`.
AGENT_PROVIDER = "agent"
Origin = Literal["interactive", "scheduled"]


@dataclass(frozen=True, slots=True)
class ChatRef:
    """Where to send: a provider's chat, and optionally a thread or forum topic inside it."""

    provider: str
    chat_id: str
    thread_id: str | None = None


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """One platform message, normalised by its channel adapter."""

    session_key: SessionKey
    chat: ChatRef
    sender_id: str
    sender_name: str
    text: str
    provider_message_id: str | None = None
    reply_to_id: str | None = None
    # Groups store every message they see but only some (mentions, replies, commands) start a turn.
    starts_turn: bool = True
    sent_at: float | None = None
    # A chat command (`reset` for "/reset"), answered before the queue and not stored.
    command: str | None = None
    # Pictures and files (kept on disk by hash) or placeholders for what we cannot read.
    media: tuple[Media, ...] = ()
    # The Discord guild a message was written in ([[bindings]] may route a guild to an agent).
    guild_id: str | None = None


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    """A reply or delivery for a channel to send; the channel splits it as its platform needs."""

    chat: ChatRef
    text: str
    reply_to_id: str | None = None
    # A stable name for this delivery (the stored reply's), from which platforms that can
    # deduplicate a resend (Discord's nonce) derive a key per chunk; None for one-off notices.
    delivery_key: str | None = None
    # Chunks already delivered before a restart: sending resumes after them.
    skip_chunks: int = 0
    # A message already showing this reply while it was written (a streamed preview): the first
    # chunk is edited into it instead of sent anew, so the reply is never posted twice.
    preview_id: str | None = None


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message as the store holds it; `id` grows with arrival order within the database."""

    id: int
    session_key: str
    role: Role
    origin: Origin
    text: str
    created_at: float
    sender_id: str | None = None
    sender_name: str | None = None
    provider_message_id: str | None = None
    reply_to_id: str | None = None
    actions: tuple[str, ...] = field(default_factory=tuple)
    job_id: str | None = None
    token_estimate: int = 0
    # Why a request was never answered: "late" (too old when the daemon could), "stopped" (/stop).
    unanswered: str | None = None
    media: tuple[Media, ...] = ()


def inbound_of(message: StoredMessage, chat: ChatRef) -> InboundMessage:
    """A stored request as its channel handed it in (a restart, or another instance, runs it)."""
    return InboundMessage(
        session_key=parse_session_key(message.session_key), chat=chat,
        sender_id=message.sender_id or "", sender_name=message.sender_name or "", text=message.text,
        provider_message_id=message.provider_message_id, reply_to_id=message.reply_to_id,
        sent_at=message.created_at, media=message.media,
    )
