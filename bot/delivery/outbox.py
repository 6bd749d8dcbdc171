"""The outbox: a stored reply is sent from here, each delivered chunk recorded as it arrives.

A reply enters the outbox in the transaction that stores it and leaves it once every chunk is
delivered (or can never be: the chat blocked the bot). A crash in between leaves it there, and
the next start sends the chunks still missing, without asking the model again; a send that failed
for a passing reason (network, a server error) is tried again while the daemon runs
(`bot.delivery.resume.redeliver`). Sent again, a reply's chunk that may have arrived without its id being
recorded is first looked for where the channel can (`bot.delivery.sent_probe`): found, it is not repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping

import structlog

from bot.core.errors import DeliveryError, describe
from bot.core.messages import OutboundMessage
from bot.delivery.sent_probe import candidates, sent_as
from bot.intake.channel import Channel, MessageProbe
from bot.store import PendingDelivery
from bot.store.seams import OutboxStore

log = structlog.get_logger("switchboard.outbox")

# Bookkeeping writes after a chunk was delivered are retried this many times (a locked database
# clears in moments); giving up means a restart may send that chunk again.
RECORD_ATTEMPTS = 3
# A reply's chunks found already sent, at most, before the rest is sent (a long reply has a few).
MAX_FOUND_CHUNKS = 16
# How long a search for a send in doubt waits for the messages that waited at the platform.
CATCH_UP_WAIT = 10.0


class Outbox:
    """Delivers stored replies through the channels running now."""

    def __init__(self, store: OutboxStore, channels: Mapping[str, Channel]) -> None:
        self._store = store
        self._channels = channels
        # Replies being sent or queued to be sent now: a sweep for undelivered ones skips them.
        self._busy: set[int] = set()

    @property
    def shared(self) -> bool:
        """Whether other daemons send from the same outbox (a store they share)."""
        return self._store.shared

    async def pending(self, message_id: int) -> PendingDelivery | None:
        """The reply as the outbox holds it now; None once it has left."""
        return next(iter(await self._store.pending_deliveries(message_id)), None)

    def is_busy(self, message_id: int) -> bool:
        return message_id in self._busy

    def claim(self, message_id: int) -> None:
        """Mark a reply as queued for sending (released when `deliver` finishes with it)."""
        self._busy.add(message_id)

    async def deliver(
        self, message_id: int, outbound: OutboundMessage, windows: list[float] | None = None
    ) -> list[str]:
        """Send a stored reply from its first undelivered chunk; the platform ids sent now.

        Failures are logged, never raised: a permanent one (blocked, no permission) takes the
        reply out of the outbox, any other leaves it for the next start. `windows` gets, per chunk,
        the ms from the platform's answer to its id's commit: the send window, in which a crash
        leaves a message the platform shows and the store does not know it sent.
        """
        self._busy.add(message_id)
        try:
            return await self._deliver(message_id, outbound, windows)
        finally:
            self._busy.discard(message_id)

    async def _deliver(
        self, message_id: int, outbound: OutboundMessage, windows: list[float] | None
    ) -> list[str]:
        chat = outbound.chat
        channel = self._channels.get(chat.provider)
        if channel is None:
            log.warning("reply kept for later: its channel is not running", provider=chat.provider,
                        reply_id=message_id)
            return []

        cleared = False  # the last chunk's record took the reply out of the outbox

        async def record(index: int, provider_id: str, /, *, last: bool = False) -> None:
            nonlocal cleared
            answered = time.perf_counter()
            done = await self._retrying(
                lambda: self._store.record_chunk(message_id, chat, index, provider_id, last=last),
                "chunk delivered but not recorded", message_id)
            cleared = cleared or (done and last)
            if windows is not None:
                windows.append((time.perf_counter() - answered) * 1000)

        try:
            sent = await channel.send(outbound, record)
        except DeliveryError as exc:
            log.error("delivery failed", reply_id=message_id, error=str(exc), permanent=exc.permanent,
                      chunks_delivered=outbound.skip_chunks + len(exc.sent_ids),
                      kept_for_restart=not exc.permanent)
            if exc.permanent:
                await self._retrying(lambda: self._store.finish_delivery(message_id),
                                     "undeliverable reply not cleared", message_id)
            else:
                await self._noted_failed(message_id)
            return exc.sent_ids
        except Exception as exc:  # a send failure must not lose the stored reply
            log.error("delivery failed", reply_id=message_id, error=describe(exc),
                      kept_for_restart=True, exc_info=True)
            await self._noted_failed(message_id)
            return []
        if not cleared:
            await self._retrying(lambda: self._store.finish_delivery(message_id),
                                 "delivered reply not cleared", message_id)
        return sent

    async def deliver_again(self, message_id: int, outbound: OutboundMessage) -> list[str]:
        """`deliver` a reply that was sent before, or may have been: its chunks the platform turns
        out to have (`found_sent`) are recorded, not sent a second time."""
        return await self.deliver(message_id, await self.found_sent(message_id, outbound))

    async def found_sent(self, message_id: int, outbound: OutboundMessage) -> OutboundMessage:
        """The reply with the chunks its channel finds it already sent (`bot.delivery.sent_probe`) recorded
        and skipped; as it was where the channel cannot tell (or need not: a preview is edited)."""
        chat = outbound.chat
        channel = self._channels.get(chat.provider)
        if not isinstance(channel, MessageProbe) or outbound.preview_id is not None:
            return outbound
        skip = outbound.skip_chunks
        with contextlib.suppress(TimeoutError):  # the backlog's ids would each be asked about
            await asyncio.wait_for(channel.caught_up(), CATCH_UP_WAIT)
        for _ in range(MAX_FOUND_CHUNKS):
            try:
                nearby = await self._store.sends_nearby(message_id, chat.provider, chat.chat_id)
                ids = candidates(channel, chat, nearby)
                found = await sent_as(channel, chat, ids) if ids else None
                if found is None:
                    log.info("send in doubt not found; sent again", reply_id=message_id, chunk=skip,
                             ids_asked=len(ids or ()), other_doubts=nearby.doubts,
                             searchable=ids is not None)
                    break
                await self._store.record_chunk(message_id, chat, skip, str(found))
            except Exception as exc:  # sending again beats not sending
                log.warning("send in doubt not searched for; sent again", reply_id=message_id,
                            error=describe(exc), exc_info=True)
                break
            log.info("send in doubt found: not sent again", reply_id=message_id, chunk=skip,
                     provider_message_id=str(found), ids_asked=len(ids or ()))
            skip += 1
        return dataclasses.replace(outbound, skip_chunks=skip)

    async def send_left_over(self, session_key: str) -> int:
        """Send the session's replies still in the outbox, oldest first; how many there were.

        With a shared store a turn calls this under the session's lease, before its own reply: a
        reply an instance stored and died before sending (or a passing failure kept back) then
        reaches the chat before the replies to later messages, not after them with the next sweep.
        """
        left = await self._store.pending_deliveries(session_key=session_key)
        for delivery in left:
            log.info("reply left in the outbox sent first", session_key=session_key,
                     reply_id=delivery.message_id)
            await self.deliver_again(delivery.message_id, delivery.outbound)
        return len(left)

    async def _noted_failed(self, message_id: int) -> None:
        await self._retrying(lambda: self._store.note_delivery_failed(message_id),
                             "failed delivery not noted", message_id)

    @staticmethod
    async def _retrying(write: Callable[[], Awaitable[None]], what: str, message_id: int) -> bool:
        """Whether the write was made (logged when it never was)."""
        for attempt in range(1, RECORD_ATTEMPTS + 1):
            try:
                await write()
                return True
            except Exception as exc:
                if attempt == RECORD_ATTEMPTS:
                    log.error(what, reply_id=message_id, error=describe(exc), exc_info=True)
                    return False
                await asyncio.sleep(0.1 * attempt)
        return False
