"""Telegram's flood limits for python-telegram-bot: replies first, previews with what is left.

Telegram allows a bot about 30 messages a second, and 20 a minute in any one group; a reply's
requests wait for their turn within those, as python-telegram-bot's `AIORateLimiter` makes them.
A preview's requests (a draft, a preview message and its edits, made inside `best_effort`) never
wait: each is sent only when no reply is waiting and a share of the budget stays free after it,
and is skipped otherwise, so previews never delay a reply and use only what replies leave.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Final

import structlog
from aiolimiter import AsyncLimiter
from telegram.error import RetryAfter
from telegram.ext import BaseRateLimiter

from bot.delivery.preview import PreviewSkipped
from channels.telegram.intake import retry_after_seconds

__all__ = ["FloodLimiter", "best_effort"]

log = structlog.get_logger("switchboard.telegram")

# A preview request goes only if this share of a limit's budget is still free after it: a burst of
# replies always finds that much at once.
PREVIEW_HEADROOM: Final = 1 / 3
# Past this many groups' budgets, those whose budget is whole again are forgotten.
MAX_GROUP_BUDGETS: Final = 512

_preview: ContextVar[bool] = ContextVar("telegram_preview_request", default=False)


@contextmanager
def best_effort() -> Iterator[None]:
    """Requests made inside are a preview's: `FloodLimiter` sends one only when the budget has
    room to spare, else raises `PreviewSkipped`. (python-telegram-bot's `rate_limit_args` would say
    it per call, but only through an `ExtBot` with a limiter; this reaches the limiter from any
    call, and a bot without our limiter sends as usual.)"""
    token = _preview.set(True)
    try:
        yield
    finally:
        _preview.reset(token)


class _Budget:
    """One of Telegram's limits (a leaky bucket) and how many replies wait for it."""

    def __init__(self, rate: float, period: float) -> None:
        self._bucket = AsyncLimiter(rate, period)
        self._headroom = 1 + rate * PREVIEW_HEADROOM
        self.waiting = 0

    async def take(self) -> None:
        """A slot for a reply, waited for in turn."""
        self.waiting += 1
        try:
            await self._bucket.acquire()
        finally:
            self.waiting -= 1

    def spare(self) -> bool:
        """Whether a preview may have a slot now: no reply waits for one and the headroom is left."""
        return self.waiting == 0 and self._bucket.has_capacity(self._headroom)

    def unused(self) -> bool:
        """Nothing waits and the whole budget is back: the budget can be forgotten."""
        return self.waiting == 0 and self._bucket.has_capacity(self._bucket.max_rate)

    async def take_spare(self) -> None:
        """The slot `spare` found: taken at once (the bucket has room, so this never waits)."""
        await self._bucket.acquire()


class FloodLimiter(BaseRateLimiter[int]):
    """Telegram's flood limits (30 messages a second, 20 a minute per group), replies first.

    A reply's requests wait for their slot in turn, as `AIORateLimiter`'s do, and a 429 holds every
    request back for its `retry_after`, then the reply is tried again (up to `max_retries` times;
    `rate_limit_args` overrides it per call). A preview's requests (made `best_effort`) never wait:
    one goes only while no reply waits and a third of the budget stays free after it, and is
    skipped otherwise (`PreviewSkipped`), so previews use what replies leave and never delay one.
    "typing…" is not counted: it must not eat a group's budget. A rate of 0 turns a limit off.
    """

    def __init__(self, *, overall_max_rate: float = 30, group_max_rate: float = 20,
                 max_retries: int = 0) -> None:
        self._overall = _Budget(overall_max_rate, 1) if overall_max_rate else None
        self._group_rate = group_max_rate
        self._groups: dict[int | str, _Budget] = {}
        self._max_retries = max_retries
        self._unpaused = asyncio.Event()
        self._unpaused.set()
        self._resume_at = 0.0

    async def initialize(self) -> None:
        """Nothing to set up."""

    async def shutdown(self) -> None:
        """Nothing to close."""

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, Any]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | None,
    ) -> Any:
        if endpoint == "sendChatAction":
            return await callback(*args, **kwargs)
        budgets = self._budgets(data.get("chat_id"))
        if _preview.get():
            return await self._preview(callback, args, kwargs, endpoint, budgets)
        retries = rate_limit_args or self._max_retries
        for attempt in itertools.count():
            for budget in budgets:  # the group's first, as AIORateLimiter takes them
                await budget.take()
            await self._unpaused.wait()
            try:
                return await callback(*args, **kwargs)
            except RetryAfter as exc:
                if attempt >= retries:
                    raise
                seconds = retry_after_seconds(exc)
                log.info("telegram flood wait; every request held back", endpoint=endpoint,
                         retry_after=seconds, attempt=attempt + 1)
                self._pause(seconds)
        raise AssertionError("unreachable")

    async def _preview(
        self, callback: Callable[..., Coroutine[Any, Any, Any]], args: Any, kwargs: dict[str, Any],
        endpoint: str, budgets: list[_Budget],
    ) -> Any:
        """A preview's request: sent at once with room to spare, else skipped; never retried."""
        if not (self._unpaused.is_set() and all(budget.spare() for budget in budgets)):
            raise PreviewSkipped(f"{endpoint} skipped: the send budget is kept for replies")
        for budget in budgets:
            await budget.take_spare()
        try:
            return await callback(*args, **kwargs)
        except RetryAfter as exc:
            seconds = retry_after_seconds(exc)
            self._pause(seconds)
            raise PreviewSkipped(f"{endpoint} skipped: flood wait of {seconds:g} s") from exc

    def _budgets(self, chat_id: object) -> list[_Budget]:
        """The limits a request to `chat_id` counts against: none without a chat, else the overall
        one and a group's own."""
        if chat_id is None:
            return []
        budgets = [self._overall] if self._overall is not None else []
        group = _group_of(chat_id)
        if group is not None and self._group_rate:
            if len(self._groups) > MAX_GROUP_BUDGETS:  # forget groups whose budget is whole again
                self._groups = {key: budget for key, budget in self._groups.items()
                                if key == group or not budget.unused()}
            budgets.insert(0, self._groups.setdefault(group, _Budget(self._group_rate, 60)))
        return budgets

    def _pause(self, seconds: float) -> None:
        """Telegram's flood wait holds back every request, not only the one told, until it ends."""
        loop = asyncio.get_running_loop()
        self._resume_at = max(self._resume_at, loop.time() + seconds + 0.1)
        self._unpaused.clear()
        loop.call_at(self._resume_at, self._resume, self._resume_at)

    def _resume(self, at: float) -> None:
        if at >= self._resume_at:  # no later flood wait came meanwhile
            self._unpaused.set()


def _group_of(chat_id: object) -> int | str | None:
    """The group a chat id names, if it names one: negative ids, and "@name"s (only groups and
    channels have them)."""
    try:
        number = int(str(chat_id))
    except ValueError:
        return chat_id if isinstance(chat_id, str) else None
    return number if number < 0 else None
