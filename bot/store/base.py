"""The shared store: every concern's methods on one connection, the part SQLite and PostgreSQL share.

`Store` mixes the concern modules together; it is abstract: `sqlite.SqliteStore` and
`postgres.PostgresStore` are its two siblings, each writing what `database.Database` (and the
concerns) leave to the backend, and each reading its dialect's statements (`dialect`).
"""

from __future__ import annotations

import asyncio
import os
from abc import abstractmethod
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

from bot.store.compactions import Compactions
from bot.store.cursors import Cursors
from bot.store.delivery import Delivery
from bot.store.embeddings import Embeddings
from bot.store.history_search import HistorySearch
from bot.store.leases import Leases
from bot.store.maintenance import Maintenance
from bot.store.messages import Messages
from bot.store.pairings import Pairings
from bot.store.people import People
from bot.store.recall import Recall
from bot.store.records import ContextRead, LexicalFound
from bot.store.reminders import Reminders
from bot.store.schedule_runs import ScheduleRuns
from bot.store.sends_in_doubt import SendsInDoubt
from bot.store.snapshots import Snapshots
from bot.store.tables import Tables
from bot.store.tool_calls import ToolCalls
from bot.store.turn_commits import TurnCommits
from bot.store.turn_openings import TurnOpenings
from bot.store.usage import Usage
from bot.store.web_accounts import WebAccounts
from bot.store.web_chat import WebChatReads

if TYPE_CHECKING:
    from bot.store.sqlite import SqliteStore


class Store(
    Messages, Recall, Embeddings, Delivery, Snapshots, Compactions, ScheduleRuns, Maintenance,
    Pairings, Usage, ToolCalls, People, HistorySearch, Reminders, Leases, Tables, SendsInDoubt,
    WebAccounts, WebChatReads, TurnOpenings, TurnCommits, Cursors,
):
    """Conversation history and the daemon's durable work, on either backend."""

    @staticmethod
    def open(path: str | os.PathLike[str]) -> AbstractAsyncContextManager[SqliteStore]:
        """The embedded store: `SqliteStore.open(path)`, the file opened (created, migrated) on
        entry and closed on exit."""
        from bot.store.sqlite import SqliteStore

        return SqliteStore.open(path)

    @abstractmethod
    async def context_reads(
        self, session_key: str, *, before_id: int, limit: int, request_id: int,
        scheduled: int, compaction: bool,
    ) -> ContextRead:
        """`latest_compaction` (None unless `compaction`), `scheduled_between(after_id=None,
        before_id=request_id, limit=scheduled)` and `recent_messages(before_id=before_id,
        limit=limit)`, in one read; and, where the store reads it in the same go (SQLite), when
        that history holds messages after the request, `recent_messages(before_id=request_id,
        limit=limit)` (else None: the build reads it apart when needed)."""

    async def context_and_recall(
        self, session_key: str, *, before_id: int, limit: int, request_id: int,
        scheduled: int, compaction: bool, text: str, recall_before: int, recall_limit: int,
        expand: int = 0,
    ) -> tuple[ContextRead, LexicalFound]:
        """`context_reads` (the same arguments) and `lexical_turns(session_key, text,
        before_id=recall_before, limit=recall_limit, expand=expand)`, both asked at once: on
        PostgreSQL each on a pooled connection of its own; SQLite answers both in one hand-off to
        its thread."""
        reads, found = await asyncio.gather(
            self.context_reads(session_key, before_id=before_id, limit=limit, request_id=request_id,
                               scheduled=scheduled, compaction=compaction),
            self.lexical_turns(session_key, text, before_id=recall_before, limit=recall_limit,
                               expand=expand),
        )
        return reads, found
