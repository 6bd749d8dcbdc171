"""The record of one turn: every fact its snapshot and its log line show, each rendered from it once.

A `TurnRecord` is put together when the turn has its answer, from the composed call, the answer
and the request; the commit phase stores `snapshot(...)` beside the reply and the turn ends with
one log line of `log_fields(...)`. Neither works a fact out on its own, so the two never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.context.prompt import system_parts
from bot.core.messages import ChatRef, StoredMessage
from bot.models.brain import Completion
from bot.ranking.stages import REPLY_CALL, Context
from bot.turn.answer import Answer
from bot.turn.compose import Composed


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One answered request: what went in (`composed`), what came out (`answer`), where it goes."""

    request: StoredMessage
    user_id: str  # who asked
    chat: ChatRef
    reply_to: str | None  # the platform message the reply quotes (groups, and between agents)
    composed: Composed
    answer: Answer
    model_ms: float  # from the context built to the answer known

    @property
    def session_key(self) -> str:
        return self.composed.session_key

    @property
    def context(self) -> Context:
        return self.composed.context

    @property
    def model(self) -> str:
        """The model that answered, else the one the session would have used."""
        completion = self.answer.completion
        return completion.model if completion is not None else self.composed.model

    @property
    def provider(self) -> str | None:
        completion = self.answer.completion
        return completion.provider if completion is not None else None

    @property
    def tools_offered(self) -> bool:
        return self.composed.loop is not None

    def reply_facts(self) -> dict[str, Any]:
        """What the reply call did, recorded beside the context so an admin can see why a turn
        said what it said. Not part of selection: replay leaves it out of the comparison."""
        call, answer = self.composed.call, self.answer
        files = list(self.composed.prompt_files) if call is not None else []
        facts: dict[str, Any] = {
            "called": call is not None,
            "model": self.model,
            "system_prompt_chars": len(call.system_stable) + len(call.system_turn) if call else None,
            "prompt_files": files,
            # Every part of the system prompt with its size, the prompt files' apart (above).
            "system_parts": system_parts(len(call.system_stable), files, self.composed.turn_parts)
            if call else [],
            **_completion_facts(answer.completion),
            "model_ms": round(self.model_ms, 1),
            "error": answer.error,
            "fallback": answer.fallback,
            "provider": self.provider,
            # Which message this answers, as its channel named it (a message between agents
            # carries its hop there: "h2-…").
            "request": {"provider_message_id": self.request.provider_message_id,
                        "reply_to_id": self.request.reply_to_id, "sender_id": self.request.sender_id},
        }
        if answer.tools is not None:
            facts["tools"] = answer.tools.record
        return facts

    def snapshot(self, settings: dict[str, Any]) -> dict[str, Any]:
        """The snapshot stored with the reply: the context's record, the reply call's facts and
        the selection settings in force (`settings`, what replay compares against)."""
        return {**self.context.snapshot(), REPLY_CALL: self.reply_facts(), "settings": settings}

    def log_fields(
        self, *, reply_id: int | None, delivered: Sequence[str], send_ms: float,
        record_ms: float | None, total_ms: float,
    ) -> dict[str, Any]:
        """The turn's one log line (`session_key` is bound apart): `send_ms` from the reply's
        store to its delivery, `record_ms` the longest of its chunks' send windows."""
        context, triage = self.context, self.context.triage
        called, tools = _completion_facts(self.answer.completion), self.answer.tools
        return {
            "channel": self.chat.provider,
            "model": self.model,
            "provider": self.provider,
            "send_ms": round(send_ms, 1),
            "record_ms": round(record_ms, 2) if record_ms is not None else None,
            "request_id": self.request.id,
            "reply_id": reply_id,
            "context_messages": len(context.entries),
            "scheduled_block": len(context.scheduled),
            "reply_to": context.reply_to.id if context.reply_to else None,
            "history_limit": context.history_limit,
            "context_tokens": context.token_estimate,
            "trimmed": len(context.trimmed),
            "candidates": len(context.candidates),
            "recalled": len(context.recalled),
            "compaction": context.compaction_id,
            "triage": triage.outcome,
            "triage_candidates": triage.candidates,
            "triage_selected": triage.selected,
            "triage_ms": round(triage.latency_ms, 1),
            "triage_tokens_in": triage.input_tokens,
            "triage_tokens_out": triage.output_tokens,
            "tokens_in": called["tokens_in"],
            "tokens_out": called["tokens_out"],
            "attempts": called["attempts"],
            "context_ms": round(self.composed.context_ms, 1),
            "model_ms": round(self.model_ms, 1),
            "total_ms": round(total_ms, 1),
            "delivered": len(delivered),
            "error": self.answer.error,
            "tool_rounds": tools.rounds if tools else 0,
            "tool_calls": tools.calls if tools else 0,
            "actions": list(tools.actions) if tools else [],
        }


def _completion_facts(completion: Completion | None) -> dict[str, Any]:
    """The tokens, attempts and stop reason of the reply call; zeros and None without a reply."""
    if completion is None:
        return {"tokens_in": 0, "tokens_out": 0, "cache_write_tokens": 0, "cache_read_tokens": 0,
                "attempts": None, "stop_reason": None}
    return {"tokens_in": completion.input_tokens, "tokens_out": completion.output_tokens,
            "cache_write_tokens": completion.cache_write_tokens,
            "cache_read_tokens": completion.cache_read_tokens,
            "attempts": completion.attempts, "stop_reason": completion.stop_reason}
