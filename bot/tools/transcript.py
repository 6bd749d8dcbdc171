"""The tool transcript sent to the model: stored rounds rebuilt as turns, every tool_use paired
with its tool_result (broken pairs closed or dropped, each repair named), and the one-line
actions later context shows after the reply."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from bot.store import StoredToolCall

INTERRUPTED = ("error: this call was interrupted before its result was recorded (a restart); it may "
               "or may not have happened. Check before doing it again, or tell the user.")
ARGUMENT_CHARS = 60


def rounds_as_turns(calls: Sequence[StoredToolCall]) -> list[dict[str, Any]]:
    """Stored calls as an assistant turn (its text and tool_use blocks) and a user turn (the
    results) per round; a call without a result is left unanswered here for `repair` to close."""
    turns: list[dict[str, Any]] = []
    by_round: dict[int, list[StoredToolCall]] = {}
    for call in calls:
        by_round.setdefault(call.round, []).append(call)
    for number in sorted(by_round):
        group = sorted(by_round[number], key=lambda c: c.position)
        text = group[0].round_text
        assistant: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        assistant += [{"type": "tool_use", "id": c.tool_use_id, "name": c.name, "input": c.arguments}
                      for c in group]
        results = [result_block(c.tool_use_id, c.result, c.is_error) for c in group if c.result is not None]
        turns.append({"role": "assistant", "content": assistant})
        if results:
            turns.append({"role": "user", "content": results})
    return turns


def result_block(tool_use_id: str, content: str, is_error: bool) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id,
                             "content": content or "(no output)"}
    if is_error:
        block["is_error"] = True
    return block


def repair(turns: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The turns with every tool_use answered in the very next user turn and every tool_result
    answering a tool_use of the turn before, as the API requires; and what was repaired.

    A tool_use without its result gets an "interrupted" error result (it may have run: the model
    must not assume either way); a result whose call is not in the turn before is dropped, and
    a turn left empty by that is dropped too. Same-role neighbours left behind are merged.
    """
    turns = list(turns)
    repairs: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    for index, turn in enumerate(turns):
        content = turn.get("content")
        if isinstance(content, list) and turn.get("role") == "user":
            previous = out[-1] if out else None
            after_call = previous is not None and previous["role"] == "assistant"
            asked = set(_ids(previous, "tool_use", "id")) if after_call else set()
            kept = []
            for block in content:
                if block.get("type") == "tool_result" and block.get("tool_use_id") not in asked:
                    repairs.append({"kind": "dropped_result", "tool_use_id": block.get("tool_use_id"),
                                    "turn": index})
                    continue
                kept.append(block)
            content = kept
            if not content:
                continue
            turn = {**turn, "content": content}
        _append(out, turn)
        if turn.get("role") == "assistant":
            uses = _ids(turn, "tool_use", "id")
            following = turns[index + 1] if index + 1 < len(turns) else None
            answered = set(_ids(following, "tool_result", "tool_use_id")) \
                if following is not None and following.get("role") == "user" else set()
            missing = [use for use in uses if use not in answered]
            if missing:
                closing = [result_block(use, INTERRUPTED, True) for use in missing]
                repairs += [{"kind": "closed_call", "tool_use_id": use, "turn": index} for use in missing]
                if following is not None and following.get("role") == "user":
                    # Results first, as the API wants them: the closing ones join the others.
                    turns[index + 1] = {**following, "content": closing + _blocks(following["content"])}
                else:
                    out.append({"role": "user", "content": closing})
    return out, repairs


def _append(out: list[dict[str, Any]], turn: dict[str, Any]) -> None:
    if out and out[-1]["role"] == turn["role"]:
        merged = _blocks(out[-1]["content"]) + _blocks(turn["content"])
        # Tool results lead a user turn.
        merged.sort(key=lambda block: 0 if block.get("type") == "tool_result" else 1)
        out[-1] = {**out[-1], "content": merged}
    else:
        out.append(dict(turn))


def _blocks(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _ids(turn: dict[str, Any] | None, kind: str, key: str) -> list[str]:
    content = turn.get("content") if turn is not None else None
    if not isinstance(content, list):
        return []
    return [str(block.get(key)) for block in content if block.get("type") == kind]


def action_line(name: str, arguments: dict[str, Any], summary: str) -> str:
    """`name(args) → summary`, arguments cut short: what later context shows after the reply."""
    shown = ", ".join(f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in arguments.items())
    if len(shown) > ARGUMENT_CHARS:
        shown = shown[: ARGUMENT_CHARS - 1] + "…"
    return f"{name}({shown}) → {summary}"
