"""Asking Telegram whether a message id is the bot's own in a chat, changing nothing: how a reply
whose send is in doubt is found instead of sent twice (`bot.delivery.sent_probe`; the Bot API has no
idempotency key and no way to read a message back).

`editMessageReplyMarkup` without a markup asks to take away a keyboard. Switchboard never sends
one, so on the bot's own message there is nothing to take away and Telegram refuses with "message
is not modified"; on someone else's message it answers "message can't be edited", and where the
chat has no such message "message to edit not found". Nothing a user sees changes in any case.
Any other answer (a network error, a rate limit) says nothing: the reply is then sent again.

Ids: in private chats and basic groups a bot's message ids come from one sequence across all of
them; a supergroup or channel numbers its own.
"""

from __future__ import annotations

import structlog
from telegram import Bot
from telegram.error import BadRequest, TelegramError

from bot.core.errors import describe

log = structlog.get_logger("switchboard.telegram")

_OWN = "message is not modified"
_NOT_OWN = ("message can't be edited", "message to edit not found")


def own_sequence(chat_id: str) -> bool:
    """Whether a chat numbers its messages itself (a supergroup or channel: -100…)."""
    return chat_id.startswith("-100")


def shares_ids(chat_id: str, other_chat_id: str) -> bool:
    """Whether message ids in the two chats come from the same sequence."""
    if own_sequence(chat_id) or own_sequence(other_chat_id):
        return chat_id == other_chat_id
    return True


async def is_own_message(bot: Bot, chat_id: str, message_id: int) -> bool | None:
    """True: the bot's own message; False: not the bot's, or none; None: Telegram did not say."""
    try:
        await bot.edit_message_reply_markup(chat_id=int(chat_id), message_id=message_id, reply_markup=None)
    except BadRequest as exc:
        text = str(exc).lower()  # the library drops the "Bad Request: " prefix and capitalises
        if _OWN in text:
            return True
        if any(phrase in text for phrase in _NOT_OWN):
            return False
        log.info("message probe unanswered", chat_id=chat_id, message_id=message_id, error=str(exc))
        return None
    except (TelegramError, ValueError) as exc:
        log.info("message probe unanswered", chat_id=chat_id, message_id=message_id,
                 error=describe(exc))
        return None
    # It changed something: a keyboard another program sent with this bot's token. Not ours.
    log.warning("message probe took a keyboard off a message", chat_id=chat_id, message_id=message_id)
    return False
