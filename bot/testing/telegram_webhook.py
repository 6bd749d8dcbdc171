"""The Bot API stand-in's webhook side: what setWebhook registers, and Telegram's way of delivering.

Telegram POSTs each update as JSON to the registered URL, with the secret token (if one was set)
in X-Telegram-Bot-Api-Secret-Token, and counts it delivered only on a 2xx answer; anything else
(an error status, a refused or dropped connection, no answer in time) is retried later with
growing pauses, and the update stays pending meanwhile. One chat's updates are posted one at a
time, the next only once the last was answered; different chats' in parallel (as grammY's
deployment guide describes Telegram's behaviour). This sender does the same, with short
pauses and a few tries so that tests end; an update it gave up on stays pending, as on Telegram.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
JSON = dict[str, Any]


@dataclass(frozen=True)
class Webhook:
    """A webhook as setWebhook registered it."""

    url: str
    secret_token: str | None
    allowed_updates: frozenset[str] | None
    max_connections: int = 40


@dataclass(frozen=True)
class WebhookAttempt:
    """One POST of an update to a webhook; `status` is None when no answer came (refused, dropped)."""

    update_id: Any
    url: str
    secret_sent: str | None
    status: int | None
    time: float = field(default_factory=time.monotonic)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def webhook_refusal(url: str, secret_token: Any) -> str | None:
    """Why Telegram would refuse this setWebhook (a 400 description), or None.

    Telegram wants https on port 443, 80, 88 or 8443; the stand-in also takes http:// on a loopback
    host and any port, since tests serve the webhook on 127.0.0.1 without a certificate."""
    parts = urlsplit(url)
    loopback = parts.hostname in ("127.0.0.1", "localhost", "::1")
    if parts.scheme != "https" and not (parts.scheme == "http" and loopback):
        return "Bad Request: bad webhook: An HTTPS URL must be provided for webhook"
    if not loopback and (parts.port or 443) not in (443, 80, 88, 8443):
        return "Bad Request: bad webhook: Webhook can be set up only on ports 80, 88, 443 or 8443"
    if secret_token is not None and not (
        isinstance(secret_token, str) and 0 < len(secret_token) <= 256
        and all(c.isascii() and (c.isalnum() or c in "_-") for c in secret_token)
    ):
        return "Bad Request: secret token contains unallowed characters"
    return None


class WebhookSender:
    """POSTs updates as Telegram does, retrying until a 2xx or `tries` attempts; records each."""

    def __init__(self, *, tries: int = 5, first_delay: float = 0.1, timeout: float = 10.0) -> None:
        self.tries = tries
        self.first_delay = first_delay
        self.timeout = timeout
        self.attempts: list[WebhookAttempt] = []
        # Called the moment an answer (or its absence) is known, before anything else runs; what it
        # returns to await (a write from a thread: not on the loop the daemon shares) is awaited
        # before the next attempt.
        self.on_answer: Callable[[WebhookAttempt], Awaitable[None] | None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._tasks: dict[Any, asyncio.Task[int | None]] = {}
        self._last_of_chat: dict[Any, asyncio.Task[int | None]] = {}

    async def post(self, webhook: Webhook, update: JSON, *, secret: str | None = None,
                   tries: int | None = None, still_wanted: Callable[[], bool] = lambda: True) -> int | None:
        """Deliver `update`, retrying with doubling pauses; the last status (None: no answer).

        `secret` overrides the registered token (a forger's request); `still_wanted` is asked before
        every retry (a deleted webhook is not retried)."""
        token = webhook.secret_token if secret is None else secret
        headers = {SECRET_HEADER: token} if token is not None else {}
        status: int | None = None
        for attempt in range(tries or self.tries):
            if attempt:
                await asyncio.sleep(self.first_delay * 2 ** (attempt - 1))
                if not still_wanted():
                    break
            status = await self._post_once(webhook.url, update, headers)
            self.attempts.append(WebhookAttempt(update.get("update_id"), webhook.url, token, status))
            if self.on_answer is not None and (waited := self.on_answer(self.attempts[-1])):
                await waited
            if status is not None and 200 <= status < 300:
                break
        return status

    def post_soon(self, webhook: Webhook, update: JSON, still_wanted: Callable[[], bool],
                  on_delivered: Callable[[JSON], None]) -> None:
        """Deliver in the background: after the same chat's previous update, beside other chats'."""
        key = update.get("update_id")
        if key in self._tasks and not self._tasks[key].done():
            return
        chat = _chat_of(update)
        before = self._last_of_chat.get(chat) if chat is not None else None

        async def deliver() -> int | None:
            if before is not None:
                await asyncio.gather(before, return_exceptions=True)
            status = await self.post(webhook, update, still_wanted=still_wanted)
            if status is not None and 200 <= status < 300:
                on_delivered(update)
            return status

        self._tasks[key] = asyncio.create_task(deliver(), name=f"webhook delivery {key}")
        if chat is not None:
            self._last_of_chat[chat] = self._tasks[key]

    def sending(self, update: JSON) -> bool:
        """Whether a background delivery of `update` was started (it may have ended)."""
        return update.get("update_id") in self._tasks

    async def outcome(self, update: JSON) -> int | None:
        """The last status of the background delivery of `update`, once it has ended."""
        return await self._tasks[update.get("update_id")]

    async def _post_once(self, url: str, update: JSON, headers: dict[str, str]) -> int | None:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        try:
            async with self._session.post(url, json=update, headers=headers) as response:
                await response.read()
                return response.status
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def close(self) -> None:
        tasks = [t for t in self._tasks.values() if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None


def _chat_of(update: JSON) -> Any:
    """The chat id an update belongs to, if it carries one (a message, an edit, a channel post)."""
    for value in update.values():
        if isinstance(value, dict) and isinstance(value.get("chat"), dict):
            return value["chat"].get("id")
    return None
