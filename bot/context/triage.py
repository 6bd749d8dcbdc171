"""Fast-model triage: which older messages matter to the current request, answered by a small model."""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol

from bot.config import ConversationConfig
from bot.core.errors import ModelError
from bot.core.media import with_labels
from bot.core.messages import StoredMessage
from bot.models.brain import Brain, FastCompleter
from bot.ranking.stages import TriageReport, group_turns

TRIAGE_SYSTEM = (
    "You pick which earlier messages of a chat are relevant to the user's new message. "
    "Answer with JSON only, like {\"relevant\": [1, 4]}. When in doubt, include. "
    "An empty list is a valid answer when none are relevant."
)
_SNIPPET = 400


def triage_prompt(units: Sequence[Sequence[StoredMessage]], request: str) -> str:
    """Number each earlier turn with a short local index the model can answer with.

    Compact, as a wider pool costs tokens per line: the UTC date once per day, then per turn its
    index, time of day, a short speaker mark ("A" the assistant, "U" the user when one person, or
    no name, speaks; else each person's name) and the text; the header explains the marks once.
    """
    names = {first.sender_name for first, *_ in units if first.role != "assistant"}
    single = len(names) <= 1
    lines = [_header(next(iter(names), None) if single else None, single)]
    day = -1
    for index, unit in enumerate(units, start=1):
        first = unit[0]
        minute = math.floor(first.created_at) // 60
        if minute // 1440 != day:
            day = minute // 1440
            lines.append(_day(day))
        user = "U" if single else first.sender_name or "U"
        speaker = "A" if first.role == "assistant" else user
        text = _clip(with_labels(first.text, first.media))
        lines.append(f"[{index}] {_time_of_day(minute)} {speaker}: {text}")
        for position, message in enumerate(unit):
            if position:
                lines.append(f" A: {_clip(message.text)}")
            # Actions go right after the reply that took them, so the model can tell whose they are.
            if message.actions:
                lines.append(f" actions: {'; '.join(message.actions)}")
    lines.append("")
    lines.append(f"New message: {_clip(request)}")
    lines.append("")
    lines.append(f"Which of [1]..[{len(units)}] are relevant? Answer {{\"relevant\": [...]}}.")
    return "\n".join(lines)


def _header(name: str | None, single: bool) -> str:
    if not single:
        who = "A: the assistant; users by name, U if unnamed"
    elif name:
        who = f"A: the assistant, U: the user, {name}"
    else:
        who = "A: the assistant, U: the user"
    return f"Earlier turns under their UTC date, oldest first ({who}):"


def parse_triage_answer(text: str, count: int) -> list[int] | None:
    """The 1-based indices the model chose, or None when nothing parseable came back.

    Accepts a JSON object (any list value, `relevant` preferred) or a bare list, alone, inside a
    code fence or inside prose; entries out of range or not integers are ignored.
    """
    for candidate in _json_candidates(text):
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        items: object = value
        if isinstance(value, dict):
            items = value.get("relevant")
            if not isinstance(items, list):
                items = next((v for v in value.values() if isinstance(v, list)), None)
        if not isinstance(items, list):
            continue
        picked = {
            item for item in items
            if isinstance(item, int) and not isinstance(item, bool) and 1 <= item <= count
        }
        return sorted(picked)
    return None


def _json_candidates(text: str) -> list[str]:
    candidates = [m.group(1) for m in re.finditer(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)]
    candidates.append(text.strip())
    for opener, closer in (("{", "}"), ("[", "]")):
        start, end = text.find(opener), text.rfind(closer)
        if start != -1 and end > start:
            candidates.append(text[start : end + 1])
    return candidates


def _clip(text: str) -> str:
    # Most chat text is already flat: printable (so its only whitespace is the ASCII space), no
    # double space, none at the ends. Checked in C, that skips the split and join of ~80 texts
    # per triage prompt.
    if (len(text) <= _SNIPPET and text.isprintable() and "  " not in text
            and text[:1] != " " and text[-1:] != " "):
        return text
    flat = " ".join(text.split())
    return flat if len(flat) <= _SNIPPET else flat[: _SNIPPET - 1] + "…"


def _time_of_day(minute: int) -> str:
    """A UTC minute (seconds since the epoch // 60) as its time of day, HH:MM."""
    hour, rest = divmod(minute % 1440, 60)
    return f"{hour:02d}:{rest:02d}"


@lru_cache(maxsize=1024)
def _day(day: int) -> str:
    """A UTC day (days since the epoch) as %Y-%m-%d."""
    return time.strftime("%Y-%m-%d", time.gmtime(day * 86400))


async def triage(
    completer: FastCompleter,
    older: Sequence[StoredMessage],
    request: str,
    *,
    model: str,
    timeout: float,
) -> tuple[list[StoredMessage] | None, TriageReport]:
    """Ask the fast model which older messages to keep; None as the list means it failed."""
    units = group_turns(older)
    started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            completion = await completer.complete(
                triage_prompt(units, request), system=TRIAGE_SYSTEM, model=model,
                deadline=time.monotonic() + timeout,
            )
    except TimeoutError:
        return None, _report("timeout", units, started, error=f"no answer within {timeout:g}s")
    except ModelError as exc:
        return None, _report("error", units, started, error=str(exc))
    chosen = parse_triage_answer(completion.text, len(units))
    if chosen is None:
        return None, _report(
            "unparseable", units, started, completion.input_tokens, completion.output_tokens,
            error=f"unparseable answer: {_clip(completion.text)[:80]}",
        )
    selected = [message for index in chosen for message in units[index - 1]]
    report = _report(
        "selected", units, started, completion.input_tokens, completion.output_tokens,
        selected=len(chosen),
    )
    return selected, report


def _report(
    outcome: str,
    units: Sequence[Sequence[StoredMessage]],
    started: float,
    input_tokens: int = 0,
    output_tokens: int = 0,
    *,
    selected: int = 0,
    error: str | None = None,
) -> TriageReport:
    return TriageReport(
        outcome=outcome,  # type: ignore[arg-type]
        candidates=len(units),
        selected=selected,
        latency_ms=(time.perf_counter() - started) * 1000,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        error=error,
    )


class Triager(Protocol):
    """Answers which older messages matter: the fast model live, or a recorded answer in replay."""

    @property
    def available(self) -> bool: ...

    async def __call__(
        self, older: Sequence[StoredMessage], request_text: str
    ) -> tuple[list[StoredMessage] | None, TriageReport]: ...


class LiveTriage:
    """Triage by the agent's fast model (through whichever provider the brain is)."""

    def __init__(self, brain: Brain, conv: ConversationConfig) -> None:
        self._brain = brain
        self._conv = conv

    @property
    def available(self) -> bool:
        return self._brain.fast_completer() is not None

    async def __call__(
        self, older: Sequence[StoredMessage], request_text: str
    ) -> tuple[list[StoredMessage] | None, TriageReport]:
        completer = self._brain.fast_completer()
        assert completer is not None
        return await triage(
            completer, older, request_text,
            model=self._brain.model_for(self._conv.selection_model),
            timeout=self._conv.selection_timeout,
        )
