"""The SQLite store: one aiosqlite connection, domain-named methods, all SQL lives here."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite

from bot.errors import SessionNotFoundError, StoreError
from bot.messages import ChatRef, InboundMessage, Origin, Role, StoredMessage
from bot.migrations import MIGRATIONS

_MESSAGE_COLUMNS = (
    "id, session_key, role, origin, text, created_at, sender_id, sender_name, "
    "provider_message_id, reply_to_id, actions, job_id, token_estimate"
)


def estimate_tokens(text: str) -> int:
    """A cheap token estimate (about four characters a token), stored with each message."""
    return (len(text) + 3) // 4


@dataclass(frozen=True, slots=True)
class SessionSummary:
    key: str
    created_at: float
    updated_at: float
    message_count: int
    user_turns: int


@dataclass(frozen=True, slots=True)
class SnapshotRecord:
    turn: int
    request_message_id: int
    reply_message_id: int | None
    created_at: float
    hash: str
    snapshot: dict[str, Any]


class Store:
    """Conversation history in one SQLite file (WAL, foreign keys on, mode 0600)."""

    def __init__(self, conn: aiosqlite.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path
        # One connection is shared by every coroutine: a write transaction must not interleave
        # with another coroutine's statements.
        self._write_lock = asyncio.Lock()

    @classmethod
    @asynccontextmanager
    async def open(cls, path: str | os.PathLike[str]) -> AsyncIterator[Store]:
        """Open (creating with mode 0600 and migrating) the database, closing it on exit."""
        db_path = Path(path)
        try:
            db_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(db_path, os.O_CREAT | os.O_RDWR, 0o600)
            os.close(fd)
            conn = await aiosqlite.connect(db_path, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open database {db_path}: {exc}") from exc
        try:
            conn.row_factory = sqlite3.Row
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute("PRAGMA foreign_keys=ON")
            await conn.execute("PRAGMA synchronous=NORMAL")
            await conn.execute("PRAGMA busy_timeout=5000")
            store = cls(conn, db_path)
            await store._migrate()
            yield store
        finally:
            await conn.close()

    async def _migrate(self) -> None:
        await self._conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations "
            "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
        )
        async with self._conn.execute("SELECT MAX(version) FROM schema_migrations") as cur:
            row = await cur.fetchone()
        current = (row[0] if row else None) or 0
        if current > len(MIGRATIONS):
            raise StoreError(
                f"database {self.path} is at schema {current}, newer than this Switchboard "
                f"({len(MIGRATIONS)}); upgrade Switchboard"
            )
        for version, sql in enumerate(MIGRATIONS[current:], start=current + 1):
            async with self._transaction():
                for statement in _statements(sql):
                    await self._conn.execute(statement)
                await self._conn.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                    (version, time.time()),
                )

    async def schema_version(self) -> int:
        async with self._conn.execute("SELECT MAX(version) FROM schema_migrations") as cur:
            row = await cur.fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[None]:
        async with self._write_lock:
            await self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                await self._conn.execute("ROLLBACK")
                raise
            await self._conn.execute("COMMIT")

    # -- writes ---------------------------------------------------------------------------

    async def append_inbound(self, msg: InboundMessage) -> StoredMessage | None:
        """Store a platform message; None when the same platform message was stored before."""
        async with self._transaction():
            if msg.provider_message_id is not None:
                seen = await self._conn.execute_fetchall(
                    "SELECT 1 FROM provider_messages "
                    "WHERE provider = ? AND chat_id = ? AND provider_message_id = ?",
                    (msg.chat.provider, msg.chat.chat_id, msg.provider_message_id),
                )
                if seen:
                    return None
            stored = await self._insert(
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
            )
            if msg.provider_message_id is not None:
                await self._link(msg.chat, msg.provider_message_id, stored.id)
            return stored

    async def append_reply(
        self,
        session_key: str,
        text: str,
        *,
        actions: Sequence[str] = (),
        origin: Origin = "interactive",
        job_id: str | None = None,
        request_id: int | None = None,
    ) -> StoredMessage:
        """Store the agent's reply (or a scheduled output) before it is sent.

        `request_id` is the message it answers, which stops waiting for a reply in the same
        transaction.
        """
        async with self._transaction():
            if request_id is not None:
                await self._clear_awaiting(request_id)
            return await self._insert(
                session_key=session_key,
                role="assistant",
                origin=origin,
                text=text,
                created_at=time.time(),
                actions=tuple(actions),
                job_id=job_id,
            )

    async def mark_delivered(
        self, message_id: int, chat: ChatRef, provider_message_ids: Sequence[str]
    ) -> None:
        """Record every platform id a stored reply was sent as (one per chunk)."""
        if not provider_message_ids:
            return
        async with self._transaction():
            await self._conn.execute(
                "UPDATE messages SET provider_message_id = COALESCE(provider_message_id, ?) "
                "WHERE id = ?",
                (provider_message_ids[0], message_id),
            )
            for provider_id in provider_message_ids:
                await self._link(chat, provider_id, message_id)

    async def abandon_request(self, message_id: int) -> None:
        """A request whose turn was stopped (/stop): it no longer waits for a reply."""
        async with self._transaction():
            await self._clear_awaiting(message_id)

    async def _clear_awaiting(self, message_id: int) -> None:
        await self._conn.execute(
            "UPDATE messages SET awaiting_reply = 0 WHERE id = ? AND awaiting_reply = 1", (message_id,)
        )

    async def awaiting_request(self, chat: ChatRef, provider_message_id: str) -> StoredMessage | None:
        """A stored platform message whose turn never finished (the daemon stopped first)."""
        found = await self._conn.execute_fetchall(
            f"SELECT {_qualified_columns('m')} FROM provider_messages p "
            "JOIN messages m ON m.id = p.message_id "
            "WHERE p.provider = ? AND p.chat_id = ? AND p.provider_message_id = ? "
            "AND m.awaiting_reply = 1",
            (chat.provider, chat.chat_id, provider_message_id),
        )
        row = next(iter(found), None)
        return _row_to_message(row) if row else None

    async def reset_context(self, session_key: str) -> None:
        """Start a fresh context for a session without deleting its history."""
        async with self._transaction():
            await self._conn.execute(
                "UPDATE sessions SET context_floor = "
                "(SELECT COALESCE(MAX(id), 0) FROM messages WHERE session_key = ?) WHERE key = ?",
                (session_key, session_key),
            )

    async def record_snapshot(
        self,
        session_key: str,
        request_message_id: int,
        reply_message_id: int | None,
        snapshot: dict[str, Any],
        snapshot_hash: str,
    ) -> None:
        async with self._transaction():
            await self._conn.execute(
                "INSERT INTO context_snapshots (session_key, request_message_id, "
                "reply_message_id, created_at, hash, snapshot) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    session_key,
                    request_message_id,
                    reply_message_id,
                    time.time(),
                    snapshot_hash,
                    json.dumps(snapshot, sort_keys=True),
                ),
            )

    async def _insert(
        self,
        *,
        session_key: str,
        role: Role,
        origin: Origin,
        text: str,
        created_at: float,
        sender_id: str | None = None,
        sender_name: str | None = None,
        provider_message_id: str | None = None,
        reply_to_id: str | None = None,
        actions: tuple[str, ...] = (),
        job_id: str | None = None,
        awaiting_reply: bool = False,
    ) -> StoredMessage:
        now = time.time()
        is_turn = 1 if role == "user" and origin == "interactive" else 0
        await self._conn.execute(
            "INSERT INTO sessions (key, created_at, updated_at, message_count, user_turns) "
            "VALUES (?, ?, ?, 1, ?) ON CONFLICT(key) DO UPDATE SET updated_at = excluded.updated_at, "
            "message_count = message_count + 1, user_turns = user_turns + excluded.user_turns",
            (session_key, now, now, is_turn),
        )
        tokens = estimate_tokens(text)
        cursor = await self._conn.execute(
            "INSERT INTO messages (session_key, role, origin, sender_id, sender_name, text, "
            "provider_message_id, reply_to_id, actions, job_id, created_at, token_estimate, "
            "awaiting_reply) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                session_key, role, origin, sender_id, sender_name, text, provider_message_id,
                reply_to_id, json.dumps(list(actions)) if actions else None, job_id,
                created_at, tokens, int(awaiting_reply),
            ),
        )
        message_id = cursor.lastrowid
        assert message_id is not None
        return StoredMessage(
            id=message_id, session_key=session_key, role=role, origin=origin, text=text,
            created_at=created_at, sender_id=sender_id, sender_name=sender_name,
            provider_message_id=provider_message_id, reply_to_id=reply_to_id,
            actions=actions, job_id=job_id, token_estimate=tokens,
        )

    async def _link(self, chat: ChatRef, provider_message_id: str, message_id: int) -> None:
        await self._conn.execute(
            "INSERT OR IGNORE INTO provider_messages "
            "(provider, chat_id, provider_message_id, message_id) VALUES (?, ?, ?, ?)",
            (chat.provider, chat.chat_id, provider_message_id, message_id),
        )

    # -- reads for the context pipeline ----------------------------------------------------

    async def recent_messages(
        self, session_key: str, *, before_id: int, limit: int, origin: Origin = "interactive"
    ) -> list[StoredMessage]:
        """The newest `limit` messages of one origin before `before_id`, oldest first.

        Reads stop at the session's context floor (set by /reset).
        """
        sql = (
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_key = ? AND origin = ? "
            "AND id < ? AND id > (SELECT COALESCE((SELECT context_floor FROM sessions "
            "WHERE key = ?), 0)) ORDER BY id DESC LIMIT ?"
        )
        rows = await self._conn.execute_fetchall(
            sql, (session_key, origin, before_id, session_key, limit)
        )
        return [_row_to_message(row) for row in reversed(list(rows))]

    async def scheduled_between(
        self, session_key: str, *, after_id: int, before_id: int, limit: int
    ) -> list[StoredMessage]:
        """Up to `limit` newest scheduled outputs with after_id < id < before_id, oldest first."""
        if limit <= 0:
            return []
        rows = await self._conn.execute_fetchall(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_key = ? "
            "AND origin = 'scheduled' AND id > ? AND id < ? ORDER BY id DESC LIMIT ?",
            (session_key, after_id, before_id, limit),
        )
        return [_row_to_message(row) for row in reversed(list(rows))]

    async def previous_user_message_id(self, session_key: str, before_id: int) -> int:
        """Id of the last interactive user message before `before_id` (0 when there is none)."""
        found = await self._conn.execute_fetchall(
            "SELECT id FROM messages WHERE session_key = ? AND origin = 'interactive' "
            "AND id < ? AND role = 'user' ORDER BY id DESC LIMIT 1",
            (session_key, before_id),
        )
        row = next(iter(found), None)
        return int(row[0]) if row else 0

    async def message_by_provider_id(
        self, chat: ChatRef, provider_message_id: str
    ) -> StoredMessage | None:
        found = await self._conn.execute_fetchall(
            f"SELECT {_qualified_columns('m')} FROM provider_messages p "
            "JOIN messages m ON m.id = p.message_id "
            "WHERE p.provider = ? AND p.chat_id = ? AND p.provider_message_id = ?",
            (chat.provider, chat.chat_id, provider_message_id),
        )
        row = next(iter(found), None)
        return _row_to_message(row) if row else None

    # -- reads for admins -------------------------------------------------------------------

    async def list_sessions(self) -> list[SessionSummary]:
        rows = await self._conn.execute_fetchall(
            "SELECT key, created_at, updated_at, message_count, user_turns FROM sessions "
            "ORDER BY updated_at DESC"
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
            raise SessionNotFoundError(f"no session {session_key!r} in {self.path}")
        return SessionSummary(*row)

    async def history(self, session_key: str, limit: int) -> list[StoredMessage]:
        """The newest `limit` messages of every origin, oldest first."""
        rows = await self._conn.execute_fetchall(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_key = ? "
            "ORDER BY id DESC LIMIT ?",
            (session_key, limit),
        )
        return [_row_to_message(row) for row in reversed(list(rows))]

    async def snapshots(self, session_key: str) -> list[SnapshotRecord]:
        rows = await self._conn.execute_fetchall(
            "SELECT request_message_id, reply_message_id, created_at, hash, snapshot "
            "FROM context_snapshots WHERE session_key = ? ORDER BY id",
            (session_key,),
        )
        return [
            SnapshotRecord(turn, row[0], row[1], row[2], row[3], json.loads(row[4]))
            for turn, row in enumerate(rows, start=1)
        ]


def _statements(sql: str) -> list[str]:
    return [part.strip() for part in sql.split(";") if part.strip()]


def _qualified_columns(alias: str) -> str:
    return ", ".join(f"{alias}.{name.strip()}" for name in _MESSAGE_COLUMNS.split(","))


def _row_to_message(row: Any) -> StoredMessage:
    actions = tuple(json.loads(row[10])) if row[10] else ()
    return StoredMessage(
        id=row[0], session_key=row[1], role=row[2], origin=row[3], text=row[4],
        created_at=row[5], sender_id=row[6], sender_name=row[7], provider_message_id=row[8],
        reply_to_id=row[9], actions=actions, job_id=row[11], token_estimate=row[12],
    )
