"""How `switchboard context` shows a recorded turn: lines for people, one JSON record for scripts."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.cli.base import utc_time
from bot.context.turn_explained import COUNT_ORDER, failure
from bot.context.turn_explained import speaker as speaker_of
from bot.core.media import with_labels
from bot.ranking.stages import REPLY_CALL
from bot.tools.transcript import action_line

if TYPE_CHECKING:
    from bot.core.messages import StoredMessage
    from bot.store import SnapshotRecord


# One line per message unless --full: enough to recognise it, short enough for a terminal row.
LINE_CHARS = 80


def context_lines(
    record: SnapshotRecord, total: int, messages: dict[int, StoredMessage | None], *, full: bool
) -> list[str]:
    snap = record.snapshot
    lines = [f"turn {record.turn} of {total}  at {utc_time(record.created_at)}  "
             f"request #{record.request_message_id}  reply #{record.reply_message_id}  (times UTC)"]
    lines.append("request: " + _text(messages.get(record.request_message_id), full, indent=9))
    lines += _reply_call_lines(snap)
    failed = failure(snap)
    if failed:
        lines.append(f"FAILED: {failed}")
    if record.reply_message_id:
        call = snap.get(REPLY_CALL) or {}
        label = "reply (the fallback reply): " if call.get("fallback") else "reply: "
        lines.append(label + _text(messages.get(record.reply_message_id), full, indent=len(label),
                                   speaker=False))
    lines.append(f"hash {record.hash}  history limit {snap.get('history_limit') or 'none'}")
    tokens = snap.get("tokens")
    if tokens and tokens.get("budget"):
        lines.append(f"tokens ~{tokens.get('estimate')} of a {tokens['budget']} history budget "
                     "(estimates x1.2)")
    if snap.get("compaction") is not None:
        lines.append(f"summary from compaction #{snap['compaction']} leads the context")
    triage = snap.get("triage")
    if triage:
        error = triage.get("error")
        lines.append(f"triage {triage.get('outcome')}: {triage.get('selected', 0)} of "
                     f"{triage.get('candidates', 0)} older turns kept, {triage.get('latency_ms', 0)} ms, "
                     f"{triage.get('input_tokens', 0)}+{triage.get('output_tokens', 0)} tokens"
                     + (f", {error}" if error else ""))
    counts = snap.get("counts") or {}
    if counts:
        names = sorted(counts, key=lambda name: (COUNT_ORDER.index(name) if name in COUNT_ORDER
                                                 else len(COUNT_ORDER), name))
        width = max(len(str(name)) for name in names)
        value_width = max(len(str(counts[name])) for name in names)
        lines.append("counts")
        lines += [f"  {name:<{width}}  {counts[name]:>{value_width}}" for name in names]
    rows: list[tuple[str, int, str]] = [("in the context", int(e["id"]), str(e["reason"]))
                                        for e in snap.get("entries", [])]
    rows += [("scheduled previous-tasks block", int(i), "scheduled") for i in snap.get("scheduled_block", [])]
    rows += [("trimmed by the token budget", int(t["id"]), str(t.get("reason", "budget")))
             for t in snap.get("trimmed", [])]
    id_width = max((len(str(message_id)) for _, message_id, _ in rows), default=1) + 1
    reason_width = max((len(reason) for *_, reason in rows), default=0)
    section = ""
    for title, message_id, reason in rows:
        if title != section:
            section = title
            count = sum(1 for row in rows if row[0] == title)
            lines.append(f"{title} ({count}, oldest first)")
        found = messages.get(message_id)
        when = datetime.fromtimestamp(found.created_at, UTC).strftime("%Y-%m-%d %H:%M:%S") \
            if found else "?" * 19
        role = found.role if found else "?"
        prefix = f"  {'#' + str(message_id):<{id_width}}  {when}  {role:<9}  {reason:<{reason_width}}  "
        lines.append(prefix + _text(found, full, indent=len(prefix)))
    lines += _candidate_lines(snap.get("candidates") or [], messages, full)
    return lines


def _candidate_lines(
    candidates: list[dict[str, Any]], messages: dict[int, StoredMessage | None], full: bool
) -> list[str]:
    """The pool triage chose from: each older turn's rank, fused score, what each source made of
    it (rank and score: recency for the lookback, idf for lexical, cosine for semantic), and
    whether it went in; a turn of triage's second round shows "2:" and its rank and cosine there
    as a neighbour of the first round's picks."""
    if not candidates:
        return []
    lines = [f"candidates ({len(candidates)} older turns, best first; per source: rank score)"]
    lines.append(f"  {'rank':>4}  {'turn':<9} {'fused':>7}  {'lookback':<8}  {'lexical':<12}  "
                 f"{'semantic':<12}  in")
    for candidate in candidates:
        sources = candidate.get("sources") or {}

        def cell(name: str, width: int, sources: dict[str, Any] = sources) -> str:
            hit, mark = sources.get(name), ""
            if not hit and name == "semantic" and sources.get("neighbour"):
                hit, mark = sources["neighbour"], "2:"  # offered in triage's second round
            if not hit:
                return f"{'-':<{width}}"
            text = (str(hit.get("rank")) if name == "lookback"
                    else f"{mark}{hit.get('rank')} {hit.get('score'):.3f}")
            return f"{text:<{width}}"

        prefix = (f"  {candidate.get('rank', '?'):>4}  {'#' + str(candidate['id']):<9} "
                  f"{float(candidate.get('score', 0)):>7.4f}  {cell('lookback', 8)}  {cell('lexical', 12)}  "
                  f"{cell('semantic', 12)}  {'yes' if candidate.get('chosen') else 'no ':<3}  ")
        lines.append(prefix + _text(messages.get(int(candidate["id"])), full, indent=len(prefix)))
    return lines


