"""Token budget: estimates, the model's window, and trimming the context oldest-first to fit."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from bot.core.media import FULL_MEDIA_REASONS, media_tokens
from bot.core.messages import StoredMessage
from bot.ranking.stages import ContextEntry

# Estimates are rough (about four characters a token); the margin keeps a long context from
# overflowing when the real tokenizer counts more, as OpenClaw does.
SAFETY_MARGIN = 1.2
DEFAULT_WINDOW = 200_000
# Model id prefixes and their context windows in tokens; the first match wins.
KNOWN_WINDOWS: tuple[tuple[str, int], ...] = (
    ("claude-", 200_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("llama3.1", 128_000),
    ("llama3", 8_192),
)


def estimate_tokens(text: str) -> int:
    """A cheap token estimate (about four characters a token), stored with each message."""
    return (len(text) + 3) // 4


def cost(text: str) -> int:
    """What a piece of text counts against the budget: its estimate with the safety margin."""
    return math.ceil(estimate_tokens(text) * SAFETY_MARGIN)


def message_cost(message: StoredMessage, *, full_media: bool = False) -> int:
    """A message's cost; a reply cut by `context_truncation` costs what is left of it.

    Pictures and files count as their placeholders, or (`full_media`: the message is in the
    recent window, replied to, or the request) as the blocks sent for them.
    """
    tokens = estimate_tokens(message.text)
    if message.token_estimate:
        tokens = min(tokens, message.token_estimate)
    if message.media:
        tokens += media_tokens(message.media, full=full_media)
    return math.ceil(tokens * SAFETY_MARGIN)


def context_window(model: str, override: int = 0) -> int:
    """The model's window: the configured override, else the known model table, else 200 000."""
    if override > 0:
        return override
    for prefix, window in KNOWN_WINDOWS:
        if model.startswith(prefix):
            return window
    return DEFAULT_WINDOW


@dataclass(frozen=True, slots=True)
class Budget:
    """How many tokens of history one turn may send."""

    window: int
    reserve: int
    history_share: float

    @property
    def history_tokens(self) -> int:
        """History gets its share of the window, but never eats into the reserve."""
        return max(0, min(int(self.window * self.history_share), self.window - self.reserve))


@dataclass(frozen=True, slots=True)
class Fitted:
    """The entries that fit, the ids trimmed (oldest first) and the tokens used in the end."""

    kept: list[ContextEntry]
    trimmed: list[int]
    used: int
    limit: int

    @property
    def over(self) -> bool:
        """Still over budget: only protected entries (and the fixed part) were left."""
        return self.used > self.limit


def fit_budget(
    entries: Sequence[ContextEntry], *, limit: int, fixed: int, protected: Collection[int] = ()
) -> Fitted:
    """Drop the oldest unprotected entries until history plus `fixed` fits in `limit` tokens.

    `fixed` is what cannot be trimmed (the request, the summary, the scheduled block); entries
    must be in chronological order. The same input always drops the same entries.
    """
    costs = [message_cost(entry.message, full_media=entry.reason in FULL_MEDIA_REASONS) for entry in entries]
    used = fixed + sum(costs)
    dropped: set[int] = set()
    for index, entry in enumerate(entries):
        if used <= limit:
            break
        if entry.message.id in protected:
            continue
        dropped.add(index)
        used -= costs[index]
    kept = [entry for index, entry in enumerate(entries) if index not in dropped]
    trimmed = [entries[index].message.id for index in sorted(dropped)]
    return Fitted(kept, trimmed, used, limit)
