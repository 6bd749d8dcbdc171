"""The overview, live: the page, and a server-sent event stream of its changing parts.

The overview's parts (agents, channels, queue, jobs, errors, the quarantined updates) are one
template fragment; `/events` renders it every LIVE_EVERY seconds and sends it only when it changed,
and `static/overview.js` swaps it in. A stream ends after STREAM_LIFETIME: the browser reconnects
through the door, so a logged-out or expired session stops getting updates.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

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


class QuarantineStore(Protocol):
    async def quarantined(self, provider: str | None = None) -> list[tuple[str, str | None, str, str]]: ...


def event(name: str, data: str) -> bytes:
    """One server-sent event: its name and its data, a `data:` field per line."""
    lines = "".join(f"data: {line}\n" for line in data.replace("\r", "").split("\n"))
    return f"event: {name}\n{lines}\n".encode()


@dataclass(frozen=True, slots=True)
class Overview:
    """GET / (the page) and GET /events (its live parts), behind the door."""

    base: str
    store: QuarantineStore
    daemon: RunningDaemon
    renderer: Renderer

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
        ends, quiet_since, last = loop.time() + STREAM_LIFETIME, loop.time(), None
        try:
            await response.write(f"retry: {RETRY_MS}\n\n".encode())
            while loop.time() < ends:
                html = await self.fragment()
                if html != last:
                    await response.write(event("overview", html))
                    last, quiet_since = html, loop.time()
                elif loop.time() - quiet_since >= KEEP_ALIVE:
                    await response.write(b": still here\n\n")
                    quiet_since = loop.time()
                await asyncio.sleep(LIVE_EVERY)
        except ConnectionError:
            pass  # the page was closed
        return response
