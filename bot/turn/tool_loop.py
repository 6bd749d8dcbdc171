"""The tool loop: the model calls tools, we run them and send the results back, round by round.

Each round is stored as it happens (the calls before they run, each result after), so a turn cut
short by a crash is answered after the restart from the stored rounds: a tool that ran is never
run again. What is sent always pairs every tool_use with its tool_result (`tools.transcript`).
At most `max_tool_rounds` rounds; then the model is asked once more with the tools shown but not
callable (`tool_choice` none), told the limit was reached, so the user still gets an answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import structlog

from bot.core.errors import describe
from bot.models.brain import Brain, Completion, ReplyRequest, TextSink
from bot.store import StoredToolCall
from bot.store.seams import ToolCallLedger
from bot.tools.base import Tool, ToolContext, ToolResult
from bot.tools.toolbox import definitions
from bot.tools.transcript import INTERRUPTED, action_line, repair, result_block, rounds_as_turns

log = structlog.get_logger("switchboard.tools")

LIMIT_NOTE = ("[You have used all the tool calls this reply may make. Answer the user now with what "
              "you have; say what you could not do.]")
SUMMARY_CHARS = 120
# A result longer than this (an MCP tool dumping a page) is cut, saying so: the rest of the reply's
# context must still fit.
RESULT_CHARS = 20_000


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """One call as the turn records it (snapshot, log line, the reply's actions)."""

    round: int
    name: str
    arguments: dict[str, Any]
    summary: str
    is_error: bool
    duration_ms: float | None
    resumed: bool = False  # sent again from a round stored before a restart, not run this time

    @property
    def action(self) -> str:
        return action_line(self.name, self.arguments, self.summary)

    def record(self) -> dict[str, Any]:
        return {"round": self.round, "name": self.name, "arguments": self.arguments,
                "summary": self.summary, "is_error": self.is_error, "duration_ms": self.duration_ms,
                "resumed": self.resumed}


@dataclass(slots=True)
class LoopOutcome:
    """The final answer (tokens summed over every call) and what the tools did on the way."""

    completion: Completion
    offered: list[str]
    calls: list[ToolCallRecord] = field(default_factory=list)
    rounds: int = 0
    limit_reached: bool = False
    repairs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def actions(self) -> list[str]:
        return [call.action for call in self.calls]

    def snapshot(self) -> dict[str, Any]:
        return {"offered": list(self.offered), "rounds": self.rounds,
                "limit_reached": self.limit_reached, "calls": [c.record() for c in self.calls],
                "repairs": list(self.repairs)}


# The definitions of the last few tool sets offered, by the identity of their tools (kept here, so an
# id is never reused while its entry lives): the sources build their tools once (the same bytes
# every turn keep the prompt cache warm), so a turn mostly offers a set seen before, and each
# definition is a JSON round trip of its schema. Shared between turns: read, never changed.
_DEFINED: dict[tuple[int, ...], tuple[tuple[Tool, ...], list[dict[str, Any]], int]] = {}
_DEFINED_SETS = 16


def _defined(tools: Sequence[Tool]) -> tuple[list[dict[str, Any]], int]:
    """The API definitions of `tools` and their length as JSON, built once per tool set."""
    key = tuple(id(tool) for tool in tools)
    known = _DEFINED.get(key)
    if known is None:
        defined = definitions(tools)
        known = (tuple(tools), defined, len(json.dumps(defined)))
        if len(_DEFINED) >= _DEFINED_SETS:
            del _DEFINED[next(iter(_DEFINED))]  # the oldest set
        _DEFINED[key] = known
    return known[1], known[2]


class ToolLoop:
    """Answers one request with tools: `run` in place of a single `Brain.reply`."""

    def __init__(
        self, brain: Brain, store: ToolCallLedger, tools: Sequence[Tool], context: ToolContext, *,
        max_rounds: int, tool_timeout: float, none_open: bool = False,
    ) -> None:
        self._brain = brain
        # Known from the turn's opening read: no earlier run left calls of the request open.
        self._none_open = none_open
        self._store = store
        self._tools = {tool.name: tool for tool in tools}
        # What the definitions add to every request (`switchboard context` shows it).
        self._definitions, self.definitions_chars = _defined(tools)
        self.offered = len(self._definitions)
        self._context = context
        self._max_rounds = max_rounds
        self._tool_timeout = tool_timeout
        self._deadline = time.monotonic() + tool_timeout
        # The last run's outcome, kept as it grows: a run that fails part-way still shows its calls.
        self.outcome: LoopOutcome | None = None

    async def run(self, call: ReplyRequest, on_text: TextSink | None = None) -> LoopOutcome:
        self._deadline = call.deadline  # the turn's: tools share it with the model calls
        stored = [] if self._none_open else await self._store.open_tool_calls(self._context.request_id)
        self._none_open = False  # a later run (the call again without files) reads what this one stored
        outcome = self.outcome = LoopOutcome(Completion("", call.model or ""), sorted(self._tools))
        transcript = await self._resume(stored, outcome)
        seen: set[tuple[str, str]] = set()
        total = Completion("", call.model or "", attempts=0)
        while True:
            last = outcome.rounds >= self._max_rounds
            messages, repairs = repair([*call.messages, *transcript])
            for found in repairs:  # the same broken pair is named once however often it is sent
                if (found["kind"], str(found["tool_use_id"])) not in seen:
                    seen.add((found["kind"], str(found["tool_use_id"])))
                    outcome.repairs.append(found)
            if last:
                messages = _with_note(messages, LIMIT_NOTE)
            request = dataclasses.replace(
                call, messages=messages, tools=self._definitions,
                tool_choice={"type": "none"} if last else None,
            )
            completion = await self._brain.reply(request, on_text=on_text)
            total = _add(total, completion)
            uses = [block for block in completion.content if block.get("type") == "tool_use"]
            if completion.stop_reason != "tool_use" or not uses or last:
                outcome.limit_reached = last and outcome.rounds > 0
                outcome.completion = dataclasses.replace(
                    total, text=completion.text, content=completion.content,
                    stop_reason=completion.stop_reason, model=completion.model,
                    provider=completion.provider,
                )
                return outcome
            _reset(on_text)  # what this round wrote before its calls is not the answer
            transcript += await self._run_round(outcome, completion, uses)

    async def _resume(self, stored: list[StoredToolCall], outcome: LoopOutcome) -> list[dict[str, Any]]:
        """The rounds a cut-short turn stored, to send again; a call with no result is recorded
        as interrupted (it may have run) and never run again."""
        if not stored:
            return []
        for call in stored:
            if call.result is None:
                await self._store.finish_tool_call(call.id, result=INTERRUPTED, is_error=True,
                                                   summary="interrupted (may or may not have happened)",
                                                   duration_ms=0.0)
            outcome.calls.append(ToolCallRecord(
                call.round, call.name, call.arguments,
                call.summary or "interrupted (may or may not have happened)",
                call.is_error or call.result is None, call.duration_ms, resumed=True,
            ))
        outcome.rounds = max(call.round for call in stored) + 1
        log.info("tool rounds resumed from the store", request_id=self._context.request_id,
                 rounds=outcome.rounds, calls=len(stored))
        return rounds_as_turns(stored)

    async def _run_round(
        self, outcome: LoopOutcome, completion: Completion, uses: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        number = outcome.rounds
        text = "".join(b["text"] for b in completion.content if b.get("type") == "text")
        ids = await self._store.begin_tool_round(
            str(self._context.session_key), self._context.request_id, number, text,
            [(str(use["id"]), str(use["name"]), _arguments(use)) for use in uses],
        )
        results = []
        for use, call_id in zip(uses, ids, strict=True):
            started = time.perf_counter()
            result = _capped(await self._call(str(use["name"]), use.get("input")))
            duration = round((time.perf_counter() - started) * 1000, 1)
            summary = _short(result.summary)
            await self._store.finish_tool_call(call_id, result=result.content, summary=summary,
                                               is_error=result.is_error, duration_ms=duration)
            outcome.calls.append(ToolCallRecord(number, str(use["name"]), _arguments(use), summary,
                                                result.is_error, duration))
            results.append(result_block(str(use["id"]), result.content, result.is_error))
        outcome.rounds += 1
        return [{"role": "assistant", "content": list(completion.content)},
                {"role": "user", "content": results}]

    async def _call(self, name: str, arguments: Any) -> ToolResult:
        """Run one call; whatever goes wrong comes back as an error result the model reads."""
        tool = self._tools.get(name)
        if tool is None:
            return ToolResult.error(f"unknown tool {name!r}; the tools are: {', '.join(sorted(self._tools))}")
        if not isinstance(arguments, dict) or "__unparsed__" in arguments:
            return ToolResult.error("the arguments were not a JSON object")
        try:
            jsonschema.validate(arguments, dict(tool.input_schema))
        except jsonschema.ValidationError as exc:
            where = "/".join(str(part) for part in exc.absolute_path)
            return ToolResult.error(f"bad arguments{' at ' + where if where else ''}: {exc.message}")
        except jsonschema.SchemaError:
            pass  # the tool's own schema is odd: let the tool judge its arguments
        timeout = min(self._tool_timeout, max(self._deadline - time.monotonic(), 0.1))
        try:
            async with asyncio.timeout(timeout):
                return await tool.run(arguments, self._context)
        except TimeoutError:
            return ToolResult.error(f"{name} took longer than {timeout:g} s and was stopped")
        except Exception as exc:
            log.warning("tool failed", tool=name, error=describe(exc), exc_info=True)
            return ToolResult.error(f"{name} failed: {describe(exc)}")


def _arguments(use: dict[str, Any]) -> dict[str, Any]:
    value = use.get("input")
    return value if isinstance(value, dict) else {}


def _capped(result: ToolResult) -> ToolResult:
    if len(result.content) <= RESULT_CHARS:
        return result
    note = f"\n[…cut: the first {RESULT_CHARS} of {len(result.content)} characters]"
    cut = result.content[:RESULT_CHARS] + note
    return dataclasses.replace(result, content=cut)


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SUMMARY_CHARS else flat[: SUMMARY_CHARS - 1] + "…"


def _with_note(messages: list[dict[str, Any]], note: str) -> list[dict[str, Any]]:
    """The last (user) turn with a note after its content."""
    last = messages[-1]
    content = last["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    return [*messages[:-1], {**last, "content": [*blocks, {"type": "text", "text": note}]}]


def _add(total: Completion, more: Completion) -> Completion:
    return dataclasses.replace(
        total, input_tokens=total.input_tokens + more.input_tokens,
        output_tokens=total.output_tokens + more.output_tokens,
        cache_write_tokens=total.cache_write_tokens + more.cache_write_tokens,
        cache_read_tokens=total.cache_read_tokens + more.cache_read_tokens,
        attempts=total.attempts + more.attempts,
    )


def _reset(on_text: TextSink | None) -> None:
    if on_text is None:
        return
    try:
        on_text("")
    except Exception as exc:  # a preview is worth no failed turn
        log.warning("reply preview failed", error=describe(exc), exc_info=True)

