"""Telegram updates set aside: when one is quarantined, and its raw JSON in a form any store keeps.

An update that does not parse is quarantined at once. One that parses but fails to be committed is
fetched (or posted by Telegram) again; when it fails a second time in a row for the same reason
(exception type and message) the failure is taken to be the update's own, such as a text holding a
lone UTF-16 surrogate that no database can encode, and it is quarantined too: otherwise the offset
stays on it and every later update waits behind it forever. A failure that does not repeat (the
store briefly unavailable) is only retried. When the store itself is down, the quarantine write
fails as well, so the update stays where it is and comes again.
"""

from __future__ import annotations

import json
from typing import Any

from bot.core.errors import describe

# How many updates' last failure is kept: polling holds at most one failing update at a time, but
# webhook requests fail side by side, and a sender could vary update ids without end.
REMEMBERED = 1000


class RepeatedFailures:
    """The last failure of each update not committed yet, to tell a repeat from a first time."""

    def __init__(self, remembered: int = REMEMBERED) -> None:
        self._remembered = remembered
        self._last: dict[str, str] = {}  # update key -> reason of its last failure

    def repeated(self, raw: Any, exc: BaseException) -> bool:
        """Record that `raw` failed with `exc`; True when its previous attempt failed the same way
        (it is then forgotten: the caller quarantines it)."""
        key, why = _key(raw), reason(exc)
        if self._last.pop(key, None) == why:
            return True
        self._last[key] = why
        while len(self._last) > self._remembered:
            del self._last[next(iter(self._last))]  # the oldest
        return False

    def forget(self, raw: Any) -> None:
        """`raw` was committed: a later failure of the same update starts counting again."""
        self._last.pop(_key(raw), None)


def update_ref(raw: Any) -> str | None:
    """The update id a quarantined row is found by, when the update has one."""
    update_id = raw.get("update_id") if isinstance(raw, dict) else None
    return None if update_id is None else printable(str(update_id))


def reason(exc: BaseException) -> str:
    """`Type: message`, storable whatever the message quotes."""
    return printable(describe(exc))


def raw_json(raw: Any) -> str:
    """The update as ASCII JSON: surrogates and control characters escaped, so that the row
    storing it cannot fail the way the update did. Never raises."""
    try:
        return json.dumps(raw, ensure_ascii=True)
    except (ValueError, TypeError, RecursionError, MemoryError) as exc:
        # Only a value this process made could get here (what came in was JSON): say so instead.
        return json.dumps(f"<{type(raw).__name__} not serialisable: {reason(exc)}>")


def printable(text: str) -> str:
    """`text` without what SQLite or PostgreSQL refuse: lone surrogates and NULs, backslash-escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def _key(raw: Any) -> str:
    ref = update_ref(raw)
    return f"update {ref}" if ref is not None else raw_json(raw)
