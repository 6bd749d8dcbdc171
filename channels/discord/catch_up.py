"""Discord catch-up: what a chat received while no gateway session was listening, read from history.

Discord replays missed events only to a RESUME of the same session. After a restart, or a new
session after INVALID_SESSION, messages sent in between exist only in channel history, so for each
chat active lately we read the messages after the newest one handed over, as discord.py's
`channel.history(after=…, oldest_first=True)` asks for them (`GET …/messages?after=…&limit=…`),
and pass them to the same handler as live messages, in order.

REST messages lack the gateway's `member` field: their authors are plain users, without roles or
server nicknames, so guild authors are looked up once per catch-up (`GET /guilds/…/members/…`).

When daemons split the bot's shards, the store they share lists every daemon's chats: each reads
only those its own shards carry (a guild channel of its guilds, DMs with shard 0), or the same
missed message would reach several daemons.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import aiohttp
import structlog

from bot.core.errors import describe
from bot.intake.channel import Intake
from channels.discord.client import Shards

with warnings.catch_warnings():
    # discord.py imports the stdlib audioop (deprecated since 3.11) for voice, which we never use.
    warnings.simplefilter("ignore", DeprecationWarning)
    import discord

log = structlog.get_logger("switchboard.discord")

T = TypeVar("T")
Handle = Callable[[discord.Message], Awaitable[None]]

# One history page per chat. Past it the newest page is read instead: the tail of a long gap is
# what people are waiting on; the older part is logged as skipped.
CATCH_UP_LIMIT = 100
# How far back to look for active chats when `max_reply_age` is 0 (no cap on answering).
UNCAPPED_WINDOW = 24 * 3600.0
# At most this long for a new session's guilds to arrive before reading anyway.
READY_WAIT = 30.0
# One chat's history read; past it that chat waits for the next catch-up.
HISTORY_TIMEOUT = 30.0
_READ_ERRORS = (discord.HTTPException, discord.RateLimited, discord.InvalidData, OSError,
                aiohttp.ClientError, TimeoutError)


def catch_up_since(max_reply_age: int, now: float) -> float:
    """The oldest activity worth catching up: `max_reply_age` back, or a day when it is 0."""
    return now - (max_reply_age or UNCAPPED_WINDOW)


class CatchUp:
    """A channel's catch-ups, one per new gateway session, run by its intake worker."""

    def __init__(
        self, stopped: asyncio.Event, provider: str = "discord", shards: Shards | None = None
    ) -> None:
        self._stopped = stopped
        self._provider = provider  # the channel's name: it catches up its own chats only
        self._shards = shards  # None: unsharded, every chat of the provider is this daemon's
        self._foreign: set[int] = set()  # chats another daemon's shards carry (a guild keeps its shard)
        self._ready = False
        self._news = asyncio.Event()  # a guild arrived, or the session is ready
        # Per channel, the newest message this process handed over: reading goes on from there, as
        # the store's newest id may be a reply of ours posted after messages we never received.
        self._seen: dict[int, int] = {}
        # What the latest catch-up handed over, so that a live copy is not taken again.
        self._handed: set[int] = set()
        # Chats the running catch-up has not finished. When stop() cuts it short their live messages
        # are left in history for the next start: taking them would move the store's point past
        # the backlog still unread.
        self._pending: set[int] = set()

    def new_session(self) -> None:
        """READY: the guilds it lists arrive one by one after it."""
        self._ready = False

    def guild_arrived(self) -> None:
        self._news.set()

    def session_ready(self) -> None:
        """discord.py's on_ready: every guild is in, or `guild_ready_timeout` passed without one."""
        self._ready = True
        self._news.set()

    def handed_over(self, channel_id: int, message_id: int) -> None:
        """Note a message (not ours) taken by the handler, live or caught up."""
        self._seen[channel_id] = max(self._seen.get(channel_id, 0), message_id)

    def passes_over(self, channel_id: int, message_id: int) -> bool:
        """Whether to leave out a live message: the catch-up before it handed it over already, or
        stop() cut its chat's catch-up short (history keeps it for the next one)."""
        if message_id in self._handed:
            self._handed.discard(message_id)
            return True
        return channel_id in self._pending

    async def run(self, client: discord.Client, intake: Intake, max_reply_age: int, handle: Handle) -> None:
        """Hand every chat active lately what it got after its newest handed-over message, oldest
        first. A chat that is gone, unreadable or slow is skipped; stop() ends the run early."""
        self._handed.clear()
        self._pending.clear()
        await self._unless_stopped(self._guilds_arrived(client), READY_WAIT)
        points = await intake.catch_up_points(self._provider, catch_up_since(max_reply_age, time.time()))
        self._pending = {int(point.chat_id) for point in points}
        members = Members()
        for point in points:
            chat_id = int(point.chat_id)
            if self._stopped.is_set():
                return
            after = self._seen.get(chat_id, int(point.after_id))
            try:
                messages = await self._unless_stopped(self._read(client, chat_id, after, members),
                                                      HISTORY_TIMEOUT)
            except (discord.NotFound, discord.Forbidden) as exc:
                log.info("catch-up skipped: channel gone or not readable", channel_id=chat_id,
                         status=exc.status, code=exc.code)
                self._pending.discard(chat_id)
                continue
            except _READ_ERRORS as exc:
                log.warning("catch-up failed for a channel", channel_id=chat_id,
                            error=describe(exc))
                self._pending.discard(chat_id)
                continue
            if self._stopped.is_set():
                return
            if messages is None:
                log.warning("catch-up timed out for a channel", channel_id=chat_id)
                self._pending.discard(chat_id)
                continue
            if messages:
                log.info("catching up", channel_id=chat_id, messages=len(messages))
            for message in messages:
                if self._stopped.is_set():
                    return
                self._handed.add(message.id)
                await handle(message)
            self._pending.discard(chat_id)

    async def _read(
        self, client: discord.Client, chat_id: int, after_id: int, members: Members
    ) -> list[discord.Message]:
        """What a chat missed; nothing for a chat of another daemon's shards (it catches that up)."""
        if self._shards is not None and not await self._carried(client, chat_id, self._shards):
            return []
        return await read_missed(client, chat_id, after_id, members)

    async def _carried(self, client: discord.Client, chat_id: int, shards: Shards) -> bool:
        if chat_id in self._foreign:
            return False
        channel = client.get_channel(chat_id)
        if channel is not None:  # a channel of a guild of ours, or a DM seen since the start
            guild = getattr(channel, "guild", None)
            guild_id = guild.id if guild is not None else None
        else:
            # The raw channel: fetch_channel would cache another shard's guild as unavailable, and
            # the next catch-up would wait for it to arrive.
            data: dict[str, Any] = dict(await client.http.get_channel(chat_id))
            guild_id = int(data["guild_id"]) if data.get("guild_id") else None
        if shards.carry(guild_id):
            return True
        self._foreign.add(chat_id)
        log.debug("catch-up leaves the chat to another daemon's shard", channel_id=chat_id, guild_id=guild_id)
        return False

    async def _guilds_arrived(self, client: discord.Client) -> None:
        # READY lists the guilds as unavailable and each GUILD_CREATE fills one in; on_ready only
        # comes `guild_ready_timeout` (2 s) after the last, so waiting for the guilds is quicker.
        while True:
            self._news.clear()
            if self._ready or not any(guild.unavailable for guild in client.guilds):
                return
            await self._news.wait()

    async def _unless_stopped(self, step: Awaitable[T], timeout: float) -> T | None:
        """`step`'s result; None when stop() or the timeout came first (the step is then cancelled)."""
        task = asyncio.ensure_future(step)
        stopped = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait({task, stopped}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            late = not task.done()
            if late:
                task.cancel()
        return None if late else task.result()


async def read_missed(
    client: discord.Client, chat_id: int, after_id: int, members: Members
) -> list[discord.Message]:
    """A chat's messages after `after_id`, oldest first, their guild authors as members."""
    channel = client.get_channel(chat_id)
    if channel is None:  # a DM after a restart, an archived thread: ask Discord
        channel = await client.fetch_channel(chat_id)
    if not isinstance(channel, discord.abc.Messageable):
        return []  # a category or forum holds no messages of its own
    messages = await missed(channel, after_id)
    await members.fill(messages)
    return messages


async def missed(channel: discord.abc.Messageable, after_id: int) -> list[discord.Message]:
    """The channel's messages after `after_id`, oldest first, at most CATCH_UP_LIMIT (the newest)."""
    after = discord.Object(after_id)
    found = [m async for m in channel.history(after=after, oldest_first=True, limit=CATCH_UP_LIMIT)]
    if len(found) < CATCH_UP_LIMIT:
        return found
    newest = [m async for m in channel.history(after=after, oldest_first=False, limit=CATCH_UP_LIMIT)]
    newest.reverse()
    if newest[0].id != found[0].id:
        log.warning("more missed than catch-up reads; the oldest were skipped",
                    channel_id=getattr(channel, "id", None), after_id=after_id, read_from=newest[0].id)
    return newest


class Members:
    """Guild members looked up once each during a catch-up; None for people no longer in the guild."""

    def __init__(self) -> None:
        self._found: dict[tuple[int, int], discord.Member | None] = {}

    async def fill(self, messages: Iterable[discord.Message]) -> None:
        """Give guild messages their author's member (roles, nickname), as the gateway would."""
        for message in messages:
            guild = message.guild
            if guild is None or isinstance(message.author, discord.Member):
                continue
            key = (guild.id, message.author.id)
            if key not in self._found:
                self._found[key] = await self._fetch(guild, message.author.id)
            member = self._found[key]
            if member is not None:
                message.author = member

    async def _fetch(self, guild: discord.Guild, user_id: int) -> discord.Member | None:
        try:
            return await guild.fetch_member(user_id)
        except discord.NotFound:
            return None
        except discord.HTTPException as exc:
            # Without the member a role-gated guild ignores the message; others still take it.
            log.info("member lookup failed", guild_id=guild.id, user_id=user_id, status=exc.status)
            return None
