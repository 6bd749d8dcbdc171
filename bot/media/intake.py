"""Taking in a picture or file a platform offers: caps first, then the download, then keeping it.

The channels describe what a message carries (`Offer`, with a download function from their own
library); this decides, the same way for every platform, what is opened, refused or noted. It
never raises: whatever goes wrong becomes a `Media` record with a note, so the message itself is
always stored (the durable intake's promise) and the model is told what it cannot see.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

import structlog

from bot.config import MediaConfig
from bot.core.errors import describe
from bot.core.media import IMAGE_TYPES, PDF, PDF_MAX_PAGES, Media, is_text, pdf_pages, size_text, sniff

log = structlog.get_logger("switchboard.media")

Download = Callable[[], Awaitable[bytes]]
Keep = Callable[[bytes], Awaitable[str]]

# A download that takes longer than this is given up (the message is stored with a note).
DOWNLOAD_TIMEOUT = 60.0
# Documents read as text whatever type the platform gives them (often application/octet-stream).
TEXT_EXTENSIONS = frozenset((
    ".txt", ".md", ".markdown", ".rst", ".csv", ".tsv", ".log", ".json", ".jsonl", ".yaml", ".yml",
    ".toml", ".ini", ".cfg", ".conf", ".xml", ".html", ".htm", ".css", ".py", ".pyi", ".js", ".mjs",
    ".ts", ".tsx", ".jsx", ".java", ".kt", ".c", ".h", ".cc", ".cpp", ".hpp", ".cs", ".go", ".rs",
    ".rb", ".php", ".swift", ".scala", ".sh", ".bash", ".zsh", ".fish", ".ps1", ".sql", ".lua",
    ".pl", ".r", ".dart", ".ex", ".exs", ".erl", ".hs", ".ml", ".clj", ".vue", ".svelte", ".tex",
    ".diff", ".patch", ".dockerfile", ".env", ".gradle", ".proto", ".graphql",
))
TEXT_TYPES = frozenset(("application/json", "application/xml", "application/x-yaml", "application/yaml",
                        "application/toml", "application/javascript", "application/x-sh",
                        "application/sql", "application/x-python"))
_IMAGE_EXTENSIONS = {".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png",
                     ".gif": "image/gif", ".webp": "image/webp"}


@dataclass(frozen=True, slots=True)
class Offer:
    """A file a message carries, as its platform describes it, and how to fetch it."""

    kind: str  # "photo", "document", or "voice" / "audio" (taken by `bot.models.voice`)
    download: Download
    size: int | None = None
    mime: str | None = None
    name: str | None = None
    width: int | None = None
    height: int | None = None
    duration: int | None = None  # seconds, for voice and audio


def category(offer: Offer) -> str | None:
    """"image", "pdf" or "text" by what the platform says; None for a file we do not open."""
    mime = (offer.mime or "").split(";")[0].strip().lower()
    extension = os.path.splitext(offer.name or "")[1].lower()
    generic = mime in ("", "application/octet-stream")  # the platform does not know: the name tells
    if mime in IMAGE_TYPES or (generic and (offer.kind == "photo" or extension in _IMAGE_EXTENSIONS)):
        return "image"
    if mime.startswith("image/"):
        return None  # HEIC, TIFF, SVG…: not a format the model reads
    if mime == PDF or extension == ".pdf":
        return "pdf"
    if mime.startswith("text/") or mime in TEXT_TYPES or extension in TEXT_EXTENSIONS:
        return "text"
    return None


def cap_of(kind: str, limits: MediaConfig) -> int:
    return {"image": limits.max_photo_bytes, "pdf": limits.max_file_bytes}.get(kind, limits.max_text_bytes)


async def take(offer: Offer, limits: MediaConfig, keep: Keep, *, timeout: float = DOWNLOAD_TIMEOUT) -> Media:
    """The record of one offered file: downloaded and kept when allowed and under its cap."""
    base = Media(offer.kind, "kept", size=offer.size, mime=offer.mime, name=offer.name,
                 width=offer.width, height=offer.height)
    kind = category(offer)
    if kind is None or (kind != "image" and kind not in limits.documents):
        return replace(base, status="unsupported", note="a file type I do not open")
    cap = cap_of(kind, limits)
    over = f"over the {size_text(cap)} limit"
    if offer.size is not None and offer.size > cap:
        return replace(base, status="too_large", note=over)
    try:
        async with asyncio.timeout(timeout):
            data = bytes(await offer.download())
    except Exception as exc:  # the platform's errors, timeouts, a dropped connection
        log.warning("file download failed; the message is stored with a note", kind=offer.kind,
                    error=describe(exc))
        # A platform's refusal is expected (a file gone, a timeout): the traceback at debug only.
        log.debug("file download failure", exc_info=True)
        return replace(base, status="failed", note="the download failed")
    if len(data) > cap:
        return replace(base, status="too_large", size=len(data), note=over)
    base = replace(base, size=len(data))
    sniffed = sniff(data)
    if kind == "image":
        if sniffed not in IMAGE_TYPES:
            return replace(base, status="failed", note="not a picture format I can read")
        base = replace(base, mime=sniffed)
    elif kind == "pdf":
        if sniffed != PDF:
            return replace(base, status="failed", note="not a readable PDF")
        base = replace(base, mime=PDF, pages=pdf_pages(data))
        if (base.pages or 0) > PDF_MAX_PAGES:
            return replace(base, status="too_large", note=f"over the {PDF_MAX_PAGES}-page limit")
    else:
        if not is_text(data):
            return replace(base, status="failed", note="not UTF-8 text")
        base = replace(base, mime="text/plain")
    try:
        return replace(base, sha256=await keep(data))
    except Exception as exc:  # a full disk: the message is still worth storing
        log.error("file not kept; the message is stored with a note", error=describe(exc), exc_info=True)
        return replace(base, status="failed", note="it could not be saved")


async def take_all(
    offers: Sequence[Offer | Media], limits: MediaConfig, keep: Keep, *, timeout: float = DOWNLOAD_TIMEOUT
) -> tuple[Media, ...]:
    """Every offer taken in order; placeholders (already `Media`) pass through."""
    return tuple([item if isinstance(item, Media) else await take(item, limits, keep, timeout=timeout)
                  for item in offers])


def worth_a_turn(text: str, media: Sequence[Media]) -> bool:
    """Whether the model has something to answer: words, or a file it can see (or should say it
    could not open). A lone sticker or voice note gets the notice instead."""
    return bool(text.strip()) or any(m.status in ("kept", "failed") for m in media)


_UNSUPPORTED_WORDS = {"sticker": "stickers", "voice": "voice messages", "video_note": "video messages",
                      "video": "videos", "audio": "audio files", "animation": "GIFs",
                      "location": "locations", "venue": "locations", "contact": "contacts",
                      "poll": "polls", "dice": "dice"}


def notice(media: Sequence[Media]) -> str | None:
    """The one short answer the sender gets for what was not opened; None when all was."""
    for m in media:
        if m.status == "too_large":
            what = "picture" if m.kind == "photo" else "file"
            why = ", ".join(filter(None, [size_text(m.size) if m.size else None, m.note]))
            return f"Sorry, that {what} is too big for me ({why}), so I haven't opened it."
    for m in media:
        if m.status == "unsupported":
            if m.kind in ("document", "photo"):
                return ("I can't open that type of file; I read pictures (JPEG, PNG, GIF, WebP), PDFs "
                        "and text or code files.")
            words = _UNSUPPORTED_WORDS.get(m.kind, "that kind of message")
            return f"I can't take {words} yet; send me text, a picture or a file."
    return None
