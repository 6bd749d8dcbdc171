"""Usage: recording what each model call used, and summing it with an estimated cost.

Every call that reports tokens (a reply, its triage, a compaction summary, a scheduled run) is one
row of the store's `model_usage`, written where the call is made. Sums are pure functions over
those rows, so `/usage` in a chat and `switchboard usage` on the host always agree.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol
from zoneinfo import ZoneInfo

import structlog

from bot.config import ModelPrice
from bot.core.errors import describe as describe_error
from bot.models.brain import Completion, FastCompleter
from bot.store import UsageRecord

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

    def add(self, record: UsageRecord, prices: Mapping[str, ModelPrice]) -> None:
        self.calls += 1
        self.input_tokens += record.input_tokens
        self.output_tokens += record.output_tokens
        self.cache_write_tokens += record.cache_write_tokens
        self.cache_read_tokens += record.cache_read_tokens
        self.cache_hits += record.cache_read_tokens > 0
        price = prices.get(record.model)
        if price is None:
            self.unpriced.add(record.model)
            return
        cost = price.cost(record.input_tokens, record.output_tokens, record.cache_write_tokens,
                          record.cache_read_tokens)
        self.cost = cost if self.cost is None else self.cost + cost


def total(records: Iterable[UsageRecord], prices: Mapping[str, ModelPrice]) -> UsageTotal:
    summed = UsageTotal()
    for record in records:
        summed.add(record, prices)
    return summed


def group_by(
    records: Iterable[UsageRecord], key: Callable[[UsageRecord], str], prices: Mapping[str, ModelPrice]
) -> dict[str, UsageTotal]:
    """Totals per group, in the order each group first appears."""
    groups: dict[str, UsageTotal] = {}
    for record in records:
        groups.setdefault(key(record), UsageTotal()).add(record, prices)
    return groups


def day_of(zone: ZoneInfo) -> Callable[[UsageRecord], str]:
    return lambda record: datetime.fromtimestamp(record.created_at, zone).strftime("%Y-%m-%d")


def user_of(record: UsageRecord) -> str:
    """A user across platforms: `telegram:42`; calls no person made (compaction, jobs) as `-`."""
    provider = record.session_key.split(":")[2] if record.session_key.count(":") >= 2 else "?"
    return f"{provider}:{record.user_id}" if record.user_id else "-"


def agent_of(record: UsageRecord) -> str:
    """The agent whose session made the call (`agent:<id>:...`)."""
    parts = record.session_key.split(":")
    return parts[1] if len(parts) > 1 and parts[0] == "agent" else "?"


def groupings(zone: ZoneInfo) -> dict[str, Callable[[UsageRecord], str]]:
    """The ways usage is summed (`switchboard usage --by`, the console's charts), by name."""
    return {"user": user_of, "session": lambda r: r.session_key, "day": day_of(zone),
            "model": lambda r: r.model, "kind": lambda r: r.kind, "agent": agent_of}


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
