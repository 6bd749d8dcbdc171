"""The way in from every channel: late messages are kept but not answered, commands are answered
at once, everything else goes to the router."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping

import structlog

from bot.channel import Channel
from bot.commands import CommandHandler
from bot.compaction import Compactor
from bot.config import Config
from bot.messages import InboundMessage, OutboundMessage
from bot.router import Router
from bot.store import Store

log = structlog.get_logger("switchboard.inbox")


class Inbox:
    """What a channel's `submit` calls for every normalised message."""

    def __init__(
        self, config: Config, store: Store, router: Router, channels: Mapping[str, Channel],
        compactor: Compactor,
    ) -> None:
        self._config = config
        self._router = router
        self._channels = channels
        self._commands = CommandHandler(config, store, router, compactor)

    async def submit(self, inbound: InboundMessage) -> None:
        late = self._is_late(inbound)
        if inbound.command is not None:
            if late:
                log.info("late command ignored", session_key=str(inbound.session_key),
                         command=inbound.command)
                return
            await self._answer_command(inbound, inbound.command)
            return
        if late and inbound.starts_turn:
            # Stored for context, but an answer hours later would only confuse.
            log.info("late message stored, not answered", session_key=str(inbound.session_key),
                     provider_message_id=inbound.provider_message_id)
            inbound = dataclasses.replace(inbound, starts_turn=False)
        await self._router.submit(inbound)

    def _is_late(self, inbound: InboundMessage) -> bool:
        section = self._config.chat_channel(inbound.chat.provider)
        if section is None or not section.max_reply_age or inbound.sent_at is None:
            return False
        return time.time() - inbound.sent_at > section.max_reply_age

    async def _answer_command(self, inbound: InboundMessage, name: str) -> None:
        text = await self._commands.run(name, inbound)
        log.info("command", session_key=str(inbound.session_key), command=name,
                 sender_id=inbound.sender_id)
        channel = self._channels.get(inbound.chat.provider)
        if channel is None:
            return
        reply_to = None if inbound.session_key.is_direct else inbound.provider_message_id
        try:
            await channel.send(OutboundMessage(inbound.chat, text, reply_to))
        except Exception as exc:  # a failed command answer must not take the channel down
            log.error("command answer not delivered", session_key=str(inbound.session_key),
                      command=name, error=f"{type(exc).__name__}: {exc}")
