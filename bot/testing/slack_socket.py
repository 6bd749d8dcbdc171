"""Slack's Socket Mode for the stand-in: a real WebSocket that says hello, sends Events API envelopes
and takes acknowledgements by `envelope_id`, sending again what is not acknowledged in time.

As Slack does: a connection needs a one-use ticket from apps.connections.open; each envelope must be
acknowledged within `ack_timeout` (3 s on Slack) or it is sent again (a new `envelope_id`,
`retry_attempt` counting up, `retry_reason` "timeout"), at most `max_retries` times; an envelope
waiting when a connection closes goes to the next one.

`deliver_by_http(url)` switches the stand-in to the HTTP Events API instead
(`bot.testing.slack_events`): each event POSTed, signed, to the app's Request URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
import uuid
from collections.abc import Coroutine
from typing import Any

from aiohttp import WSMsgType, web

from bot.testing.slack_events import SIGNING_SECRET, EventsSender
from bot.testing.slack_values import Envelope, Json


class SocketMode:
    """The Socket Mode half of `SlackStandIn`: tickets, connections, envelopes and their acks."""

    app_id: str
    team_id: str
    bot_user_id: str

    def __init__(self, *, ack_timeout: float = 3.0, max_retries: int = 3) -> None:
        self.ack_timeout = ack_timeout
        self.max_retries = max_retries
        # True: acknowledgements are read but not counted, as if they never reached Slack.
        self.drop_acks = False
        self.envelopes: list[Envelope] = []
        self.connections = 0
        self._tickets: set[str] = set()
        self._sockets: list[web.WebSocketResponse] = []
        self._redeliver: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._port = 0
        self._writes: set[asyncio.Task[None]] = set()
        self.http: EventsSender | None = None  # events POSTed to a Request URL instead (HTTP mode)

    # -- what the Web API half calls --------------------------------------------------------

    def _new_ticket(self) -> str:
        ticket = secrets.token_hex(8)
        self._tickets.add(ticket)
        return f"ws://127.0.0.1:{self._port}/link/?ticket={ticket}&app_id={self.app_id}"

    def _start_socket_mode(self) -> None:
        self._redeliver = asyncio.create_task(self._redeliver_late(), name="slack stand-in redelivery")

    async def _stop_socket_mode(self) -> None:
        if self.http is not None:
            await self.http.close()
        if self._redeliver is not None:
            self._redeliver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._redeliver
        for ws in list(self._sockets):
            await ws.close()

    # -- scripting and reading --------------------------------------------------------------

    def dispatch(self, event: Json) -> Envelope:
        """Wrap `event` in an event_callback and send it to the live connection (or the next one)."""
        event_id = f"Ev{uuid.uuid4().hex[:10].upper()}"
        payload = {
            "token": "verification-token", "team_id": self.team_id, "context_team_id": self.team_id,
            "api_app_id": self.app_id, "event": event, "type": "event_callback", "event_id": event_id,
            "event_time": int(time.time()),
            "authorizations": [{"enterprise_id": None, "team_id": self.team_id, "user_id": self.bot_user_id,
                                "is_bot": True, "is_enterprise_install": False}],
            "is_ext_shared_channel": False, "event_context": f"4-{secrets.token_hex(12)}",
        }
        envelope = Envelope(event_id, payload)
        self.envelopes.append(envelope)
        if self.http is not None:
            self.http.post_soon(envelope, self._changed.set)
        else:
            self._send(envelope, "")
        return envelope

    def deliver_by_http(self, url: str, *, signing_secret: str = SIGNING_SECRET,
                        retry_delays: tuple[float, ...] = (0.0, 0.5, 1.0)) -> EventsSender:
        """From now on POST events to `url` (the app's Request URL in HTTP mode), signed with
        `signing_secret`, with this stand-in's ack_timeout and max_retries."""
        self.http = EventsSender(url, signing_secret=signing_secret, ack_timeout=self.ack_timeout,
                                 max_retries=self.max_retries, retry_delays=retry_delays)
        return self.http

    def disconnect(self, reason: str = "refresh_requested") -> None:
        """Tell the live connections to go (as Slack does every few hours) and close them."""
        for ws in list(self._sockets):
            self._later(self._goodbye(ws, reason))

    @property
    def live(self) -> bool:
        """Whether an app is connected now (Slack sends nothing written while none is)."""
        return any(not ws.closed for ws in self._sockets)

    @property
    def unacked(self) -> list[Envelope]:
        return [e for e in self.envelopes if not e.acked]

    async def all_acked(self, timeout: float = 30) -> None:
        """Return once every envelope dispatched so far has been acknowledged."""
        async with asyncio.timeout(timeout):
            while self.unacked:
                self._changed.clear()
                await self._changed.wait()

    async def connected(self, count: int = 1, timeout: float = 30) -> None:
        """Return once `count` connections have been made in all (hello sent on each)."""
        async with asyncio.timeout(timeout):
            while self.connections < count:
                self._changed.clear()
                await self._changed.wait()

    # -- the socket ---------------------------------------------------------------------------

    async def _link(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.json_response({"ok": False, "error": "invalid_ticket"}, status=401)
        self._tickets.discard(ticket)  # a ticket opens one connection
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.append(ws)
        self.connections += 1
        await ws.send_str(json.dumps({
            "type": "hello", "num_connections": len(self._sockets),
            "debug_info": {"host": "applink-standin", "build_number": 1,
                           "approximate_connection_time": 18060},
            "connection_info": {"app_id": self.app_id},
        }))
        for envelope in self.unacked:  # what waited for a connection
            self._send(envelope, "timeout" if envelope.attempts else "")
        self._changed.set()
        try:
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    self._read_ack(message.data)
        finally:
            self._sockets.remove(ws)
            self._changed.set()
        return ws

    def _read_ack(self, data: str) -> None:
        try:
            frame: Any = json.loads(data)
        except ValueError:
            return
        envelope_id = frame.get("envelope_id") if isinstance(frame, dict) else None
        if self.drop_acks or not isinstance(envelope_id, str):
            return
        for envelope in self.envelopes:
            if envelope_id in envelope.envelope_ids:
                envelope.acked = True
                self._changed.set()

    def _send(self, envelope: Envelope, reason: str) -> None:
        live = [ws for ws in self._sockets if not ws.closed]
        if not live:
            return
        envelope_id = str(uuid.uuid4())
        if envelope.sent_at:
            envelope.attempts += 1
        envelope.envelope_ids.append(envelope_id)
        envelope.sent_at = time.monotonic()
        self._later(live[-1].send_str(json.dumps(envelope.frame(envelope_id, reason))))

    def _later(self, write: Coroutine[Any, Any, None]) -> None:
        """Write to a socket from synchronous code (tasks run in the order they were made)."""
        task = asyncio.ensure_future(write)
        self._writes.add(task)
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        """A write to a socket the app just closed (or died on) fails, as it would at Slack: the
        envelope stays unacknowledged and goes to the next connection."""
        self._writes.discard(task)
        if not task.cancelled():
            task.exception()

    async def _redeliver_late(self) -> None:
        while True:
            await asyncio.sleep(min(self.ack_timeout / 4, 0.25))
            now = time.monotonic()
            for envelope in self.unacked if self.http is None else ():
                late = envelope.sent_at and now - envelope.sent_at >= self.ack_timeout
                if late and envelope.attempts < self.max_retries:
                    self._send(envelope, "timeout")

    async def _goodbye(self, ws: web.WebSocketResponse, reason: str) -> None:
        with contextlib.suppress(ConnectionError):
            await ws.send_str(json.dumps({"type": "disconnect", "reason": reason,
                                          "debug_info": {"host": "applink-standin"}}))
        await ws.close()
