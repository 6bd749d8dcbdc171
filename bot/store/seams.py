"""What each consumer of the store uses of it, as a Protocol each: the narrow seams.

A consumer takes the protocol of what it calls (the outbox an `OutboxStore`, the context builder
`ContextReads`, a job's run a `RunLedger`, …), not the whole `Store`: a reader sees what it
touches, and a fake for its tests implements only that. Each lists the store's own methods, their
signatures as `Store` has them; a consumer that hands the store on takes a protocol that includes
what the next one needs. Only the daemon's assembly (and the CLI) hold the whole store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Collection, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from datetime import tzinfo

    from bot.core.messages import ChatRef, InboundMessage, Origin, StoredMessage
    from bot.store.embeddings import VectorRow
    from bot.store.leases import Instance
    from bot.store.pairings import PairingState
    from bot.store.people import UserNote
    from bot.store.records import (
        CompactionRecord,
        ContextRead,
        LexicalFound,
        PendingCommand,
        PendingDelivery,
        PendingRequest,
        RunStatus,
        RunTrigger,
        ScheduleRun,
        SessionSummary,
        SnapshotRecord,
    )
    from bot.store.reminders import Reminder, ReminderStatus
    from bot.store.sends_in_doubt import SendsNearby
    from bot.store.tool_calls import StoredToolCall
    from bot.store.turn_starts import P, Planner, TurnStarts
    from bot.store.usage import UsageRecord, UsageSum


class EmbeddingWrites(Protocol):
    """The embed worker's: work to do, vectors kept, sessions warmed."""

    async def pending_embeddings(
        self, model: str, *, after_id: int = 0, limit: int = 256
    ) -> list[StoredMessage]: ...
    async def save_embeddings(self, model: str, rows: Sequence[VectorRow]) -> int: ...
    async def warm_embeddings(self, model: str, *, sessions: int) -> int: ...


class SemanticReads(Protocol):
    """Semantic recall's: vectors kept and searched within a session."""

    async def save_embeddings(self, model: str, rows: Sequence[VectorRow]) -> int: ...
    async def semantic_matches_of(
        self, session_key: str, message_id: int, *, model: str, limit: int
    ) -> list[tuple[int, float]] | None: ...
    async def semantic_matches_counted(
        self, session_key: str, message_id: int, *, model: str, limit: int
    ) -> tuple[list[tuple[int, float]] | None, int]: ...
    async def semantic_matches(
        self, session_key: str, query: Sequence[float], *, model: str, before_id: int, limit: int
    ) -> list[tuple[int, float]]: ...
    async def semantic_neighbours(
        self, session_key: str, message_ids: Sequence[int], *, model: str, before_id: int, limit: int
    ) -> list[list[tuple[int, float]]]: ...


class ToolCallLedger(Protocol):
    """The tool loop's: each round's calls before they run, their results after."""

    async def begin_tool_round(
        self, session_key: str, request_id: int, round_number: int, text: str,
        calls: Sequence[tuple[str, str, dict[str, Any]]],
    ) -> list[int]: ...
    async def finish_tool_call(
        self, call_id: int, *, result: str, summary: str, is_error: bool, duration_ms: float
    ) -> None: ...
    async def open_tool_calls(self, request_id: int) -> list[StoredToolCall]: ...


class SnapshotReads(Protocol):
    """Replay's: the snapshots of a session and the messages they name."""

    async def message_by_id(self, message_id: int) -> StoredMessage | None: ...
    async def snapshot_count(self, session_key: str) -> int: ...
    async def snapshots(self, session_key: str) -> list[SnapshotRecord]: ...
    async def snapshot_of_turn(self, session_key: str, turn: int) -> list[SnapshotRecord]: ...


class PairingLedger(Protocol):
    """Pairing's: requests, approvals and the welcomes they are owed."""

    async def mark_welcomed(self, provider: str, user_id: str, *, now: float) -> None: ...
    async def request_pairing(
        self, provider: str, user_id: str, user_name: str | None, *, now: float, ttl: float,
        notice_interval: float, chat_id: str | None = None,
    ) -> PairingState: ...
    async def unwelcomed_approvals(self) -> list[tuple[str, str, str]]: ...


