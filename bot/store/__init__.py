"""The store: conversation history and the daemon's durable work behind one interface, all SQL inside.

`base.Store` is the shared store: a module per concern (`messages`, `delivery`, `leases`, …) mixed
together over one connection, the statements that differ between backends in one `dialect` value.
`SqliteStore` (`sqlite/`: one file, the embedded default) and `PostgresStore` (`postgres/`: a
server several daemons share) are its two siblings; `open_store(config)` opens whichever the
config names. The values it hands out are in `records`; each backend's numbered migrations are SQL
files in its package (`schema`).
"""

from __future__ import annotations

from bot.store.base import Store
from bot.store.leases import Instance
from bot.store.opening import open_store
from bot.store.pairings import Pairing, PairingError, PairingState
from bot.store.people import UserNote
from bot.store.postgres import PostgresStore
from bot.store.recall import RECALL_COMMON
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
from bot.store.reminders import Reminder, ReminderLimitError, ReminderStatus, reminder_id
from bot.store.sends_in_doubt import SendsNearby
from bot.store.sqlite import SqliteStore
from bot.store.tool_calls import StoredToolCall
from bot.store.turn_openings import TurnOpening
from bot.store.usage import USAGE_KEYS, UsageRecord, UsageSum

__all__ = [
    "RECALL_COMMON",
    "USAGE_KEYS",
    "CompactionRecord",
    "Instance",
    "Pairing",
    "PairingError",
    "PairingState",
    "PendingCommand",
    "PendingDelivery",
    "PendingRequest",
    "PostgresStore",
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
    "SqliteStore",
    "Store",
    "StoredToolCall",
    "TurnOpening",
    "UsageRecord",
    "UsageSum",
    "UserNote",
    "delivery_key",
    "open_store",
    "reminder_id",
]
