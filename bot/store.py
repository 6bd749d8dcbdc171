"""The SQLite store: one aiosqlite connection, domain-named methods, all SQL lives here."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiosqlite
import structlog

from bot.budget import estimate_tokens
from bot.context import read_snapshot
from bot.errors import SessionNotFoundError, StoreError
from bot.messages import ChatRef, InboundMessage, Origin, OutboundMessage, Role, StoredMessage
from bot.migrations import MIGRATIONS
from bot.recall import fts_phrase, query_terms, rank_matches
from bot.session_key import parse as parse_session_key

log = structlog.get_logger("switchboard.store")

_MESSAGE_COLUMNS = (
    "id, session_key, role, origin, text, created_at, sender_id, sender_name, "
    "provider_message_id, reply_to_id, actions, job_id, token_estimate, unanswered"
)


@dataclass(frozen=True, slots=True)
class SessionSummary:
    key: str
    created_at: float
    updated_at: float
    message_count: int
    user_turns: int


_COMPACTION_COLUMNS = (
    "id, session_key, summary, last_summarised_id, first_kept_message_id, tokens_before, "
    "tokens_after, model, created_at, notified"
)


# The compaction in use: the newest that summarised messages above the context floor (/reset).
_LATEST_COMPACTION = (
    f"SELECT {_COMPACTION_COLUMNS} FROM compactions WHERE session_key = ? AND "
    "last_summarised_id > (SELECT COALESCE((SELECT context_floor FROM sessions "
    "WHERE key = ?), 0)) ORDER BY id DESC LIMIT 1"
)


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    """A summary of a session's older messages; context reads from `first_kept_message_id` on."""

    id: int
    session_key: str
    summary: str
    last_summarised_id: int
    first_kept_message_id: int
    tokens_before: int
    tokens_after: int
    model: str
    created_at: float
    notified: int


@dataclass(frozen=True, slots=True)
class PendingRequest:
    """A stored request still waiting for its reply, with where it came from."""

    message: StoredMessage
    chat: ChatRef | None  # None for a row stored before chats were recorded, with no platform id


@dataclass(frozen=True, slots=True)
class PendingDelivery:
    """A stored reply whose chunks were not all delivered: what to send, from which chunk on."""

    message_id: int
    session_key: str
    created_at: float
    outbound: OutboundMessage


@dataclass(frozen=True, slots=True)
class PendingCommand:
    """A chat command received but not yet run; it runs after message `after_message_id`'s turn."""

    id: int
    after_message_id: int
    received_at: float
    inbound: InboundMessage


@dataclass(frozen=True, slots=True)
class SnapshotRecord:
    turn: int
    request_message_id: int
    reply_message_id: int | None
    created_at: float
    hash: str
    snapshot: dict[str, Any]


RunStatus = Literal[
    "requested", "running", "generated", "delivered", "quiet", "failed", "missed", "stale"
]
RunTrigger = Literal["schedule", "manual"]
_RUN_COLUMNS = (
    "id, job_id, scheduled_for, trigger, status, started_at, finished_at, attempts, "
    "reply_message_id, delivered_ids, error"
)


