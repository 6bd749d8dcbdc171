"""Slack catch-up: what conversations received while no socket was open, read back from history.

Socket Mode delivers only what happens while a connection is open (and what waits unacknowledged);
a message written while the daemon was down reaches it from history alone. So at each start every
conversation active within `max_reply_age` (the intake's catch-up points: its newest stored
message's ts) is read again: `conversations.history` for the top level, and `conversations.replies`
for every thread there with a reply after that point, oldest first. Live messages of a conversation
wait until its catch-up is done, so what is stored keeps Slack's order; a message that came both
ways is stored once (the store keeps a conversation's `ts` once).

The reads go through a client that does not wait out a 429: Slack's Retry-After (conversations.history
is tier 3, about 50 calls a minute, so a start with many conversations to read meets it) is waited
out here, as often as Slack asks, outside the time a stalled read is given; a conversation is
skipped only when it is gone, unreadable or its read stalls.

History is read from the start of the window (`max_reply_age` back, a day when it is 0) when that is
older than the point, so that a thread whose first message is older than the point but which got
replies since is found; a thread whose first message is older than the window is not.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.core.errors import describe
from bot.intake.channel import CatchUpPoint, Intake
from channels.slack.rate_limits import retry_after

log = structlog.get_logger("switchboard.slack")

Json = dict[str, Any]

# Messages handed over per conversation at most; past it the newest are taken (what people wait on).
CATCH_UP_LIMIT = 200
PAGE_SIZE = 100  # per history call (Slack's own default for internal apps)
# How far back to look for active conversations when `max_reply_age` is 0 (no cap on answering).
UNCAPPED_WINDOW = 24 * 3600.0
# One history call (a page); past it the read has stalled and the conversation is skipped.
HISTORY_TIMEOUT = 30.0
# A call answered 429 is tried again after each Retry-After this many times at most.
RATE_LIMIT_WAITS = 10
READ_ERRORS = (SlackApiError, OSError, aiohttp.ClientError, TimeoutError)


def catch_up_since(max_reply_age: int, now: float) -> float:
    """The oldest activity worth catching up: `max_reply_age` back, or a day when it is 0."""
    return now - (max_reply_age or UNCAPPED_WINDOW)


async def missed(client: AsyncWebClient, channel: str, after: str, since: float) -> list[Json]:
    """A conversation's messages after the ts `after`, top level and in threads, oldest first, as
    event-shaped dicts (the conversation's id in `channel`); at most CATCH_UP_LIMIT, the newest."""
    point = float(after)
    oldest = f"{min(point, since):.6f}"
    top = await _pages(client.conversations_history, channel=channel, oldest=oldest)
    found: dict[str, Json] = {m["ts"]: m for m in top if _ts(m) > point}
    for parent in top:
        if int(parent.get("reply_count") or 0) and float(parent.get("latest_reply") or 0) > point:
            replies = await _pages(client.conversations_replies, channel=channel, ts=parent["ts"],
                                   oldest=after)
            found.update((m["ts"], m) for m in replies if _ts(m) > point)
    ordered = sorted(found.values(), key=_ts)
    if len(ordered) > CATCH_UP_LIMIT:
        log.warning("more missed than catch-up takes; the oldest were skipped", channel_id=channel,
                    missed=len(ordered), taken=CATCH_UP_LIMIT)
        ordered = ordered[-CATCH_UP_LIMIT:]
    return [{**m, "channel": channel} for m in ordered]


async def _pages(method: Callable[..., Awaitable[Any]], **args: Any) -> list[Json]:
    """Every message a history method returns for `args`, following its cursor."""
    messages: list[Json] = []
    cursor = None
    while True:
        page = await _paced(method, **args, limit=PAGE_SIZE, **({"cursor": cursor} if cursor else {}))
        messages.extend(m for m in page.get("messages") or () if isinstance(m.get("ts"), str))
        cursor = (page.get("response_metadata") or {}).get("next_cursor")
        if not page.get("has_more") or not cursor:
            return messages


async def _paced(method: Callable[..., Awaitable[Any]], **args: Any) -> Any:
    """One history call, given HISTORY_TIMEOUT; a 429 is waited out (its Retry-After) and the call
    made again."""
    for waits in range(RATE_LIMIT_WAITS + 1):
        try:
            async with asyncio.timeout(HISTORY_TIMEOUT):
                return await method(**args)
        except SlackApiError as exc:
            if exc.response.status_code != 429 or waits == RATE_LIMIT_WAITS:
                raise
            await asyncio.sleep(retry_after(exc.response.headers))
    raise AssertionError("unreachable")


def _ts(message: Json) -> float:
    return float(message["ts"])


async def read_or_skip(client: AsyncWebClient, channel: str, after: str, since: float) -> list[Json]:
    """`missed`, or nothing (logged) when the conversation is gone, unreadable or its read stalls."""
    started = time.monotonic()
    try:
        messages = await missed(client, channel, after, since)
    except READ_ERRORS as exc:
        error = exc.response.get("error") if isinstance(exc, SlackApiError) else describe(exc)
        log.warning("catch-up skipped a conversation", channel_id=channel, error=error)
        return []
    if messages:
        log.info("catching up", channel_id=channel, messages=len(messages),
                 read_ms=round((time.monotonic() - started) * 1000))
    return messages



class CatchUp:
    """A channel's catch-up at start: which conversations, held while they are read, and the reading."""

    def __init__(
        self, provider: str, order: dict[str, asyncio.Lock], take: Callable[[Json], Awaitable[None]],
        stopped: asyncio.Event,
    ) -> None:
        self._provider = provider
        self._order = order  # the channel's per-conversation locks, live messages wait on them
        self._take = take  # hands one event-shaped message over as a live one
        self._stopped = stopped
        self.done = asyncio.Event()

    async def hold(self, core: Intake, max_reply_age: int) -> list[CatchUpPoint]:
        """The conversations to catch up, each one's order lock taken: its live messages wait for
        what it missed."""
        try:
            points = await core.catch_up_points(self._provider, catch_up_since(max_reply_age, time.time()))
        except Exception as exc:  # then only what Slack sends is taken
            log.warning("nothing caught up: the store could not say what to read", error=describe(exc))
            return []
        for point in points:
            await self._order.setdefault(point.chat_id, asyncio.Lock()).acquire()
        return points

    async def run(self, client: AsyncWebClient, points: list[CatchUpPoint], max_reply_age: int) -> None:
        """Hand over what each held conversation missed, oldest first, then let its live messages in."""
        since = catch_up_since(max_reply_age, time.time())
        pending = list(points)
        try:
            while pending:
                point = pending.pop(0)
                try:
                    for event in await read_or_skip(client, point.chat_id, point.after_id, since):
                        if self._stopped.is_set():
                            break
                        await self._take(event)
                except Exception as exc:  # one conversation's failure holds up no other
                    log.warning("catch-up stopped for a conversation", channel_id=point.chat_id,
                                error=describe(exc))
                finally:
                    self._order[point.chat_id].release()
        finally:
            for point in pending:
                self._order[point.chat_id].release()
            self.done.set()
