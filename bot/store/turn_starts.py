"""Where a session's turns start, as the words' search reads them, and what plans a read of turns."""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

# The most starts one read gives (the newest): a very long session's read stays short.
TURN_STARTS = 2_000


@dataclass(frozen=True, slots=True)
class TurnStarts:
    """Where a session's turns start: its interactive user messages above the context floor and
    below `before_id`, ascending; every one when `complete`, else the newest TURN_STARTS."""

    ids: Sequence[int]
    complete: bool
    before_id: int

    @classmethod
    def of(cls, listed: object, before_id: int) -> TurnStarts:
        """From the comma-separated ids a read gave (None: there are none)."""
        ids: list[int] = json.loads(f"[{listed}]") if listed else []
        ids.reverse()  # read newest first
        ids.sort()  # (in order already: a pass)
        return cls(ids, len(ids) < TURN_STARTS, before_id)

    def span(self, message_id: int) -> tuple[int, int] | None:
        """[start, stop) of the turn holding `message_id` (below `before_id`): its user message
        and the next one (or `before_id`); None when no start read is at or before it."""
        return self.spans([message_id])[0].get(message_id)

    def spans(self, message_ids: Iterable[int]) -> tuple[dict[int, tuple[int, int]], list[int]]:
        """`span` of each id that has one, and the ids it cannot speak for (see `knows`), each
        once: one pass for a build's ~60 matches."""
        ids, last, bisect_right = self.ids, len(self.ids) - 1, bisect.bisect_right
        spans: dict[int, tuple[int, int]] = {}
        unknown: list[int] = []
        for message_id in message_ids:
            if message_id in spans:
                continue
            index = bisect_right(ids, message_id) - 1
            if index >= 0:
                spans[message_id] = (ids[index], ids[index + 1] if index < last else self.before_id)
            elif not self.knows(message_id) and message_id not in unknown:
                unknown.append(message_id)
        return spans, unknown

    def knows(self, message_id: int) -> bool:
        """Whether `span` speaks for `message_id`: always when every start was read."""
        return self.complete or (bool(self.ids) and message_id >= self.ids[0])


class Planned(Protocol):
    """What a planner gives `lexical_then_turns`: the turns [start, stop) to read."""

    @property
    def wanted(self) -> Collection[tuple[int, int]]: ...


P = TypeVar("P", bound=Planned)
# Which turns to read, from the words' matches and the session's turn starts.
Planner = Callable[[list[tuple[int, float]], TurnStarts], P]
