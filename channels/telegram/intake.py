"""Telegram's durable intake: long-poll getUpdates, hand over each update, confirm only what was taken.

python-telegram-bot's Updater confirms a batch (asks for the next one with a higher offset) before
its handlers have run, and fails the whole batch when one update does not parse. Here the raw JSON
comes through the request layer, each update is handed over on its own, and the offset moves past
an update only once its handler returned: what was fetched but not taken comes again.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import warnings
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

import structlog
from telegram import Bot
from telegram.error import Conflict, InvalidToken, RetryAfter, TelegramError
from telegram.request import BaseRequest, RequestData
from telegram.request._requestparameter import RequestParameter
from telegram.warnings import PTBDeprecationWarning

from bot.core.errors import describe
from bot.core.stopping import unless_stopped
from channels.telegram.quarantine import reason

# Takes one raw update; returns once it is committed (stored, deliberately skipped or
# quarantined) and raises when it was not, so that it is fetched again.
Take = Callable[[Any], Awaitable[None]]

BATCH_LIMIT = 100
FIRST_DELAY = 0.5
MAX_DELAY = 30.0
# The last getUpdates on stop only confirms the offset; if Telegram is slow, the updates taken
# since the previous request simply come again next start (the store ignores duplicates).
CONFIRM_TIMEOUT = 2.0


class Backoff:
    """Capped exponential delays: 0.5 s, 1 s, 2 s … 30 s, back to the start after a success."""

    def __init__(self, first: float = FIRST_DELAY, cap: float = MAX_DELAY) -> None:
        self._first, self._cap = first, cap
        self._next = first

    def next(self) -> float:
        delay = self._next
        self._next = min(delay * 2, self._cap)
        return delay

    def reset(self) -> None:
        self._next = self._first


class UpdatePoller:
    """Fetches updates until stopped and hands each to `take`, in order, confirming only what it took."""

    def __init__(
        self,
        bot: Bot,
        request: BaseRequest,
        take: Take,
        *,
        poll_timeout: float,
        allowed_updates: Sequence[str],
        on_connected: Callable[[], None],
        channel: str = "telegram",
    ) -> None:
        # Several bots may poll side by side: say which (a lazy logger, so later logging set-up applies).
        self._log = structlog.get_logger("switchboard.telegram", channel=channel)
        self._bot = bot
        self._request = request  # the bot's getUpdates request object
        self._take = take
        self._poll_timeout = max(0, math.ceil(poll_timeout))  # Telegram wants whole seconds
        self._allowed_updates = list(allowed_updates)
        self._on_connected = on_connected
        self._offset = 0  # the next update id wanted: everything below it was taken
        self._confirmed = 0  # the highest offset a getUpdates that Telegram answered carried
        self._stopping = asyncio.Event()
        self._running = False
        self._done = asyncio.Event()
        # Set once a batch smaller than a full one is taken: what waited at Telegram is stored.
        self.caught_up = asyncio.Event()
        # Why the last getUpdates failed, until one is answered again (the channel's state says so).
        self.trouble: str | None = None

    @property
    def offset(self) -> int:
        return self._offset

    async def run(self) -> bool:
        """Poll until stop(); False when Telegram rejected the token (the channel is then off)."""
        if self._running or self._stopping.is_set():
            return True
        self._running = True
        try:
            return await self._poll()
        finally:
            self._done.set()

    async def stop(self) -> None:
        """Stop fetching (a waiting long poll is cancelled), finish the batch in hand, confirm the
        offset; returns when that is done, or at once when polling never started."""
        self._stopping.set()
        if self._running:
            await self._done.wait()

    async def _poll(self) -> bool:
        backoff = Backoff()
        connected = failing = False
        webhook_checked = False
        while not self._stopping.is_set():
            try:
                if not webhook_checked:
                    # As the Updater does before polling: a webhook would make getUpdates fail.
                    # Pending updates are kept (drop_pending_updates is not sent).
                    await self._bot.delete_webhook()
                    webhook_checked = True
                # The first request does not wait, so `connected` means Telegram answered; nor does
                # the first after a failure, so that its recovery shows at once (`trouble`).
                waiting = connected and not failing
                batch = await self._fetch_unless_stopped(self._poll_timeout if waiting else 0)
            except InvalidToken:  # the channel tells the admin (channels/telegram/channel.py)
                return False
            except RetryAfter as exc:
                delay = retry_after_seconds(exc)
                self._log.warning("Telegram asks to wait before polling again", retry_in=delay)
                failing, self.trouble = True, describe(exc)
            except Conflict as exc:
                delay = backoff.next()
                webhook_checked = "webhook" not in str(exc).lower()
                self._log.warning("another getUpdates or a webhook uses this bot token; retrying",
                            error=f"Conflict: {exc}", retry_in=delay)
                failing, self.trouble = True, f"Conflict: {exc}"
            except Exception as exc:  # network errors, timeouts, an answer that is no update list
                delay = backoff.next()
                self._log.warning("telegram polling failed; retrying", error=describe(exc),
                            retry_in=delay)
                # Retried every few seconds while Telegram is away: the traceback at debug only.
                self._log.debug("telegram polling failure", exc_info=True)
                failing, self.trouble = True, describe(exc)
            else:
                if batch is None:  # stopped while waiting
                    break
                if not connected:
                    connected = True
                    self._on_connected()
                elif failing:
                    self._log.info("telegram polling recovered")
                failing, self.trouble = False, None
                if await self._hand_over(batch):
                    if len(batch) < BATCH_LIMIT:
                        self.caught_up.set()
                    backoff.reset()
                    continue
                delay = backoff.next()
            await self._pause(delay)
        await self._confirm()
        return True

    async def _hand_over(self, batch: list[Any]) -> bool:
        """Take the updates one by one; False (offset left at the failed one) when one was not taken."""
        for raw in batch:
            update_id = raw.get("update_id") if isinstance(raw, dict) else None
            try:
                await self._take(raw)
            except Exception as exc:
                # A second failure for the same reason comes back quarantined (`_take`).
                self._log.warning("telegram update not stored; fetching it again", update_id=update_id,
                                  error=reason(exc), exc_info=True)
                return False
            if isinstance(update_id, int) and not isinstance(update_id, bool):
                self._offset = max(self._offset, update_id + 1)
        return True

    async def _fetch_unless_stopped(self, timeout: int) -> list[Any] | None:
        """The next batch, or None when stop() came first (the request is then cancelled); a batch
        that arrived together with stop() is still handed over."""
        return await unless_stopped(self._get_updates(self._offset, timeout, BATCH_LIMIT), self._stopping)

    async def _get_updates(
        self, offset: int, timeout: int, limit: int, *, allowed_updates: bool = True,
        read_timeout: float | None = None,
    ) -> list[Any]:
        """The raw `result` of one getUpdates; raises the TelegramErrors the bot would."""
        values: dict[str, object] = {"offset": offset or None, "limit": limit, "timeout": timeout,
                                     "allowed_updates": self._allowed_updates if allowed_updates else None}
        parameters = [RequestParameter.from_input(k, v) for k, v in values.items() if v is not None]
        if read_timeout is None:  # as Bot.get_updates: the transport's read timeout plus the wait
            read_timeout = (self._request.read_timeout or 0) + timeout
        result = await self._request.post(
            url=f"{self._bot.base_url}/getUpdates", request_data=RequestData(parameters),
            read_timeout=read_timeout,
        )
        if not isinstance(result, list):
            raise TelegramError(f"getUpdates answered {type(result).__name__}, not a list of updates")
        self._confirmed = max(self._confirmed, offset)
        return result

    async def _pause(self, delay: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), delay)

    async def _confirm(self) -> None:
        """Tell Telegram what was taken since the last answered request (one short getUpdates)."""
        if self._offset <= self._confirmed:
            return
        try:
            async with asyncio.timeout(CONFIRM_TIMEOUT):
                await self._get_updates(self._offset, 0, 1, allowed_updates=False,
                                        read_timeout=CONFIRM_TIMEOUT)
        except Exception as exc:
            self._log.info("telegram offset not confirmed; those updates come again next start",
                     offset=self._offset, error=describe(exc), exc_info=True)


def retry_after_seconds(exc: RetryAfter) -> float:
    """retry_after in seconds, whether PTB gives an int or (with PTB_TIMEDELTA) a timedelta."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value: int | float | timedelta = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)