def _reply_call_lines(snap: dict[str, Any]) -> list[str]:
    call = snap.get(REPLY_CALL)
    if call is None:
        return ["model call: not recorded (a turn stored before this version recorded it)"]
    if not call.get("called"):
        return [f"model {call.get('model')}: not called (the context could not be built)"]
    attempts = call.get("attempts")
    tried = _calls(attempts, call.get("tools"))
    stop = f"  stopped: {call['stop_reason']}" if call.get("stop_reason") not in (None, "end_turn") else ""
    files = ", ".join(
        f"{f.get('name')} {Path(str(f.get('file'))).name} "
        + ("(left out: the total cap was used up)" if f.get("left_out") else f"({f.get('chars')} chars)")
        for f in call.get("prompt_files") or []
    ) or "none"
    cached = ""
    if call.get("cache_write_tokens") or call.get("cache_read_tokens"):
        written, read = call.get("cache_write_tokens", 0), call.get("cache_read_tokens", 0)
        cached = f" (cache {written} written, {read} read)"
    return [
        f"model {call.get('model')}  tokens {call.get('tokens_in', 0)} in, {call.get('tokens_out', 0)} out"
        f"{cached}  {tried}  {call.get('model_ms', 0)} ms{stop}",
        f"system prompt {call.get('system_prompt_chars')} chars; prompt files: {files}",
        *_part_lines(call.get("system_parts")),
        *_tool_lines(call.get("tools")),
    ]


def _part_lines(parts: Any) -> list[str]:
    """Each part of the system prompt with its size, so knowledge that came from it (a note, a
    prompt file) can be traced."""
    if not isinstance(parts, list):
        return []
    return [f"  {int(part.get('chars') or 0):>6} chars  {part.get('part')}"
            + (f"  ({Path(str(part['source'])).name})" if part.get("source") else "")
            for part in parts if isinstance(part, dict)]


def _calls(attempts: Any, tools: Any) -> str:
    """How many model calls the reply took: one per tool round and one for the answer, and the
    attempts beyond those that were retries (a tool loop is not a retried call)."""
    if not attempts:
        return "failed"
    rounds = int(tools.get("rounds") or 0) if isinstance(tools, dict) else 0
    calls = min(rounds + 1, int(attempts))
    retried = int(attempts) - calls
    return (f"{calls} model call{'s' if calls != 1 else ''}"
            + (f" ({retried} retr{'ies' if retried != 1 else 'y'})" if retried else ""))


def _tool_lines(tools: Any) -> list[str]:
    """The turn's tool use: what was offered, each call as its action, and any transcript repair."""
    if not isinstance(tools, dict):
        return []
    calls = tools.get("calls") or []
    limit = " (the round limit was reached)" if tools.get("limit_reached") else ""
    lines = [f"tools: {len(tools.get('offered') or [])} offered, {len(calls)} call"
             f"{'s' if len(calls) != 1 else ''} in {tools.get('rounds', 0)} round"
             f"{'s' if tools.get('rounds') != 1 else ''}{limit}"]
    for call in calls:
        arguments = call.get("arguments") or {}
        action = action_line(str(call.get("name")), arguments if isinstance(arguments, dict) else {},
                             str(call.get("summary")))
        took = f"{call['duration_ms']} ms" if call.get("duration_ms") is not None else "-"
        notes = (" ERROR" if call.get("is_error") else "") + (" (sent again after a restart)"
                                                                if call.get("resumed") else "")
        number = call["round"] + 1 if isinstance(call.get("round"), int) else "?"  # stored from 0
        lines.append(f"  round {number}: {action}  [{took}]{notes}")
    for repair in tools.get("repairs") or []:
        what = {"closed_call": "a call without its result was closed as interrupted",
                "dropped_result": "a result without its call was dropped"}.get(str(repair.get("kind")),
                                                                                str(repair.get("kind")))
        lines.append(f"  transcript repaired: {what} ({repair.get('tool_use_id')})")
    return lines


def _text(message: StoredMessage | None, full: bool, *, indent: int, speaker: bool = True) -> str:
    """A message's text after its speaker: cut to one line, or whole (lines aligned) with --full."""
    if message is None:
        return "(not in the store any more)"
    shown = with_labels(message.text, message.media)
    text = f"{speaker_of(message)}: {shown}" if speaker else shown
    if full:
        return text.replace("\n", "\n" + " " * indent)
    line = " ".join(text.split())
    return line if len(line) <= LINE_CHARS else line[:LINE_CHARS - 1] + "…"
