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
# What triage is shown of each earlier turn (issue 38): a person's words whole up to
# `_SAID_WORDS`, longer ones as their head and tail; each reply only its first `_REPLY_WORDS`
# words, as what the person said is what a later question asks after, and a reply's opening
# words say what it was about. Long words (links) are bounded by characters as well.
_SAID_WORDS = 40
_SAID_HEAD, _SAID_TAIL = 30, 8
_REPLY_WORDS = (2, 10)
_TURN_WORDS = 12
_WORD_CHARS = 12  # characters a shown word may average before the head is cut by characters


def triage_prompt(units: Sequence[Sequence[StoredMessage]], request: str) -> str:
    """Number each earlier turn with a short local index the model can answer with.

    Compact, as a wider pool costs tokens per line: the UTC date once per day, then per turn its
    index, a speaker mark only where needed (none for the one person who speaks, "A" for a turn
    the assistant opened, each person's name when several speak) and their words, then " A:" and
    the opening of the reply; the header explains the marks once.
    """
    names = {first.sender_name for first, *_ in units if first.role != "assistant"}
    single = len(names) <= 1
    lines = [_header(next(iter(names), None) if single else None, single)]
    day, year = -1, ""
    for index, unit in enumerate(units, start=1):
        first = unit[0]
        if math.floor(first.created_at) // 86400 != day:
            day = math.floor(first.created_at) // 86400
            date = _day(day)
            # The year once, then month-day until it changes.
            lines.append(date if date[:4] != year else date[5:])
            year = date[:4]
        text, count = _opening(with_labels(first.text, first.media))
        if first.role == "assistant":
            lines.append(f"[{index}] A: {text}")
        elif single:
            lines.append(f"[{index}] {text}")
        else:
            lines.append(f"[{index}] {first.sender_name or 'U'}: {text}")
        for position, message in enumerate(unit):
            if position:
                lines.append(f" A: {reply_head(message.text, count)}")
            # Actions go right after the reply that took them, so the model can tell whose they are.
            if message.actions:
                lines.append(f" actions: {'; '.join(message.actions)}")
    lines.append("")
    lines.append(f"New message: {_clip(request)}")
    lines.append("")
    lines.append(f"Which of [1]..[{len(units)}] are relevant? Answer {{\"relevant\": [...]}}.")
    return "\n".join(lines)


def _opening(text: str) -> tuple[str, int]:
    """What a turn's first message shows and how many words it has. Most chat text is already
    flat (see `_clip`) and short: its words are counted by its spaces, in C, without a split."""
    if (len(text) <= _SNIPPET and text.isprintable() and "  " not in text
            and text[:1] != " " and text[-1:] != " "):
        count = text.count(" ") + 1 if text else 0
        if count <= _SAID_WORDS:
            return text, count
    words = text.split()
    return said(words), len(words)


def said(words: Sequence[str]) -> str:
    """A person's words as triage shows them: whole up to `_SAID_WORDS`, else head … tail."""
    if len(words) <= _SAID_WORDS:
        return _clip(" ".join(words))
    head = _chars(" ".join(words[:_SAID_HEAD]), _SAID_HEAD)
    return f"{head} … {_chars(' '.join(words[-_SAID_TAIL:]), _SAID_TAIL)}"


def reply_head(text: str, said_words: int) -> str:
    """A reply as triage shows it: its opening words, "…" where it goes on; the fewer words the
    person said (an "ok, do it" says little of what the turn was about), the more of the reply,
    `_TURN_WORDS` for the two together, within `_REPLY_WORDS`."""
    count = min(_REPLY_WORDS[1], max(_REPLY_WORDS[0], _TURN_WORDS - said_words))
    words = text.split(maxsplit=count)
    if len(words) <= count:
        return _chars(" ".join(words), count)
    return _chars(" ".join(words[:count]), count) + "…"


def _chars(text: str, words: int) -> str:
    limit = words * _WORD_CHARS
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _header(name: str | None, single: bool) -> str:
    if not single:
        who = "each turn opens with who spoke, by name (U if unnamed); A: the assistant's reply"
    else:
        who = f"each turn: what {name or 'the user'} said, then A: the assistant's reply"
    return f"Earlier turns under their UTC date, oldest first ({who}, cut short where \"…\"):"


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
