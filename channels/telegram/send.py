"""Sending to Telegram: a reply in chunks (HTML, plain text when Telegram rejects the HTML), and
"typing…" while one is being written; failures reach the core as `DeliveryError`s."""

from __future__ import annotations

import asyncio

import structlog
from telegram import Bot, Message, ReplyParameters
from telegram.constants import ChatAction
from telegram.error import BadRequest, Forbidden, NetworkError, RetryAfter, TelegramError, TimedOut

from bot.core.errors import DeliveryError, describe
from bot.core.messages import ChatRef, OutboundMessage
from bot.intake.channel import ChunkSent
from channels.telegram.html import html_or_plain, telegram_chunks
from channels.telegram.preview import edit_into

log = structlog.get_logger("switchboard.telegram")

# Telegram shows "typing…" for about five seconds; refresh a little sooner, and never forever.
TYPING_REFRESH = 4.0
TYPING_CAP = 120.0
SEND_ATTEMPTS = 3


async def send_reply(bot: Bot, message: OutboundMessage, on_chunk: ChunkSent | None = None) -> list[str]:
    """Send `message` in Telegram-sized chunks (after those already sent), the first one edited
    into its preview when there is one; the ids of the chunks sent."""
    chat = message.chat
    refusal = not_a_chat(chat)
    if refusal is not None:
        raise DeliveryError(refusal, permanent=True)
    sent: list[str] = []
    chunks = telegram_chunks(message.text)
    for index, chunk in enumerate(chunks):
        if index < message.skip_chunks:
            continue
        reply = None
        if index == 0 and message.reply_to_id is not None:
            reply = ReplyParameters(int(message.reply_to_id), allow_sending_without_reply=True)
        try:
            if index == 0 and message.preview_id is not None and await edit_into(
                bot, chat, int(message.preview_id), chunk
            ):
                sent_id = message.preview_id  # the preview message is the first chunk
            else:
                sent_id = str((await _send_chunk(bot, chat, chunk, reply)).message_id)
        except TelegramError as exc:
            permanent = isinstance(exc, Forbidden | BadRequest)
            if isinstance(exc, Forbidden):
                log.warning("the chat blocked the bot or removed it", chat_id=chat.chat_id)
            raise DeliveryError(
                f"Telegram refused the message: {describe(exc)}",
                sent_ids=sent, permanent=permanent,
            ) from exc
        sent.append(sent_id)
        if on_chunk is not None:
            await on_chunk(index, sent_id, last=index == len(chunks) - 1)
    return sent


def not_a_chat(chat: ChatRef) -> str | None:
    """Why nothing can be sent to `chat`, naming it: a chat or topic id that is no number (from a
    session key or a job's target typed by hand); None when it can be sent to."""
    for what, value in (("chat", chat.chat_id), ("topic", chat.thread_id)):
        if not value and what == "topic":
            continue
        try:
            int(value or "")
        except ValueError:
            return f"Telegram {what} ids are numbers: {value!r} is not one (chat {chat.chat_id!r})"
    return None


async def _send_chunk(bot: Bot, chat: ChatRef, chunk: str, reply: ReplyParameters | None) -> Message:
    async def call(text: str, mode: str | None) -> Message:
        return await _send_retrying(bot, chat, text, mode, reply)

    sent: Message = await html_or_plain(call, chunk)
    return sent


async def _send_retrying(
    bot: Bot, chat: ChatRef, text: str, parse_mode: str | None, reply: ReplyParameters | None
) -> Message:
    # Connection failures are retried: the request never arrived. A timeout is not, since
    # the message may have been delivered and must not arrive twice. 429s are the limiter's.
    for attempt in range(1, SEND_ATTEMPTS + 1):
        try:
            sent: Message = await bot.send_message(
                int(chat.chat_id), text, parse_mode=parse_mode,
                message_thread_id=int(chat.thread_id) if chat.thread_id else None,
                reply_parameters=reply,
            )
            return sent
        except (TimedOut, RetryAfter, BadRequest):  # BadRequest is a NetworkError in PTB
            raise
        except NetworkError as exc:
            if attempt == SEND_ATTEMPTS:
                raise
            log.warning("telegram send failed; retrying", attempt=attempt, error=str(exc))
            await asyncio.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


async def keep_typing(bot: Bot, chat: ChatRef) -> None:
    """Show "typing…" in `chat` until cancelled, for at most TYPING_CAP seconds."""
    if not_a_chat(chat) is not None:
        return  # send_reply refuses the reply itself
    loop = asyncio.get_running_loop()
    give_up = loop.time() + TYPING_CAP
    while loop.time() < give_up:
        try:
            await bot.send_chat_action(
                int(chat.chat_id), ChatAction.TYPING,
                message_thread_id=int(chat.thread_id) if chat.thread_id else None,
            )
        except Forbidden:
            return
        except TelegramError as exc:
            log.debug("typing action failed", chat_id=chat.chat_id, error=str(exc))
        await asyncio.sleep(TYPING_REFRESH)
