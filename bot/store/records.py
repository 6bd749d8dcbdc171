"""The values the store hands out: sessions, pending work, snapshots, compactions and job runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from bot.core.messages import ChatRef, InboundMessage, OutboundMessage, StoredMessage


def delivery_key(message_id: int) -> str:
    """The stable name of a stored reply's delivery (Discord derives each chunk's nonce from it)."""
    return f"sb{message_id}"


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One session's counters, as the admin commands list them."""

    key: str
    created_at: float
    updated_at: float
    message_count: int
    user_turns: int


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
    """The context one turn was answered from, numbered from the session's first turn."""

    turn: int
    request_message_id: int
    reply_message_id: int | None
    created_at: float
    hash: str
    snapshot: dict[str, Any]


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


# What a context build reads: the compaction in use (or None), the scheduled block, the newest
# history and, where the store reads it in the same go, the newest history before the request
# when messages were stored after it (else None: read apart when needed) (`context_reads`); and
# lexical recall's matches, (message id, score) best first, with each one's turn by its id
# (`lexical_turns`).
ContextRead = tuple[
    CompactionRecord | None, list[StoredMessage], list[StoredMessage], list[StoredMessage] | None]
LexicalFound = tuple[list[tuple[int, float]], dict[int, list[StoredMessage]]]

RunStatus = Literal[
    "requested", "running", "generated", "delivered", "quiet", "failed", "missed", "stale"
]
RunTrigger = Literal["schedule", "manual"]


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
    owner: str | None = None  # the instance that claimed it (daemons sharing a store)


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What `prune_interactive` removed (or, on a dry run, would remove)."""

    messages_by_session: dict[str, int]
    snapshots: int
    dry_run: bool

    @property
    def messages(self) -> int:
        return sum(self.messages_by_session.values())
