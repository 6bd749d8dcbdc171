"""Compaction: the older part of a long session summarised by the fast model, in chunks.

The summary is written as a compaction record; later contexts start with it and read messages
from the record's first kept message on. Nothing is deleted: the full history stays stored, and a
failed compaction leaves everything as it was (the token budget's trimming still bounds context).
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import structlog

from bot.config import Config, resolve_history_limit
from bot.core.errors import BotError, ModelError, describe
from bot.core.media import with_labels
from bot.core.messages import StoredMessage
from bot.core.session_key import parse
from bot.models.brain import Brain, FastCompleter
from bot.models.usage import RecordingCompleter
from bot.ranking.budget import SAFETY_MARGIN, Budget, cost, message_cost
from bot.store import CompactionRecord
from bot.store.seams import CompactionStore

log = structlog.get_logger("switchboard.compaction")

ATTEMPTS = 3
# Room for one summary (a chunk of ~6 000 tokens of chat or a merge); triage's 256 would cut it.
SUMMARY_MAX_TOKENS = 2048
CONCURRENT_CHUNKS = 4
# After a failed automatic compaction the session is not tried again for a while: each try costs
# model calls, and trimming keeps the context in bounds meanwhile.
RETRY_AFTER = 600.0
_NO_UPPER_BOUND = 2**63 - 1

NOTICE = (
    "(This conversation has grown long, so I summarised its older part to keep going; "
    "the full history is still stored.)"
)
SUMMARY_SYSTEM = (
    "You summarise part of a chat so the conversation can continue without it. Keep every "
    "decision, open question or request, constraint and preference, and copy exact identifiers "
    "verbatim (names, numbers, dates, ids, URLs, file paths, amounts). Leave out small talk. "
    "Plain text, short lines, no preamble."
)
MERGE_SYSTEM = (
    "You merge summaries of consecutive parts of one chat, oldest first, into one summary. Keep "
    "every decision, open question or request, constraint and exact identifier; when a later "
    "part changes an earlier decision, keep the later one. Plain text, short lines, no preamble."
)


class CompactionError(BotError):
    """A compaction could not be completed; nothing was written."""


@dataclass(frozen=True, slots=True)
class Plan:
    """What one compaction summarises and what it keeps verbatim."""

    previous: CompactionRecord | None
    summarise: list[StoredMessage]
    keep: list[StoredMessage]


def plan(
    previous: CompactionRecord | None, messages: Sequence[StoredMessage], keep_recent: int
) -> Plan:
    """Summarise all uncompacted messages but the newest `keep_recent`."""
    cut = max(len(messages) - keep_recent, 0)
    return Plan(previous, list(messages[:cut]), list(messages[cut:]))


def split_chunks(messages: Sequence[StoredMessage], chunk_tokens: int) -> list[list[StoredMessage]]:
    """Consecutive chunks of about equal token share, none over `chunk_tokens` unless one message
    alone is: such a message is a chunk of its own (and is clipped when rendered)."""
    sizes = [max(message_cost(m), 1) for m in messages]
    total = sum(size for size in sizes if size <= chunk_tokens)
    target = total / max(1, math.ceil(total / chunk_tokens)) if total else 1.0
    chunks: list[list[StoredMessage]] = []
    current: list[StoredMessage] = []
    filled = 0
    position = 0  # tokens of the messages before this one (oversized ones left out)
    share = 0
    for message, size in zip(messages, sizes, strict=True):
        if size > chunk_tokens:
            if current:
                chunks.append(current)
            chunks.append([message])
            current, filled = [], 0
            continue
        # A message belongs to the share its middle falls in: boundaries sit at multiples of
        # the target, so one chunk's overshoot does not leave the last chunk a scrap.
        mine = int((position + size / 2) // target)
        if current and (mine > share or filled + size > chunk_tokens):
            chunks.append(current)
            current, filled = [], 0
        share = max(share, mine)
        current.append(message)
        filled += size
        position += size
    if current:
        chunks.append(current)
    return chunks


def render_chunk(messages: Sequence[StoredMessage], chunk_tokens: int) -> str:
    """The chunk as dated speaker lines; a message too big for one call keeps its head only."""
    max_chars = chunk_tokens * 4
    lines = []
    for message in messages:
        when = datetime.fromtimestamp(message.created_at, UTC).strftime("%Y-%m-%d %H:%M")
        speaker = "assistant" if message.role == "assistant" else (message.sender_name or "user")
        text = with_labels(message.text, message.media)
        if len(text) > max_chars:
            cut = len(text) - max_chars
            text = text[:max_chars] + f"\n[…the rest of this message ({cut} characters) is cut]"
        lines.append(f"[{when}] {speaker}: {text}")
        if message.actions:
            lines.append(f"    actions: {'; '.join(message.actions)}")
    return "Summarise this part of the chat:\n\n" + "\n".join(lines)


def merge_prompt(parts: Sequence[str]) -> str:
    numbered = [f"Part {index}:\n{part}" for index, part in enumerate(parts, start=1)]
    return "Merge these summaries, oldest first:\n\n" + "\n\n".join(numbered)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a compaction did: the record written, or why none was."""

    record: CompactionRecord | None
    reason: str
    summarised: int = 0
    calls: int = 0
    # "nothing": too few messages since the last summary; "limited": the session has a history
    # limit, so older messages are out of its context anyway; "superseded": another compaction
    # of the session was written while this one ran.
    status: Literal["compacted", "nothing", "limited", "superseded"] = "compacted"


