"""A turn's commit in one write: the reply with its outbox row, the usage of its model calls, its
tool calls linked to it and its context snapshot, in one transaction.

On SQLite that is one item of the connection's thread (`Database._batch`); PostgreSQL's store
writes it all in one statement instead (`postgres/turn_commits.py`), one round trip.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import aiosqlite

from bot.core.messages import OutboundMessage, StoredMessage
from bot.store.database import Database
from bot.store.messages import reply_written
from bot.store.usage import UsageRecord

# The usage rows in one statement: their ids in the order the calls were spent.
_USAGE = ("INSERT INTO model_usage (session_key, user_id, kind, model, input_tokens, output_tokens, "
          "cache_write_tokens, cache_read_tokens, created_at) VALUES ")
_USAGE_ROW = "(?, ?, ?, ?, ?, ?, ?, ?, ?)"
_LINK = "UPDATE tool_calls SET reply_id = ? WHERE request_id = ? AND reply_id IS NULL"
_SNAPSHOT = ("INSERT INTO context_snapshots (session_key, request_message_id, reply_message_id, "
             "created_at, hash, snapshot) VALUES (?, ?, ?, ?, ?, ?)")


class TurnCommits(Database):
    """The one write that commits an answered turn."""

    async def commit_turn(
        self, session_key: str, text: str, *, request_id: int, deliver: OutboundMessage,
        fallback: bool, actions: Sequence[str], usage: Sequence[UsageRecord], link_tool_calls: bool,
        snapshot: dict[str, Any] | None, snapshot_hash: str,
    ) -> StoredMessage:
        """`append_reply` (for `request_id`, into the outbox as `deliver`), each `record_usage`,
        `attach_tool_calls` when `link_tool_calls`, and `record_snapshot` when `snapshot` is
        given: all stored, or (on an error, AlreadyAnsweredError among them) none."""
        document = json.dumps(snapshot, sort_keys=True) if snapshot is not None else None

        async def written(conn: aiosqlite.Connection) -> StoredMessage:
            reply = await reply_written(conn, session_key, text, actions, "interactive", None,
                                        request_id, deliver, fallback)
            records: list[tuple[str, tuple[Any, ...]]] = []
            if usage:
                records.append((_USAGE + ", ".join([_USAGE_ROW] * len(usage)), tuple(
                    value for u in usage for value in (
                        u.session_key, u.user_id, u.kind, u.model, u.input_tokens, u.output_tokens,
                        u.cache_write_tokens, u.cache_read_tokens, u.created_at or time.time()))))
            if link_tool_calls:
                records.append((_LINK, (reply.id, request_id)))
            if document is not None:
                records.append((_SNAPSHOT, (session_key, request_id, reply.id, time.time(),
                                            snapshot_hash, document)))
            for sql, params in records:
                await conn.execute(sql, params)
            return reply

        return await self._batch(written)

