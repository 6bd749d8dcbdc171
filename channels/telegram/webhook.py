"""Telegram's webhook intake: an aiohttp server that answers 200 only once an update is committed.

Telegram POSTs each update to the URL given to setWebhook, with our secret in the
X-Telegram-Bot-Api-Secret-Token header, and posts it again later whenever the answer is not 2xx.
So each update goes to the same `take` as a polled one (parse, gate, store or quarantine) and the
answer waits for it: 200 once committed, 500 when it could not be stored (Telegram redelivers; the
store ignores a message it already has), 503 while stopping. A body that cannot even be read as
JSON (not JSON, nested too deep for the parser, too big) is quarantined and answered 200: Telegram
would post it again forever. No request depends on another or on anything this process remembers
(beyond spotting an update that fails twice the same way), so any number of daemons may sit
behind one load balancer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import structlog
from aiohttp import web
from telegram import Bot
from telegram.error import InvalidToken, RetryAfter, TelegramError

from bot.config.fields import split_listen
from bot.core.errors import describe
from channels.telegram.intake import Backoff, Take, retry_after_seconds
from channels.telegram.quarantine import reason

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
# Keeps a body that is no update (as text) with the reason it could not be read; raises when it
# could not be kept.
SetAside = Callable[[Any, BaseException], Awaitable[None]]
# What reading a body as JSON can raise: not JSON or not UTF-8 (ValueError), brackets nested deeper
# than the parser's recursion limit, or more than memory holds.
UNREADABLE = (ValueError, RecursionError, MemoryError)
# Seconds a stopping server still waits for aiohttp's own shutdown once every update in hand is in.
CLOSE_TIMEOUT = 1.0


class WebhookServer:
    """Serves one bot's webhook until stopped; registers it with Telegram once it listens."""

    def __init__(
        self,
        bot: Bot,
        take: Take,
        set_aside: SetAside,
        *,
        listen: str,
        url: str,
        secret: str,
        allowed_updates: Sequence[str],
        on_connected: Callable[[], None],
        channel: str = "telegram",
    ) -> None:
        self._log = structlog.get_logger("switchboard.telegram", channel=channel)
        self._bot = bot
        self._take = take
        self._set_aside = set_aside
        self._host, self._port = split_listen(listen)
        self._url = url
        self._path = urlsplit(url).path or "/"
        self._secret = secret.encode()
        self._allowed_updates = list(allowed_updates)
        self._on_connected = on_connected
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()
        self._inflight = 0
        self._drained = asyncio.Event()
        self._drained.set()
        self._running = False
        self._done = asyncio.Event()

    @property
    def in_hand(self) -> int:
        """Requests received and not answered yet (their updates being committed)."""
        return self._inflight

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def run(self) -> bool:
        """Listen, set the webhook (retrying while Telegram is unreachable) and serve until stop();
        False when Telegram rejected the token (the channel is then off)."""
        if self._running or self._stopping.is_set():
            return True
        self._running = True
        try:
            await self._listen()
            if not await self._register():
                return False
            await self._stopping.wait()
            await self._drained.wait()  # what was received is stored before the server closes
            return True
        finally:
            await self._close()
            self._done.set()

    async def stop(self) -> None:
        """Refuse new requests (503: Telegram tries again later, maybe another instance), let those
        in hand finish storing, close the server; returns when that is done. The webhook itself
        stays set: other instances may still serve it, and polling deletes it when it starts."""
        self._stopping.set()
        if self._running:
            await self._done.wait()

    async def _listen(self) -> None:
        app = web.Application()
        app.router.add_post(self._path, self._receive)
        # No access log: one line per update would drown the turn lines (and say nothing new).
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=CLOSE_TIMEOUT)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port).start()
        self._log.info("telegram webhook listening", host=self._host, port=self._port, path=self._path)

    async def _register(self) -> bool:
        """setWebhook, as polling fetches: the same updates, and nothing pending dropped."""
        backoff = Backoff()
        while not self._stopping.is_set():
            try:
                await self._bot.set_webhook(self._url, secret_token=self._secret.decode(),
                                            allowed_updates=self._allowed_updates,
                                            drop_pending_updates=False)
            except InvalidToken:  # the channel tells the admin (channels/telegram/channel.py)
                return False
            except RetryAfter as exc:
                delay = retry_after_seconds(exc)
                self._log.warning("Telegram asks to wait before setting the webhook", retry_in=delay)
            except TelegramError as exc:
                delay = backoff.next()
                self._log.warning("could not set the telegram webhook; retrying", url=self._url,
                                  error=describe(exc), retry_in=delay)
            else:
                self._log.info("telegram webhook set", url=self._url)
                self._on_connected()
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
        return True

    async def _receive(self, request: web.Request) -> web.Response:
        if self._stopping.is_set():
            return web.Response(status=503, text="stopping", headers={"Retry-After": "1"})
        given = request.headers.get(SECRET_HEADER)
        if given is None or not hmac.compare_digest(given.encode(), self._secret):
            self._log.warning("telegram webhook request refused: secret token missing or wrong",
                              remote=request.remote, has_token=given is not None)
            return web.Response(status=401 if given is None else 403)
        self._inflight += 1  # counted before the first await, so stop() waits for this one
        self._drained.clear()
        try:
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge as exc:  # the reason says how big; the body is not read
                return await self._unreadable("<a body over the size limit>", exc)
            try:
                raw = json.loads(body)
            except UNREADABLE as exc:
                return await self._unreadable(body.decode("utf-8", errors="replace"), exc)
            update_id = raw.get("update_id") if isinstance(raw, dict) else None
            try:
                await self._take(raw)
            except Exception as exc:
                self._log.warning("telegram update not stored; Telegram sends it again", update_id=update_id,
                                  error=reason(exc), exc_info=True)
                return web.Response(status=500, text="not stored")
            return web.Response(status=200)
        finally:
            self._inflight -= 1
            if not self._inflight:
                self._drained.set()

    async def _unreadable(self, text: str, exc: BaseException) -> web.Response:
        """Quarantine a body that is no update; 200 once kept, so that Telegram stops posting it."""
        try:
            await self._set_aside(text, exc)
        except Exception as failed:
            self._log.warning("unreadable telegram webhook body not quarantined; Telegram sends it again",
                              error=reason(failed), exc_info=True)
            return web.Response(status=500, text="not stored")
        return web.Response(status=200)

    async def _close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

