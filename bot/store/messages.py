"""The message log: requests and replies written, read back for context and admins, rows decoded."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import fields
from typing import Any

import aiosqlite
import structlog

from bot.core.errors import AlreadyAnsweredError, SessionNotFoundError
from bot.core.media import Media, decode, encode
from bot.core.messages import ChatRef, InboundMessage, Origin, OutboundMessage, Role, StoredMessage
from bot.ranking.budget import estimate_tokens
from bot.store.database import Database
from bot.store.records import SessionSummary

log = structlog.get_logger("switchboard.store")

MESSAGE_COLUMNS = (
    "id, session_key, role, origin, text, created_at, sender_id, sender_name, "
    "provider_message_id, reply_to_id, actions, job_id, token_estimate, unanswered, media"
)


class Messages(Database):
    """Writes and reads of the `messages` table and its sessions."""

    # -- writes ---------------------------------------------------------------------------

    async def append_inbound(self, msg: InboundMessage) -> StoredMessage | None:
        """Store a platform message; None when the same platform message was stored before."""
        try:
            return await self._batch(lambda conn: _inbound_written(conn, msg))
        except _AlreadyStored:
            return None

    async def append_reply(
        self, session_key: str, text: str, *, actions: Sequence[str] = (), origin: Origin = "interactive",
        job_id: str | None = None, request_id: int | None = None, deliver: OutboundMessage | None = None,
        fallback: bool = False,
    ) -> StoredMessage:
        """Store the agent's reply (or a scheduled output) before it is sent.

        `fallback`: the model did not write it (the apology when it failed): it is delivered and
        shown in history, but context and recall never read it.

        `request_id` is the message it answers: it and every earlier request of the session still
        waiting (the reply's context held them) stop waiting, in the same transaction; when it
        waits no more (answered by another instance meanwhile) AlreadyAnsweredError, nothing stored. `deliver`
        puts the reply in the outbox, so a restart sends what a crash kept from being sent.
        """
        return await self._batch(lambda conn: reply_written(
            conn, session_key, text, actions, origin, job_id, request_id, deliver, fallback))

    async def reset_context(self, session_key: str) -> None:
        """Start a fresh context for a session without deleting its history."""
        async with self._transaction():
            await self._conn.execute(
                "UPDATE sessions SET context_floor = "
                "(SELECT COALESCE(MAX(id), 0) FROM messages WHERE session_key = ?) WHERE key = ?",
                (session_key, session_key),
            )

    # -- reads for the context pipeline ----------------------------------------------------

    async def recent_messages(
        self, session_key: str, *, before_id: int, limit: int, origin: Origin = "interactive",
        after_id: int = 0,
    ) -> list[StoredMessage]:
        """The newest `limit` messages of one origin with after_id < id < before_id, oldest first.

        Reads stop at the session's context floor (set by /reset); fallback replies are left out.
        """
        rows = await self._conn.execute_fetchall(
            _RECENT,
            (session_key, origin, before_id, after_id, limit),
        )
        return rows_to_messages(reversed(list(rows)))

    async def scheduled_between(
        self, session_key: str, *, after_id: int | None, before_id: int, limit: int
    ) -> list[StoredMessage]:
        """Up to `limit` newest scheduled outputs with after_id < id < before_id, oldest first;
        `after_id` None: since the session's previous interactive user message (one read).

        Output whose run did not deliver it (the send failed, or it is still on its way) is left
        out: the user never saw it. So is output from before a /reset (the context floor).
        """
        if limit <= 0:
            return []
        rows = await self._conn.execute_fetchall(
            _SCHEDULED_AFTER if after_id is not None else _SCHEDULED_SINCE_USER,
            (session_key, after_id or 0, before_id, limit),
        )
        return rows_to_messages(reversed(list(rows)))

    async def message_by_provider_id(
        self, chat: ChatRef, provider_message_id: str
    ) -> StoredMessage | None:
        found = await self._conn.execute_fetchall(
            f"SELECT {qualified_columns('m')} FROM provider_messages p "
            "JOIN messages m ON m.id = p.message_id "
            "WHERE p.provider = ? AND p.chat_id = ? AND p.provider_message_id = ?",
            (chat.provider, chat.chat_id, provider_message_id),
        )
        return next(iter(rows_to_messages(found)), None)

    async def message_by_id(self, message_id: int) -> StoredMessage | None:
        found = await self._conn.execute_fetchall(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?", (message_id,)
        )
        return next(iter(rows_to_messages(found)), None)

    async def messages_between(
        self, session_key: str, *, after_id: int, before_id: int
    ) -> list[StoredMessage]:
        """Every interactive message with after_id < id < before_id above the context floor."""
        return await self.recent_messages(
            session_key, before_id=before_id, after_id=after_id, limit=_NO_LIMIT
        )

    async def history_tokens(self, session_key: str, *, after_id: int) -> tuple[int, int]:
        """(messages, estimated tokens) of interactive history after `after_id` and the floor."""
        found = await self._conn.execute_fetchall(
            "SELECT COUNT(*), COALESCE(SUM(token_estimate), 0) FROM messages "
            "WHERE session_key = ? AND origin = 'interactive' AND id > MAX(?, (SELECT "
            "COALESCE((SELECT context_floor FROM sessions WHERE key = ?), 0)))",
            (session_key, after_id, session_key),
        )
        row = next(iter(found))
        return int(row[0]), int(row[1])

    # -- reads for admins -------------------------------------------------------------------

    async def list_sessions(self, agent_id: str | None = None) -> list[SessionSummary]:
        """Every session, newest activity first; only one agent's when `agent_id` is given."""
        prefix = f"agent:{agent_id or ''}:"
        rows = await self._conn.execute_fetchall(
            "SELECT key, created_at, updated_at, message_count, user_turns FROM sessions "
            "WHERE ? OR substr(key, 1, length(?)) = ? ORDER BY updated_at DESC",
            (agent_id is None, prefix, prefix),
        )
        return [SessionSummary(*row) for row in rows]

    async def session(self, session_key: str) -> SessionSummary:
        found = await self._conn.execute_fetchall(
            "SELECT key, created_at, updated_at, message_count, user_turns FROM sessions "
            "WHERE key = ?",
            (session_key,),
        )
        row = next(iter(found), None)
        if row is None:
            raise SessionNotFoundError(f"no session {session_key!r} in {self.label}")
        return SessionSummary(*row)

    async def history(
        self, session_key: str, limit: int, *, before_id: int | None = None
    ) -> list[StoredMessage]:
        """The newest `limit` messages of every origin (those before `before_id`: a page further
        back), oldest first."""
        rows = await self._conn.execute_fetchall(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_key = ? AND id < ? "
            "ORDER BY id DESC LIMIT ?",
            (session_key, before_id if before_id is not None else 2**63 - 1, limit),
        )
        return rows_to_messages(reversed(list(rows)))


# -- shared with the other concerns that write or read messages ---------------------------------


async def _inbound_written(conn: aiosqlite.Connection, msg: InboundMessage) -> StoredMessage | None:
    """`append_inbound`'s transaction."""
    if msg.provider_message_id is not None:
        seen = await conn.execute_fetchall(
            "SELECT 1 FROM provider_messages "
            "WHERE provider = ? AND chat_id = ? AND provider_message_id = ?",
            (msg.chat.provider, msg.chat.chat_id, msg.provider_message_id),
        )
        if seen:
            return None
    stored = await insert_message(
        conn,
        session_key=str(msg.session_key),
        role="user",
        origin="interactive",
        text=msg.text,
        created_at=msg.sent_at or time.time(),
        sender_id=msg.sender_id,
        sender_name=msg.sender_name,
        provider_message_id=msg.provider_message_id,
        reply_to_id=msg.reply_to_id,
        awaiting_reply=msg.starts_turn,
        chat=msg.chat,
        media=msg.media,
    )
    if msg.provider_message_id is not None and not await link_platform_id(
        conn, msg.chat, msg.provider_message_id, stored.id
    ):
        # Stored meanwhile by another writer of the same database: this copy is undone.
        raise _AlreadyStored
    return stored



async def reply_written(
    conn: aiosqlite.Connection, session_key: str, text: str, actions: Sequence[str], origin: Origin,
    job_id: str | None, request_id: int | None, deliver: OutboundMessage | None, fallback: bool,
) -> StoredMessage:
    """`append_reply`'s transaction (`turn_commits` writes more in the same one)."""
    if request_id is not None:
        cleared = await conn.execute_fetchall(
            "UPDATE messages SET awaiting_reply = 0 WHERE awaiting_reply = 1 "
            "AND session_key = ? AND id <= ? RETURNING id",
            (session_key, request_id),
        )
        if all(row[0] != request_id for row in cleared):
            raise AlreadyAnsweredError(f"request #{request_id} of {session_key} is no longer waiting")
    stored = await insert_message(
        conn,
        session_key=session_key,
        role="assistant",
        origin=origin,
        text=text,
        created_at=time.time(),
        actions=tuple(actions),
        job_id=job_id,
        fallback=fallback,
        request_id=request_id,
    )
    if deliver is not None:
        chat = deliver.chat
        await conn.execute(
            "INSERT INTO outbox (message_id, provider, chat_id, thread_id, reply_to_id, text, "
            "created_at, preview_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (stored.id, chat.provider, chat.chat_id, chat.thread_id, deliver.reply_to_id,
             deliver.text, stored.created_at, deliver.preview_id),
        )
    return stored


