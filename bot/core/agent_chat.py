"""Conversations between agents: how their chats, sessions and message ids are spelt.

A conversation between agents A and B is two sessions, one per side: `agent:B:agent:direct:A` holds
what A wrote to B (B answers there), `agent:A:agent:direct:B` what B wrote to A. The chat of a side
is "<owner>/<peer>" ('/' never appears in an agent id), so a reply sent to the chat "B/A" is B
writing to A. What A writes from one of its chats (`message_agent`) is a conversation of its own,
the thread `…:thread:<tag of that chat>` on both sides: B answers from what was said for that chat
alone, so nothing A was told in one person's private chat reaches another chat through B (the
privacy rule of `bot.tools.scope`); a job delivering to an agent writes outside any thread. Each
message passed carries its hop in its id ("h2-…"): the id is stored with the message, so the hop
survives a restart and shows in `switchboard history` and the snapshots.
"""

from __future__ import annotations

import hashlib
import re

from bot.core.messages import AGENT_PROVIDER, ChatRef
from bot.core.session_key import SessionKey, build

_HOP = re.compile(r"^h([0-9]+)-")


def agent_chat(owner: str, peer: str, thread: str | None = None) -> ChatRef:
    """The chat of `owner`'s side of its conversation with `peer` (for the chat `thread` tags)."""
    return ChatRef(AGENT_PROVIDER, f"{owner}/{peer}", thread)


def chat_agents(chat: ChatRef) -> tuple[str, str] | None:
    """(owner, peer) of an agent chat; None for any other chat."""
    owner, sep, peer = chat.chat_id.partition("/")
    if chat.provider != AGENT_PROVIDER or not sep or not owner or not peer:
        return None
    return owner, peer


def agent_session(owner: str, peer: str, thread: str | None = None) -> SessionKey:
    """`owner`'s session with `peer`: where what `peer` writes to `owner` is stored and answered."""
    return build(owner, AGENT_PROVIDER, "direct", peer, thread=thread)


def origin_thread(origin: str) -> str:
    """The thread of the conversation an agent writes from the session `origin`: a short, stable
    name that tells nothing of the chat."""
    return hashlib.sha256(origin.encode()).hexdigest()[:16]


def hop_message_id(hop: int, name: str) -> str:
    """The id of a message passed at `hop` (the first message of an exchange is hop 1)."""
    return f"h{hop}-{name}"


def hop_of(message_id: str | None) -> int:
    """The hop a message id carries; 0 for an id that is not an agent message's (or none)."""
    match = _HOP.match(message_id or "")
    return int(match.group(1)) if match else 0
