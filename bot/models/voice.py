"""Voice notes and audio files: transcribed into the message's text when a `transcribe` role is set.

The channels offer a voice note like any file (`Offer` of kind "voice" or "audio"); this takes
those offers before the pictures and files are taken in: downloaded within the media caps, sent
to the transcription endpoint, and returned as a line "[voice 0:42] what was said" that becomes
the message's text. Without a transcriber it is the placeholder it always was (the sender is told
voice is not enabled); whatever fails is a placeholder with a note, and the message is stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

import structlog

from bot.config import MediaConfig
from bot.core.errors import describe
from bot.core.media import Media, label
from bot.media.intake import DOWNLOAD_TIMEOUT, Offer

log = structlog.get_logger("switchboard.media")

# (audio bytes, a file name with its extension, its mime type) → the words said.
Transcribe = Callable[[bytes, str, str | None], Awaitable[str]]
VOICE_KINDS = frozenset(("voice", "audio"))
_EXTENSIONS = {"audio/ogg": ".ogg", "audio/mpeg": ".mp3", "audio/mp4": ".m4a", "audio/x-m4a": ".m4a",
               "audio/wav": ".wav", "audio/x-wav": ".wav", "audio/webm": ".webm", "audio/flac": ".flac"}


async def hear(
    items: Sequence[Offer | Media], limits: MediaConfig, transcribe: Transcribe | None,
    *, timeout: float = DOWNLOAD_TIMEOUT,
) -> tuple[list[Offer | Media], list[str]]:
    """The items with each voice or audio offer replaced (by nothing when it was transcribed, by
    its placeholder otherwise), and the transcript lines in order."""
    kept: list[Offer | Media] = []
    lines: list[str] = []
    for item in items:
        if not isinstance(item, Offer) or item.kind not in VOICE_KINDS:
            kept.append(item)
            continue
        heard = await _transcribed(item, limits, transcribe, timeout)
        if isinstance(heard, Media):
            kept.append(heard)
        else:
            lines.append(heard)
    return kept, lines


async def _transcribed(
    offer: Offer, limits: MediaConfig, transcribe: Transcribe | None, timeout: float
) -> str | Media:
    # Without a transcriber: the placeholder as it always was ("[voice 0:42 — not viewable]").
    base = Media(offer.kind, "unsupported", duration=offer.duration,
                 name=offer.name if offer.kind == "audio" else None)
    if transcribe is None:
        return base
    cap = limits.max_file_bytes
    if offer.size is not None and offer.size > cap:
        return replace(base, status="too_large", size=offer.size, note="over the size limit")
    try:
        async with asyncio.timeout(timeout):
            data = bytes(await offer.download())
            if len(data) > cap:
                return replace(base, status="too_large", size=len(data), note="over the size limit")
            text = (await transcribe(data, _file_name(offer), offer.mime)).strip()
    except Exception as exc:  # the platform's errors, the endpoint's, a timeout
        log.warning("voice note not transcribed; stored as a placeholder", kind=offer.kind,
                    error=describe(exc))
        log.debug("voice note failure", exc_info=True)  # the platform's or endpoint's refusal is expected
        return replace(base, status="failed", note="it could not be transcribed")
    marker = label(Media(offer.kind, "kept", duration=offer.duration,
                         name=offer.name if offer.kind == "audio" else None))
    return f"{marker} {text}" if text else f"{marker} (nothing said)"


def _file_name(offer: Offer) -> str:
    """A name whose extension tells the endpoint the format (whisper servers go by it)."""
    if offer.name and "." in offer.name:
        return offer.name
    mime = (offer.mime or "").split(";")[0].strip().lower()
    return f"{offer.kind}{_EXTENSIONS.get(mime, '.ogg')}"


def with_transcript(text: str, lines: Sequence[str]) -> str:
    """The message text with the transcripts first (a caption after them)."""
    return "\n".join([*lines, text] if text.strip() else lines)
