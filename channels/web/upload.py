"""A file uploaded with a web chat message: offered to the same media intake as a Telegram or
Discord attachment (caps first, then kept by content hash), so the model sees it as it sees
theirs, and a refused one is stored as the same note.

The browser sends the bytes with the form, so there is nothing to download: the offer's
download hands back what came. How big a chat POST may be follows the `[media]` caps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from bot.config import MediaConfig
from bot.core.messages import InboundMessage
from bot.intake.channel import Intake
from bot.media.intake import Offer, notice, take_all, worth_a_turn
from bot.models.voice import hear, with_transcript

# Room in a chat POST beside the file: the message (16 000 characters, up to 4 bytes each), the
# form's tokens and the multipart framing.
HEADROOM = 256 * 1024


@dataclass(frozen=True, slots=True)
class Upload:
    """One file from the chat form, as the browser named and typed it."""

    data: bytes
    name: str | None = None
    mime: str | None = None


def largest_cap(limits: MediaConfig) -> int:
    """The biggest file any `[media]` cap lets in."""
    return max(limits.max_photo_bytes, limits.max_file_bytes, limits.max_text_bytes)


def body_limit(limits: MediaConfig) -> int:
    """How big a chat POST may be: the largest file the caps allow, and the form around it."""
    return largest_cap(limits) + HEADROOM


def offer(upload: Upload) -> Offer:
    """The upload as the media intake takes any platform's file (an audio file is heard when a
    `transcribe` role is set, as on Discord)."""
    mime = (upload.mime or "").split(";")[0].strip().lower() or None
    data = upload.data

    async def download() -> bytes:
        return data

    if mime is not None and mime.startswith("audio/"):
        return Offer("audio", download, size=len(data), mime=mime, name=upload.name)
    kind = "photo" if mime is not None and mime.startswith("image/") else "document"
    return Offer(kind, download, size=len(data), mime=mime, name=upload.name)


async def with_upload(
    upload: Upload, inbound: InboundMessage, intake: Intake
) -> tuple[InboundMessage, str | None]:
    """The message with its file taken in, and the notice the account gets when it was not opened."""
    limits = intake.media_limits()
    items, heard = await hear([offer(upload)], limits, intake.transcriber())
    media = await take_all(items, limits, intake.keep_file)
    text = with_transcript(inbound.text, heard)
    starts = inbound.starts_turn and worth_a_turn(text, media)
    return replace(inbound, text=text, media=media, starts_turn=starts), notice(media)
