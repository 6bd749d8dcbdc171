"""A turn's last phase, deliver: the committed reply sent, from the outbox or (unstored) directly.

A stored reply leaves through the outbox, which records each chunk as it is delivered (a crash
sends the rest at the next start); one the database would not take goes straight to its channel,
best effort. Either way `Delivered` says what the platform got, for the turn's log line.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import structlog

from bot.core.errors import DeliveryError, describe
from bot.core.messages import OutboundMessage
from bot.store import delivery_key
from bot.turn.commit import Committed

log = structlog.get_logger("switchboard.turn")


class ReplyOutbox(Protocol):
    """Sends stored replies, chunk by chunk (`bot.delivery.outbox.Outbox`)."""

    async def deliver(
        self, message_id: int, outbound: OutboundMessage, windows: list[float] | None = None
    ) -> list[str]: ...


class Sender(Protocol):
    """A channel, as far as sending an unstored reply goes."""

    async def send(self, message: OutboundMessage) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class Delivered:
    """What one reply's delivery did."""

    sent: tuple[str, ...]  # the platform ids of the chunks sent now
    send_ms: float  # from storing the reply to the end of its delivery
    record_ms: float | None  # the longest of its chunks' send windows (platform answered → id committed)


class Deliverer:
    """Sends each committed reply of the daemon's channels."""

    def __init__(self, outbox: ReplyOutbox, channels: Mapping[str, Sender]) -> None:
        self._outbox = outbox
        self._channels = channels

    async def __call__(self, committed: Committed) -> Delivered:
        windows: list[float] = []
        if committed.reply is None:
            sent = await self._deliver_unstored(committed.outbound)
        else:
            reply_id = committed.reply.id
            keyed = dataclasses.replace(committed.outbound, delivery_key=delivery_key(reply_id))
            sent = await self._outbox.deliver(reply_id, keyed, windows)
        return Delivered(tuple(sent), (time.perf_counter() - committed.store_started) * 1000,
                         max(windows) if windows else None)

    async def _deliver_unstored(self, outbound: OutboundMessage) -> list[str]:
        channel = self._channels.get(outbound.chat.provider)
        if channel is None:
            return []
        try:
            return await channel.send(outbound)
        except DeliveryError as exc:
            log.error("delivery failed", error=str(exc), permanent=exc.permanent)
            return exc.sent_ids
        except Exception as exc:
            log.error("delivery failed", error=describe(exc), exc_info=True)
            return []
