"""A stand-in of the load balancer in front of several daemons' webhooks: a round-robin reverse proxy.

Each POST goes to the next backend in turn; a connection error (the backend is down, or died with
the request in hand) moves it on to the one after, as a proxy with passive health checks does. An
update is idempotent (the store keeps the first copy), so resending one a dying backend may have
stored is safe. With every backend down the answer is 502, and Telegram tries again later.
"""

from __future__ import annotations

from collections import Counter

import aiohttp
from aiohttp import web

from bot.testing.telegram_webhook import SECRET_HEADER


class RoundRobin:
    """A reverse proxy: each POST goes to the next backend; a connection error moves on to the one
    after (an update is idempotent, so a request a dying backend may have stored is safe to resend)."""

    def __init__(self, backends: list[int]) -> None:
        self.backends = backends
        self.forwarded: Counter[int] = Counter()
        self.failovers = 0
        self._next = 0
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    async def __aenter__(self) -> RoundRobin:
        app = web.Application()
        app.router.add_post("/telegram", self._forward)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])
        connector = aiohttp.TCPConnector(limit=0)
        self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/telegram"

    async def _forward(self, request: web.Request) -> web.Response:
        assert self._session is not None
        body = await request.read()
        headers = {"Content-Type": "application/json"}
        if SECRET_HEADER in request.headers:
            headers[SECRET_HEADER] = request.headers[SECRET_HEADER]
        start, self._next = self._next, self._next + 1
        for i in range(len(self.backends)):
            port = self.backends[(start + i) % len(self.backends)]
            try:
                async with self._session.post(f"http://127.0.0.1:{port}/telegram", data=body,
                                              headers=headers) as answer:
                    text = await answer.read()
                    self.forwarded[port] += 1
                    return web.Response(status=answer.status, body=text)
            except (aiohttp.ClientConnectionError, TimeoutError):
                self.failovers += 1
        return web.Response(status=502, text="no backend answered")
