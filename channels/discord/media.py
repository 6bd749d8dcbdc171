"""What a Discord message carries besides text: attachments offered for download (discord.py's
`Attachment.read()`, which fetches the attachment URL with the client's HTTP session), voice
messages, video, audio and stickers as placeholders."""

from __future__ import annotations

import warnings
from dataclasses import replace

from bot.core.media import Media
from bot.core.messages import InboundMessage
from bot.intake.channel import Intake
from bot.media.intake import Offer, notice, take_all, worth_a_turn
from bot.models.voice import hear, with_transcript

with warnings.catch_warnings():
    # discord.py imports the stdlib audioop (deprecated since 3.11) for voice, which we never use.
    warnings.simplefilter("ignore", DeprecationWarning)
    import discord


def offers(message: discord.Message) -> list[Offer | Media]:
    """The files to fetch and the placeholders of what is only noted, in message order."""
    found: list[Offer | Media] = []
    for attachment in message.attachments:
        mime = (attachment.content_type or "").split(";")[0].strip().lower() or None
        duration = int(attachment.duration) if attachment.duration is not None else None
        if attachment.is_voice_message() or (mime is not None and mime.startswith("audio/")):
            # Transcribed when a `transcribe` role is set (`bot.models.voice`), else noted.
            voice = attachment.is_voice_message()
            found.append(Offer("voice" if voice else "audio", attachment.read, size=attachment.size,
                               mime=mime, name=None if voice else attachment.filename, duration=duration))
        elif mime is not None and mime.startswith("video/"):
            found.append(Media("video", "unsupported", duration=duration, name=attachment.filename))
        else:
            kind = "photo" if mime is not None and mime.startswith("image/") else "document"
            found.append(Offer(kind, attachment.read, size=attachment.size, mime=mime,
                               name=attachment.filename, width=attachment.width, height=attachment.height))
    found.extend(Media("sticker", "unsupported", name=sticker.name) for sticker in message.stickers)
    return found


async def with_media(
    message: discord.Message, inbound: InboundMessage, intake: Intake
) -> tuple[InboundMessage, str | None]:
    """The message with its files taken in, and the notice its sender gets (DMs only)."""
    limits = intake.media_limits()
    items, heard = await hear(offers(message), limits, intake.transcriber())
    media = await take_all(items, limits, intake.keep_file)
    text = with_transcript(inbound.text, heard)
    starts = inbound.starts_turn and worth_a_turn(text, media)
    told = notice(media) if isinstance(message.channel, discord.DMChannel) else None
    return replace(inbound, text=text, media=media, starts_turn=starts), told
