"""Usage: recording what each model call used, and summing it with an estimated cost.

Every call that reports tokens (a reply, its triage, a compaction summary, a scheduled run) is one
row of the store's `model_usage`, written where the call is made. The store sums them per group and
model in one read (`usage_summed`), and `usage_report` prices those sums: `/usage` in a chat,
`switchboard usage` on the host and the console's usage page all read it, so they always agree.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Protocol
from zoneinfo import ZoneInfo

import structlog

from bot.config import ModelPrice
from bot.core.errors import describe as describe_error
from bot.models.brain import Completion, FastCompleter
from bot.store import UsageRecord, UsageSum

log = structlog.get_logger("switchboard.usage")


class UsageLedger(Protocol):
    """Where a call's tokens are kept (the store)."""

    async def record_usage(self, record: UsageRecord) -> None: ...


async def record_usage(
    store: UsageLedger, session_key: str, user_id: str | None, kind: str, completion: Completion | None
) -> None:
    """Keep one call's tokens; a failure is logged, never raised (the reply matters more)."""
    if completion is None:
        return
    record = UsageRecord(
        session_key, user_id, kind, completion.model, completion.input_tokens,
        completion.output_tokens, completion.cache_write_tokens, completion.cache_read_tokens,
        time.time(),
    )
    if not (record.input_tokens or record.output_tokens or record.cache_write_tokens
            or record.cache_read_tokens):
        return
    try:
        await store.record_usage(record)
    except Exception as exc:
        log.warning("usage not recorded", session_key=session_key, kind=kind,
                    error=describe_error(exc), exc_info=True)


class RecordingCompleter:
    """A fast completer whose every call's tokens are recorded for a session (compaction)."""

    def __init__(self, inner: FastCompleter, store: UsageLedger, session_key: str, kind: str) -> None:
        self._inner = inner
        self._store = store
        self._session_key = session_key
        self._kind = kind

    async def complete(
        self, prompt: str, *, system: str, model: str, deadline: float, max_tokens: int = 256
    ) -> Completion:
        completion = await self._inner.complete(prompt, system=system, model=model, deadline=deadline,
                                                max_tokens=max_tokens)
        await record_usage(self._store, self._session_key, None, self._kind, completion)
        return completion


class UsageSums(Protocol):
    """Where the calls are summed (the store)."""

    async def usage_summed(
        self, since: float, by: Sequence[str], zone: tzinfo, session_key: str | None = None
    ) -> list[UsageSum]: ...


@dataclass(slots=True)
class UsageTotal:
    """Summed tokens of some calls, and their estimated cost (None: no call had a price)."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    cache_hits: int = 0  # calls that read from the prompt cache
    cost: float | None = None
    unpriced: set[str] = field(default_factory=set)  # models seen without a price

    def add(self, summed: UsageSum, prices: Mapping[str, ModelPrice]) -> None:
        """Count one model's calls of a group in, priced as one: a price is per token, so the
        cost of the sums is the sum of the costs."""
        self.calls += summed.calls
        self.input_tokens += summed.input_tokens
        self.output_tokens += summed.output_tokens
        self.cache_write_tokens += summed.cache_write_tokens
        self.cache_read_tokens += summed.cache_read_tokens
        self.cache_hits += summed.cache_hits
        price = prices.get(summed.model)
        if price is None:
            self.unpriced.add(summed.model)
            return
        cost = price.cost(summed.input_tokens, summed.output_tokens, summed.cache_write_tokens,
                          summed.cache_read_tokens)
        self.cost = cost if self.cost is None else self.cost + cost


@dataclass(frozen=True, slots=True)
class UsageReport:
    """A window's calls summed per group of each name asked for (`groups["day"]["2026-11-28"]`),
    and all of them."""

    groups: dict[str, dict[str, UsageTotal]]
    total: UsageTotal


async def usage_report(
    store: UsageSums, since: float, zone: tzinfo, by: Sequence[str], prices: Mapping[str, ModelPrice],
    session_key: str | None = None,
) -> UsageReport:
    """The calls since `since` (of one session, or all) summed per group of each name in `by`
    (`bot.store.USAGE_KEYS`; days in `zone`), by the store in one read: what `/usage`, `switchboard
    usage` and the console's usage page show."""
    return fold(await store.usage_summed(since, by, zone, session_key), by, prices)


def fold(sums: Iterable[UsageSum], by: Sequence[str], prices: Mapping[str, ModelPrice]) -> UsageReport:
    """The store's sums per group and model priced and gathered per group, and into the total
    (from the first name's groups: each name's groups hold every call once)."""
    groups: dict[str, dict[str, UsageTotal]] = {name: {} for name in by}
    summed = UsageTotal()
    for part in sums:
        named = groups[part.by]
        group = named.get(part.key)
        if group is None:
            group = named[part.key] = UsageTotal()
        group.add(part, prices)
        if part.by == by[0]:
            summed.add(part, prices)
    return UsageReport(groups, summed)


def window(now: float, zone: ZoneInfo, days: int | None) -> tuple[float, str]:
    """Where a usage report starts and what it is called: the last `days` days (today one of
    them), or this month when `days` is None."""
    if days is not None:
        return (period_starts(now - (days - 1) * 86400, zone)[0],
                f"the last {days} day{'s' if days != 1 else ''}")
    return period_starts(now, zone)[1], "this month"


def period_starts(now: float, zone: ZoneInfo) -> tuple[float, float]:
    """The start of today and of this month in the agent's timezone."""
    local = datetime.fromtimestamp(now, zone)
    day = local.replace(hour=0, minute=0, second=0, microsecond=0)
    return day.timestamp(), day.replace(day=1).timestamp()


def describe(summed: UsageTotal) -> str:
    """One line: tokens in (uncached) and out, the prompt cache apart when there was any (what share
    of all input it served, on how many calls), and the estimate."""
    text = f"{summed.input_tokens:,} in, {summed.output_tokens:,} out"
    if summed.cache_write_tokens or summed.cache_read_tokens:
        whole = summed.input_tokens + summed.cache_write_tokens + summed.cache_read_tokens
        text += (f" (cache: {summed.cache_write_tokens:,} written, {summed.cache_read_tokens:,} read; "
                 f"{summed.cache_read_tokens / whole:.0%} of input from cache, hit on "
                 f"{summed.cache_hits} call{'s' if summed.cache_hits != 1 else ''})")
    text += f", {summed.calls} call{'s' if summed.calls != 1 else ''}"
    if summed.cost is not None:
        text += f", about {summed.cost:.4f}"
    if summed.unpriced:
        text += f" (no price for {', '.join(sorted(summed.unpriced))})"
    return text