@dataclass(frozen=True, slots=True)
class ScheduleRun:
    """One run of a scheduled job: its time, what became of it, and what was delivered."""

    id: int
    job_id: str
    scheduled_for: float
    trigger: RunTrigger
    status: RunStatus
    started_at: float | None
    finished_at: float | None
    attempts: int
    reply_message_id: int | None
    delivered_ids: tuple[str, ...]
    error: str | None


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What `prune_interactive` removed (or, on a dry run, would remove)."""

    messages_by_session: dict[str, int]
    snapshots: int
    dry_run: bool

    @property
    def messages(self) -> int:
        return sum(self.messages_by_session.values())


_NO_ID_ABOVE = 2**63 - 1  # SQLite's largest rowid: "no floor"
RECALL_COMMON = 500  # recall ignores a word found in more of the searched messages than this


def delivery_key(message_id: int) -> str:
    """The stable name of a stored reply's delivery (Discord derives each chunk's nonce from it)."""
    return f"sb{message_id}"


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
                chat=msg.chat,
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
        deliver: OutboundMessage | None = None,
    ) -> StoredMessage:
        """Store the agent's reply (or a scheduled output) before it is sent.

        `request_id` is the message it answers: it and every earlier request of the session still
        waiting (the reply's context held them) stop waiting, in the same transaction. `deliver`
        puts the reply in the outbox, so a restart sends what a crash kept from being sent.
        """
        async with self._transaction():
            if request_id is not None:
                await self._conn.execute(
                    "UPDATE messages SET awaiting_reply = 0 WHERE awaiting_reply = 1 "
                    "AND session_key = ? AND id <= ?",
                    (session_key, request_id),
                )
            stored = await self._insert(
                session_key=session_key,
                role="assistant",
                origin=origin,
                text=text,
                created_at=time.time(),
                actions=tuple(actions),
                job_id=job_id,
            )
            if deliver is not None:
                chat = deliver.chat
                await self._conn.execute(
                    "INSERT INTO outbox (message_id, provider, chat_id, thread_id, reply_to_id, text, "
                    "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (stored.id, chat.provider, chat.chat_id, chat.thread_id, deliver.reply_to_id,
                     deliver.text, stored.created_at),
                )
            return stored

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

    async def abandon_request(self, message_id: int, reason: str = "stopped") -> None:
        """A request that will not be answered (`stopped` by /stop, `late`): it no longer waits."""
        async with self._transaction():
            await self._conn.execute(
                "UPDATE messages SET awaiting_reply = 0, unanswered = ? WHERE id = ? "
                "AND awaiting_reply = 1",
                (reason, message_id),
            )

    # -- durable intake and delivery: what a restart picks up ----------------------------------

    async def awaiting_requests(self) -> list[PendingRequest]:
        """Every stored request still waiting for a reply, oldest first, with its chat."""
        rows = await self._conn.execute_fetchall(
            f"SELECT {_MESSAGE_COLUMNS}, chat_id, thread_id, (SELECT p.chat_id FROM provider_messages p "
            "WHERE p.message_id = messages.id LIMIT 1) FROM messages WHERE awaiting_reply = 1 ORDER BY id"
        )
        pending = []
        for row in rows:
            for message in _rows_to_messages([row]):
                provider = parse_session_key(message.session_key).provider
                chat_id = row[14] or row[16] or ("local" if provider == "console" else None)
                chat = ChatRef(provider, chat_id, row[15]) if chat_id is not None else None
                pending.append(PendingRequest(message, chat))
        return pending

    async def record_chunk(
        self, message_id: int, chat: ChatRef, index: int, provider_message_id: str
    ) -> None:
        """One chunk of an outbox reply reached the platform as `provider_message_id`."""
        async with self._transaction():
            await self._conn.execute(
                "UPDATE messages SET provider_message_id = COALESCE(provider_message_id, ?) WHERE id = ?",
                (provider_message_id, message_id),
            )
            await self._link(chat, provider_message_id, message_id)
            await self._conn.execute(
                "UPDATE outbox SET chunks_sent = MAX(chunks_sent, ?) WHERE message_id = ?",
                (index + 1, message_id),
            )

    async def finish_delivery(self, message_id: int) -> None:
        """The reply left the outbox: every chunk was delivered, or it never will be."""
        async with self._transaction():
            await self._conn.execute("DELETE FROM outbox WHERE message_id = ?", (message_id,))

    async def pending_deliveries(self) -> list[PendingDelivery]:
        """Replies in the outbox, oldest first, each to be sent from its first undelivered chunk."""
        rows = await self._conn.execute_fetchall(
            "SELECT o.message_id, m.session_key, o.created_at, o.provider, o.chat_id, o.thread_id, "
            "o.reply_to_id, o.text, o.chunks_sent FROM outbox o JOIN messages m ON m.id = o.message_id "
            "ORDER BY o.message_id"
        )
        return [
            PendingDelivery(row[0], row[1], row[2], OutboundMessage(
                ChatRef(row[3], row[4], row[5]), row[7], row[6], delivery_key=delivery_key(row[0]),
                skip_chunks=row[8],
            ))
            for row in rows
        ]

    async def append_command(
        self, inbound: InboundMessage, command: str, status: Literal["pending", "done"] = "pending"
    ) -> PendingCommand | None:
        """Record a chat command (`pending` until it has run, or `done` for one answered at once,
        kept only so a redelivery is recognised); None for a redelivery."""
        chat = inbound.chat
        async with self._transaction():
            cursor = await self._conn.execute(
                "INSERT OR IGNORE INTO chat_commands (session_key, provider, chat_id, thread_id, "
                "sender_id, sender_name, provider_message_id, command, text, sent_at, received_at, "
                "after_message_id, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                "(SELECT COALESCE(MAX(id), 0) FROM messages), ?)",
                (str(inbound.session_key), chat.provider, chat.chat_id, chat.thread_id, inbound.sender_id,
                 inbound.sender_name, inbound.provider_message_id, command, inbound.text,
                 inbound.sent_at, time.time(), status),
            )
            if not cursor.rowcount:
                return None
            found = await self._conn.execute_fetchall(
                "SELECT after_message_id, received_at FROM chat_commands WHERE id = ?", (cursor.lastrowid,)
            )
        row = next(iter(found))
        return PendingCommand(int(cursor.lastrowid or 0), int(row[0]), float(row[1]), inbound)

    async def finish_command(self, command_id: int, status: Literal["done", "late"] = "done") -> None:
        async with self._transaction():
            await self._conn.execute(
                "UPDATE chat_commands SET status = ? WHERE id = ?", (status, command_id)
            )

    async def pending_commands(self) -> list[PendingCommand]:
        """Commands received but not yet run, oldest first."""
        rows = await self._conn.execute_fetchall(
            "SELECT id, after_message_id, received_at, session_key, provider, chat_id, thread_id, "
            "sender_id, sender_name, provider_message_id, command, text, sent_at FROM chat_commands "
            "WHERE status = 'pending' ORDER BY id"
        )
        return [
            PendingCommand(row[0], row[1], row[2], InboundMessage(
                session_key=parse_session_key(row[3]), chat=ChatRef(row[4], row[5], row[6]),
                sender_id=row[7], sender_name=row[8], text=row[11], provider_message_id=row[9],
                sent_at=row[12], command=row[10],
            ))
            for row in rows
        ]

    async def quarantine(self, provider: str, ref: str | None, raw: str, error: str) -> None:
        """Keep an inbound update that could not be parsed, raw, with the reason."""
        async with self._transaction():
            await self._conn.execute(
                "INSERT INTO quarantine (provider, ref, raw, error, received_at) VALUES (?, ?, ?, ?, ?)",
                (provider, ref, raw, error, time.time()),
            )

    async def quarantined(self, provider: str | None = None) -> list[tuple[str, str | None, str, str]]:
        """(provider, ref, raw, error) of every quarantined update, oldest first."""
        rows = await self._conn.execute_fetchall(
            "SELECT provider, ref, raw, error FROM quarantine WHERE ?1 IS NULL OR provider = ?1 ORDER BY id",
            (provider,),
        )
        return [(row[0], row[1], row[2], row[3]) for row in rows]

    async def quarantine_count(self) -> int:
        return await self._count("SELECT COUNT(*) FROM quarantine")

    async def catch_up_points(self, provider: str, since: float) -> list[tuple[str, str]]:
        """(chat id, newest inbound platform message id) of every chat of `provider` with a message
        received since `since`; ids compare as numbers (Discord snowflakes).

        Our own replies do not count: one posted after a message that was never stored (it came
        during a shutdown) would move the point past that message. Commands count, as received.
        """
        rows = await self._conn.execute_fetchall(
            "SELECT chat_id, MAX(CAST(provider_message_id AS INTEGER)) FROM ("
            "SELECT p.chat_id, p.provider_message_id FROM sessions s "
            "JOIN messages m ON m.session_key = s.key JOIN provider_messages p ON p.message_id = m.id "
            "WHERE s.updated_at >= ?2 AND p.provider = ?1 AND m.created_at >= ?2 AND m.role = 'user' "
            "UNION ALL SELECT chat_id, provider_message_id FROM chat_commands "
            "WHERE provider = ?1 AND received_at >= ?2 AND provider_message_id IS NOT NULL"
            ") GROUP BY chat_id",
            (provider, since),
        )
        return [(str(row[0]), str(row[1])) for row in rows if row[1] is not None]

    async def awaiting_request(self, chat: ChatRef, provider_message_id: str) -> StoredMessage | None:
        """A stored platform message whose turn never finished (the daemon stopped first)."""
        found = await self._conn.execute_fetchall(
            f"SELECT {_qualified_columns('m')} FROM provider_messages p "
            "JOIN messages m ON m.id = p.message_id "
            "WHERE p.provider = ? AND p.chat_id = ? AND p.provider_message_id = ? "
            "AND m.awaiting_reply = 1",
            (chat.provider, chat.chat_id, provider_message_id),
        )
        return next(iter(_rows_to_messages(found)), None)

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
        chat: ChatRef | None = None,
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
            "awaiting_reply, chat_id, thread_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                session_key, role, origin, sender_id, sender_name, text, provider_message_id,
                reply_to_id, json.dumps(list(actions)) if actions else None, job_id,
                created_at, tokens, int(awaiting_reply),
                chat.chat_id if chat else None, chat.thread_id if chat else None,
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
        self, session_key: str, *, before_id: int, limit: int, origin: Origin = "interactive",
        after_id: int = 0,
    ) -> list[StoredMessage]:
        """The newest `limit` messages of one origin with after_id < id < before_id, oldest first.

        Reads stop at the session's context floor (set by /reset).
        """
        sql = (
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_key = ? AND origin = ? "
            "AND id < ? AND id > MAX(?, (SELECT COALESCE((SELECT context_floor FROM sessions "
            "WHERE key = ?), 0))) ORDER BY id DESC LIMIT ?"
        )
        rows = await self._conn.execute_fetchall(
            sql, (session_key, origin, before_id, after_id, session_key, limit)
        )
        return _rows_to_messages(reversed(list(rows)))

    async def scheduled_between(
        self, session_key: str, *, after_id: int, before_id: int, limit: int
    ) -> list[StoredMessage]:
        """Up to `limit` newest scheduled outputs with after_id < id < before_id, oldest first.

        Output whose run did not deliver it (the send failed, or it is still on its way) is left
        out: the user never saw it.
        """
        if limit <= 0:
            return []
        rows = await self._conn.execute_fetchall(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages m WHERE session_key = ? "
            "AND origin = 'scheduled' AND id > ? AND id < ? AND NOT EXISTS (SELECT 1 FROM "
            "schedule_runs r WHERE r.reply_message_id = m.id AND r.status <> 'delivered') "
            "ORDER BY id DESC LIMIT ?",
            (session_key, after_id, before_id, limit),
        )
        return _rows_to_messages(reversed(list(rows)))

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
        return next(iter(_rows_to_messages(found)), None)

    # -- long conversations: recall and compaction -----------------------------------------

    async def search_messages(
        self, session_key: str, text: str, *, before_id: int, limit: int
    ) -> list[StoredMessage]:
        """Up to `limit` interactive messages before `before_id` sharing words with `text`, best first.

        Each content word of `text` is searched as a quoted FTS5 string (user text is never FTS5
        syntax) and the matches ranked by `bot.recall.rank_matches`, which looks only at the
        session's messages in the searched range: the answer never changes as the log grows.
        Reads stop at the session's context floor.
        """
        terms = query_terms(text)
        if limit <= 0 or not terms:
            return []
        found = await self._conn.execute_fetchall(
            "SELECT COALESCE((SELECT context_floor FROM sessions WHERE key = ?), 0)", (session_key,)
        )
        floor = int(next(iter(found))[0])
        if before_id <= floor + 1:
            return []
        hits: list[set[int]] = []
        for term in terms:
            # CROSS JOIN: the full-text index leads (the planner would otherwise scan the session
            # and search the index once per message). A term in more than RECALL_COMMON messages
            # says little about any of them and is left out, which also bounds the work.
            ids = [int(row[0]) for row in await self._conn.execute_fetchall(
                "SELECT m.id FROM messages_fts f CROSS JOIN messages m ON m.id = f.rowid "
                "WHERE messages_fts MATCH ? AND f.rowid > ? AND f.rowid < ? "
                "AND m.session_key = ? AND m.origin = 'interactive' ORDER BY f.rowid DESC LIMIT ?",
                (fts_phrase(term), floor, before_id, session_key, RECALL_COMMON + 1),
            )]
            hits.append(set(ids) if len(ids) <= RECALL_COMMON else set())
        if not any(hits):
            return []
        total = await self._count_interactive(session_key, after_id=floor, before_id=before_id)
        best = rank_matches(hits, total, limit)
        marks = ", ".join("?" * len(best))
        rows = await self._conn.execute_fetchall(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE id IN ({marks})", best
        )
        by_id = {message.id: message for message in _rows_to_messages(rows)}
        return [by_id[message_id] for message_id in best if message_id in by_id]

    async def turn_of(
        self, session_key: str, message_id: int, *, before_id: int, limit: int = 6
    ) -> list[StoredMessage]:
        """The turn an interactive message belongs to, oldest first: the user message it is or that
        it answers, and the replies that followed it (before the next user message and `before_id`).

        Empty when a reply's user message is not above the context floor. At most `limit` messages.
        """
        found = await self._conn.execute_fetchall(
            "SELECT MAX(id) FROM messages WHERE session_key = ?1 AND origin = 'interactive' "
            "AND role = 'user' AND id <= ?2 AND id > (SELECT COALESCE((SELECT context_floor "
            "FROM sessions WHERE key = ?1), 0))",
            (session_key, message_id),
        )
        start = next(iter(found))[0]
        if start is None:
            return []
        rows = await self._conn.execute_fetchall(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_key = ?1 "
            "AND origin = 'interactive' AND id >= ?2 AND id < ?3 AND id < COALESCE((SELECT MIN(id) "
            "FROM messages WHERE session_key = ?1 AND origin = 'interactive' AND role = 'user' "
            "AND id > ?2), ?3) ORDER BY id LIMIT ?4",
            (session_key, int(start), before_id, limit),
        )
        return _rows_to_messages(rows)

    async def _count_interactive(self, session_key: str, *, after_id: int, before_id: int) -> int:
        found = await self._conn.execute_fetchall(
            "SELECT COUNT(*) FROM messages WHERE session_key = ? AND origin = 'interactive' "
            "AND id > ? AND id < ?",
            (session_key, after_id, before_id),
        )
        return int(next(iter(found))[0])

    async def messages_between(
        self, session_key: str, *, after_id: int, before_id: int
    ) -> list[StoredMessage]:
        """Every interactive message with after_id < id < before_id above the context floor."""
        return await self.recent_messages(
            session_key, before_id=before_id, after_id=after_id, limit=-1
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

    async def latest_compaction(self, session_key: str) -> CompactionRecord | None:
        """The session's newest compaction that summarised messages above its context floor."""
        found = await self._conn.execute_fetchall(
            _LATEST_COMPACTION,
            (session_key, session_key),
        )
        row = next(iter(found), None)
        return CompactionRecord(*row) if row else None

    async def compaction_by_id(self, compaction_id: int) -> CompactionRecord | None:
        found = await self._conn.execute_fetchall(
            f"SELECT {_COMPACTION_COLUMNS} FROM compactions WHERE id = ?", (compaction_id,)
        )
        row = next(iter(found), None)
        return CompactionRecord(*row) if row else None

    async def record_compaction(
        self,
        session_key: str,
        *,
        summary: str,
        last_summarised_id: int,
        first_kept_message_id: int,
        tokens_before: int,
        tokens_after: int,
        model: str,
        replaces: int | None,
        notified: bool = False,
    ) -> CompactionRecord | None:
        """Write a compaction built on `replaces` (the latest one when it started, or None).

        None when another compaction of the session was written meanwhile: the caller's summary
        is stale and is dropped rather than hiding the newer one. Compactions at or below the
        context floor (before a /reset) are out of use and do not count.
        """
        async with self._transaction():
            found = await self._conn.execute_fetchall(
                "SELECT MAX(id) FROM compactions WHERE session_key = ? AND last_summarised_id > "
                "(SELECT COALESCE((SELECT context_floor FROM sessions WHERE key = ?), 0))",
                (session_key, session_key),
            )
            latest = next(iter(found))[0]
            if latest is not None and (replaces is None or latest > replaces):
                return None
            cursor = await self._conn.execute(
                "INSERT INTO compactions (session_key, summary, last_summarised_id, "
                "first_kept_message_id, tokens_before, tokens_after, model, created_at, notified) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (session_key, summary, last_summarised_id, first_kept_message_id, tokens_before,
                 tokens_after, model, time.time(), int(notified)),
            )
        return await self.compaction_by_id(cursor.lastrowid or 0)

    async def take_compaction_notice(self, session_key: str) -> CompactionRecord | None:
        """The compaction in use, if the chat was not told about it yet; every one is marked told.

        Summaries already replaced, or out of use since a /reset, are marked without a notice.
        Called every turn: a read, and a write only when some compaction is still untold.
        """
        pending = await self._conn.execute_fetchall(
            "SELECT 1 FROM compactions WHERE session_key = ? AND notified = 0 LIMIT 1", (session_key,)
        )
        if not list(pending):
            return None
        async with self._transaction():
            found = await self._conn.execute_fetchall(
                _LATEST_COMPACTION,
                (session_key, session_key),
            )
            row = next(iter(found), None)
            await self._conn.execute(
                "UPDATE compactions SET notified = 1 WHERE session_key = ? AND notified = 0",
                (session_key,),
            )
        if row is None or row["notified"]:
            return None
        return CompactionRecord(*row)

    # -- scheduled job runs ----------------------------------------------------------------

    async def claim_run(
        self, job_id: str, scheduled_for: float, trigger: RunTrigger = "schedule"
    ) -> tuple[ScheduleRun, bool]:
        """The run record of one job time, and whether this call may (re)start generating it.

        A new time, a requested run or one left `running` by a crash is claimed (status
        `running`); any other record is returned as it is for the caller to honour.
        """
        now = time.time()
        async with self._transaction():
            found = await self._conn.execute_fetchall(
                f"SELECT {_RUN_COLUMNS} FROM schedule_runs WHERE job_id = ? AND scheduled_for = ?",
                (job_id, scheduled_for),
            )
            row = next(iter(found), None)
            if row is None:
                await self._conn.execute(
                    "INSERT INTO schedule_runs (job_id, scheduled_for, trigger, status, started_at) "
                    "VALUES (?, ?, ?, 'running', ?)",
                    (job_id, scheduled_for, trigger, now),
                )
            elif row[4] in ("requested", "running"):
                await self._conn.execute(
                    "UPDATE schedule_runs SET status = 'running', started_at = ? WHERE id = ?",
                    (now, row[0]),
                )
            else:
                return _row_to_run(row), False
            claimed = await self._conn.execute_fetchall(
                f"SELECT {_RUN_COLUMNS} FROM schedule_runs WHERE job_id = ? AND scheduled_for = ?",
                (job_id, scheduled_for),
            )
        return _row_to_run(next(iter(claimed))), True

    async def request_run(self, job_id: str, at: float) -> ScheduleRun:
        """Ask the running daemon to run a job now (`switchboard jobs run ID`)."""
        async with self._transaction():
            cursor = await self._conn.execute(
                "INSERT INTO schedule_runs (job_id, scheduled_for, trigger, status) "
                "VALUES (?, ?, 'manual', 'requested')",
                (job_id, at),
            )
        run = await self.schedule_run_by_id(cursor.lastrowid or 0)
        assert run is not None
        return run

    async def record_scheduled_output(
        self, run_id: int, session_key: str, text: str, *, job_id: str, attempts: int
    ) -> StoredMessage:
        """Store a job's output and mark its run generated, in one transaction, before sending."""
        async with self._transaction():
            stored = await self._insert(
                session_key=session_key, role="assistant", origin="scheduled", text=text,
                created_at=time.time(), job_id=job_id,
            )
            await self._conn.execute(
                "UPDATE schedule_runs SET status = 'generated', reply_message_id = ?, attempts = ? "
                "WHERE id = ?",
                (stored.id, attempts, run_id),
            )
        return stored

    async def finish_run(
        self,
        run_id: int,
        status: RunStatus,
        *,
        error: str | None = None,
        delivered_ids: Sequence[str] = (),
        attempts: int | None = None,
    ) -> None:
        async with self._transaction():
            await self._conn.execute(
                "UPDATE schedule_runs SET status = ?, finished_at = ?, error = ?, "
                "delivered_ids = ?, attempts = COALESCE(?, attempts) WHERE id = ?",
                (status, time.time(), error, json.dumps(list(delivered_ids)) if delivered_ids else None,
                 attempts, run_id),
            )

    async def record_missed(self, job_id: str, times: Sequence[float], reason: str) -> None:
        """Record scheduled times that will not run (down too long, or coalesced into a later run)."""
        if not times:
            return
        now = time.time()
        async with self._transaction():
            await self._conn.executemany(
                "INSERT OR IGNORE INTO schedule_runs (job_id, scheduled_for, trigger, status, "
                "finished_at, error) VALUES (?, ?, 'schedule', 'missed', ?, ?)",
                [(job_id, at, now, reason) for at in times],
            )

    async def schedule_run_by_id(self, run_id: int) -> ScheduleRun | None:
        found = await self._conn.execute_fetchall(
            f"SELECT {_RUN_COLUMNS} FROM schedule_runs WHERE id = ?", (run_id,)
        )
        row = next(iter(found), None)
        return _row_to_run(row) if row else None

    async def schedule_runs(self, job_id: str, limit: int) -> list[ScheduleRun]:
        """A job's newest `limit` runs, newest first (by scheduled time)."""
        rows = await self._conn.execute_fetchall(
            f"SELECT {_RUN_COLUMNS} FROM schedule_runs WHERE job_id = ? "
            "ORDER BY scheduled_for DESC, id DESC LIMIT ?",
            (job_id, limit),
        )
        return [_row_to_run(row) for row in rows]

    async def last_scheduled_time(self, job_id: str) -> float | None:
        """The newest time of the job's own schedule that has a record (manual runs do not count)."""
        found = await self._conn.execute_fetchall(
            "SELECT MAX(scheduled_for) FROM schedule_runs WHERE job_id = ? AND trigger = 'schedule'",
            (job_id,),
        )
        row = next(iter(found), None)
        return float(row[0]) if row and row[0] is not None else None

    async def pending_runs(self, status: RunStatus) -> list[ScheduleRun]:
        """Runs waiting in one state (`requested` by the CLI, `generated` but not delivered)."""
        rows = await self._conn.execute_fetchall(
            f"SELECT {_RUN_COLUMNS} FROM schedule_runs WHERE status = ? ORDER BY scheduled_for, id",
            (status,),
        )
        return [_row_to_run(row) for row in rows]

    async def job_outputs(self, job_id: str, limit: int) -> list[StoredMessage]:
        """The job's newest `limit` delivered outputs, oldest first."""
        if limit <= 0:
            return []
        rows = await self._conn.execute_fetchall(
            f"SELECT {_qualified_columns('m')} FROM schedule_runs r "
            "JOIN messages m ON m.id = r.reply_message_id "
            "WHERE r.job_id = ? AND r.status = 'delivered' ORDER BY r.scheduled_for DESC LIMIT ?",
            (job_id, limit),
        )
        return _rows_to_messages(reversed(list(rows)))

    async def message_by_id(self, message_id: int) -> StoredMessage | None:
        found = await self._conn.execute_fetchall(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE id = ?", (message_id,)
        )
        return next(iter(_rows_to_messages(found)), None)

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
        return _rows_to_messages(reversed(list(rows)))

    async def snapshots(self, session_key: str) -> list[SnapshotRecord]:
        """Every turn's snapshot, numbered from 1; an unreadable one keeps its number but is left out."""
        rows = await self._conn.execute_fetchall(
            "SELECT request_message_id, reply_message_id, created_at, hash, snapshot "
            "FROM context_snapshots WHERE session_key = ? ORDER BY id",
            (session_key,),
        )
        records = []
        for turn, row in enumerate(rows, start=1):
            try:
                snapshot = read_snapshot(row[4])
                if not isinstance(row[0], int) or not isinstance(row[2], int | float) \
                        or not isinstance(row[3], str):
                    raise ValueError("request id, time or hash is malformed")
            except (ValueError, TypeError, RecursionError) as exc:
                log.warning("unreadable context snapshot skipped", session_key=session_key,
                            turn=turn, error=str(exc))
                continue
            records.append(SnapshotRecord(turn, row[0], row[1], row[2], row[3], snapshot))
        return records

    async def snapshot_count(self, session_key: str) -> int:
        """How many turns of a session have a snapshot, readable or not (the newest turn's number)."""
        found = await self._conn.execute_fetchall(
            "SELECT COUNT(*) FROM context_snapshots WHERE session_key = ?", (session_key,)
        )
        return int(next(iter(found))[0])

    # -- operations: integrity, backup, pruning --------------------------------------------------

    @staticmethod
    def damaged(path: Path, detail: str) -> StoreError:
        """The error for a database file SQLite finds damaged, saying what to do about it."""
        return StoreError(
            f"database {path} is damaged ({detail}); stop the daemon, move the file aside and "
            "restore the newest backup (`switchboard db backup` makes them), or start afresh"
        )

    async def check_integrity(self) -> None:
        """`PRAGMA quick_check`: StoreError naming the file when SQLite finds it damaged."""
        try:
            rows = await self._conn.execute_fetchall("PRAGMA quick_check")
        except sqlite3.DatabaseError as exc:
            raise Store.damaged(self.path, str(exc)) from exc
        problems = [str(row[0]) for row in rows if row[0] != "ok"]
        if problems:
            shown = "; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else "")
            raise Store.damaged(self.path, shown)

    async def backup_to(self, target: Path) -> None:
        """Copy the whole database, consistent as of one moment, into a new file (mode 0600).

        SQLite's online backup reads under a read transaction, so a running daemon keeps writing.
        """
        fd = os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(fd)
        copy = await aiosqlite.connect(target)
        try:
            await self._conn.backup(copy)
        finally:
            await copy.close()

    async def prune_interactive(
        self, before: float, *, keep_recent: int, keep_turns: dict[str, int], dry_run: bool = False
    ) -> PruneReport:
        """Delete interactive messages older than `before` that no limit can still reach.

        Kept in every session: the newest `keep_recent` interactive messages (what a turn reads),
        everything from the `keep_turns[session]`-th newest user message on, requests still
        waiting for a reply, scheduled outputs, and any message another table refers to (other
        than the platform ids and context snapshots, which go with their message).
        """
        async with self._transaction():
            await self._conn.execute("CREATE TEMP TABLE IF NOT EXISTS prune_ids (id INTEGER PRIMARY KEY)")
            await self._conn.execute("DELETE FROM temp.prune_ids")
            guards = "".join(
                f" AND id NOT IN (SELECT {column} FROM {table} WHERE {column} IS NOT NULL)"
                for table, column in await self._references_to_messages()
            )
            keys = [str(row[0]) for row in await self._conn.execute_fetchall("SELECT key FROM sessions")]
            for key in keys:
                floor = await self._nth_newest_id(key, keep_recent, users_only=False)
                turns = keep_turns.get(key, 0)
                if turns > 0:
                    floor = min(floor, await self._nth_newest_id(key, turns, users_only=True))
                await self._conn.execute(
                    "INSERT INTO temp.prune_ids SELECT id FROM messages WHERE session_key = ? "
                    "AND origin = 'interactive' AND created_at < ? AND id < ? AND awaiting_reply = 0"
                    + guards,
                    (key, before, floor),
                )
            per_session = {
                str(row[0]): int(row[1]) for row in await self._conn.execute_fetchall(
                    "SELECT session_key, COUNT(*) FROM messages WHERE id IN (SELECT id FROM temp.prune_ids) "
                    "GROUP BY session_key ORDER BY session_key"
                )
            }
            snapshot_filter = (
                "FROM context_snapshots WHERE request_message_id IN (SELECT id FROM temp.prune_ids) "
                "OR reply_message_id IN (SELECT id FROM temp.prune_ids)"
            )
            snapshots = await self._count(f"SELECT COUNT(*) {snapshot_filter}")
            if not dry_run:
                await self._conn.execute(f"DELETE {snapshot_filter}")
                await self._conn.execute(
                    "DELETE FROM provider_messages WHERE message_id IN (SELECT id FROM temp.prune_ids)")
                for key in per_session:
                    await self._conn.execute(
                        "UPDATE sessions SET message_count = message_count - (SELECT COUNT(*) "
                        "FROM messages WHERE session_key = ?1 AND id IN (SELECT id FROM temp.prune_ids)), "
                        "user_turns = user_turns - (SELECT COUNT(*) FROM messages WHERE session_key = ?1 "
                        "AND role = 'user' AND id IN (SELECT id FROM temp.prune_ids)) WHERE key = ?1",
                        (key,),
                    )
                await self._conn.execute("DELETE FROM messages WHERE id IN (SELECT id FROM temp.prune_ids)")
            await self._conn.execute("DELETE FROM temp.prune_ids")
        return PruneReport(per_session, snapshots, dry_run)

    async def _nth_newest_id(self, session_key: str, n: int, *, users_only: bool) -> int:
        """Id of the n-th newest interactive (user) message of a session; 0 when it has fewer."""
        if n <= 0:
            return _NO_ID_ABOVE
        found = await self._conn.execute_fetchall(
            "SELECT id FROM messages WHERE session_key = ? AND origin = 'interactive'"
            + (" AND role = 'user'" if users_only else "") + " ORDER BY id DESC LIMIT 1 OFFSET ?",
            (session_key, n - 1),
        )
        row = next(iter(found), None)
        return int(row[0]) if row else 0

    async def _references_to_messages(self) -> list[tuple[str, str]]:
        """(table, column) of every foreign key to messages.id, except those pruning cleans up."""
        tables = [str(row[0]) for row in await self._conn.execute_fetchall(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        found: list[tuple[str, str]] = []
        for table in tables:
            if table in ("messages", "provider_messages", "context_snapshots"):
                continue
            for ref in await self._conn.execute_fetchall(f'PRAGMA foreign_key_list("{table}")'):
                if ref["table"] == "messages":
                    found.append((f'"{table}"', f'"{ref["from"]}"'))
        return found

    async def _count(self, sql: str) -> int:
        found = await self._conn.execute_fetchall(sql)
        row = next(iter(found), None)
        return int(row[0]) if row else 0

    async def foreign_key_problems(self) -> int:
        """Rows whose foreign key points nowhere (`PRAGMA foreign_key_check`); 0 in a sound file."""
        return len(list(await self._conn.execute_fetchall("PRAGMA foreign_key_check")))

    async def message_count(self) -> int:
        return await self._count("SELECT COUNT(*) FROM messages")


def _statements(sql: str) -> list[str]:
    """Split a migration into statements; a trigger body's own semicolons stay inside it."""
    statements: list[str] = []
    pending = ""
    for part in sql.split(";"):
        pending += part + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                statements.append(pending.strip())
            pending = ""
    return statements


def _qualified_columns(alias: str) -> str:
    return ", ".join(f"{alias}.{name.strip()}" for name in _MESSAGE_COLUMNS.split(","))


def _rows_to_messages(rows: Iterable[Any]) -> list[StoredMessage]:
    """Messages from rows; a malformed row is skipped with a warning instead of failing the read."""
    messages = []
    for row in rows:
        try:
            messages.append(_row_to_message(row))
        except (ValueError, TypeError, IndexError, RecursionError) as exc:
            log.warning("malformed message row skipped", message_id=row[0], error=str(exc))
    return messages


def _row_to_message(row: Any) -> StoredMessage:
    """One message from a row, or ValueError when a column holds what no write path stores."""
    actions = json.loads(row[10]) if row[10] else []
    if not isinstance(actions, list) or not all(isinstance(action, str) for action in actions):
        raise ValueError("actions is not a JSON list of strings")
    if not isinstance(row[4], str) or row[2] not in ("user", "assistant") \
            or row[3] not in ("interactive", "scheduled"):
        raise ValueError("text, role or origin is malformed")
    # SQLite keeps whatever a column is given: the context's arithmetic needs real numbers.
    if not isinstance(row[5], int | float) or not isinstance(row[12], int) or row[12] < 0:
        raise ValueError("created_at or token_estimate is not a number")
    return StoredMessage(
        id=row[0], session_key=row[1], role=row[2], origin=row[3], text=row[4],
        created_at=float(row[5]), sender_id=row[6], sender_name=row[7], provider_message_id=row[8],
        reply_to_id=row[9], actions=tuple(actions), job_id=row[11], token_estimate=row[12],
        unanswered=row[13],
    )


def _row_to_run(row: Any) -> ScheduleRun:
    return ScheduleRun(
        id=row[0], job_id=row[1], scheduled_for=row[2], trigger=row[3], status=row[4],
        started_at=row[5], finished_at=row[6], attempts=row[7], reply_message_id=row[8],
        delivered_ids=tuple(json.loads(row[9])) if row[9] else (), error=row[10],
    )