@dataclass
class _Sessions:
    """Per-session locks and failure times of one database."""

    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    failed_at: dict[str, float] = field(default_factory=dict)


# Shared by every Compactor on the same store: the turn runner's, /compact's and the runner
# built after a config reload must not compact one session at once or forget a failure.
_SESSIONS: weakref.WeakKeyDictionary[CompactionStore, _Sessions] = weakref.WeakKeyDictionary()


class Compactor:
    """Compacts sessions: automatically after a turn when history outgrows the budget, or on request."""

    def __init__(self, config: Config, store: CompactionStore, brain: Brain, budget: Budget) -> None:
        self._config = config
        self._settings = config.compaction
        self._store = store
        self._brain = brain
        self._budget = budget
        sessions = _SESSIONS.setdefault(store, _Sessions())
        self._failed_at = sessions.failed_at
        self._locks = sessions.locks

    def history_limit(self, session: str) -> int | None:
        """The session's history limit: a limited session is never compacted (nor summarised in
        its context), since the limit says the model sees only its last turns."""
        return resolve_history_limit(self._config, parse(session))

    async def fill(self, session: str) -> float | None:
        """The uncompacted history (with the summary) as a share of the size that triggers
        compaction (over 1: due); 0 while it holds no more than `keep_recent` messages, None for a
        session never compacted (a history limit)."""
        if self.history_limit(session) is not None:
            return None
        latest, count, tokens = await self._store.compaction_state(session)
        if count <= self._settings.keep_recent:
            return 0.0
        size = math.ceil(tokens * SAFETY_MARGIN) + (cost(latest.summary) if latest else 0)
        return size / max(self._budget.history_tokens * self._settings.trigger_share, 1.0)

    async def due(self, session: str) -> bool:
        """Whether the uncompacted history (with the summary) is past the trigger share of the budget."""
        share = await self.fill(session)
        return share is not None and share > 1

    async def maybe_compact(self, session: str, fill: float | None = None) -> Outcome | None:
        """Compact when due and enabled (`fill`: the session's, when just read); never raises (a
        failure is logged, trimming carries on)."""
        if not self._settings.enabled:
            return None
        failed = self._failed_at.get(session)
        if failed is not None and time.monotonic() - failed < RETRY_AFTER:
            return None
        try:
            if not (fill > 1 if fill is not None else await self.due(session)):
                return None
            return await self.compact(session)
        except Exception as exc:  # compaction is an optimisation: it must never cost a turn
            self._failed_at[session] = time.monotonic()
            log.warning("compaction failed; context is trimmed instead", session_key=session,
                        error=describe(exc), exc_info=True)
            return None

    async def compact(self, session: str, *, notified: bool = False) -> Outcome:
        """Summarise the session's older part now; raises CompactionError when it cannot."""
        limit = self.history_limit(session)
        if limit is not None:
            return Outcome(None, f"not compacted: the session has a history limit of {limit} user "
                           "turns, so older messages are not in its context anyway", status="limited")
        lock = self._locks.setdefault(session, asyncio.Lock())
        async with lock:
            try:
                async with asyncio.timeout(self._settings.timeout):
                    return await self._compact(session, notified)
            except TimeoutError as exc:
                raise CompactionError(
                    f"compaction of {session} took longer than {self._settings.timeout:g}s"
                ) from exc

    async def _compact(self, session: str, notified: bool) -> Outcome:
        started = time.perf_counter()
        latest = await self._store.latest_compaction(session)
        after = latest.first_kept_message_id - 1 if latest else 0
        messages = await self._store.messages_between(session, after_id=after, before_id=_NO_UPPER_BOUND)
        work = plan(latest, messages, self._settings.keep_recent)
        if not work.summarise:
            since = "since the last summary" if latest else "in its context"
            return Outcome(
                None, f"nothing to compact: the session has {len(messages)} messages {since}, and "
                f"the newest {self._settings.keep_recent} always stay as they are", status="nothing",
            )
        completer = self._brain.fast_completer()
        if completer is None:
            raise CompactionError(
                f"no model to summarise with: set the {self._config.anthropic.api_key_env} "
                "environment variable"
            )
        completer = RecordingCompleter(completer, self._store, session, "compaction")  # for /usage
        model = self._brain.model_for(self._settings.model)
        deadline = time.monotonic() + self._settings.timeout
        chunk_tokens = self._settings.chunk_tokens
        chunks = split_chunks(work.summarise, chunk_tokens)
        gate = asyncio.Semaphore(CONCURRENT_CHUNKS)

        async def summarise(chunk: list[StoredMessage]) -> str:
            async with gate:
                return await _ask(completer, render_chunk(chunk, chunk_tokens), SUMMARY_SYSTEM,
                                  model, deadline)

        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(summarise(chunk)) for chunk in chunks]
        except ExceptionGroup as failed:
            # One chunk that fails for good fails the compaction; its siblings were cancelled.
            raise failed.exceptions[0] from None
        partials = [task.result() for task in tasks]
        calls = len(partials)
        if latest is not None:
            partials.insert(0, latest.summary)
        summary = partials[0]
        if len(partials) > 1:
            summary = await _ask(completer, merge_prompt(partials), MERGE_SYSTEM, model, deadline)
            calls += 1
        before = sum(message_cost(m) for m in messages) + (cost(latest.summary) if latest else 0)
        after_tokens = cost(summary) + sum(message_cost(m) for m in work.keep)
        last = work.summarise[-1].id
        record = await self._store.record_compaction(
            session, summary=summary, last_summarised_id=last,
            first_kept_message_id=work.keep[0].id if work.keep else last + 1,
            tokens_before=before, tokens_after=after_tokens, model=model,
            replaces=latest.id if latest else None, notified=notified,
        )
        if record is None:
            return Outcome(None, "another compaction of this session was written meanwhile",
                           status="superseded")
        self._failed_at.pop(session, None)
        log.info("compacted", session_key=session, compaction_id=record.id,
                 summarised=len(work.summarise), kept=len(work.keep), chunks=len(chunks),
                 tokens_before=before, tokens_after=after_tokens,
                 ms=round((time.perf_counter() - started) * 1000, 1))
        return Outcome(record, "compacted", len(work.summarise), calls)


async def _ask(
    completer: FastCompleter, prompt: str, system: str, model: str, deadline: float
) -> str:
    """One summary, tried up to ATTEMPTS times.

    An error, an empty answer or one cut at the token limit (its end, the newest part, would be
    missing) is a failed try.
    """
    problem = "no attempt made"
    for _ in range(ATTEMPTS):
        if time.monotonic() >= deadline:
            break
        try:
            completion = await completer.complete(
                prompt, system=system, model=model, deadline=deadline, max_tokens=SUMMARY_MAX_TOKENS
            )
        except ModelError as exc:
            problem = str(exc)
            continue
        text = completion.text.strip()
        if completion.stop_reason == "max_tokens":
            problem = f"the summary was cut at {SUMMARY_MAX_TOKENS} tokens"
        elif text:
            return text
        else:
            problem = "empty answer"
    raise CompactionError(f"a summary failed after {ATTEMPTS} tries: {problem}")