class RunClaims(Protocol):
    """Who may run a scheduled time: the instances alive and the claims they hold."""

    @staticmethod
    def at_work_elsewhere(run: ScheduleRun, me: str | None, live: frozenset[str]) -> bool: ...
    async def claimants(self) -> tuple[str | None, frozenset[str]]: ...


class RunLedger(RunClaims, Protocol):
    """A job's run: its time claimed once, its output stored and delivered at most once, recorded
    (the model call's tokens too, `bot.models.usage.record_usage`)."""

    async def claim_run(
        self, job_id: str, scheduled_for: float, trigger: RunTrigger = "schedule", *,
        owner: str | None = None, live: Collection[str] = (),
    ) -> tuple[ScheduleRun, bool]: ...
    async def finish_run(
        self,
        run_id: int,
        status: RunStatus,
        *,
        error: str | None = None,
        delivered_ids: Sequence[str] = (),
        attempts: int | None = None,
    ) -> None: ...
    async def job_outputs(self, job_id: str, limit: int) -> list[StoredMessage]: ...
    async def mark_delivered(
        self, message_id: int, chat: ChatRef, provider_message_ids: Sequence[str]
    ) -> None: ...
    async def message_by_id(self, message_id: int) -> StoredMessage | None: ...
    async def record_scheduled_output(
        self, run_id: int, session_key: str, text: str, *, job_id: str, attempts: int
    ) -> StoredMessage: ...
    async def schedule_run_by_id(self, run_id: int) -> ScheduleRun | None: ...
    async def schedule_runs(self, job_id: str, limit: int) -> list[ScheduleRun]: ...
    async def record_usage(self, record: UsageRecord) -> None: ...


class ReminderRuns(RunLedger, Protocol):
    """The reminders' schedule: what is pending, what ran, each firing a run of `RunLedger`."""

    async def finish_reminder(self, reminder_id: int, status: ReminderStatus) -> None: ...
    async def last_scheduled_time(self, job_id: str) -> float | None: ...
    async def pending_reminders(
        self, *, session_key: str | None = None, provider: str | None = None, user_id: str | None = None
    ) -> list[Reminder]: ...
    async def pending_runs(self, status: RunStatus) -> list[ScheduleRun]: ...
    async def record_missed(self, job_id: str, times: Sequence[float], reason: str) -> None: ...
    async def reminder_by_id(self, reminder_id: int) -> Reminder | None: ...


class ScheduleStore(ReminderRuns, Protocol):
    """The scheduler's: jobs' runs and the reminders' (it hands itself to both)."""


class PreviewStore(Protocol):
    """A reply's preview: the message that shows it while it is written, kept on the request."""

    async def preview_of(self, request_id: int) -> str | None: ...
    async def record_preview(self, request_id: int, provider_message_id: str) -> None: ...


class RouterStore(Protocol):
    """The router's: messages stored as they arrive, the requests still waiting for a turn."""

    async def append_inbound(self, msg: InboundMessage) -> StoredMessage | None: ...
    async def awaiting_request(self, chat: ChatRef, provider_message_id: str) -> StoredMessage | None: ...
    async def awaiting_requests(
        self, session_key: str | None = None, *, before: int | None = None, unleased_at: float | None = None,
    ) -> list[PendingRequest]: ...
    async def left_requests(
        self, message_ids: Iterable[int], *, now: float | None = None
    ) -> tuple[set[int], set[int]]: ...
    async def waiting_ids(self, session_key: str) -> list[int]: ...


class CompactionStore(Protocol):
    """Compaction's: the history to summarise, the summaries kept, the summariser's tokens."""

    async def history_tokens(self, session_key: str, *, after_id: int) -> tuple[int, int]: ...
    async def latest_compaction(self, session_key: str) -> CompactionRecord | None: ...
    async def compaction_state(self, session_key: str) -> tuple[CompactionRecord | None, int, int]: ...
    async def messages_between(
        self, session_key: str, *, after_id: int, before_id: int
    ) -> list[StoredMessage]: ...
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
    ) -> CompactionRecord | None: ...
    async def record_usage(self, record: UsageRecord) -> None: ...


