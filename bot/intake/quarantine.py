"""Platform events set aside: when one is quarantined, and its raw JSON in a form any store keeps.

An event that parses but fails to be committed is fetched again; when it fails a second time in a
row for the same reason (exception type and message) the failure is taken to be the event's own,
such as a text holding a lone UTF-16 surrogate that no database can encode, and it is quarantined:
otherwise the platform's cursor (Telegram's offset, Matrix's sync token) stays on it and every
later event waits behind it forever. A failure that does not repeat (the store briefly
unavailable) is only retried. When the store itself is down, the quarantine write fails as well,
so the event stays where it is and comes again.
"""

from __future__ import annotations

import json
from typing import Any

from bot.core.errors import describe

# How many events' last failure is kept: polling holds at most one failing event at a time, but
# webhook requests fail side by side, and a sender could vary event ids without end.
REMEMBERED = 1000


class RepeatedFailures:
    """The last failure of each event not committed yet (by a key naming it), to tell a repeat
    from a first time."""

    def __init__(self, remembered: int = REMEMBERED) -> None:
        self._remembered = remembered
        self._last: dict[str, str] = {}  # event key -> reason of its last failure

    def repeated(self, key: str, exc: BaseException) -> bool:
        """Record that the event `key` failed with `exc`; True when its previous attempt failed
        the same way (it is then forgotten: the caller quarantines it)."""
        why = reason(exc)
        if self._last.pop(key, None) == why:
            return True
        self._last[key] = why
        while len(self._last) > self._remembered:
            del self._last[next(iter(self._last))]  # the oldest
        return False

    def forget(self, key: str) -> None:
        """The event was committed: a later failure of it starts counting again."""
        self._last.pop(key, None)


def reason(exc: BaseException) -> str:
    """`Type: message`, storable whatever the message quotes."""
    return printable(describe(exc))


def raw_json(raw: Any) -> str:
    """The event as ASCII JSON: surrogates and control characters escaped, so that the row
    storing it cannot fail the way the event did. Never raises."""
    try:
        return json.dumps(raw, ensure_ascii=True)
    except (ValueError, TypeError, RecursionError, MemoryError) as exc:
        # Only a value this process made could get here (what came in was JSON): say so instead.
        return json.dumps(f"<{type(raw).__name__} not serialisable: {reason(exc)}>")


def printable(text: str) -> str:
    """`text` without what SQLite or PostgreSQL refuse: lone surrogates and NULs, backslash-escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
