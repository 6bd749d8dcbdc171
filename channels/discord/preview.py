"""Discord reply previews: one message posted at the first sentence and edited as the reply grows.

Discord allows about 5 edits per 5 seconds per channel; the preview stays under that with the
final edit included (the outbox edits the preview into the reply's first chunk, `edit_into`).
Each chunk sent after it carries a nonce (`nonce_of`), so a resend is never a second message.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable
from typing import Any

from bot.delivery.preview import has_first_sentence

with warnings.catch_warnings():
    # discord.py imports the stdlib audioop (deprecated since 3.11) for voice, which we never use.
    warnings.simplefilter("ignore", DeprecationWarning)
    import discord

NONCE_LENGTH = 25  # Discord's limit on a message nonce
# Four preview edits in any 5 s leave the fifth for the final one.
EDIT_INTERVAL = 1.25
# A reply complete within this gains nothing from a message posted early.
EDIT_START_AFTER = 1.0


class DiscordPreview:
    """The preview surface of one reply in one channel (see `bot.delivery.preview.PreviewStream`)."""

    def __init__(
        self, channel_of: Callable[[], discord.PartialMessageable], reply_to_id: str | None,
        mentions: discord.AllowedMentions, resume_id: str | None, chunks: Callable[[str], list[str]],
    ) -> None:
        self._channel_of = channel_of  # raises DeliveryError while Discord is not connected
        self._reply_to_id = reply_to_id
        self._chunks = chunks
        self._mentions = mentions
        # A message an interrupted turn left half-written is edited, never left behind.
        self._message_id = int(resume_id) if resume_id is not None else None
        self._shown: str | None = None

    @property
    def interval(self) -> float:
        return EDIT_INTERVAL

    def ready(self, text: str, elapsed: float) -> bool:
        return elapsed >= EDIT_START_AFTER and has_first_sentence(text)

    async def show(self, text: str) -> str | None:
        chunks = self._chunks(text)
        chunk = chunks[0] if chunks else text
        if chunk == self._shown:
            return None  # the reply grew past the first message: its preview is complete
        channel = self._channel_of()
        posted = None
        if self._message_id is None or not await edit_into(channel, self._message_id, chunk, self._mentions):
            # The first time, or the message was deleted meanwhile.
            options: dict[str, Any] = {"allowed_mentions": self._mentions}
            if self._reply_to_id is not None:
                options["reference"] = discord.MessageReference(
                    message_id=int(self._reply_to_id), channel_id=channel.id, fail_if_not_exists=False
                )
            self._message_id = (await channel.send(chunk, **options)).id
            posted = str(self._message_id)
        self._shown = chunk
        return posted

    async def close(self, final: str) -> str | None:
        return str(self._message_id) if self._message_id is not None else None

    async def withdraw(self) -> None:
        if self._message_id is not None:
            await self._channel_of().get_partial_message(self._message_id).delete()
            self._message_id = None


async def edit_into(
    channel: discord.PartialMessageable, message_id: int, chunk: str, mentions: discord.AllowedMentions
) -> bool:
    """Edit a preview message into its final text; False when it is gone (deleted by someone) and
    the chunk must be posted instead. Other failures raise as a send's would."""
    try:
        await channel.get_partial_message(message_id).edit(content=chunk, allowed_mentions=mentions)
    except discord.NotFound:
        return False
    return True


def nonce_of(delivery_key: str, index: int) -> str:
    """The nonce of one chunk of a delivery: the same on every resend, at most 25 characters."""
    nonce = f"{delivery_key}.{index}"
    if len(nonce) <= NONCE_LENGTH:
        return nonce
    return hashlib.blake2b(nonce.encode(), digest_size=12).hexdigest()
