"""Memory flush: before a session's older part is summarised, one silent turn in which the agent may
keep durable facts with `remember`.

After a turn, when the uncompacted history has crossed one of `[compaction].flush_shares` of the
compaction trigger (50 %, 75 % and 90 % by default) for the first time in this compaction cycle,
the agent is asked once more, in the same context as the turn just answered with its reply added,
to keep what is worth keeping as notes. Only `remember` is offered, and only where the asker may
use it in their private chat: without it (tools off, denied, a group) there is no flush. The
flush's reply is never sent, never stored as conversation and never seen by a later context; its
row in `memory_flushes` (claimed before it runs, so a restart or another instance never runs it
twice) keeps what it did, and its tokens are usage of kind "flush".
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from bot.config import Config
from bot.config.provider_check import reply_timeout
from bot.core.errors import describe
from bot.core.messages import InboundMessage, StoredMessage
from bot.models.usage import UsageLedger, record_usage
from bot.turn.answer import Answer
from bot.turn.compose import Composed, ToolRounds
from bot.turn.tool_loop import ToolCallRecord

log = structlog.get_logger("switchboard.flush")

FLUSH_PROMPT = (
    "[Automatic message from the system, not from the user. This conversation has grown long: its "
    "older part will soon be summarised and its details lost. If the user said anything durable "
    "that is worth knowing in later conversations with them (a preference, a fact about them, a "
    "standing request) and is not in their notes yet, keep it now with `remember`, one short note "
    "each. Keep nothing else; when there is nothing new, call no tool. Nobody sees your reply to "
    "this message.]"
)


class FlushStore(UsageLedger, Protocol):
    """The flush's: where the cycle stands, the claim and the record of each flush, its tokens."""

    async def memory_flush_state(self, session_key: str) -> tuple[int, float | None]: ...
    async def claim_memory_flush(
        self, session_key: str, *, cycle_start: int, threshold: float, share: float, request_id: int
    ) -> int | None: ...
    async def finish_memory_flush(
        self, flush_id: int, *, model: str | None, notes: int, actions: Sequence[str], reply: str | None,
        error: str | None = None,
    ) -> None: ...


class Fill(Protocol):
    """How full the session is, as a share of the compaction trigger (the compactor)."""

    async def fill(self, session: str) -> float | None: ...


class RememberLoops(Protocol):
    """The flush's tool loop, `remember` alone (`bot.turn.tools.TurnTools`)."""

    def remember_loop(self, inbound: InboundMessage, request: StoredMessage) -> ToolRounds | None: ...


def threshold_reached(shares: Sequence[float], fill: float, fired: float | None) -> float | None:
    """The highest flush share `fill` has reached, when it is above every one the cycle fired
    (a jump past several fires once, for the highest); None when no flush is due."""
    reached = [share for share in shares if fill >= share]
    if not reached:
        return None
    top = max(reached)
    return top if fired is None or top > fired else None


@dataclass(frozen=True, slots=True)
class Flushed:
    """What one flush did."""

    flush_id: int
    threshold: float
    notes: int
    reply: str | None
    error: str | None = None


class MemoryFlush:
    """Runs each agent's flushes, after the turn that crossed a threshold, in the session's turn."""

    def __init__(self, config: Config, store: FlushStore, fill: Fill, tools: RememberLoops) -> None:
        self._config = config
        self._shares = sorted(config.compaction.flush_shares)
        self._store = store
        self._fill = fill
        self._tools = tools
        self.last: Flushed | None = None  # the latest flush run (for tests and the log)

    async def before_compaction(
        self, composed: Composed, answer: Answer, request: StoredMessage, inbound: InboundMessage
    ) -> float | None:
        """Flush when a threshold is newly crossed; the session's fill as read (None when unread,
        so compaction reads it itself). Never raises: a flush is worth no failed turn."""
        if not self._shares or not self._config.compaction.enabled:
            return None
        key = str(inbound.session_key)
        try:
            fill = await self._fill.fill(key)
            if fill is None or fill < self._shares[0]:
                return fill
            if composed.call is None or not answer.written:
                return fill
            await self._maybe_flush(key, fill, composed, answer, request, inbound)
        except Exception as exc:
            log.warning("memory flush failed", session_key=key, error=describe(exc), exc_info=True)
            return None
        return fill

    async def _maybe_flush(
        self, key: str, fill: float, composed: Composed, answer: Answer, request: StoredMessage,
        inbound: InboundMessage,
    ) -> None:
        loop = self._tools.remember_loop(inbound, request)
        if loop is None:  # no tool to keep anything with: nothing to ask
            return
        cycle_start, fired = await self._store.memory_flush_state(key)
        threshold = threshold_reached(self._shares, fill, fired)
        if threshold is None:
            return
        flush_id = await self._store.claim_memory_flush(
            key, cycle_start=cycle_start, threshold=threshold, share=round(fill, 4), request_id=request.id)
        if flush_id is None:
            return
        self.last = await self._run(flush_id, key, threshold, fill, composed, answer, inbound, loop)

    async def _run(
        self, flush_id: int, key: str, threshold: float, fill: float, composed: Composed,
        answer: Answer, inbound: InboundMessage, loop: ToolRounds,
    ) -> Flushed:
        assert composed.call is not None
        started = time.perf_counter()
        call = dataclasses.replace(
            composed.call,
            messages=[*composed.call.messages, {"role": "assistant", "content": answer.text},
                      {"role": "user", "content": FLUSH_PROMPT}],
            deadline=time.monotonic() + reply_timeout(self._config),
        )
        try:
            outcome = await loop.run(call)
        except Exception as exc:
            done = loop.outcome
            notes = _notes(done.calls if done is not None else [])
            actions = done.actions if done is not None else []
            await self._store.finish_memory_flush(flush_id, model=call.model, notes=notes,
                                                  actions=actions, reply=None, error=describe(exc))
            log.warning("memory flush failed", session_key=key, threshold=threshold, notes=notes,
                        error=describe(exc))
            return Flushed(flush_id, threshold, notes, None, describe(exc))
        await record_usage(self._store, key, inbound.sender_id, "flush", outcome.completion)
        notes = _notes(outcome.calls)
        reply = outcome.completion.text.strip() or None
        await self._store.finish_memory_flush(flush_id, model=outcome.completion.model, notes=notes,
                                              actions=outcome.actions, reply=reply)
        log.info("memory flush", session_key=key, threshold=threshold, share=round(fill, 3),
                 notes=notes, rounds=outcome.rounds, tokens_in=outcome.completion.input_tokens,
                 tokens_out=outcome.completion.output_tokens,
                 ms=round((time.perf_counter() - started) * 1000, 1))
        return Flushed(flush_id, threshold, notes, reply)


def _notes(calls: Sequence[ToolCallRecord]) -> int:
    """How many `remember` calls kept a note."""
    return sum(1 for call in calls if call.name == "remember" and not call.is_error)
