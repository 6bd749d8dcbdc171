"""Telegram updates set aside: an update that does not parse is quarantined at once; one that
parses but fails to be committed twice in a row the same way is quarantined too
(`bot.intake.quarantine`, which Matrix's events share), so the offset does not stay on it forever.
"""

from __future__ import annotations

from typing import Any

from bot.intake import quarantine
from bot.intake.quarantine import REMEMBERED, printable, raw_json, reason

__all__ = ["REMEMBERED", "RepeatedFailures", "printable", "raw_json", "reason", "update_ref"]


class RepeatedFailures:
    """The last failure of each update not committed yet, to tell a repeat from a first time."""

    def __init__(self, remembered: int = REMEMBERED) -> None:
        self._failures = quarantine.RepeatedFailures(remembered)

    def repeated(self, raw: Any, exc: BaseException) -> bool:
        """Record that `raw` failed with `exc`; True when its previous attempt failed the same way
        (it is then forgotten: the caller quarantines it)."""
        return self._failures.repeated(_key(raw), exc)

    def forget(self, raw: Any) -> None:
        """`raw` was committed: a later failure of the same update starts counting again."""
        self._failures.forget(_key(raw))


def update_ref(raw: Any) -> str | None:
    """The update id a quarantined row is found by, when the update has one."""
    update_id = raw.get("update_id") if isinstance(raw, dict) else None
    return None if update_id is None else printable(str(update_id))


def _key(raw: Any) -> str:
    ref = update_ref(raw)
    return f"update {ref}" if ref is not None else raw_json(raw)
