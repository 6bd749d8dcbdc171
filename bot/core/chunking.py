"""Message chunking: split a reply into platform-sized messages without leaving a code fence open.

Cut points are preferred in this order: a paragraph break outside code, a line break outside code, a
line break inside a fenced block, a sentence end or space inside one over-long line, and last a hard
cut. A preferred break wins only when it costs no extra message and leaves no tiny chunk (under an
eighth of the limit); otherwise the cut goes to the break nearest the limit. Whether a break costs a
message is found by splitting the rest with the fullest cuts, a lookahead bounded so that any text
splits in linear time (past the bound, the fullest cut is taken).

A chunk that ends inside a fence is closed with the fence's marker and the next chunk reopens it
with the same opening line (language included). The added lines count toward the limits, so every
chunk is at most `limit` characters and `max_lines` lines. Once a text is split, every chunk is
balanced, even the last one of a reply whose final block was never closed; a text that fits is
returned as it is (edge blank lines stripped).

Degraded cases, all still within the limits: a reopening line that would take more than half the
limit is shortened to the bare marker; a fence whose marker (with its indentation) is too long to be
closed and reopened in one message is treated as plain text; a fence line longer than a message is
cut like any other long line.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

MIN_LIMIT = 16
MIN_LINES = 3  # a reopened fence, one line of code, the closing fence
LOOKAHEAD_BUDGET = 20_000  # chunks the fullest-cut lookahead may take in one split

_FENCE = re.compile(r"([ \t]*)(`{3,}|~{3,})(.*)")
_FENCE_START = re.compile(r"[ \t]*(?:`{3,}|~{3,})")
_BLANK_LINES = re.compile(r"(?:[^\S\n]*\n)*")
_INLINE_SPACE = re.compile(r"[^\S\n]*")
_SENTENCE_END = re.compile(r"[.!?…][)\]\"'»”’]*(?=\s)")


@dataclass(frozen=True, slots=True)
class _Fence:
    """An open fenced code block: its opening line as written and the line that closes it."""

    opener: str
    closer: str  # the opener's indentation and marker

    def closed_by(self, line: str) -> bool:
        body = line.lstrip(" \t").rstrip()
        marker = self.closer.lstrip(" \t")
        return len(body) >= len(marker) and body == marker[0] * len(body)


class _Cut(IntEnum):
    """Kinds of line-boundary cut, best last."""

    CODE = 1
    LINE = 2
    PARAGRAPH = 3


def split_message(text: str, limit: int, *, max_lines: int | None = None) -> list[str]:
    """Split `text` into chunks of at most `limit` characters and `max_lines` lines ([] if blank)."""
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT}, got {limit}")
    if max_lines is not None and max_lines < MIN_LINES:
        raise ValueError(f"max_lines must be at least {MIN_LINES}, got {max_lines}")
    stripped = text.rstrip()
    body = stripped[_skip(_BLANK_LINES, stripped, 0) :]
    if not body:
        return []
    lines_cap = sys.maxsize if max_lines is None else max_lines
    if len(body) <= limit and body.count("\n") < lines_cap:
        return [body]
    return _Splitter(body, limit, lines_cap).split()


_Point = tuple[int, "_Fence | None"]  # a position in the text and the fence open there
_Choice = Callable[[int, dict[_Cut, _Point]], _Point]


def _fullest(pos: int, best: dict[_Cut, _Point]) -> _Point:
    return max(best.values(), key=lambda point: point[0])


class _Splitter:
    """One pass over a text that does not fit in a single message."""

    def __init__(self, text: str, limit: int, max_lines: int) -> None:
        self.text = text
        self.limit = limit
        self.max_lines = max_lines
        self._budget = LOOKAHEAD_BUDGET
        self._needed: dict[_Point, int] = {}  # chunks the fullest cuts take from a point

    def split(self) -> list[str]:
        chunks: list[str] = []
        pos, carry = 0, None
        while pos < len(self.text):
            pos, carry, chunk = self._take(pos, carry, self._choose)
            if chunk is not None:
                chunks.append(chunk)
        return chunks

    def _choose(self, pos: int, best: dict[_Cut, _Point]) -> _Point:
        """The best kind of break that leaves no tiny chunk and costs no extra message, else the fullest."""
        fullest = _fullest(pos, best)
        for kind in sorted(best, reverse=True):
            point = best[kind]
            if point == fullest:
                return fullest
            if point[0] - pos < self.limit // 8:
                continue
            after, after_fullest = self._chunks_from(point), self._chunks_from(fullest)
            if after is not None and after_fullest is not None and after <= after_fullest:
                return point
        return fullest

    def _chunks_from(self, point: _Point) -> int | None:
        """How many chunks the fullest cuts make of the rest after `point` (None: over the budget)."""
        trail: list[tuple[_Point, bool]] = []
        total = 0
        while point not in self._needed:
            if point[0] >= len(self.text):
                break
            if self._budget == 0:
                return None
            self._budget -= 1
            pos, carry, chunk = self._take(point[0], point[1], _fullest)
            trail.append((point, chunk is not None))
            point = (pos, carry)
        else:
            total = self._needed[point]
        for seen, made in reversed(trail):
            total += made
            self._needed[seen] = total
        return total

    def _open(self, line: str) -> _Fence | None:
        match = _FENCE.fullmatch(line)
        if match is None:
            return None
        indent, marker, info = match.groups()
        if marker[0] == "`" and "`" in info:
            return None  # a line like ```code``` is inline code, not a fence
        closer = indent + marker
        # Closing and reopening must leave room for at least one character of code.
        if 2 * len(closer) + 3 > self.limit:
            return None
        return _Fence(line, closer)

    def _step(self, fence: _Fence | None, line: str) -> _Fence | None:
        if fence is None:
            return self._open(line)
        return None if fence.closed_by(line) else fence

    def _reopener(self, fence: _Fence) -> str:
        if len(fence.opener) + len(fence.closer) + 2 <= self.limit // 2:
            return fence.opener
        return fence.closer

    def _line_end(self, start: int, hi: int) -> int:
        """End of the line starting at `start`, or -1 if it runs past `hi`."""
        newline = self.text.find("\n", start, hi)
        if newline != -1:
            return newline
        return len(self.text) if len(self.text) <= hi else -1

    def _take(self, pos: int, carry: _Fence | None, choose: _Choice) -> tuple[int, _Fence | None, str | None]:
        """One chunk from `pos`: the next position, the fence left open, and the chunk (None: skipped)."""
        text, limit = self.text, self.limit
        pos = _skip(_BLANK_LINES, text, pos)
        if pos >= len(text):
            return pos, None, None
        first_end = self._line_end(pos, pos + limit + 1)
        first = text[pos:first_end] if first_end != -1 else None
        head = ""
        fence = carry
        if carry is not None:
            if first is not None and first.strip() == carry.closer.strip():
                # The previous chunk's added closing line already ends this block.
                return first_end, None, None
            head = self._reopener(carry)
        elif first is not None and first_end < len(text):
            opened = self._open(first)
            if opened is not None and len(first) + len(opened.closer) + 3 <= limit:
                # A chunk starting with a fence carries its opening line like a reopened one.
                head, fence = first, opened
                pos = _skip(_BLANK_LINES, text, first_end + 1)
        return self._cut_lines(pos, head, fence, choose) or self._cut_inside_line(pos, head, fence)

    def _cut_lines(
        self, pos: int, head: str, fence: _Fence | None, choose: _Choice
    ) -> tuple[int, _Fence | None, str | None] | None:
        """The chunk ending at the line boundary `choose` picks within the limits (None: there is none)."""
        text, limit = self.text, self.limit
        base = len(head) + 1 if head else 0
        head_lines = 1 if head else 0
        best: dict[_Cut, _Point] = {}
        previous: _Point | None = None
        state, start, count = fence, pos, 0
        while base + (start - pos) <= limit and head_lines + count < self.max_lines:
            end = self._line_end(start, pos + limit + 1)
            if end == -1:
                break
            line = text[start:end]
            before, state = state, self._step(state, line)
            is_last = end == len(text)
            candidate = None
            if not line.strip():
                if previous is not None and previous[1] is None:
                    best[_Cut.PARAGRAPH] = previous
            elif is_last or not (before is None and state is not None):
                # (A chunk never ends right after an opening line: that would send an empty block.)
                size = base + (start - pos) + len(line.rstrip())
                lines = head_lines + count + 1
                if state is not None:
                    size += 1 + len(state.closer)
                    lines += 1
                if size <= limit and lines <= self.max_lines:
                    candidate = (end, state)
                    if is_last:
                        return self._emit(pos, end, head, state)
                    best[_Cut.LINE if state is None else _Cut.CODE] = candidate
            previous = candidate
            if is_last:
                break
            start, count = end + 1, count + 1
        if not best:
            return None
        end, state = choose(pos, best)
        return self._emit(pos, end, head, state)

    def _emit(self, pos: int, end: int, head: str, state: _Fence | None) -> tuple[int, _Fence | None, str]:
        parts = [head] if head else []
        parts.append(self.text[pos:end].rstrip())
        if state is not None:
            parts.append(state.closer)
        return end, state, "\n".join(parts)

    def _cut_inside_line(self, pos: int, head: str, fence: _Fence | None) -> tuple[int, _Fence | None, str]:
        """Cut the over-long line at `pos` at a sentence end, a space, or anywhere."""
        text = self.text
        reserve = 1 + len(fence.closer) if fence is not None else 0
        if fence is None:
            # The piece we keep may itself read as an opening fence; leave room to close it.
            looks = _FENCE_START.match(text, pos, pos + self.limit + 1)
            if looks is not None and 2 * (looks.end() - pos) + 3 <= self.limit:
                reserve = 1 + looks.end() - pos
        room = self.limit - (len(head) + 1 if head else 0) - reserve
        if not text[pos : pos + room].strip():
            # Indentation longer than a message is dropped, like whitespace at any cut point.
            pos = _skip(_INLINE_SPACE, text, pos)
        end = self._line_end(pos, pos + room + 1)
        window = text[pos : end if end != -1 else pos + room + 1]
        if len(window) <= room:
            cut = resume = len(window)
        else:
            cut = _soft_cut(window, room)
            resume = cut
            if cut == 0:
                cut = resume = room
        piece = text[pos : pos + cut].rstrip()
        state = self._step(fence, piece)
        parts = [head] if head else []
        parts.append(piece)
        if state is not None:
            parts.append(state.closer)
        resume_at = pos + resume
        if resume_at < len(text) and text[resume_at] != "\n" and text[resume_at].isspace():
            resume_at = _skip(_INLINE_SPACE, text, resume_at)
        return resume_at, state, "\n".join(parts)


def _skip(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """The position after `pattern` matched at `pos` (the patterns here may match nothing)."""
    match = pattern.match(text, pos)
    return match.end() if match else pos


def _soft_cut(window: str, room: int) -> int:
    """Where to cut a line within `room` characters: a late sentence end, else a space, else 0."""
    head = window[: room + 1]
    sentence = 0
    for match in _SENTENCE_END.finditer(head):
        sentence = match.end()
    if sentence >= room // 2:
        return sentence
    indent = len(head) - len(head.lstrip())
    for index in range(len(head) - 1, indent, -1):
        if head[index].isspace():
            return index
    return 0
