"""Finding a send in doubt before sending it again, where the platform has no idempotency key.

A reply in the outbox whose next chunk has no recorded id may still have reached the chat: the
daemon died, or the request failed, after the platform created the message and before its id was
committed. Sent again, it would show twice. Where the channel can ask the platform whether a
message is the bot's own (`MessageProbe`: Telegram), the ids after the chunk's floor (its request,
or the reply's last recorded chunk) that the store never recorded are asked in the reply's chat,
each once. Exactly one of the bot's own there, while nothing else of that chat is in doubt, is
that chunk: it is recorded and not sent again. Anything less certain (no answer, two found, too
many ids to ask, another send of the chat in doubt) leaves it to be sent again: a double beats a
lost reply. A probe never changes what anyone sees.
"""

from __future__ import annotations

import structlog

from bot.core.messages import ChatRef
from bot.intake.channel import MessageProbe
from bot.store import SendsNearby

log = structlog.get_logger("switchboard.outbox")

# The most ids one chunk's search may ask about: past that, the chunk is sent again.
MAX_PROBES = 32
# Ids past the newest one the store knows that the chunk may have taken.
SLACK = 4


def candidates(probe: MessageProbe, chat: ChatRef, nearby: SendsNearby) -> list[int] | None:
    """The ids the chunk may have been sent as, lowest first; None when it cannot be searched for
    (no floor, another send of the chat in doubt, more ids than MAX_PROBES)."""
    if nearby.floor is None or nearby.doubts:
        return None
    known = {number for chat_id, number in nearby.known if probe.shares_ids(chat, chat_id)}
    ceiling = max([nearby.floor, *known]) + SLACK
    found = [n for n in range(nearby.floor + 1, ceiling + 1) if n not in known]
    return found if len(found) <= MAX_PROBES else None


async def sent_as(probe: MessageProbe, chat: ChatRef, ids: list[int]) -> int | None:
    """The one id of `ids` that is the bot's own message in `chat`; None when none is, several are,
    or the platform did not answer one of them."""
    own = []
    for message_id in ids:
        answer = await probe.is_own(chat, message_id)
        if answer is None:
            return None
        if answer:
            own.append(message_id)
    return own[0] if len(own) == 1 else None
