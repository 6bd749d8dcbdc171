"""What a tool may read: the one privacy rule every tool that reads stored words goes through.

The rule: a tool running in session S reads only what every participant of S may already see. A
group, forum topic or channel session reads itself alone. A private chat reads itself and, only
where `[tools] search_scope = "user"` is set, the asking person's own messages in their other chats
with this agent on this platform: never other people's words there, nor the agent's replies to
them. A sender that is a chat (an anonymous group admin, a channel posting: `chat:<id>`) and an
agent writing to another agent are no person: they read their session alone and own no notes.
The model is not a security boundary: what it is told to ask for does not widen any of this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bot.core.messages import AGENT_PROVIDER
from bot.tools.base import ToolContext

# `[tools] search_scope`: "session" (the chat alone) or "user" (a private chat also reads the
# asking person's own messages elsewhere).
SearchScope = Literal["session", "user"]

# How channels spell a sender that is a chat speaking, not a person (Telegram's `sender_chat`).
CHAT_SENDER_PREFIX = "chat:"


def is_person(provider: str, sender_id: str) -> bool:
    """Whether a sender is one person, who may own notes and a history across chats."""
    return not sender_id.startswith(CHAT_SENDER_PREFIX) and provider != AGENT_PROVIDER


@dataclass(frozen=True, slots=True)
class ReadScope:
    """What one tool call may read: the asker's part of `session_key` (their own messages and the
    replies answering them; all of it in a private chat, where they are its only participant) and,
    when `elsewhere`, their own messages in their other sessions of the same agent and platform."""

    session_key: str
    user_id: str
    private: bool
    elsewhere: bool


def read_scope(context: ToolContext, search_scope: SearchScope) -> ReadScope:
    """The rule above, for the session and person a tool call runs for."""
    key = context.session_key
    private = key.is_direct and is_person(context.chat.provider, context.user_id)
    return ReadScope(
        session_key=str(key), user_id=context.user_id, private=private,
        elsewhere=private and search_scope == "user",
    )
