"""Slack's HTTP Events API for the stand-in: events POSTed to the app's Request URL, signed, and sent
again when not answered 200 in time.

As Slack does: each request carries `X-Slack-Request-Timestamp` and `X-Slack-Signature`
(`v0=` + HMAC-SHA256 of `v0:{timestamp}:{body}` with the app's signing secret); an event not
answered 200 within `ack_timeout` (3 s on Slack) is sent again with the same body and
`X-Slack-Retry-Num` (1, 2, 3) and `X-Slack-Retry-Reason` (`http_timeout`, `http_error`,
`connection_failed`), at most `max_retries` times. Slack waits about a minute, then five, before
its later retries; here `retry_delays` (short, so tests end). The Request URL is first checked
with a `url_verification` challenge (`verify_url`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp

from bot.testing.slack_values import Envelope, Json

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


@dataclass(frozen=True)
class EventAttempt:
    """One POST of an event; `status` None when no answer came in time (or the connection failed)."""

    event_id: str
    retry_num: int
    reason: str
    status: int | None
    time: float = field(default_factory=time.monotonic)


def signed_headers(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """The headers Slack sends with `body`: its timestamp and v0 signature."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}",
            "Content-Type": "application/json"}


class EventsSender:
    """POSTs envelopes' payloads to `url` as Slack does; records each attempt in `attempts`."""

    def __init__(self, url: str, *, signing_secret: str = SIGNING_SECRET, ack_timeout: float = 3.0,
                 max_retries: int = 3, retry_delays: tuple[float, ...] = (0.0, 0.5, 1.0)) -> None:
        self.url = url
        self.signing_secret = signing_secret
        self.ack_timeout = ack_timeout
        self.max_retries = max_retries
        self.retry_delays = retry_delays
        self.attempts: list[EventAttempt] = []
        # Called the moment an answer (or its absence) is known; what it returns to await is
        # awaited before the next attempt.
        self.on_answer: Callable[[EventAttempt], Awaitable[None] | None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def post_soon(self, envelope: Envelope, answered: Callable[[], None]) -> None:
        """Deliver in the background, retrying until a 200; `answered` after each attempt."""
        task = asyncio.ensure_future(self._deliver(envelope, answered))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _deliver(self, envelope: Envelope, answered: Callable[[], None]) -> None:
        body = json.dumps(envelope.payload).encode()
        reason = ""
        for retry in range(self.max_retries + 1):
            if retry:
                await asyncio.sleep(self.retry_delays[min(retry, len(self.retry_delays)) - 1])
                envelope.attempts += 1
            headers = signed_headers(self.signing_secret, body)
            if retry:
                headers |= {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": reason}
            envelope.sent_at = time.monotonic()
            status, reason = await self._post(body, headers)
            envelope.acked = status == 200
            sent_reason = headers.get("X-Slack-Retry-Reason", "")
            self.attempts.append(EventAttempt(envelope.event_id, retry, sent_reason, status))
            if self.on_answer is not None and (waited := self.on_answer(self.attempts[-1])):
                await waited
            answered()
            if envelope.acked:
                return

    async def _post(self, body: bytes, headers: dict[str, str]) -> tuple[int | None, str]:
        """One POST: its status and, when not 200, the reason Slack would give its retry."""
        timeout = aiohttp.ClientTimeout(total=self.ack_timeout)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session, \
                    session.post(self.url, data=body, headers=headers) as answer:
                await answer.read()
                return answer.status, "" if answer.status == 200 else "http_error"
        except TimeoutError:
            return None, "http_timeout"
        except aiohttp.ClientError:
            return None, "connection_failed"

    async def post_raw(self, payload: Json, *, secret: str | None = None, timestamp: int | None = None,
                       signature: str | None = None) -> int:
        """POST once, signed with another secret, at another time or with a given signature (a
        forger's request); the status."""
        body = json.dumps(payload).encode()
        headers = signed_headers(self.signing_secret if secret is None else secret, body, timestamp)
        if signature is not None:
            headers["X-Slack-Signature"] = signature
        async with aiohttp.ClientSession() as session, \
                session.post(self.url, data=body, headers=headers) as answer:
            return answer.status

    async def verify_url(self) -> tuple[int, Json]:
        """Slack's check of a new Request URL: a signed url_verification, answered with its challenge."""
        challenge = secrets.token_urlsafe(24)
        body = json.dumps({"token": "verification-token", "challenge": challenge,
                           "type": "url_verification"}).encode()
        headers = signed_headers(self.signing_secret, body)
        async with aiohttp.ClientSession() as session, \
                session.post(self.url, data=body, headers=headers) as answer:
            found = await answer.json(content_type=None) if answer.status == 200 else {}
            return answer.status, {"sent": challenge, **found}
