"""The deliver phase: a committed reply sent from the outbox, or straight to its channel when unstored."""

from __future__ import annotations

import time

from bot.core.errors import DeliveryError
from bot.core.messages import ChatRef, OutboundMessage, StoredMessage
from bot.store import delivery_key
from bot.turn.commit import Committed
from bot.turn.deliver import Deliverer

OUTBOUND = OutboundMessage(ChatRef("fake", "42"), "hi there", preview_id="p1")


class Outbox:
    def __init__(self) -> None:
        self.delivered: list[tuple[int, OutboundMessage]] = []

    async def deliver(
        self, message_id: int, outbound: OutboundMessage, windows: list[float] | None = None
    ) -> list[str]:
        self.delivered.append((message_id, outbound))
        if windows is not None:
            windows.extend([0.5, 2.0])
        return ["s1", "s2"]


class Channel:
    def __init__(self, failure: Exception | None = None) -> None:
        self.failure = failure
        self.sent: list[OutboundMessage] = []

    async def send(self, message: OutboundMessage) -> list[str]:
        self.sent.append(message)
        if self.failure is not None:
            raise self.failure
        return ["d1"]


def committed(reply_id: int | None) -> Committed:
    reply = (StoredMessage(reply_id, "k", "assistant", "interactive", "hi there", 0.0)
             if reply_id is not None else None)
    return Committed(OUTBOUND, reply, time.perf_counter())


async def test_a_stored_reply_leaves_through_the_outbox_under_its_delivery_key() -> None:
    """The outbox sends it, keyed by the stored reply; the longest send window is reported."""
    outbox, channel = Outbox(), Channel()
    delivered = await Deliverer(outbox, {"fake": channel})(committed(12))

    assert outbox.delivered == [(12, OutboundMessage(ChatRef("fake", "42"), "hi there",
                                                     delivery_key=delivery_key(12), preview_id="p1"))]
    assert channel.sent == []
    assert (delivered.sent, delivered.record_ms) == (("s1", "s2"), 2.0) and delivered.send_ms >= 0


async def test_an_unstored_reply_goes_straight_to_its_channel() -> None:
    """The database refused it: the channel sends it as it is, with no send windows to report."""
    outbox, channel = Outbox(), Channel()
    delivered = await Deliverer(outbox, {"fake": channel})(committed(None))

    assert channel.sent == [OUTBOUND] and outbox.delivered == []
    assert (delivered.sent, delivered.record_ms) == (("d1",), None)


async def test_an_unstored_reply_that_fails_part_way_reports_what_arrived() -> None:
    """A delivery error's chunks that did arrive are what was sent; any other failure sent nothing."""
    partly = DeliveryError("blocked", sent_ids=["d1"], permanent=True)

    assert (await Deliverer(Outbox(), {"fake": Channel(partly)})(committed(None))).sent == ("d1",)
    assert (await Deliverer(Outbox(), {"fake": Channel(OSError("reset"))})(committed(None))).sent == ()
    assert (await Deliverer(Outbox(), {})(committed(None))).sent == ()
