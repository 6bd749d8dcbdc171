"""Slack's HTTP mode (the Events API): an aiohttp server, the same shape as Telegram's webhook, that
answers Slack only once an event is stored.

Slack POSTs each event to the app's Request URL, signed with the app's signing secret
(`X-Slack-Signature`: v0, HMAC-SHA256 over `v0:{X-Slack-Request-Timestamp}:{body}`), and posts it
again (`X-Slack-Retry-Num` 1 to 3, `X-Slack-Retry-Reason` http_timeout, http_error, ...) whenever
the answer is not 200 within 3 s. Each request goes to slack-bolt's own dispatch, whose middleware
checks the signature and its timestamp (within 5 minutes; 401 otherwise) with slack_sdk's
SignatureVerifier and answers the url_verification challenge; with `process_before_response` the
answer waits for the listener: 200 once stored (a retry of a stored event is a repeat the store
drops, answered 200 again), 500 when it could not be stored (Slack tries again, maybe at another
daemon), 503 while stopping. Nothing depends on what this process remembers, so any number of
daemons may serve one app behind a load balancer.
"""

from __future__ import annotations

import asyncio

import structlog
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp

from bot.config.fields import split_listen

RETRY_NUM = "X-Slack-Retry-Num"
RETRY_REASON = "X-Slack-Retry-Reason"
# Seconds a stopping server still waits for aiohttp's own shutdown once every event in hand is in.
CLOSE_TIMEOUT = 1.0
# Slack sends events of a few kilobytes; a body larger than this is no event of theirs.
MAX_BODY = 1024 * 1024


class SlackEventsServer:
    """Serves one app's Request URL until stopped."""

    def __init__(self, app: AsyncApp, *, listen: str, path: str, channel: str) -> None:
        self._log = structlog.get_logger("switchboard.slack", channel=channel)
        self._app = app
        self._host, self._port = split_listen(listen)
        self._path = path
        self._runner: web.AppRunner | None = None
        self._stopping = False
        self._inflight = 0
        self._drained = asyncio.Event()
        self._drained.set()

    @property
    def in_hand(self) -> int:
        """Requests received and not answered yet (their events being stored)."""
        return self._inflight

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post(self._path, self._receive)
        # No access log: one line per event would drown the turn lines.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=CLOSE_TIMEOUT)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port).start()
        self._log.info("slack events listening", host=self._host, port=self._port, path=self._path)

    async def stop(self) -> None:
        """Refuse new requests (503: Slack tries again, maybe another daemon), let those in hand
        finish storing, close the server."""
        self._stopping = True
        await self._drained.wait()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _receive(self, request: web.Request) -> web.Response:
        if self._stopping:
            return web.Response(status=503, text="stopping", headers={"Retry-After": "1"})
        self._inflight += 1  # counted before the first await, so stop() waits for this one
        self._drained.clear()
        try:
            retry = request.headers.get(RETRY_NUM)
            if retry is not None:
                self._log.info("slack event sent again", retry=retry,
                               reason=request.headers.get(RETRY_REASON))
            answer = await self._app.async_dispatch(await to_bolt_request(request))
            if answer.status == 401:
                self._log.warning("slack request refused: signature missing, wrong or too old",
                                  remote=request.remote)
            return await to_aiohttp_response(answer)
        finally:
            self._inflight -= 1
            if not self._inflight:
                self._drained.set()