async def insert_message(
    conn: aiosqlite.Connection, *, session_key: str, role: Role, origin: Origin, text: str,
    created_at: float, sender_id: str | None = None, sender_name: str | None = None,
    provider_message_id: str | None = None, reply_to_id: str | None = None,
    actions: tuple[str, ...] = (), job_id: str | None = None, awaiting_reply: bool = False,
    chat: ChatRef | None = None, fallback: bool = False, media: tuple[Media, ...] = (),
    request_id: int | None = None,
) -> StoredMessage:
    """Add one message and count it in its session, inside the caller's transaction; a reply's
    `request_id` is the request it answers.

    Interactive messages get their recall terms, except a fallback reply (never recalled)."""
    now = time.time()
    is_turn = 1 if role == "user" and origin == "interactive" else 0
    await conn.execute(
        "INSERT INTO sessions (key, created_at, updated_at, message_count, user_turns) "
        "VALUES (?, ?, ?, 1, ?) ON CONFLICT(key) DO UPDATE SET updated_at = excluded.updated_at, "
        "message_count = sessions.message_count + 1, user_turns = sessions.user_turns + excluded.user_turns",
        (session_key, now, now, is_turn),
    )
    tokens = estimate_tokens(text)
    inserted = await conn.execute_fetchall(
        "INSERT INTO messages (session_key, role, origin, sender_id, sender_name, text, "
        "provider_message_id, reply_to_id, actions, job_id, created_at, token_estimate, "
        "awaiting_reply, chat_id, thread_id, fallback, media, request_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (
            session_key, role, origin, sender_id, sender_name, text, provider_message_id,
            reply_to_id, json.dumps(list(actions)) if actions else None, job_id,
            created_at, tokens, int(awaiting_reply),
            chat.chat_id if chat else None, chat.thread_id if chat else None, int(fallback),
            encode(media), request_id,
        ),
    )
    message_id = int(next(iter(inserted))[0])
    # Imported here: the recall module reads rows through this one.
    from bot.store.recall import index_message

    if not fallback:
        await index_message(conn, message_id, session_key=session_key, origin=origin, text=text)
    return StoredMessage(
        id=message_id, session_key=session_key, role=role, origin=origin, text=text,
        created_at=created_at, sender_id=sender_id, sender_name=sender_name,
        provider_message_id=provider_message_id, reply_to_id=reply_to_id,
        actions=actions, job_id=job_id, token_estimate=tokens, media=media,
    )


