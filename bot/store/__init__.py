"""The store: conversation history and the daemon's durable work behind one interface, all SQL inside.

`Store` is one SQLite connection (`connection`) with the methods of every concern mixed in, each
concern a module of its own; the values it hands out are in `records`. `postgres.PostgresStore` is
the same store on PostgreSQL, and `opening.open_store(config)` opens whichever the config names.
"""

from __future__ import annotations

from bot.store.compactions import Compactions
from bot.store.context_reads import ContextReads
from bot.store.delivery import Delivery
from bot.store.embeddings import Embeddings
from bot.store.history_search import HistorySearch
from bot.store.leases import Instance, Leases
from bot.store.maintenance import Maintenance
from bot.store.messages import Messages
from bot.store.pairings import Pairing, PairingError, Pairings, PairingState
from bot.store.people import People, UserNote
from bot.store.recall import RECALL_COMMON, Recall
from bot.store.records import (
    CompactionRecord,
    PendingCommand,
    PendingDelivery,
    PendingRequest,
    PruneReport,
    RunStatus,
    RunTrigger,
    ScheduleRun,
    SessionSummary,
    SnapshotRecord,
    delivery_key,
)
from bot.store.reminders import Reminder, ReminderLimitError, Reminders, ReminderStatus, reminder_id
from bot.store.schedule_runs import ScheduleRuns
from bot.store.sends_in_doubt import SendsInDoubt, SendsNearby
from bot.store.snapshots import Snapshots
from bot.store.tables import Tables
from bot.store.tool_calls import StoredToolCall, ToolCalls
from bot.store.usage import Usage, UsageRecord


class Store(
    Messages, ContextReads, Recall, Embeddings, Delivery, Snapshots, Compactions, ScheduleRuns,
    Maintenance, Pairings, Usage, ToolCalls, People, HistorySearch, Reminders, Leases, Tables,
    SendsInDoubt,
):
    """Conversation history in one SQLite file (WAL, foreign keys on, mode 0600).

    Open it with `Store.open(path)`; a file that cannot be opened, is damaged or has a newer
    schema raises StoreError.
    """


__all__ = [
    "RECALL_COMMON",
    "CompactionRecord",
    "Instance",
    "Pairing",
    "PairingError",
    "PairingState",
    "PendingCommand",
    "PendingDelivery",
    "PendingRequest",
    "PruneReport",
    "Reminder",
    "ReminderLimitError",
    "ReminderStatus",
    "RunStatus",
    "RunTrigger",
    "ScheduleRun",
    "SendsNearby",
    "SessionSummary",
    "SnapshotRecord",
    "Store",
    "StoredToolCall",
    "UsageRecord",
    "UserNote",
    "delivery_key",
    "reminder_id",
]
