"""The homeserver's rate limits honoured: a request answered 429 `M_LIMIT_EXCEEDED` is waited out
for its `retry_after_ms` (or `Retry-After`) and sent again, a few times, as an aiohttp client
middleware under mautrix (whose errors do not carry the wait).

A resend of `PUT /send/…/{txnId}` is the same transaction, so waiting and repeating it can never
post a message twice; a wait longer than `MAX_WAIT` is not waited here: the 429 goes up, and the
outbox retries the reply later.
"""

from __future__ import annotations

import asyncio
import contextvars
import json

import structlog
from aiohttp import ClientHandlerType, ClientRequest, ClientResponse

log = structlog.get_logger("switchboard.matrix")

RETRIES = 3
MAX_WAIT = 30.0  # seconds; longer waits are the outbox's (it resends later)
DEFAULT_WAIT = 1.0  # a 429 that names no wait
# Set while a request is only best effort (a preview's edit): its 429 goes straight up, not waited
# out, so a reply's own sends are never held behind a preview's.
best_effort: contextvars.ContextVar[bool] = contextvars.ContextVar("matrix_best_effort", default=False)


async def retry_after(response: ClientResponse) -> float:
    """The wait a 429 asks for, in seconds: `retry_after_ms` in its JSON, else `Retry-After`."""
    try:
        body = json.loads(await response.read())
        if isinstance(body, dict) and isinstance(body.get("retry_after_ms"), int | float):
            return max(0.0, float(body["retry_after_ms"]) / 1000)
    except (ValueError, UnicodeDecodeError):
        pass
    header = response.headers.get("Retry-After", "")
    return float(header) if header.isdigit() else DEFAULT_WAIT


async def honour_rate_limits(request: ClientRequest, handler: ClientHandlerType) -> ClientResponse:
    """Send; on a 429, wait what the homeserver asks and send again (at most RETRIES times)."""
    for attempt in range(RETRIES + 1):
        response = await handler(request)
        if response.status != 429 or attempt == RETRIES or best_effort.get():
            return response
        wait = await retry_after(response)
        if wait > MAX_WAIT:
            return response
        log.info("matrix rate limit; waiting", path=request.url.path, wait=round(wait, 3))
        response.release()
        await asyncio.sleep(wait)
    return response
