"""Context selection stages: pure functions over lists of stored messages, plus the result shape."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

from bot.core.messages import ChatRef, StoredMessage

# Why a message is in the context. "ranked": kept by the ranked fallback (triage could not choose);
# "fail_open" only in snapshots from before the ranked fallback.
Reason = Literal[
    "all", "recent", "triaged", "ranked", "fail_open", "fallback_all", "reply_to", "recalled"
]
TriageOutcome = Literal[
    "skipped", "disabled", "selected", "fail_open", "error", "timeout", "unparseable"
]
# The snapshot key under which the turn records its reply call (model, prompt size, tokens, error,
# fallback): facts about the answer, not about selection, so replay does not compare them.
REPLY_CALL = "reply_call"


def limit_history_turns(messages: Sequence[StoredMessage], limit: int | None) -> list[StoredMessage]:
    """Keep the newest `limit` user turns (a user message and what followed it); None keeps all."""
    if limit is None:
        return list(messages)
    if limit <= 0:
        return []
    seen = 0
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            seen += 1
            if seen == limit:
                return list(messages[index:])
    return list(messages)


def apply_recency(
    messages: Sequence[StoredMessage], *, now: float, hours: float, min_messages: int
) -> list[StoredMessage]:
    """Drop messages older than `hours` (0 = off), always keeping the newest `min_messages`."""
    if hours <= 0:
        return list(messages)
    cutoff = now - hours * 3600
    keep_from = len(messages)
    for index, message in enumerate(messages):
        if message.created_at >= cutoff:
            keep_from = index
            break
    keep_from = min(keep_from, max(len(messages) - min_messages, 0))
    return list(messages[keep_from:])


def split_recent(
    messages: Sequence[StoredMessage], always_include_recent: int
) -> tuple[list[StoredMessage], list[StoredMessage]]:
    """Split into (older, guaranteed recent): the newest `always_include_recent` are always in."""
    cut = max(len(messages) - always_include_recent, 0)
    return list(messages[:cut]), list(messages[cut:])


def group_turns(messages: Sequence[StoredMessage]) -> list[list[StoredMessage]]:
    """Group messages into triage units: a user message with the replies that followed it."""
    units: list[list[StoredMessage]] = []
    for message in messages:
        if message.role == "user" or not units:
            units.append([message])
        else:
            units[-1].append(message)
    return units


def truncate_replies(messages: Iterable[StoredMessage], max_chars: int) -> list[StoredMessage]:
    """Cut the agent's replies to `max_chars` characters (0 = no cut)."""
    if max_chars <= 0:
        return list(messages)
    result = []
    for message in messages:
        if message.role == "assistant" and len(message.text) > max_chars:
            message = replace(message, text=message.text[:max_chars] + " […]")
        result.append(message)
    return result


@dataclass(frozen=True, slots=True)
class ContextEntry:
    message: StoredMessage
    reason: Reason


@dataclass(frozen=True, slots=True)
class TriageReport:
    """What the fast-model triage did for one turn."""

    outcome: TriageOutcome
    candidates: int = 0
    selected: int = 0
    latency_ms: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None

    @property
    def ran(self) -> bool:
        return self.outcome not in ("skipped", "disabled", "fail_open")


def merge_entries(
    *groups: Iterable[ContextEntry], truncation: int = 0
) -> list[ContextEntry]:
    """Merge chosen entries in chronological order, each message once (first reason wins)."""
    by_id: dict[int, ContextEntry] = {}
    for group in groups:
        for entry in group:
            by_id.setdefault(entry.message.id, entry)
    ordered = sorted(by_id.values(), key=lambda entry: entry.message.id)
    messages = truncate_replies((entry.message for entry in ordered), truncation)
    return [ContextEntry(message, entry.reason) for message, entry in zip(messages, ordered, strict=True)]


def tag(messages: Iterable[StoredMessage], reason: Reason) -> list[ContextEntry]:
    return [ContextEntry(message, reason) for message in messages]


