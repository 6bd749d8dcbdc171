"""Durable intake and delivery: awaiting requests, outbox, chat commands, quarantine, catch-up points.

All of it is what a restart picks up, so nothing received or answered is lost in a crash.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Literal

from bot.core.messages import ChatRef, InboundMessage, OutboundMessage, StoredMessage
from bot.core.session_key import parse as parse_session_key
from bot.store.database import Database
from bot.store.messages import MESSAGE_COLUMNS, link_platform_id, qualified_columns, rows_to_messages
from bot.store.records import PendingCommand, PendingDelivery, PendingRequest, delivery_key

# Where the columns selected after a message's own begin.
_AFTER = len(MESSAGE_COLUMNS.split(","))


class Delivery(Database):
    """Requests still waiting, replies still to send, commands still to run, updates kept aside."""

    # -- requests waiting for a reply -----------------------------------------------------------

    async def awaiting_requests(
        self, session_key: str | None = None, *, before: int | None = None, unleased_at: float | None = None,
    ) -> list[PendingRequest]:
        """Every stored request still waiting for a reply, oldest first, with its chat; only one
        session's, only those older than message `before`, and only those of sessions whose lease
        (`bot.store.leases`) is free, expired at time `unleased_at` or its owner's gone, when given."""
        rows = await self._conn.execute_fetchall(
            f"SELECT {MESSAGE_COLUMNS}, chat_id, thread_id, (SELECT p.chat_id FROM provider_messages p "
            "WHERE p.message_id = messages.id LIMIT 1) FROM messages WHERE awaiting_reply = 1 "
            "AND (CAST(? AS TEXT) IS NULL OR session_key = ?) AND id < ? "
            f"AND (CAST(? AS DOUBLE PRECISION) IS NULL OR NOT {self._held('messages.session_key')}) "
            "ORDER BY id",
            (session_key, session_key, before if before is not None else 2**62, unleased_at, unleased_at),
        )
        pending = []
        for row in rows:
            for message in rows_to_messages([row]):
                provider = parse_session_key(message.session_key).provider
                chat_id = row[_AFTER] or row[_AFTER + 2] or ("local" if provider == "console" else None)
                chat = ChatRef(provider, chat_id, row[_AFTER + 1]) if chat_id is not None else None
                pending.append(PendingRequest(message, chat))
        return pending

    async def awaiting_request(self, chat: ChatRef, provider_message_id: str) -> StoredMessage | None:
        """A stored platform message whose turn never finished (the daemon stopped first)."""
        found = await self._conn.execute_fetchall(
            f"SELECT {qualified_columns('m')} FROM provider_messages p "
            "JOIN messages m ON m.id = p.message_id "
            "WHERE p.provider = ? AND p.chat_id = ? AND p.provider_message_id = ? "
            "AND m.awaiting_reply = 1",
            (chat.provider, chat.chat_id, provider_message_id),
        )
        return next(iter(rows_to_messages(found)), None)

    async def abandon_request(self, message_id: int, reason: str = "stopped") -> None:
        """A request that will not be answered (`stopped` by /stop, `late`): it no longer waits."""
        async with self._one_write():
            await self._conn.execute(
                "UPDATE messages SET awaiting_reply = 0, unanswered = ? WHERE id = ? "
                "AND awaiting_reply = 1",
                (reason, message_id),
            )

    async def record_preview(self, request_id: int, provider_message_id: str) -> None:
        """A message posted to show the reply to this request while it is written (a preview)."""
        async with self._one_write():
            await self._conn.execute(
                "UPDATE messages SET preview_id = ? WHERE id = ?", (provider_message_id, request_id)
            )

    async def preview_of(self, request_id: int) -> str | None:
        """The preview message an earlier run posted for this request, if any (see record_preview)."""
        rows = await self._conn.execute_fetchall(
            "SELECT preview_id FROM messages WHERE id = ?", (request_id,)
        )
        return next((str(row[0]) for row in rows if row[0] is not None), None)

    async def preview_taken(self, chat: ChatRef, provider_message_id: str) -> bool:
        """Whether a stored reply in the chat is (or is about to be) that preview message: sent as
        it, or waiting in the outbox to be edited into it (another instance that answered the
        request picked up the preview this one posted)."""
        rows = await self._conn.execute_fetchall(
            "SELECT EXISTS (SELECT 1 FROM provider_messages WHERE provider = ?1 AND chat_id = ?2 "
            "AND provider_message_id = ?3) OR EXISTS (SELECT 1 FROM outbox WHERE provider = ?1 "
            "AND chat_id = ?2 AND preview_id = ?3)",
            (chat.provider, chat.chat_id, provider_message_id),
        )
        return bool(next(iter(rows))[0])

    # -- replies on their way: the outbox -------------------------------------------------------

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
                await link_platform_id(self._conn, chat, provider_id, message_id)

    async def note_delivery_failed(self, message_id: int) -> None:
        """A send of this reply failed for a passing reason: it stays in the outbox, and the
        session's next turn may go ahead of it (`SendsInDoubt.sends_nearby` then doubts more)."""
        async with self._one_write():
            await self._conn.execute("UPDATE outbox SET failed_at = ? WHERE message_id = ?",
                                     (time.time(), message_id))

    async def finish_delivery(self, message_id: int) -> None:
        """The reply left the outbox: every chunk was delivered, or it never will be."""
        async with self._one_write():
            await self._conn.execute("DELETE FROM outbox WHERE message_id = ?", (message_id,))

    async def pending_deliveries(
        self, message_id: int | None = None, *, session_key: str | None = None
    ) -> list[PendingDelivery]:
        """Replies in the outbox, oldest first, each to be sent from its first undelivered chunk
        (only reply `message_id`, if it is still there, or only one session's, when given)."""
        rows = await self._conn.execute_fetchall(
            "SELECT o.message_id, m.session_key, o.created_at, o.provider, o.chat_id, o.thread_id, "
            "o.reply_to_id, o.text, o.chunks_sent, o.preview_id FROM outbox o "
            "JOIN messages m ON m.id = o.message_id WHERE (CAST(? AS BIGINT) IS NULL OR o.message_id = ?) "
            "AND (CAST(? AS TEXT) IS NULL OR m.session_key = ?) ORDER BY o.message_id",
            (message_id, message_id, session_key, session_key),
        )
        return [
            PendingDelivery(row[0], row[1], row[2], OutboundMessage(
                ChatRef(row[3], row[4], row[5]), row[7], row[6], delivery_key=delivery_key(row[0]),
                skip_chunks=row[8], preview_id=row[9],
            ))
            for row in rows
        ]

    # -- chat commands --------------------------------------------------------------------------

    async def append_command(
        self, inbound: InboundMessage, command: str, status: Literal["pending", "done"] = "pending"
    ) -> PendingCommand | None:
        """Record a chat command (`pending` until it has run, or `done` for one answered at once,
        kept only so a redelivery is recognised); None for a redelivery."""
        chat = inbound.chat
        async with self._transaction():
            found = await self._conn.execute_fetchall(
                "INSERT INTO chat_commands (session_key, provider, chat_id, thread_id, "
                "sender_id, sender_name, provider_message_id, command, text, sent_at, received_at, "
                "after_message_id, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                "(SELECT COALESCE(MAX(id), 0) FROM messages), ?) ON CONFLICT DO NOTHING "
                "RETURNING id, after_message_id, received_at",
                (str(inbound.session_key), chat.provider, chat.chat_id, chat.thread_id, inbound.sender_id,
                 inbound.sender_name, inbound.provider_message_id, command, inbound.text,
                 inbound.sent_at, time.time(), status),
            )
        row = next(iter(found), None)
        if row is None:  # a redelivery
            return None
        return PendingCommand(int(row[0]), int(row[1]), float(row[2]), inbound)

    async def command_pending(self, command_id: int) -> bool:
        """Whether a recorded command still waits to be run (another instance may have run it)."""
        rows = await self._conn.execute_fetchall(
            "SELECT 1 FROM chat_commands WHERE id = ? AND status = 'pending'", (command_id,)
        )
        return bool(list(rows))

    async def finish_command(self, command_id: int, status: Literal["done", "late"] = "done") -> None:
        async with self._one_write():
            await self._conn.execute(
                "UPDATE chat_commands SET status = ? WHERE id = ?", (status, command_id)
            )

    async def pending_commands(self, *, unleased_at: float | None = None) -> list[PendingCommand]:
        """Commands received but not yet run, oldest first; only those of sessions whose lease is
        free, expired at time `unleased_at` or its owner's gone, when given (see `awaiting_requests`)."""
        rows = await self._conn.execute_fetchall(
            "SELECT id, after_message_id, received_at, session_key, provider, chat_id, thread_id, "
            "sender_id, sender_name, provider_message_id, command, text, sent_at FROM chat_commands c "
            "WHERE status = 'pending' AND (CAST(? AS DOUBLE PRECISION) IS NULL OR NOT "
            f"{self._held('c.session_key')}) ORDER BY id",
            (unleased_at, unleased_at),
        )
        return [
            PendingCommand(row[0], row[1], row[2], InboundMessage(
                session_key=parse_session_key(row[3]), chat=ChatRef(row[4], row[5], row[6]),
                sender_id=row[7], sender_name=row[8], text=row[11], provider_message_id=row[9],
                sent_at=row[12], command=row[10],
            ))
            for row in rows
        ]

    # -- updates that could not be parsed, and where to catch up from ---------------------------

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
            "SELECT provider, ref, raw, error FROM quarantine "
            "WHERE CAST(?1 AS TEXT) IS NULL OR provider = ?1 ORDER BY id",
            (provider,),
        )
        return [(row[0], row[1], row[2], row[3]) for row in rows]

    async def quarantine_count(self) -> int:
        return await self._count("SELECT COUNT(*) FROM quarantine")

    async def catch_up_points(self, provider: str, since: float) -> list[tuple[str, str]]:
        """(chat id, newest inbound platform message id) of every chat of `provider` with a message
        received since `since`; ids compare as numbers (Discord snowflakes, Slack's "1700000000.000100"
        ts, which SQLite gives back as a float in its shortest form, "1700000000.0001").

        Our own replies do not count: one posted after a message that was never stored (it came
        during a shutdown) would move the point past that message. Commands count, as received.
        """
        rows = await self._conn.execute_fetchall(
            "SELECT chat_id, MAX(CAST(provider_message_id AS NUMERIC)) FROM ("
            "SELECT p.chat_id, p.provider_message_id FROM sessions s "
            "JOIN messages m ON m.session_key = s.key JOIN provider_messages p ON p.message_id = m.id "
            "WHERE s.updated_at >= ?2 AND p.provider = ?1 AND m.created_at >= ?2 AND m.role = 'user' "
            "UNION ALL SELECT chat_id, provider_message_id FROM chat_commands "
            "WHERE provider = ?1 AND received_at >= ?2 AND provider_message_id IS NOT NULL"
            ") AS received GROUP BY chat_id",
            (provider, since),
        )
        return [(str(row[0]), str(row[1])) for row in rows if row[1] is not None]
