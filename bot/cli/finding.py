"""A finding of `switchboard doctor`: one checked thing, what was found, and what to do about it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Finding:
    """One line of `doctor`. `ok` is None for a check that does not apply here (no systemd, semantic
    recall off, no daemon running): shown, but neither a pass nor a failure."""

    ok: bool | None
    label: str
    detail: str
    fix: str = ""

    def line(self, *, unicode: bool = True) -> str:
        marks = ("✓", "✗", "–") if unicode else ("ok  ", "FAIL", "--  ")
        mark = marks[0] if self.ok else marks[2] if self.ok is None else marks[1]
        text = f"{mark} {self.label}: {self.detail}"
        return f"{text} — {self.fix}" if self.fix and unicode else f"{text}; {self.fix}" if self.fix else text


def passed(label: str, detail: str) -> Finding:
    return Finding(True, label, detail)


def failed(label: str, detail: str, fix: str) -> Finding:
    return Finding(False, label, detail, fix)


def skipped(label: str, detail: str, fix: str = "") -> Finding:
    return Finding(None, label, detail, fix)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def listed(items: list[str], most: int = 6) -> str:
    """Items joined by commas, the rest counted: "a, b, c and 4 more"."""
    shown = ", ".join(items[:most])
    return f"{shown} and {len(items) - most} more" if len(items) > most else shown