class CommandStore(CompactionStore, Protocol):
    """Chat commands': the session, its model, its context floor, what it spent."""

    async def abandon_request(self, message_id: int, reason: str = "stopped") -> None: ...
    async def reset_context(self, session_key: str) -> None: ...
    async def session(self, session_key: str) -> SessionSummary: ...
    async def session_model(self, session_key: str) -> str | None: ...
    async def set_session_model(self, session_key: str, model: str | None, set_by: str | None) -> None: ...
    async def usage_summed(
        self, since: float, by: Sequence[str], zone: tzinfo, session_key: str | None = None
    ) -> list[UsageSum]: ...


class InboxStore(CommandStore, Protocol):
    """The inbox's: commands queued in their session's order, and what the commands read."""

    async def append_command(
        self, inbound: InboundMessage, command: str, status: Literal["pending", "done"] = "pending"
    ) -> PendingCommand | None: ...
    async def command_pending(self, command_id: int) -> bool: ...
    async def finish_command(self, command_id: int, status: Literal["done", "late"] = "done") -> None: ...
    @property
    def shared(self) -> bool: ...


class HealthReads(Protocol):
    """The daemon's health: instances alive, the database's name, the quarantine."""

    async def instances(self, seen_since: float) -> list[Instance]: ...
    @property
    def label(self) -> str: ...
    async def quarantine_count(self) -> int: ...
    @property
    def shared(self) -> bool: ...


class TurnReads(Protocol):
    """Recalled turns': where turns start and their messages."""

    async def turns_at(
        self, session_key: str, spans: Sequence[tuple[int, int]]
    ) -> dict[int, list[StoredMessage]]: ...
    async def turns_of(
        self, session_key: str, message_ids: Sequence[int], *, before_id: int, max_len: int = ...
    ) -> dict[int, list[StoredMessage]]: ...



class LeaseStore(Protocol):
    """Session leases': taken, renewed and dropped, with a heartbeat per instance."""

    async def drop_lease(self, session_key: str, owner: str) -> None: ...
    async def heartbeat(self, instance: Instance) -> None: ...
    async def held_sessions(self, session_keys: Collection[str], *, now: float | None = None) -> set[str]: ...
    def lease_releases(self) -> AsyncIterator[str | None] | None: ...
    def living(self, instance: str) -> AbstractAsyncContextManager[None]: ...
    async def renew_leases(
        self, session_keys: Collection[str], owner: str, ttl: float, *, now: float | None = None
    ) -> set[str]: ...
    async def take_lease(
        self, session_key: str, owner: str, ttl: float, *, now: float | None = None
    ) -> bool: ...


class RecallUpkeep(Protocol):
    """The recall index's upkeep."""

    async def merge_recall_index(self) -> None: ...


class NoteReads(Protocol):
    """A user's notes and timezone, as a turn reads them."""

    async def notes_of(self, provider: str, user_id: str) -> list[UserNote]: ...
    async def user_timezone(self, provider: str, user_id: str) -> str | None: ...


class NoteStore(NoteReads, Protocol):
    """The notes tools': a user's notes and timezone, written."""

    async def add_note(
        self, provider: str, user_id: str, note: str, *, session_key: str | None, max_notes: int
    ) -> UserNote | None: ...
    async def forget_note(self, provider: str, user_id: str, note_id: int) -> bool: ...
    async def set_user_timezone(self, provider: str, user_id: str, zone: str) -> None: ...


class HistoryReads(Protocol):
    """The history tool's: what one user may search, lexically and by meaning."""

    async def lexical_history(
        self, sessions: Sequence[str], query: str, *, limit: int
    ) -> list[tuple[int, float]]: ...
    async def owned_messages(
        self, message_ids: Sequence[int], session_key: str, user_id: str, *, private: bool,
        elsewhere: Sequence[str] = (), since: float | None = None, until: float | None = None,
    ) -> list[StoredMessage]: ...
    async def semantic_matches(
        self, session_key: str, query: Sequence[float], *, model: str, before_id: int, limit: int
    ) -> list[tuple[int, float]]: ...
    async def user_sessions(self, agent_id: str, provider: str, user_id: str) -> list[str]: ...