async def link_platform_id(
    conn: aiosqlite.Connection, chat: ChatRef, provider_message_id: str, message_id: int
) -> bool:
    """Record that a stored message is `provider_message_id` in `chat` (inside a transaction);
    False when that platform id already belongs to a stored message."""
    linked = await conn.execute_fetchall(
        "INSERT INTO provider_messages (provider, chat_id, provider_message_id, message_id) "
        "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING message_id",
        (chat.provider, chat.chat_id, provider_message_id, message_id),
    )
    return bool(list(linked))


def qualified_columns(alias: str) -> str:
    return ", ".join(f"{alias}.{name.strip()}" for name in MESSAGE_COLUMNS.split(","))


def rows_to_messages(rows: Iterable[Any]) -> list[StoredMessage]:
    """Messages from rows; a malformed row is skipped with a warning instead of failing the read."""
    messages = []
    for row in rows:
        try:
            messages.append(_row_to_message(row))
        except (ValueError, TypeError, IndexError, KeyError, RecursionError) as exc:
            log.warning("malformed message row skipped", message_id=row[0], error=str(exc))
    return messages


def _row_to_message(row: Any) -> StoredMessage:
    """One message from a row, or ValueError when a column holds what no write path stores."""
    actions: Any = json.loads(row[10]) if row[10] else ()
    if actions and (not isinstance(actions, list) or not all(isinstance(a, str) for a in actions)):
        raise ValueError("actions is not a JSON list of strings")
    if not isinstance(row[4], str) or row[2] not in _ROLES or row[3] not in _ORIGINS:
        raise ValueError("text, role or origin is malformed")
    # SQLite keeps whatever a column is given: the context's arithmetic needs real numbers.
    if not isinstance(row[5], _NUMBER) or not isinstance(row[12], int) or row[12] < 0:
        raise ValueError("created_at or token_estimate is not a number")
    # The fields in StoredMessage's order, each set through its slot: a frozen dataclass's
    # __init__ sets them through object.__setattr__, a third of decoding a context build's ~100
    # rows.
    message: StoredMessage = _NEW(StoredMessage)
    (id_, session_key, role, origin, text, created_at, sender_id, sender_name, provider_id,
     reply_to_id, actions_, job_id, tokens, unanswered, media) = _SLOTS
    id_(message, row[0])
    session_key(message, row[1])
    role(message, row[2])
    origin(message, row[3])
    text(message, row[4])
    created_at(message, float(row[5]))
    sender_id(message, row[6])
    sender_name(message, row[7])
    provider_id(message, row[8])
    reply_to_id(message, row[9])
    actions_(message, tuple(actions))
    job_id(message, row[11])
    tokens(message, row[12])
    unanswered(message, row[13])
    media(message, decode(row[14]) if row[14] else ())
    return message


