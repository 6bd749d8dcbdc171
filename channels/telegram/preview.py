"""Telegram reply previews: a draft that grows in a private chat, else one message edited in place.

A draft (`sendMessageDraft`) is only a preview: the reply is still sent as messages when complete.
Where Telegram refuses drafts for a chat, that chat gets the edit path instead, from then on: one
message posted at the first sentence and edited as the reply grows, paced to stay inside the
group's budget (about 20 messages a minute, edits included), then edited into the reply's first
chunk by the outbox (`edit_into`).

Every request a preview makes is `best_effort`: it takes a slot of Telegram's send budget only when
no reply is waiting for one and some is left to spare, and is skipped otherwise. A reply complete
before its first preview is due has none.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any

import structlog
from telegram import Bot, ReplyParameters
from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError

from bot.core.messages import ChatRef
from bot.delivery.preview import PreviewSkipped, has_first_sentence
from channels.telegram.html import html_or_plain
from channels.telegram.limits import best_effort

log = structlog.get_logger("switchboard.telegram")

# A private chat takes about one message a second; a draft update is lighter, but animated.
DRAFT_INTERVAL = 0.8
PRIVATE_EDIT_INTERVAL = 1.0
# 60 / 3.5 ≈ 17 preview updates a minute leave room in a group's 20 for the reply's other chunks.
GROUP_EDIT_INTERVAL = 3.5
# A reply complete within this of its first text gains nothing from a draft, which would cost a
# slot of the send budget the replies need (the limiter already puts replies first). Short: the
# first visible text is what a private chat feels (0.8 s here cost 0.8 s of it in
# bench/streaming_latency.py, 0.51 -> 1.32 s, for no throughput: with the limiter alone replies go
# at 30/s).
DRAFT_START_AFTER = 0.3
EDIT_START_AFTER = 1.0
EDIT_ATTEMPTS = 3
# A draft vanishes 30 s after its last update: one that stopped growing (the reply went past the
# first message) is sent again before that.
DRAFT_REFRESH = 20.0

Chunker = Callable[[str], list[str]]


class TelegramPreview:
    """The preview surface of one reply in one chat (see `bot.delivery.preview.PreviewStream`)."""

    def __init__(
        self, bot: Bot, chat: ChatRef, reply_to_id: str | None, *, private: bool,
        no_drafts: set[str], chunks: Chunker, resume_id: str | None = None,
    ) -> None:
        self._bot = bot
        self._chat = chat
        self._reply_to_id = reply_to_id
        self._private = private
        self._no_drafts = no_drafts
        self._chunks = chunks
        # A message an interrupted turn left half-written is edited, never left behind.
        self._message_id = int(resume_id) if resume_id is not None else None
        self._drafting = private and chat.chat_id not in no_drafts and self._message_id is None
        self._draft_id = secrets.randbelow(2**31 - 1) + 1
        self._shown: str | None = None  # the Markdown chunk on screen
        self._drafted_at = 0.0

    @property
    def interval(self) -> float:
        if self._drafting:
            return DRAFT_INTERVAL
        return PRIVATE_EDIT_INTERVAL if self._private else GROUP_EDIT_INTERVAL

    def ready(self, text: str, elapsed: float) -> bool:
        if self._drafting:
            return elapsed >= DRAFT_START_AFTER
        return elapsed >= EDIT_START_AFTER and has_first_sentence(text)

    async def show(self, text: str) -> str | None:
        with best_effort():
            return await self._show(text)

    async def _show(self, text: str) -> str | None:
        chunk = self._first_chunk(text)
        now = asyncio.get_running_loop().time()
        if chunk == self._shown and not (self._drafting and now - self._drafted_at > DRAFT_REFRESH):
            return None  # the reply grew past the first message: its preview is complete
        if self._drafting:
            try:
                await self._draft(chunk)
                self._shown, self._drafted_at = chunk, now
                return None
            except BadRequest as exc:
                # Drafts refused here (not a private chat, an old client, a server that lacks them):
                # this reply and the chat's next ones are shown by editing a message instead. A
                # Forbidden (the user blocked the bot) is no refusal of drafts: it ends the preview.
                log.info("drafts refused; previews edit a message here", chat_id=self._chat.chat_id,
                         error=str(exc))
                self._no_drafts.add(self._chat.chat_id)
                self._drafting = False
        posted = None
        if self._message_id is None or not await edit_into(self._bot, self._chat, self._message_id, chunk):
            self._message_id = await self._post(chunk)  # the first time, or the old one was deleted
            posted = str(self._message_id)
        self._shown = chunk
        return posted

    async def close(self, final: str) -> str | None:
        if self._drafting and self._shown is not None and not final.startswith(self._shown):
            # The draft shows words the reply does not have (a failed or retried attempt): it says
            # what is being sent instead until the message replaces it.
            try:
                with best_effort():
                    await self._draft(self._first_chunk(final))
            except (TelegramError, PreviewSkipped) as exc:
                log.debug("last draft not sent", chat_id=self._chat.chat_id, error=str(exc))
        return str(self._message_id) if self._message_id is not None else None

    async def withdraw(self) -> None:
        if self._message_id is not None:
            await self._bot.delete_message(int(self._chat.chat_id), self._message_id)
            self._message_id = None

    def _first_chunk(self, text: str) -> str:
        chunks = self._chunks(text)
        return chunks[0] if chunks else text

    async def _draft(self, chunk: str) -> None:
        async def call(text: str, mode: str | None) -> Any:
            return await self._bot.send_message_draft(
                int(self._chat.chat_id), self._draft_id, text, parse_mode=mode,
                message_thread_id=int(self._chat.thread_id) if self._chat.thread_id else None,
            )

        await html_or_plain(call, chunk)

    async def _post(self, chunk: str) -> int:
        reply = (ReplyParameters(int(self._reply_to_id), allow_sending_without_reply=True)
                 if self._reply_to_id is not None else None)

        async def call(text: str, mode: str | None) -> Any:
            return await self._bot.send_message(
                int(self._chat.chat_id), text, parse_mode=mode, reply_parameters=reply,
                message_thread_id=int(self._chat.thread_id) if self._chat.thread_id else None,
            )

        sent = await html_or_plain(call, chunk)
        return int(sent.message_id)


async def edit_into(bot: Bot, chat: ChatRef, message_id: int, chunk: str) -> bool:
    """Edit a preview message to show `chunk`; False when it is gone (deleted by someone) or can no
    longer be edited, and the chunk must be sent as a new message instead.

    An edit is safe to repeat, so failed connections are tried again; "not modified" is success.
    """

    async def call(text: str, mode: str | None) -> Any:
        return await bot.edit_message_text(text, int(chat.chat_id), message_id, parse_mode=mode)

    for attempt in range(1, EDIT_ATTEMPTS + 1):
        try:
            await html_or_plain(call, chunk)
            return True
        except BadRequest as exc:
            reason = str(exc).lower()
            if "not modified" in reason:
                return True
            if "not found" in reason or "can't be edited" in reason:
                return False
            raise
        except RetryAfter:
            raise
        except NetworkError as exc:
            if attempt == EDIT_ATTEMPTS:
                raise
            log.warning("telegram edit failed; retrying", attempt=attempt, error=str(exc))
            await asyncio.sleep(0.5 * attempt)
    raise AssertionError("unreachable")