class ToolStore(NoteStore, HistoryReads, Protocol):
    """The built-in tools' (notes, timezone, history)."""


class TurnToolStore(ToolCallLedger, NoteReads, Protocol):
    """A turn's tools: the tool loop's ledger, and the asker's notes and timezone for its prompt."""


class MessageReads(Protocol):
    """A stored message by id."""

    async def message_by_id(self, message_id: int) -> StoredMessage | None: ...


class ReminderStore(Protocol):
    """The reminder tools': reminders set, listed and cancelled."""

    async def add_reminder(
        self, *, session_key: str, chat: ChatRef, user_id: str, user_name: str | None, text: str,
        at: float, repeat: str | None, timezone: str, request_message_id: int | None, max_pending: int,
    ) -> Reminder: ...
    async def cancel_reminder(
        self, reminder_id: int, *, session_key: str, user_id: str
    ) -> Reminder | None: ...
    async def message_by_id(self, message_id: int) -> StoredMessage | None: ...
    async def pending_reminders(
        self, *, session_key: str | None = None, provider: str | None = None, user_id: str | None = None
    ) -> list[Reminder]: ...


class OutboxStore(Protocol):
    """The outbox's: replies not fully delivered, each chunk recorded as it is sent."""

    async def finish_delivery(self, message_id: int) -> None: ...
    async def note_delivery_failed(self, message_id: int) -> None: ...
    async def pending_deliveries(
        self, message_id: int | None = None, *, session_key: str | None = None
    ) -> list[PendingDelivery]: ...
    async def record_chunk(
        self, message_id: int, chat: ChatRef, index: int, provider_message_id: str, *,
        last: bool = False,
    ) -> None: ...
    async def sends_nearby(self, reply_id: int, provider: str, chat_id: str) -> SendsNearby: ...
    @property
    def shared(self) -> bool: ...


class ResumeStore(OutboxStore, Protocol):
    """What a start (and a takeover) picks up: requests, commands and replies left."""

    async def abandon_request(self, message_id: int, reason: str = "stopped") -> None: ...
    async def awaiting_requests(
        self, session_key: str | None = None, *, before: int | None = None, unleased_at: float | None = None,
    ) -> list[PendingRequest]: ...
    async def finish_command(self, command_id: int, status: Literal["done", "late"] = "done") -> None: ...
    async def forget_leases(self, *, expired_before: float) -> None: ...
    async def gone_instances(self, seen_since: float) -> list[str]: ...
    async def pending_commands(self, *, unleased_at: float | None = None) -> list[PendingCommand]: ...


class ContextReads(TurnReads, Protocol):
    """The context builder's: history, the compaction in use, lexical recall and its turns."""

    async def compaction_by_id(self, compaction_id: int) -> CompactionRecord | None: ...
    async def context_reads(
        self, session_key: str, *, before_id: int, limit: int, request_id: int,
        scheduled: int, compaction: bool,
    ) -> ContextRead: ...
    async def context_and_recall(
        self, session_key: str, *, before_id: int, limit: int, request_id: int,
        scheduled: int, compaction: bool, text: str, recall_before: int, recall_limit: int,
        expand: int = 0,
    ) -> tuple[ContextRead, LexicalFound]: ...
    async def lexical_then_turns(
        self, session_key: str, text: str, *, before_id: int, limit: int,
        plan: Awaitable[Planner[P]], expand: int = 0,
    ) -> tuple[list[tuple[int, float]], TurnStarts, P, dict[int, list[StoredMessage]]]: ...
    async def lexical_turns(
        self, session_key: str, text: str, *, before_id: int, limit: int, expand: int = 0
    ) -> tuple[list[tuple[int, float]], dict[int, list[StoredMessage]]]: ...
    async def message_by_provider_id(
        self, chat: ChatRef, provider_message_id: str
    ) -> StoredMessage | None: ...
    async def recent_messages(
        self, session_key: str, *, before_id: int, limit: int, origin: Origin = "interactive",
        after_id: int = 0,
    ) -> list[StoredMessage]: ...


class ReplayStore(SnapshotReads, ContextReads, SemanticReads, Protocol):
    """Replay's: the snapshots, and what a context build reads to rebuild one."""