class Explanation:
    """What a context's snapshot explains it with: the candidate records and the input hash.

    Neither changes what the model is sent, and the turn reads them only when it stores the
    snapshot, after the reply: a build hands over how to work them out (`later`), so the reply
    request does not wait for ~40 records and a hash. They are worked out once, on first read,
    from values the build no longer changes.
    """

    __slots__ = ("_candidates", "_input_hash", "_later")

    def __init__(
        self, input_hash: str = "", candidates: Sequence[dict[str, Any]] = (), *,
        later: Callable[[], tuple[str, list[dict[str, Any]]]] | None = None,
    ) -> None:
        self._later = later
        self._input_hash = input_hash
        self._candidates = list(candidates)

    def _settle(self) -> None:
        if self._later is not None:
            later, self._later = self._later, None
            self._input_hash, self._candidates = later()

    @property
    def input_hash(self) -> str:
        self._settle()
        return self._input_hash

    @property
    def candidates(self) -> list[dict[str, Any]]:
        self._settle()
        return self._candidates


@dataclass(frozen=True, slots=True)
class Context:
    """The slice of history one reply is built from, and why each part is there."""

    entries: list[ContextEntry]
    scheduled: list[StoredMessage]
    reply_to: StoredMessage | None
    triage: TriageReport
    history_limit: int | None
    counts: dict[str, int] = field(default_factory=dict)
    # The candidate pool's records and the input hash (`Explanation`).
    explanation: Explanation = field(default_factory=Explanation, compare=False)
    # The latest compaction summary, sent as a leading block, and its record id.
    summary: str | None = None
    compaction_id: int | None = None
    trimmed: list[int] = field(default_factory=list)
    recalled: list[int] = field(default_factory=list)
    # What triage picked (before the budget trimmed anything): replay answers triage with it.
    triaged: list[int] = field(default_factory=list)
    token_estimate: int = 0
    token_budget: int = 0
    # Where in the log and when it was built, and the chat: what replay needs to build it again.
    as_of: int = 0
    built_at: float = 0.0
    chat: ChatRef | None = None
    status: Literal["ok", "failed"] = "ok"
    error: str | None = None

    @property
    def input_hash(self) -> str:
        """A hash of everything selection depended on (`input_hash`): replay compares it."""
        return self.explanation.input_hash

    @property
    def candidates(self) -> list[dict[str, Any]]:
        """The candidate pool, best first: each older turn's sources, ranks and scores, and
        whether it went in (`Candidate.record`)."""
        return self.explanation.candidates

    @classmethod
    def failed(cls, error: str, chat: ChatRef | None = None) -> Context:
        """The record of a turn whose context could not be built (`context_build_error`)."""
        return cls([], [], None, TriageReport("skipped"), None, chat=chat, status="failed", error=error)

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready record of what went in and why, stored with every turn."""
        chat = None
        if self.chat is not None:
            chat = {"provider": self.chat.provider, "chat_id": self.chat.chat_id,
                    "thread_id": self.chat.thread_id}
        return {
            "status": self.status,
            "error": self.error,
            "compaction": self.compaction_id,
            "trimmed": [{"id": message_id, "reason": "budget"} for message_id in self.trimmed],
            "recalled": list(self.recalled),
            "candidates": [dict(candidate) for candidate in self.candidates],
            "triaged": list(self.triaged),
            "tokens": {"estimate": self.token_estimate, "budget": self.token_budget},
            "as_of": self.as_of,
            "built_at": self.built_at,
            "chat": chat,
            "entries": [
                {"id": e.message.id, "role": e.message.role, "reason": e.reason}
                for e in self.entries
            ],
            "scheduled_block": [m.id for m in self.scheduled],
            "reply_to": self.reply_to.id if self.reply_to else None,
            "history_limit": self.history_limit,
            "counts": dict(self.counts),
            "triage": {
                "outcome": self.triage.outcome,
                "ran": self.triage.ran,
                "candidates": self.triage.candidates,
                "selected": self.triage.selected,
                "latency_ms": round(self.triage.latency_ms, 1),
                "input_tokens": self.triage.input_tokens,
                "output_tokens": self.triage.output_tokens,
                "error": self.triage.error,
            },
            "hash": self.input_hash,
        }


# The bytes input_hash has always hashed; no cycle check (the payload is built here, plain lists
# and dicts), a quarter of encoding a build's 40 candidates.
_HASH_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), check_circular=False)


def input_hash(
    config: dict[str, Any],
    history_limit: int | None,
    fetched: Sequence[StoredMessage],
    scheduled: Sequence[StoredMessage],
    reply_to: StoredMessage | None,
    *,
    candidates: Sequence[dict[str, Any]] = (),
    compaction_id: int | None = None,
) -> str:
    """A hash of everything selection depends on: equal history and config give equal hashes."""
    payload: dict[str, Any] = {
        "config": config,
        "history_limit": history_limit,
        "fetched": [[m.id, m.role, m.token_estimate] for m in fetched],
        "scheduled": [m.id for m in scheduled],
        "reply_to": reply_to.id if reply_to else None,
    }
    if candidates:
        payload["candidates"] = [[c["ids"], c["sources"], c["chosen"]] for c in candidates]
    if compaction_id is not None:
        payload["compaction"] = compaction_id
    encoded = _HASH_JSON.encode(payload).encode()
    return hashlib.sha256(encoded).hexdigest()[:16]


def read_snapshot(text: str) -> dict[str, Any]:
    """A stored snapshot parsed and checked; ValueError saying what is wrong when it can't be used.

    Only what readers index is checked (the entries, the trimmed list, the numbers replay pins);
    keys added later are optional so older snapshots stay readable.
    """
    snapshot = json.loads(text)
    if not isinstance(snapshot, dict):
        raise ValueError("not a JSON object")
    entries = snapshot.get("entries", [])
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and _is_int(e.get("id")) and isinstance(e.get("role"), str)
        and isinstance(e.get("reason"), str) for e in entries
    ):
        raise ValueError("entries is not a list of {id, role, reason}")
    trimmed = snapshot.get("trimmed", [])
    if not isinstance(trimmed, list) or not all(
        isinstance(t, dict) and _is_int(t.get("id")) for t in trimmed
    ):
        raise ValueError("trimmed is not a list of {id, reason}")
    for name in ("recalled", "triaged", "scheduled_block"):
        ids = snapshot.get(name, [])
        if not isinstance(ids, list) or not all(_is_int(i) for i in ids):
            raise ValueError(f"{name} is not a list of message ids")
    candidates = snapshot.get("candidates", [])
    if not isinstance(candidates, list) or not all(
        isinstance(c, dict) and _is_int(c.get("id")) and isinstance(c.get("sources"), dict)
        for c in candidates
    ):
        raise ValueError("candidates is not a list of {id, sources, ...}")
    for name in ("triage", "tokens", "counts", REPLY_CALL):
        if not isinstance(snapshot.get(name, {}), dict):
            raise ValueError(f"{name} is not an object")
    triage = snapshot.get("triage", {})
    if triage and (triage.get("outcome") not in get_args(TriageOutcome) or not all(
        _is_int(triage.get(name, 0)) for name in ("candidates", "selected")
    )):
        raise ValueError("triage has an unknown outcome or non-integer counts")
    for name in ("as_of", "compaction"):
        if snapshot.get(name) is not None and not _is_int(snapshot[name]):
            raise ValueError(f"{name} is not a message id")
    built_at = snapshot.get("built_at")
    if built_at is not None and (isinstance(built_at, bool) or not isinstance(built_at, int | float)):
        raise ValueError("built_at is not a time")
    chat = snapshot.get("chat")
    if chat is not None and not (
        isinstance(chat, dict) and isinstance(chat.get("provider"), str)
        and isinstance(chat.get("chat_id"), str) and isinstance(chat.get("thread_id"), str | None)
    ):
        raise ValueError("chat is not {provider, chat_id, thread_id}")
    return snapshot


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
