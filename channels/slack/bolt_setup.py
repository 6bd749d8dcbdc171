"""What slack-bolt's AsyncApp is given by the Slack channel: its authorization, a catch-all listener,
a quieter log, and what it says of the events a stop leaves unacknowledged."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import structlog
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app, send_async_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest

from bot.core.errors import describe

log = structlog.get_logger("switchboard.slack")

UNACKNOWLEDGED = "Slack event left unacknowledged while stopping; Slack sends it again"


class ClientGiven(logging.Filter):
    """Bolt warns that the token in SLACK_BOT_TOKEN goes unused whenever it is given a client (ours
    carries the token and the base URL), or is ignored beside an `authorize` (ours, `SignedIn`),
    while that variable is set, which is the default setup: once per start, saying nothing wrong."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return "`token` will be unused" not in message and "will be ignored" not in message


async def ignore() -> None:
    return None


class SignedIn(AsyncAuthorize):
    """Bolt's authorization from our own auth.test at start. Bolt would call auth.test on the first
    events itself, and envelopes waiting on that call could reach the listener out of order; with
    nothing to wait for, listeners are entered in the order the envelopes arrived."""

    def __init__(self, result: AuthorizeResult) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # unannotated in bolt
        self._result = result

    async def __call__(self, **_: Any) -> AuthorizeResult:
        return self._result


def quiet_bolt() -> None:
    bolt = logging.getLogger("slack_bolt.AsyncApp")  # Bolt's own logger for an AsyncApp
    if not any(isinstance(f, ClientGiven) for f in bolt.filters):
        bolt.addFilter(ClientGiven())


def left_unacknowledged(channel: str, body: dict[str, Any], error: object = None) -> None:
    """The one line for an event the stop caught: not stored (the router closed) or stored but its
    acknowledgement unwritable (the socket closed). Slack sends it again; the next start takes it,
    and the store drops it if it holds it already: nothing is wrong."""
    found = body.get("event")
    event: dict[str, Any] = found if isinstance(found, dict) else {}
    log.info(UNACKNOWLEDGED, channel=channel, event_id=body.get("event_id"), message_id=event.get("ts"),
             reason=describe(error) if isinstance(error, BaseException) else error)


def tell_errors(app: AsyncApp, channel: str, stopping: Callable[[], bool]) -> None:
    """A listener that raises leaves its event unacknowledged. While the channel stops (the router
    refuses what it is handed) that is expected, and said in our one line; otherwise Bolt's own
    error line, with its traceback, as before."""

    bolt = logging.getLogger("slack_bolt.AsyncApp")  # where Bolt's default handler says it

    async def on_error(error: Exception, body: dict[str, Any]) -> None:
        if stopping():
            left_unacknowledged(channel, body, error)
        else:
            bolt.exception(f"Failed to run listener function (error: {error})")

    app.error(on_error)


class StoppingHandler(AsyncSocketModeHandler):
    """Bolt's Socket Mode handler, except while the channel stops: an event the listener refused
    (told by `tell_errors`) is not answered, and one stored after the socket closed, whose
    acknowledgement cannot be written, is told in our one line, not as Bolt's error and Slack
    SDK's warning."""

    def __init__(self, app: AsyncApp, app_token: str, *, web_client: Any, channel: str,
                 stopping: Callable[[], bool]) -> None:
        super().__init__(app, app_token, web_client=web_client)
        self._channel = channel
        self._stopping = stopping

    async def handle(self, client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        start = time.time()
        response = await run_async_bolt_app(self.app, req)
        if self._stopping():
            if response.status != 200:
                return  # the error handler told it
            if client.closed:
                left_unacknowledged(self._channel, req.payload, "the socket is closed")
                return
        try:
            await send_async_response(client, req, response, start)
        except (ConnectionError, aiohttp.ClientError) as exc:
            if not self._stopping():
                raise
            left_unacknowledged(self._channel, req.payload, exc)
