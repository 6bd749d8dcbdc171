"""What a Telegram message carries besides text: photos and documents offered for download
(getFile, then the file URL, through python-telegram-bot), everything else as a placeholder.

A photo comes in several sizes; the largest whose stated size fits the cap is fetched (when none
fits, it is refused without a download).
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from datetime import timedelta

from telegram import Audio, Document, Message, PhotoSize, Voice
from telegram.constants import ChatType
from telegram.warnings import PTBDeprecationWarning

from bot.config import MediaConfig
from bot.core.media import Media
from bot.core.messages import InboundMessage
from bot.intake.channel import Intake
from bot.media.intake import Download, Offer, notice, take_all, worth_a_turn
from bot.models.voice import hear, with_transcript

# Attachments that are only noted, by the attribute python-telegram-bot gives them.
_NOTED = ("sticker", "animation", "video_note", "video", "location", "venue", "contact", "poll", "dice")


def file_base_url(base_url: str) -> str:
    """The file download base for a Bot API base: `…/bot` → `…/file/bot` (as api.telegram.org)."""
    head, found, tail = base_url.rpartition("/bot")
    return f"{head}/file/bot{tail}" if found else base_url.rstrip("/") + "/file/bot"


def carries_media(message: Message) -> bool:
    return message.effective_attachment is not None


def offers(message: Message, limits: MediaConfig) -> list[Offer | Media]:
    """The files to fetch and the placeholders of what is only noted, in one list."""
    if message.photo:
        return [_photo(message.photo, limits)]
    for name in ("voice", "audio"):  # transcribed when a `transcribe` role is set (`bot.models.voice`)
        sound: Voice | Audio | None = getattr(message, name, None)
        if sound is not None:
            return [Offer(name, _downloader(sound), size=sound.file_size, mime=sound.mime_type,
                          name=sound.file_name if isinstance(sound, Audio) else None,
                          duration=_seconds(sound))]
    for name in _NOTED:  # before `document`: an animation is also sent as a document
        attached = getattr(message, name, None)
        if attached is not None:
            return [_noted(name, attached)]
    if message.document is not None:
        return [_document(message.document)]
    attached = message.effective_attachment
    if attached is None:
        return []
    return [Media(type(attached).__name__.lower() if not isinstance(attached, tuple) else "attachment",
                  "unsupported")]


async def with_media(
    message: Message, inbound: InboundMessage, intake: Intake
) -> tuple[InboundMessage, str | None]:
    """The message with its files taken in, and the notice its sender gets (private chats only)."""
    limits = intake.media_limits()
    items, heard = await hear(offers(message, limits), limits, intake.transcriber())
    media = await take_all(items, limits, intake.keep_file)
    text = with_transcript(inbound.text, heard)
    starts = inbound.starts_turn and worth_a_turn(text, media)
    told = notice(media) if message.chat.type == ChatType.PRIVATE else None
    return replace(inbound, text=text, media=media, starts_turn=starts), told


def _photo(sizes: tuple[PhotoSize, ...], limits: MediaConfig) -> Offer:
    by_area = sorted(sizes, key=lambda p: (p.width * p.height, p.file_size or 0))
    fitting = [p for p in by_area if p.file_size is None or p.file_size <= limits.max_photo_bytes]
    chosen = fitting[-1] if fitting else by_area[-1]  # none fits: refused, described by the largest
    return Offer("photo", _downloader(chosen), size=chosen.file_size, mime="image/jpeg",
                 width=chosen.width, height=chosen.height)


def _document(document: Document) -> Offer:
    return Offer("document", _downloader(document), size=document.file_size, mime=document.mime_type,
                 name=document.file_name)


def _downloader(attached: PhotoSize | Document | Voice | Audio) -> Download:
    async def download() -> bytes:
        file = await attached.get_file()
        return bytes(await file.download_as_bytearray())

    return download


def _noted(name: str, attached: object) -> Media:
    emoji = getattr(attached, "emoji", None) if name in ("sticker", "dice") else None
    return Media(name, "unsupported", duration=_seconds(attached), emoji=emoji)


def _seconds(attached: object) -> int | None:
    """A duration in whole seconds, whether PTB gives an int or (PTB_TIMEDELTA) a timedelta."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = getattr(attached, "duration", None)
    if isinstance(value, timedelta):
        return int(value.total_seconds())
    return value if isinstance(value, int) else None
