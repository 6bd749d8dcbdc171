"""An aiohttp transport for python-telegram-bot: the Bot API over the HTTP client we already ship.

PTB's default transport (`HTTPXRequest`) costs 0.4-1 ms of CPU per Bot API call, more the more
calls are in flight (httpcore's pool bookkeeping); with this one a whole call, PTB's own work
included, costs about 0.1 ms. `BaseRequest` does the rest (JSON decoding, mapping status and body
to `TelegramError`s), so this class only moves bytes and translates transport failures as
`HTTPXRequest` does. The rate limiter every request goes through is made here too (the limits
themselves are `channels.telegram.limits`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

import aiohttp
from telegram._utils.defaultvalue import DefaultValue
from telegram.error import NetworkError, TelegramError, TimedOut
from telegram.ext import BaseRateLimiter
from telegram.request import BaseRequest, RequestData

from bot.core.errors import describe
from channels.telegram.limits import FloodLimiter

if TYPE_CHECKING:
    from telegram._utils.types import JSONDict, ODVInput

__all__ = ["AiohttpRequest", "default_rate_limiter"]

_FORM: Final = {"Content-Type": "application/x-www-form-urlencoded"}
# How much of an answer that is no JSON its error quotes.
_EXCERPT: Final = 200
class AiohttpRequest(BaseRequest):
    """`telegram.request.BaseRequest` over one `aiohttp.ClientSession`, with PTB's default limits.

    Timeouts mean what they mean for `HTTPXRequest`: `read_timeout` bounds each wait for the
    response once the request is sent, `connect_timeout` a new connection, `pool_timeout` the wait
    for a free one. aiohttp has no write timeout, so an upload (the only request whose body can
    stall) is bounded as a whole by the sum of all four instead. Proxies from the environment are
    not read: pass `proxy`.
    """

    __slots__ = (
        "_connect_timeout",
        "_keepalive",
        "_media_write_timeout",
        "_pool_size",
        "_pool_timeout",
        "_proxy",
        "_read_timeout",
        "_session",
        "_write_timeout",
    )

    def __init__(
        self,
        connection_pool_size: int = 256,
        *,
        read_timeout: float | None = 5.0,
        write_timeout: float | None = 5.0,
        connect_timeout: float | None = 5.0,
        pool_timeout: float | None = 1.0,
        media_write_timeout: float | None = 20.0,
        proxy: str | None = None,
        keepalive: float = 5.0,
    ) -> None:
        if connection_pool_size < 1:
            raise ValueError("connection_pool_size must be at least 1")
        self._pool_size = connection_pool_size
        self._read_timeout = read_timeout
        self._write_timeout = write_timeout
        self._connect_timeout = connect_timeout
        self._pool_timeout = pool_timeout
        self._media_write_timeout = media_write_timeout
        self._proxy = proxy
        self._keepalive = keepalive  # httpx's keep-alive expiry; idle connections close sooner than servers'
        # Made in initialize(): an aiohttp session belongs to the running event loop.
        self._session: aiohttp.ClientSession | None = None

    @property
    def read_timeout(self) -> float | None:
        """The read timeout used when a call passes none; Bot.get_updates adds the poll timeout to it."""
        return self._read_timeout

    async def initialize(self) -> None:
        """Open the session; again after shutdown(), as PTB re-initialises a bot that failed to start."""
        if self._session is not None and not self._session.closed:
            return
        connector = aiohttp.TCPConnector(limit=self._pool_size, limit_per_host=0,
                                         keepalive_timeout=self._keepalive)
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers={"User-Agent": self.USER_AGENT},
            cookie_jar=aiohttp.DummyCookieJar(),  # the Bot API sets none; a real jar costs CPU per call
            proxy=self._proxy,
        )

    async def shutdown(self) -> None:
        """Close the session and its connections; safe to call twice."""
        if self._session is not None and not self._session.closed:
            await self._session.close()

    @staticmethod
    def parse_json_payload(payload: bytes) -> JSONDict:
        """Telegram's JSON answer, as BaseRequest parses it, but quiet when it is none.

        BaseRequest logs an answer that is no JSON at ERROR with a traceback before raising, so a
        file server's 404 page became a stack in the log though the failure is handled (a download
        becomes a placeholder, a poll is retried, each with its own warning). The error raised is
        what the caller reports; for a failed call PTB also quotes the answer in it.
        """
        text = payload.decode("utf-8", "replace")
        try:
            parsed: JSONDict = json.loads(text)
        except (ValueError, RecursionError) as exc:  # nested too deep for the parser is no JSON either
            excerpt = text[:_EXCERPT] + ("…" if len(text) > _EXCERPT else "")
            raise TelegramError(f"Invalid server response: {excerpt!r}") from exc
        return parsed

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        """Send one request and return the status and body; transport failures become PTB errors."""
        session = self._session
        if session is None or session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        uploads = request_data is not None and request_data.contains_files
        read = _given(read_timeout, self._read_timeout)
        write = _given(write_timeout, self._media_write_timeout if uploads else self._write_timeout)
        connect = _given(connect_timeout, self._connect_timeout)
        pool = _given(pool_timeout, self._pool_timeout)
        timeout = aiohttp.ClientTimeout(
            # aiohttp's `connect` covers the wait for a pooled connection and making a new one.
            connect=_sum(pool, connect),
            sock_connect=connect,
            sock_read=read,
            total=_sum(pool, connect, write, read) if uploads else None,
        )
        data: aiohttp.FormData | bytes | None = None
        headers: dict[str, str] | None = None
        if request_data is not None and uploads:
            data = _multipart(request_data)
        elif request_data is not None:
            data, headers = request_data.url_encoded_parameters().encode(), _FORM
        try:
            async with session.request(method, url, data=data, headers=headers, timeout=timeout) as response:
                return response.status, await response.read()
        except aiohttp.ConnectionTimeoutError as exc:
            raise TimedOut(
                "Pool or connect timeout: no connection to Telegram became available in time. "
                "The request was *not* sent."
            ) from exc
        except TimeoutError as exc:  # aiohttp's read timeout, or an upload's overall bound
            raise TimedOut from exc
        except aiohttp.ClientError as exc:
            raise NetworkError(f"aiohttp.{_redact(describe(exc), url)}") from exc


def _given(value: ODVInput[float], default: float | None) -> float | None:
    """A timeout the caller passed (None meaning no limit), else this request's default."""
    return default if isinstance(value, DefaultValue) else value


def _sum(*parts: float | None) -> float | None:
    """A bound made of several timeouts; None (unbounded) when any of them is."""
    total = 0.0
    for part in parts:
        if part is None:
            return None
        total += part
    return total


def _multipart(request_data: RequestData) -> aiohttp.FormData:
    """Every parameter as a form field plus the files, as HTTPXRequest sends uploads."""
    form = aiohttp.FormData(quote_fields=False)
    for name, value in request_data.json_parameters.items():
        form.add_field(name, value)
    for name, (filename, content, mimetype) in request_data.multipart_data.items():
        form.add_field(name, content, filename=filename, content_type=mimetype)
    return form


def _redact(message: str, url: str) -> str:
    """Some aiohttp errors quote the URL, whose path holds the bot token."""
    path = urlsplit(url).path
    return message.replace(path, "/<redacted>") if path.strip("/") else message


def default_rate_limiter() -> BaseRateLimiter[int]:
    """Telegram's limits (30 messages/s, 20 a minute per group), waiting out 429s up to 3 times."""
    return FloodLimiter(max_retries=3)