class _AlreadyStored(Exception):
    """Another writer stored the same platform message first (only where writers run at once)."""


_NO_LIMIT = 2**62  # "every row", as LIMIT reads it in SQLite and PostgreSQL alike
_ROLES = frozenset(("user", "assistant"))
_ORIGINS = frozenset(("interactive", "scheduled"))
_NUMBER = (int, float)
_NEW = object.__new__
# StoredMessage's slot setters in field order (the columns' order in MESSAGE_COLUMNS).
_SLOTS = tuple(StoredMessage.__dict__[field.name].__set__ for field in fields(StoredMessage))


# The session's (?1) context floor (/reset), 0 when none.
_FLOOR = "(SELECT COALESCE((SELECT context_floor FROM sessions WHERE key = ?1), 0))"


def recent_sql(*, origin: str, before: str, after: str, limit: str) -> str:
    """`recent_messages`' statement for session ?1, newest first, its values given as SQL
    (placeholders or literals): `ContextReads` runs it inside a union."""
    return (f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_key = ?1 AND origin = {origin} "
            f"AND fallback = 0 AND id < {before} AND id > MAX({after}, {_FLOOR}) "
            f"ORDER BY id DESC LIMIT {limit}")


def scheduled_sql(*, after: str | None, before: str, limit: str) -> str:
    """`scheduled_between`'s statement for session ?1, newest first (`after` None: since the
    session's previous interactive user message), its values given as SQL."""
    since = after if after is not None else (
        "(SELECT COALESCE(MAX(id), 0) FROM messages WHERE session_key = ?1 "
        f"AND origin = 'interactive' AND role = 'user' AND id < {before})")
    return (f"SELECT {MESSAGE_COLUMNS} FROM messages m WHERE session_key = ?1 "
            f"AND origin = 'scheduled' AND id < {before} AND id > MAX({since}, {_FLOOR}) "
            "AND NOT EXISTS (SELECT 1 FROM schedule_runs r WHERE r.reply_message_id = m.id "
            f"AND r.status <> 'delivered') ORDER BY id DESC LIMIT {limit}")


# ?1 session, ?2 origin, ?3 before, ?4 after, ?5 limit.
_RECENT = recent_sql(origin="?2", before="?3", after="?4", limit="?5")
# ?1 session, ?2 after (unused by the second), ?3 before, ?4 limit.
_SCHEDULED_AFTER = scheduled_sql(after="?2", before="?3", limit="?4")
_SCHEDULED_SINCE_USER = scheduled_sql(after=None, before="?3", limit="?4")
