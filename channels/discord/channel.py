"""Discord: a discord.py Client run by hand inside the daemon's event loop; normalising and gating
what arrives is `channels.discord.normalise`, taking in its attachments `channels.discord.media`;
the client, unsharded or this daemon's shards of the bot, is `channels.discord.client`.

Nothing lost: on every new gateway session (start-up, or a reconnect Discord would not RESUME) the
chats active lately are caught up from channel history (see `channels.discord.catch_up`) before any
message that arrives live after it. Nothing twice: every chunk of a stored reply carries a nonce
derived from its delivery key, so Discord answers a resend (after a lost response or a crash, within
a few minutes) with the message it already posted instead of posting again.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import aiohttp
import structlog

from bot.config import DiscordConfig
from bot.core.chunking import split_message
from bot.core.errors import ChannelNotStartedError, DeliveryError, describe
from bot.core.messages import ChatRef, InboundMessage, OutboundMessage
from bot.core.misconfiguration import report, token_refused
from bot.delivery.preview import PreviewStream
from bot.intake.access import TEXT_ONLY_REPLY, RefusalNotices, refused_dm_reply
from bot.intake.channel import ChunkSent, Intake, PreviewPosted, ReplyPreview
from channels.discord import normalise as discord_normalise
from channels.discord.catch_up import CatchUp
from channels.discord.client import Shards, make_client
from channels.discord.media import with_media
from channels.discord.normalise import PLATFORM, DiscordMessage, admit, read_message, to_inbound
from channels.discord.preview import DiscordPreview, edit_into, nonce_of

with warnings.catch_warnings():
    # discord.py imports the stdlib audioop (deprecated since 3.11) for voice, which we never use.
    warnings.simplefilter("ignore", DeprecationWarning)
    import discord

log = structlog.get_logger("switchboard.discord")

MESSAGE_LIMIT = 2000
# Discord has no line limit, but a 2000-character reply of short lines (a long list, a code
# listing) is several screens tall; 40 lines is about one desktop screen of chat.
MAX_LINES = 40
# Discord shows "typing…" for about ten seconds; refresh a little sooner, and never forever.
TYPING_REFRESH = 8.0
TYPING_CAP = 120.0
# discord.py sleeps through any 429; past this the reply fails instead of blocking its session.
MAX_RATE_LIMIT_WAIT = 60.0
DRAIN_TIMEOUT = 2.0  # messages already received are handed to the core this long at most after stop()
# A message the core could not store is handed over again after this, doubling up to the cap.
SUBMIT_RETRY_DELAY = 0.5
MAX_SUBMIT_RETRY_DELAY = 30.0
# Model output may mention users by name but must never ping anyone, let alone @everyone or roles.
NO_PINGS = discord.AllowedMentions(everyone=False, users=False, roles=False, replied_user=False)

_NETWORK_ERRORS = (OSError, aiohttp.ClientError, TimeoutError)
# Queued at each new gateway session: the intake worker catches up before later live messages.
CATCH_UP: Final = "catch-up"


class DiscordChannel:
    """Receives over the gateway and sends over REST; one instance per bot token, its `name`
    ("discord", "discord.<account>") the provider of its session keys, chats and stored rows."""

    def __init__(
        self,
        config: DiscordConfig,
        *,
        agent_id: str,
        token: str,
        name: str = PLATFORM,
        guild_ready_timeout: float = 2.0,
        retry_delay: float = 1.0,
    ) -> None:
        self.provider = name
        self._config = config
        self._agent_id = agent_id
        self._token = token
        self._guild_ready_timeout = guild_ready_timeout
        self._retry_delay = retry_delay
        self._client: discord.Client | None = None
        self._worker: asyncio.Task[None] | None = None
        self._typing: set[asyncio.Task[None]] = set()
        self._core: Intake | None = None
        self._notices = RefusalNotices()
        # One intake worker keeps messages in gateway order (discord.py runs each event as a task),
        # with a catch-up queued at each new session ahead of that session's messages.
        self._intake: asyncio.Queue[discord.Message | str] = asyncio.Queue()
        self._stopped = asyncio.Event()
        # The gateway shards this daemon runs (None: unsharded); read once, like the token.
        self.shards = Shards.of(config)
        self._catch_up = CatchUp(self._stopped, name, self.shards)
        self.ready = asyncio.Event()

    async def run(self, intake: Intake) -> None:
        self._core = intake
        worker = self._worker = asyncio.create_task(self._take_messages(), name="discord intake")
        try:
            delay = self._retry_delay
            while not self._stopped.is_set():
                try:
                    retry = await self._session()
                except Exception:
                    if self._stopped.is_set():
                        return  # stop() closed the client under a login in progress
                    raise
                if not retry or self._stopped.is_set():
                    return
                log.warning("Discord unreachable; retrying", retry_in=delay)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), delay)
                delay = min(delay * 2, 60.0)
        finally:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker

    async def _session(self) -> bool:
        """Log in and stay connected until closed; True when worth retrying (Discord unreachable)."""
        client = self._client = make_client(
            self, self.shards,
            intents=discord_normalise.default_intents(),
            guild_ready_timeout=self._guild_ready_timeout,
            allowed_mentions=NO_PINGS,
            max_messages=None,  # the store keeps history; no message cache needed
            max_ratelimit_timeout=MAX_RATE_LIMIT_WAIT,
        )
        try:
            async with client:
                await client.login(self._token)
                try:
                    await client.connect(reconnect=True)
                except AttributeError:
                    # discord.py #10520: when the very first gateway connection fails, its retry
                    # path reads `client.ws.sequence` of a socket it never had.
                    if client.ws is not None:
                        raise
                    return not self._stopped.is_set()
            return False
        except discord.LoginFailure:
            await self._token_refused("HTTP 401 at login")
        except discord.PrivilegedIntentsRequired:
            log.error("Discord refused the Message Content intent; enable it for the bot in the Developer "
                      "Portal (Bot → Privileged Gateway Intents); the channel stays off")
        except discord.ConnectionClosed as exc:
            if exc.code == 4004:  # the gateway's "Authentication failed": the token was revoked
                await self._token_refused("the gateway closed with 4004 Authentication failed")
            else:
                log.error("Discord closed the gateway for good; the channel stays off", code=exc.code,
                          reason=exc.reason)
        except discord.DiscordServerError as exc:
            log.warning("Discord server error at login", status=exc.status, error=exc.text)
            return True
        except discord.HTTPException as exc:
            log.error("Discord refused the login; the channel stays off", status=exc.status, error=exc.text)
        except (*_NETWORK_ERRORS, discord.GatewayNotFound) as exc:
            if not self._stopped.is_set():
                log.warning("Discord connection failed", error=describe(exc))
            return True
        return False

    async def _token_refused(self, detail: str) -> None:
        """A revoked or mistyped token: the channel is off; the admin is told what to do (the log,
        the console, `status`)."""
        await report(self._core, token_refused(
            "Discord", self.provider, self._config.token_env, detail,
            "Developer Portal → Applications → the bot → Bot → Reset Token"))

    def reconfigure(self, config: DiscordConfig) -> None:
        """Apply a reloaded section (access lists, mentions, reply age) to messages from now on.

        The token and connection settings are read once; the daemon restarts the channel for those.
        """
        self._config = config

    async def stop(self) -> None:
        """Stop taking input; the client stays open so turns in flight still deliver.

        Messages arriving after this, and those of chats a catch-up in progress had not finished,
        stay in Discord's history for the next start's catch-up; cancelling `run()` closes the client.
        """
        self._stopped.set()
        # What already arrived is handed over (and so stored) before the core shuts down.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.handled(), DRAIN_TIMEOUT)

    async def handled(self) -> None:
        """Return once every message received so far has been handed to the core, or refused (its
        notice sent)."""
        if self._worker is not None and not self._worker.done():
            await self._intake.join()

    # -- receiving ----------------------------------------------------------------------

    def gateway_connected(self) -> None:
        # A new session: what was sent since the last one is in channel history only.
        self._catch_up.new_session()
        if not self._stopped.is_set():
            self._intake.put_nowait(CATCH_UP)

    def guild_available(self) -> None:
        self._catch_up.guild_arrived()

    def shard_ready(self) -> None:
        self._catch_up.session_ready()

    def gateway_ready(self, client: discord.Client) -> None:
        user = client.user
        if user is None:  # discord.py sets it before READY is dispatched
            raise ChannelNotStartedError(f"{self.provider}: READY without the bot's own user")
        log.info("discord connected", channel=self.provider, bot=user.name, guilds=len(client.guilds),
                 shards=self.shards.describe() if self.shards is not None else None)
        self._catch_up.session_ready()
        self.ready.set()

    def message_received(self, message: discord.Message) -> None:
        if not self._stopped.is_set():
            self._intake.put_nowait(message)

    async def _take_messages(self) -> None:
        while True:
            item = await self._intake.get()
            try:
                if isinstance(item, str):
                    if self._client is not None and self._core is not None:
                        await self._catch_up.run(self._client, self._core, self._config.max_reply_age,
                                                 self._handle)
                elif not self._catch_up.passes_over(item.channel.id, item.id):
                    await self._handle(item)
            except Exception:  # one bad message (or a failed catch-up) must not stop the intake
                log.exception("discord intake failed", message_id=getattr(item, "id", None))
            finally:
                self._intake.task_done()

    async def _handle(self, message: discord.Message) -> None:
        client = self._client
        if client is None or client.user is None or self._core is None:
            return
        bot_id = client.user.id
        msg = read_message(message)
        if msg is None:
            return
        await self._take(msg, bot_id, self._core, message)
        if msg.author_id != bot_id:
            self._catch_up.handed_over(msg.channel_id, msg.id)

    async def _take(self, msg: DiscordMessage, bot_id: int, core: Intake, message: discord.Message) -> None:
        """Gate, normalise and submit one message, or send the notice a refused DM gets."""
        verdict = admit(msg, self._config, bot_id=bot_id)
        if verdict == "pair":  # a stranger under the pairing policy: the core decides, and tells them
            paired = await core.pair(self.provider, str(msg.channel_id), str(msg.author_id), msg.author_name)
            verdict = "accept" if paired else "ignore"
        if verdict == "refuse":
            log.info("message refused", channel_id=msg.channel_id, sender_id=msg.author_id)
            if self._notices.first_time(self.provider, str(msg.author_id)):
                await self._notify(msg, refused_dm_reply(str(msg.author_id)))
            return
        if verdict == "ignore":
            if msg.author_id != bot_id:
                log.debug("message ignored", channel_id=msg.channel_id, guild_id=msg.guild_id,
                          sender_id=msg.author_id)
            return
        inbound = to_inbound(msg, agent_id=self._agent_id, bot_id=bot_id, config=self._config,
                             provider=self.provider)
        if inbound is None:
            if msg.guild_id is None and not msg.author_is_bot:
                await self._notify(msg, TEXT_ONLY_REPLY)
            return
        inbound, told = await with_media(message, inbound, core) if msg.attachments else (inbound, None)
        await self._submit_until_stored(core, inbound)
        if told is not None:
            await self._notify(msg, told)

    async def _submit_until_stored(self, core: Intake, inbound: InboundMessage) -> None:
        """Hand a message over, trying again (0.5 s doubling to 30 s) while the core cannot store it.

        Later messages wait behind it, so nothing newer is stored first: if the daemon stops before
        it is stored, the next start's catch-up still finds it in history (it reads after the
        newest message stored).
        """
        delay = SUBMIT_RETRY_DELAY
        while True:
            try:
                await core.submit(inbound)
                return
            except Exception as exc:
                if self._stopped.is_set():
                    raise
                log.warning("discord message not stored; trying again",
                            message_id=inbound.provider_message_id,
                            error=describe(exc), retry_in=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), delay)
            delay = min(delay * 2, MAX_SUBMIT_RETRY_DELAY)

    async def _notify(self, msg: DiscordMessage, text: str) -> None:
        try:
            await self.send(OutboundMessage(ChatRef(self.provider, str(msg.channel_id)), text))
        except DeliveryError as exc:
            log.warning("notice not delivered", channel_id=msg.channel_id, error=str(exc))

    # -- sending ------------------------------------------------------------------------

    def _messageable(self, chat: ChatRef) -> discord.PartialMessageable:
        client = self._client
        if client is None or client.user is None or client.is_closed():
            raise DeliveryError("Discord is not connected")
        # A partial messageable needs no cache: it works for threads and DMs seen before a restart.
        return client.get_partial_messageable(int(chat.chat_id))

    async def send(self, message: OutboundMessage, on_chunk: ChunkSent | None = None) -> list[str]:
        channel = self._messageable(message.chat)
        sent: list[str] = []
        for index, chunk in enumerate(split_message(message.text, MESSAGE_LIMIT, max_lines=MAX_LINES)):
            if index < message.skip_chunks:
                continue
            options: dict[str, Any] = {"allowed_mentions": NO_PINGS}
            if index == 0 and message.reply_to_id is not None:
                options["reference"] = discord.MessageReference(
                    message_id=int(message.reply_to_id), channel_id=channel.id, fail_if_not_exists=False
                )
            if message.delivery_key is not None:
                # discord.py sends it with enforce_nonce: a resend returns the first message.
                options["nonce"] = nonce_of(message.delivery_key, index)
            try:
                preview_id = message.preview_id if index == 0 else None
                if preview_id is not None and await edit_into(channel, int(preview_id), chunk, NO_PINGS):
                    posted_id = preview_id  # the preview message is the first chunk
                else:
                    posted_id = str((await channel.send(chunk, **options)).id)
            except discord.HTTPException as exc:
                # 4xx cannot succeed on retry (no permission, unknown channel, bad request);
                # 429s never get here: discord.py waits them out.
                permanent = 400 <= exc.status < 500
                if isinstance(exc, discord.Forbidden):
                    log.warning("Discord forbids the bot to post here (missing permission?)",
                                channel_id=channel.id, code=exc.code, error=exc.text)
                raise DeliveryError(
                    f"Discord refused the message: {exc.status} {exc.text or type(exc).__name__}",
                    sent_ids=sent, permanent=permanent,
                ) from exc
            except (discord.RateLimited, *_NETWORK_ERRORS) as exc:
                # Not retried here: the message may have arrived. The core's resend carries the same
                # nonce (with a delivery key), so Discord does not post it twice.
                raise DeliveryError(
                    f"Discord send failed: {describe(exc)}", sent_ids=sent
                ) from exc
            sent.append(posted_id)
            if on_chunk is not None:
                await on_chunk(index, posted_id)
        return sent

    def preview(self, chat: ChatRef, reply_to_id: str | None, *, resume_id: str | None = None,
                on_posted: PreviewPosted | None = None) -> ReplyPreview | None:
        """One message edited in place as the reply grows; None with streaming off."""
        if self._config.streaming == "off":
            return None
        surface = DiscordPreview(lambda: self._messageable(chat), reply_to_id, NO_PINGS, resume_id,
                                 lambda text: split_message(text, MESSAGE_LIMIT, max_lines=MAX_LINES))
        return PreviewStream(surface, name=f"preview {chat.chat_id}", on_posted=on_posted)

    @asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        done = asyncio.Event()
        task = asyncio.create_task(self._keep_typing(chat, done), name=f"typing {chat.chat_id}")
        self._typing.add(task)
        task.add_done_callback(self._typing.discard)
        try:
            yield
        finally:
            # Signalled, not cancelled: a request cancelled inside discord.py's rate limiter keeps
            # its token (the bucket drains) and the cancelled task then sleeps out the bucket's
            # reset, which would hold up the reply that follows.
            done.set()

    async def _keep_typing(self, chat: ChatRef, done: asyncio.Event) -> None:
        try:
            channel = self._messageable(chat)
        except DeliveryError:
            return
        loop = asyncio.get_running_loop()
        give_up = loop.time() + TYPING_CAP
        while loop.time() < give_up and not done.is_set():
            try:
                await channel.typing()
            except discord.Forbidden:
                log.debug("typing not allowed here", channel_id=channel.id)
                return
            except (discord.HTTPException, discord.RateLimited, *_NETWORK_ERRORS) as exc:
                log.debug("typing indicator failed", channel_id=channel.id, error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), TYPING_REFRESH)
