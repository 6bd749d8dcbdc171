"""The overview, live: the page, and a server-sent event stream of its changing parts.

The overview's parts (agents, channels, queue, jobs, errors, the quarantined updates) are one
template fragment; one `LiveFeed` per server renders it every LIVE_EVERY seconds while any `/events`
stream is open and hands each change to every stream (so a hundred open pages cost one look, not a
hundred), and `static/overview.js` swaps it in. A stream ends after STREAM_LIFETIME: the browser reconnects
through the door, so a logged-out or expired session stops getting updates.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
from aiohttp import web

from bot.web.guard import SESSION_KEY
from bot.web.rendering import Renderer
from bot.web.running import RunningDaemon

LIVE_EVERY = 2.0  # seconds between looks at the daemon's state
KEEP_ALIVE = 30.0  # a comment line this often, so proxies keep a quiet stream open
STREAM_LIFETIME = 300.0  # then the browser reconnects (and its session is checked again)
RETRY_MS = 3000  # how soon the browser reconnects
QUARANTINE_SHOWN = 10  # the newest quarantined updates listed
RAW_SHOWN = 300  # characters of a quarantined update's raw form shown

log = structlog.get_logger(__name__)


class QuarantineStore(Protocol):
    async def quarantined(self, provider: str | None = None) -> list[tuple[str, str | None, str, str]]: ...


def event(name: str, data: str) -> bytes:
    """One server-sent event: its name and its data, a `data:` field per line."""
    lines = "".join(f"data: {line}\n" for line in data.replace("\r", "").split("\n"))
    return f"event: {name}\n{lines}\n".encode()


class LiveFeed:
    """The overview's live parts, looked at once every LIVE_EVERY seconds for all open streams, and
    only while one is open; each change gets a new version that every stream waits for."""

    def __init__(self, render: Callable[[], Awaitable[str]]) -> None:
        self._render = render
        self._html = ""
        self._version = 0
        self._changed = asyncio.Event()
        self._streams = 0
        self._poller: asyncio.Task[None] | None = None

    @asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """A stream is open: the feed runs until the last one closes."""
        self._streams += 1
        if self._poller is None:
            self._poller = asyncio.create_task(self._poll())
        try:
            yield
        finally:
            self._streams -= 1
            if not self._streams and self._poller is not None:
                self._poller.cancel()
                self._poller, self._version = None, 0  # a later stream starts from a fresh look

    async def after(self, seen: int, timeout: float) -> tuple[int, str | None]:
        """The newest parts once they are newer than version `seen`: (version, HTML); or (seen,
        None) when nothing changed within `timeout` seconds."""
        if self._version <= seen:
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                return seen, None
        return self._version, self._html

    async def _poll(self) -> None:
        while True:
            try:
                html = await self._render()
            except Exception:  # a failed look is logged and the next one tried; streams stay open
                log.warning("overview look failed", exc_info=True)
            else:
                if html != self._html or not self._version:
                    self._html, self._version = html, self._version + 1
                    self._changed.set()
                    self._changed = asyncio.Event()
            await asyncio.sleep(LIVE_EVERY)


@dataclass(frozen=True, slots=True)
class Overview:
    """GET / (the page) and GET /events (its live parts), behind the door."""

    base: str
    store: QuarantineStore
    daemon: RunningDaemon
    renderer: Renderer
    feed: LiveFeed = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "feed", LiveFeed(self.fragment))

    def routes(self, app: web.Application) -> None:
        app.router.add_get(f"{self.base}/", self.page)
        app.router.add_get(f"{self.base}/events", self.events)

    async def values(self) -> dict[str, Any]:
        """What the overview shows: the daemon's status answer and the newest quarantined updates."""
        quarantined = (await self.store.quarantined())[-QUARANTINE_SHOWN:]
        return {"status_report": await self.daemon.status(), "quarantine": [
            {"provider": provider, "ref": ref, "error": error,
             "raw": raw if len(raw) <= RAW_SHOWN else raw[:RAW_SHOWN] + "…"}
            for provider, ref, raw, error in reversed(quarantined)
        ]}

    async def page(self, request: web.Request) -> web.Response:
        return self.renderer.page("overview.html", request[SESSION_KEY], **await self.values())

    async def fragment(self) -> str:
        template = self.renderer.environment.get_template("_overview_live.html")
        return template.render(base=self.renderer.base, **await self.values())

    async def events(self, request: web.Request) -> web.StreamResponse:
        """The overview's live parts as `overview` events: the current ones at once, then each change."""
        response = web.StreamResponse(headers={
            "Content-Type": "text/event-stream", "X-Accel-Buffering": "no",  # nginx: do not buffer
        })
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        ends, seen = loop.time() + STREAM_LIFETIME, 0
        try:
            await response.write(f"retry: {RETRY_MS}\n\n".encode())
            async with self.feed.watching():
                while (left := ends - loop.time()) > 0:
                    seen, html = await self.feed.after(seen, min(KEEP_ALIVE, left))
                    if html is not None:
                        await response.write(event("overview", html))
                    elif loop.time() < ends:
                        await response.write(b": still here\n\n")
        except ConnectionError:
            pass  # the page was closed
        return response
