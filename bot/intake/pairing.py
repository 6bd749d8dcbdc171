"""The pairing gate: what the core answers a channel about a stranger under `dm_policy = "pairing"`.

The channel's allowlist check is synchronous and knows only config; a user it does not know is
asked about here, so an approval written by `switchboard pairing approve` (another process) is
seen on that user's next message, with no reload.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from bot.config import Config
from bot.core.errors import describe
from bot.core.messages import ChatRef, OutboundMessage
from bot.intake.access import APPROVED_REPLY, pairing_reply, refused_dm_reply
from bot.intake.channel import Channel
from bot.store.seams import PairingLedger

log = structlog.get_logger("switchboard.pairing")

# A stranger hears from the bot at most once an hour, however often they write.
NOTICE_INTERVAL = 3600.0
# How often the daemon looks for approvals to announce (the CLI writes them from another process).
WELCOME_EVERY = 5.0


@dataclass(frozen=True, slots=True)
class PairingVerdict:
    """Let the user in (approved), and the notice to send them, if one is due."""

    approved: bool
    notice: str | None = None


class PairingGate:
    """Asks the store where a stranger stands, and words (and sends) the notice they get."""

    def __init__(self, config: Config, store: PairingLedger, channels: Mapping[str, Channel]) -> None:
        self._config = config
        self._store = store
        self._channels = channels

    async def check(
        self, provider: str, user_id: str, user_name: str | None, chat_id: str | None = None
    ) -> PairingVerdict:
        """Approved users pass; others get their (same, until it expires) code, one notice an hour.
        `chat_id`, their private chat, is where they are told once an admin approves them."""
        section = self._config.chat_channel(provider)
        ttl = section.pairing_code_ttl if section is not None else 3600
        state = await self._store.request_pairing(
            provider, user_id, user_name, now=time.time(), ttl=ttl, notice_interval=NOTICE_INTERVAL,
            chat_id=chat_id,
        )
        if state.status == "approved":
            return PairingVerdict(approved=True)
        log.info("message refused", channel=provider, sender_id=user_id, pairing=state.status,
                 code=state.code, notified=state.notify)
        if not state.notify:
            return PairingVerdict(approved=False)
        if state.status == "denied" or state.code is None:
            return PairingVerdict(approved=False, notice=refused_dm_reply(user_id))
        return PairingVerdict(False, pairing_reply(state.code, user_id, max(1, ttl // 60)))

    async def tell(self, chat: ChatRef, text: str) -> None:
        """Send a notice; a failure is logged (the user hears again within the hour at most)."""
        channel = self._channels.get(chat.provider)
        if channel is None:
            return
        try:
            await channel.send(OutboundMessage(chat, text))
        except Exception as exc:
            log.warning("notice not delivered", chat_id=chat.chat_id, error=describe(exc), exc_info=True)


async def welcome_approved(store: PairingLedger, channels: Mapping[str, Channel]) -> None:
    """Tell each stranger an admin approved (`switchboard pairing approve`, another process) that
    they are in, once, in the private chat they asked from; looked for every WELCOME_EVERY seconds.
    A channel not running now is tried again later; a send that fails is not (it was tried)."""
    while True:
        try:
            for provider, user_id, chat_id in await store.unwelcomed_approvals():
                channel = channels.get(provider)
                if channel is None:
                    continue
                try:
                    await channel.send(OutboundMessage(ChatRef(provider, chat_id), APPROVED_REPLY))
                except Exception as exc:
                    log.warning("approval not delivered", chat_id=chat_id,
                                error=describe(exc), exc_info=True)
                await store.mark_welcomed(provider, user_id, now=time.time())
                log.info("paired user told they are in", channel=provider, sender_id=user_id)
        except Exception as exc:  # the store is busy or closing: look again next time
            log.warning("approvals not read", error=describe(exc), exc_info=True)
        await asyncio.sleep(WELCOME_EVERY)
