"""Replies as Matrix message contents: the model's Markdown as the plain `body`, rendered to
`org.matrix.custom.html` beside it, cut into events, placed in their thread, sent with a
transaction id a resend repeats.

markdown-it-py renders CommonMark with tables and strikethrough; raw HTML in the model's text is
escaped, never passed on, and links other than http(s)/mailto are dropped by markdown-it's own
validation. The homeserver keeps the first event sent with a transaction id (per access token)
and answers a resend of it with the same event id, so a chunk resent after a crash is not posted
twice.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from markdown_it import MarkdownIt

from bot.core.chunking import split_message
from bot.core.messages import OutboundMessage

# An event may be 65 536 bytes of JSON: the body and its HTML, escaped, stay well inside it.
CHUNK_LIMIT = 12_000

_MD = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


def matrix_chunks(text: str) -> list[str]:
    return split_message(text, CHUNK_LIMIT)


def message_content(markdown: str, *, thread_root: str | None, reply_to: str | None) -> dict[str, Any]:
    """One chunk's `m.room.message` content: in `thread_root`'s thread when set, answering
    `reply_to` (`m.in_reply_to`) when set; it mentions nobody (`m.mentions` empty), so a name
    the model writes pings no one."""
    content: dict[str, Any] = {
        "msgtype": "m.text", "body": markdown,
        "format": "org.matrix.custom.html", "formatted_body": _MD.render(markdown).strip(),
        "m.mentions": {},
    }
    if thread_root is not None:
        content["m.relates_to"] = {
            "rel_type": "m.thread", "event_id": thread_root,
            # Clients without threads show it as a reply: to the message answered, else the root.
            "is_falling_back": reply_to is None,
            "m.in_reply_to": {"event_id": reply_to or thread_root},
        }
    elif reply_to is not None:
        content["m.relates_to"] = {"m.in_reply_to": {"event_id": reply_to}}
    return content


def edit_content(event_id: str, markdown: str) -> dict[str, Any]:
    """An `m.replace` edit of the bot's message `event_id` to `markdown` (the whole text, in
    `m.new_content`; clients without edits show the "* "-marked fallback beside it)."""
    new = message_content(markdown, thread_root=None, reply_to=None)
    return {
        "msgtype": "m.text", "body": f"* {markdown}",
        "format": "org.matrix.custom.html", "formatted_body": f"* {new['formatted_body']}",
        "m.mentions": {}, "m.new_content": new,
        "m.relates_to": {"rel_type": "m.replace", "event_id": event_id},
    }


def transaction_id(delivery_key: str | None, room_id: str, index: int, chunk: str) -> str:
    """The same id for the same chunk of the same reply, whenever it is sent; the room and the
    chunk's text go in too, so a reply that reuses a stored id (a new database) still gets ids of
    its own. A one-off notice (no delivery key) gets a fresh one."""
    if delivery_key is None:
        return f"sb-{uuid.uuid4().hex}"
    seed = "\x00".join((delivery_key, room_id, str(index), chunk))
    return "sb-" + hashlib.sha256(seed.encode()).hexdigest()[:40]


def chunk_event(message: OutboundMessage, room_id: str, index: int, chunk: str) -> tuple[dict[str, Any], str]:
    """One chunk's content and transaction id: the first chunk of a streamed reply is the final
    edit of its preview message (the whole chunk in `m.new_content`), any other a message of its
    own, in the thread, the first answering `reply_to_id`. The same on every resend."""
    if index == 0 and message.preview_id is not None:
        seed = f"edit\x00{message.preview_id}\x00{chunk}"
        return (edit_content(message.preview_id, chunk),
                transaction_id(message.delivery_key, room_id, index, seed))
    content = message_content(chunk, thread_root=message.chat.thread_id,
                              reply_to=message.reply_to_id if index == 0 else None)
    return content, transaction_id(message.delivery_key, room_id, index, chunk)
