"""Telegram: python-telegram-bot driven by hand inside the daemon's event loop.

python-telegram-bot provides the bot (requests, rate limiter, types); updates are fetched by
`channels.telegram.intake`, which confirms each only once it is committed, or (mode = "webhook")
received by `channels.telegram.webhook`, which answers Telegram only once it is committed; both
hand each raw update to the same `_take`. Normalising and gating each message is
`channels.telegram.normalise`, sending `channels.telegram.send`. Edits are ignored: only new
messages are asked for (`allowed_updates=["message"]`), so what the model saw is what was stored.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import structlog
from telegram import BotCommand, Message
from telegram.constants import ChatType
from telegram.error import InvalidToken, TelegramError
from telegram.ext import Application, BaseRateLimiter

from bot.config import TelegramConfig
from bot.core.errors import BotError, ChannelNotStartedError, describe
from bot.core.messages import ChatRef, InboundMessage, OutboundMessage
from bot.core.misconfiguration import report, token_refused
from bot.delivery.preview import PreviewStream
from bot.intake.access import TEXT_ONLY_REPLY, RefusalNotices, refused_dm_reply
from bot.intake.channel import ChunkSent, Intake, PreviewPosted, ReplyPreview
from bot.intake.commands import COMMANDS
from channels.telegram.html import telegram_chunks
from channels.telegram.intake import UpdatePoller
from channels.telegram.media import carries_media, file_base_url, with_media
from channels.telegram.normalise import PLATFORM, BotIdentity, Verdict, admit, to_inbound
from channels.telegram.preview import TelegramPreview
from channels.telegram.probe import is_own_message, shares_ids
from channels.telegram.quarantine import RepeatedFailures, raw_json, reason, update_ref
from channels.telegram.request import AiohttpRequest, default_rate_limiter
from channels.telegram.send import keep_typing, not_a_chat, send_reply
from channels.telegram.webhook import WebhookServer

log = structlog.get_logger("switchboard.telegram")

# The updates asked for, polled or by webhook alike.
ALLOWED_UPDATES = ("message",)

class TelegramChannel:
    """Long-polls the Bot API (or serves its webhook) and sends replies; one instance per bot token.

    `name` is the channel's name, "telegram" or an extra account's "telegram.<account>": it is the
    provider of every session key, chat and stored row of this bot, so two bots share nothing (each
    has its own HTTP clients, offset, rate limiter, refusal notices and pairing requests).
    """

    def __init__(
        self,
        config: TelegramConfig,
        *,
        agent_id: str,
        token: str,
        name: str = PLATFORM,
        rate_limiter: BaseRateLimiter[int] | None = None,
        poll_timeout: float = 30.0,
        webhook_secret: str | None = None,
    ) -> None:
        self.provider = name
        self._config = config
        self._agent_id = agent_id
        self._updates_request = AiohttpRequest(connection_pool_size=1)
        self._app = _build_application(token, config.base_url, rate_limiter or default_rate_limiter(),
                                       self._updates_request)
        self._bot: BotIdentity | None = None
        self._intake: Intake | None = None
        self._failures = RepeatedFailures()
        self._updates = self._update_source(poll_timeout, webhook_secret)
        self._notices = RefusalNotices()
        self._notice_tasks: set[asyncio.Task[None]] = set()
        self._no_drafts: set[str] = set()  # private chats where Telegram refused a draft
        self._stopped = asyncio.Event()
        self.ready = asyncio.Event()

    async def run(self, intake: Intake) -> None:
        self._intake = intake
        try:
            if not await self._connect():
                return
            me = self._app.bot
            self._bot = BotIdentity(me.id, me.username)
            await self._register_commands()
            if not await self._updates.run():  # returns at once (True) when stop() came first
                await self._token_refused("the Bot API answered 401/404 while running")
                return
            # Until cancelled: after stop() the bot still sends the replies of turns in flight.
            await asyncio.get_running_loop().create_future()
        finally:
            await self._close()

    async def _connect(self) -> bool:
        """Initialise (getMe), retrying while Telegram is unreachable; False when stopped first."""
        delay = 1.0
        while not self._stopped.is_set():
            try:
                await self._app.initialize()
                return True
            except InvalidToken:
                await self._token_refused("the Bot API answered getMe with 401/404")
                return False
            except TelegramError as exc:
                await self._app.bot.shutdown()  # initialize() leaves its HTTP client open on failure
                log.warning("Telegram unreachable; retrying", channel=self.provider,
                            error=describe(exc), retry_in=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), delay)
            delay = min(delay * 2, 60.0)
        return False

    async def _token_refused(self, detail: str) -> None:
        """A revoked or mistyped token (401/404 on any call): the channel is off; the admin is told
        what to do (the log, the console, `status`)."""
        await report(self._intake, token_refused(
            "Telegram", self.provider, self._config.token_env, detail,
            "from @BotFather: /mybots → the bot → API Token"))

    def _update_source(self, poll_timeout: float, secret: str | None) -> UpdatePoller | WebhookServer:
        """Where updates come from: getUpdates, or Telegram's POSTs to our webhook server."""
        config = self._config
        if config.mode == "webhook":
            if config.webhook_url is None or secret is None:
                raise BotError("webhook mode needs webhook_url and the webhook secret")
            return WebhookServer(self._app.bot, self._take, self._quarantine, listen=config.webhook_listen,
                                 url=config.webhook_url, secret=secret, allowed_updates=ALLOWED_UPDATES,
                                 on_connected=self._connected, channel=self.provider)
        return UpdatePoller(self._app.bot, self._updates_request, self._take, poll_timeout=poll_timeout,
                            allowed_updates=ALLOWED_UPDATES, on_connected=self._connected,
                            channel=self.provider)

    @property
    def trouble(self) -> str | None:
        """Why Telegram is not answering the polls now (they are retried), or None."""
        return self._updates.trouble if isinstance(self._updates, UpdatePoller) else None

    def _connected(self) -> None:
        log.info("telegram connected", channel=self.provider, mode=self._config.mode,
                 bot=self._bot.username if self._bot else None)
        self.ready.set()

    async def _register_commands(self) -> None:
        commands = [BotCommand(c.name, c.description) for c in COMMANDS]
        try:
            await self._app.bot.set_my_commands(commands)
        except TelegramError as exc:
            log.warning("could not register the command menu", error=str(exc))

    async def _close(self) -> None:
        """Release everything, whichever way run() ends: notices in flight, then the HTTP clients."""
        tasks = list(self._notice_tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._app.shutdown()  # a no-op unless initialize() succeeded
        await self._app.bot.shutdown()  # closes the sessions when initialize() failed half-way

    def reconfigure(self, config: TelegramConfig) -> None:
        """Apply a reloaded section (access lists, mentions, reply age) to messages from now on.

        The token and connection settings are read once; the daemon restarts the channel for those.
        """
        self._config = config

    async def stop(self) -> None:
        """Stop taking updates; returns once every update fetched (or received) is committed and
        confirmed to Telegram (the offset, or the webhook's answers)."""
        self._stopped.set()
        await self._updates.stop()

    # -- receiving ----------------------------------------------------------------------

    async def _take(self, raw: Any) -> None:
        """Commit one raw update: submit it, skip it, or quarantine it (see `channels.telegram.quarantine`).

        Raises only when it could not be committed, so that it comes again; a second failure in a
        row for the same reason quarantines it instead.
        """
        try:
            await self._commit(raw)
        except Exception as exc:
            if not self._failures.repeated(raw, exc):
                raise
            await self._quarantine(raw, exc)
        else:
            self._failures.forget(raw)

    async def _commit(self, raw: Any) -> None:
        """Submit one update, skip it, or quarantine it when it does not parse; raises when the
        intake could not store it (or, for a stranger under the pairing policy, look them up)."""
        intake = self._started()
        try:
            message = self._message(raw)
            verdict = self._verdict(message) if message is not None else "ignore"
        except Exception as exc:  # one malformed update must not hold up the others
            # The intake logs the quarantine (one line); why it does not parse is detail.
            log.debug("telegram update unreadable", update_id=update_ref(raw), exc_info=True)
            await self._quarantine(raw, exc)
            return
        if verdict == "pair" and message is not None:
            verdict = await self._pair(message)
        if verdict != "accept" or message is None:
            return
        try:
            inbound = self._normalise(message)
        except Exception as exc:
            log.debug("telegram message not normalised", update_id=update_ref(raw), exc_info=True)
            await self._quarantine(raw, exc)
            return
        if inbound is None:
            return
        told = None
        if carries_media(message) and inbound.command is None:  # never raises: a failure is a note
            inbound, told = await with_media(message, inbound, intake)
        await intake.submit(inbound)
        if told is not None:
            self._notify(message.chat.id, told)

    def _started(self) -> Intake:
        if self._intake is None:
            raise ChannelNotStartedError(f"{self.provider}: an update came before the channel started")
        return self._intake

    async def _quarantine(self, raw: Any, exc: BaseException) -> None:
        await self._started().quarantine(self.provider, update_ref(raw), raw_json(raw), reason(exc))

    def _message(self, raw: Any) -> Message | None:
        if not isinstance(raw, dict):
            raise TypeError(f"an update must be an object, not {type(raw).__name__}")
        if "update_id" not in raw:
            raise TypeError("an update must have an update_id")
        # Only the message is parsed: an update carries one payload, and `Update.de_json` would try
        # each of its two dozen kinds (a third of the parse's CPU) for this to read `.message` alone.
        payload = raw.get("message")
        message = Message.de_json(payload, self._app.bot) if payload is not None else None
        if message is None:
            log.debug("update without a message ignored", update_id=raw.get("update_id"))
        return message

    def _verdict(self, message: Message) -> Verdict:
        """Who may be heard; a refused private chat gets its notice (in the background)."""
        verdict = admit(message, self._config)
        sender_id = str(message.from_user.id) if message.from_user else "?"
        if verdict == "refuse":
            log.info("message refused", chat_id=message.chat.id, sender_id=sender_id)
            if self._notices.first_time(self.provider, sender_id):
                self._notify(message.chat.id, refused_dm_reply(sender_id))
        elif verdict == "ignore":
            log.debug("message ignored", chat_id=message.chat.id, sender_id=sender_id)
        return verdict

    async def _pair(self, message: Message) -> Verdict:
        """A stranger under the pairing policy: in when approved; else the core sends their code
        and the message is not stored."""
        sender = message.from_user
        if sender is None:  # a channel post has no sender to pair
            return "ignore"
        paired = await self._started().pair(self.provider, str(message.chat.id), str(sender.id),
                                         sender.full_name or sender.username)
        return "accept" if paired else "ignore"

    def _normalise(self, message: Message) -> InboundMessage | None:
        """The message to submit, or None when there is none (notices are sent in the background)."""
        if self._bot is None:
            raise ChannelNotStartedError(f"{self.provider}: a message came before the bot was known")
        inbound = to_inbound(message, agent_id=self._agent_id, bot=self._bot, config=self._config,
                             media=carries_media(message), provider=self.provider)
        if inbound is None and message.chat.type == ChatType.PRIVATE:
            self._notify(message.chat.id, TEXT_ONLY_REPLY)
        return inbound

    def _notify(self, chat_id: int, text: str) -> None:
        """Send a notice without holding up intake; the task is cancelled if still running at the end."""
        task = asyncio.create_task(self._reply_quietly(chat_id, text), name=f"notice {chat_id}")
        self._notice_tasks.add(task)
        task.add_done_callback(self._notice_tasks.discard)

    async def _reply_quietly(self, chat_id: int, text: str) -> None:
        try:
            await self._app.bot.send_message(chat_id, text)
        except TelegramError as exc:
            log.warning("notice not delivered", chat_id=chat_id, error=str(exc))

    # -- sending ------------------------------------------------------------------------

    def shares_ids(self, chat: ChatRef, other_chat_id: str) -> bool:
        """`bot.intake.channel.MessageProbe`: see `channels.telegram.probe`."""
        return shares_ids(chat.chat_id, other_chat_id)

    async def caught_up(self) -> None:
        """Polling: until the updates that waited at Telegram are stored; a webhook has no backlog
        to wait for (Telegram posts it as it can)."""
        if isinstance(self._updates, UpdatePoller):
            await self._updates.caught_up.wait()

    async def is_own(self, chat: ChatRef, message_id: int) -> bool | None:
        return await is_own_message(self._app.bot, chat.chat_id, message_id)

    async def send(self, message: OutboundMessage, on_chunk: ChunkSent | None = None) -> list[str]:
        return await send_reply(self._app.bot, message, on_chunk)

    def preview(
        self, chat: ChatRef, reply_to_id: str | None, *, resume_id: str | None = None,
        on_posted: PreviewPosted | None = None,
    ) -> ReplyPreview | None:
        """A draft in private chats, else a message edited in place; None with streaming off."""
        if self._config.streaming == "off" or not_a_chat(chat) is not None:
            return None  # nowhere to preview: send() refuses the reply
        surface = TelegramPreview(self._app.bot, chat, reply_to_id, private=int(chat.chat_id) > 0,
                                  no_drafts=self._no_drafts, chunks=telegram_chunks, resume_id=resume_id)
        return PreviewStream(surface, name=f"preview {chat.chat_id}", on_posted=on_posted)

    @asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        task = asyncio.create_task(keep_typing(self._app.bot, chat), name=f"typing {chat.chat_id}")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _build_application(
    token: str, base_url: str, rate_limiter: BaseRateLimiter[int], updates_request: AiohttpRequest
) -> Application[Any, Any, Any, Any, Any, Any]:
    # No Updater: it confirms updates before they are stored (see channels/telegram/intake.py).
    # The aiohttp transport costs a fifth of the CPU per Bot API call that the default httpx one
    # does (bench/telegram_throughput.py): ~500 instead of ~310 turns/s on two cores.
    return (
        Application.builder().token(token).base_url(base_url).base_file_url(file_base_url(base_url))
        .rate_limiter(rate_limiter)
        .updater(None)
        .request(AiohttpRequest())
        .get_updates_request(updates_request)
        .build()
    )
