"""A recorded turn, explained: its snapshot read with every message it names, as one plain record.

`switchboard context` (its lines and `--json`) and the browser console's turn page read a turn
here, through the same queries, and show the same record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bot.context.turn_choice import read_chosen_turn
from bot.ranking.stages import REPLY_CALL

if TYPE_CHECKING:
    from bot.core.messages import StoredMessage
    from bot.store import SnapshotRecord
    from bot.store.seams import SnapshotReads

# Counts in the order the pipeline makes them (the stored snapshot's keys are sorted).
COUNT_ORDER = ["fetched", "within_history_limit", "within_recency", "candidates", "found_lookback",
               "found_lexical", "found_semantic", "recalled", "trimmed", "included", "scheduled_block"]


def ordered_counts(counts: dict[str, Any]) -> list[tuple[str, Any]]:
    """A snapshot's counts in pipeline order (names this version does not know last, by name)."""
    return sorted(counts.items(), key=lambda item: (COUNT_ORDER.index(item[0]) if item[0] in COUNT_ORDER
                                                     else len(COUNT_ORDER), item[0]))


@dataclass(frozen=True, slots=True)
class TurnRead:
    """One turn's snapshot, how many the session has, and each message it names (None: pruned)."""

    record: SnapshotRecord
    total: int
    messages: dict[int, StoredMessage | None]


async def read_turn(store: SnapshotReads, key: str, turn: int) -> TurnRead:
    """Turn `turn` of a session (from 1; negative from the newest; 0 the newest); BotError when
    there is no such turn."""
    record, total = await read_chosen_turn(store, key, turn)
    # Texts come from the log at display time: the snapshot holds ids and reasons only.
    messages = {i: await store.message_by_id(i) for i in snapshot_ids(record)}
    return TurnRead(record, total, messages)


def snapshot_ids(record: SnapshotRecord) -> list[int]:
    snap = record.snapshot
    ids = [record.request_message_id, *([record.reply_message_id] if record.reply_message_id else [])]
    ids += [int(e["id"]) for e in snap.get("entries", [])]
    ids += [int(i) for i in snap.get("scheduled_block", [])]
    ids += [int(t["id"]) for t in snap.get("trimmed", [])]
    ids += [int(c["id"]) for c in snap.get("candidates", [])]
    return list(dict.fromkeys(ids))


def failure(snap: dict[str, Any]) -> str | None:
    """Why the turn was not answered by the model: the context or the model call failed."""
    if snap.get("status") == "failed":
        return str(snap.get("error"))
    error = (snap.get(REPLY_CALL) or {}).get("error")
    return str(error) if error else None


def speaker(message: StoredMessage) -> str:
    """Who wrote a message, as the admin views name them."""
    if message.role == "user":
        return message.sender_name or message.sender_id or "user"
    if message.origin == "scheduled":
        return f"agent [scheduled {message.job_id}]" if message.job_id else "agent [scheduled]"
    return "agent"


def _message_record(message_id: int, message: StoredMessage | None) -> dict[str, Any]:
    if message is None:
        return {"id": message_id, "stored": False, "text": None}
    return {
        "id": message_id, "stored": True, "role": message.role, "origin": message.origin,
        "sender": speaker(message), "job_id": message.job_id, "created_at": message.created_at,
        "time": datetime.fromtimestamp(message.created_at, UTC).isoformat(), "text": message.text,
    }


def context_record(
    key: str, record: SnapshotRecord, total: int, messages: dict[int, StoredMessage | None]
) -> dict[str, Any]:
    """The whole turn for scripts: the snapshot as stored, its reply call, and every message's text."""
    snap = record.snapshot

    def message(message_id: int) -> dict[str, Any]:
        return _message_record(message_id, messages.get(message_id))

    return {
        "session": key, "turn": record.turn, "turns": total, "recorded_at": record.created_at,
        "hash": record.hash, "status": snap.get("status", "ok"), "failed": failure(snap) is not None,
        "error": failure(snap),
        "reply_call": snap.get(REPLY_CALL),
        "request": message(record.request_message_id),
        "reply": message(record.reply_message_id) if record.reply_message_id else None,
        "entries": [{**message(int(e["id"])), **e} for e in snap.get("entries", [])],
        "scheduled_block": [message(int(i)) for i in snap.get("scheduled_block", [])],
        "trimmed": [{**message(int(t["id"])), **t} for t in snap.get("trimmed", [])],
        "candidates": [{**message(int(c["id"])), **c} for c in snap.get("candidates", [])],
        "snapshot": snap,
    }
