"""Pictures and files in messages: the stored record of one, its placeholder text, its token cost,
and the content blocks the model is sent for it.

A message keeps its caption as its text and a tuple of `Media` beside it. Only a kept file (a
photo, a PDF, a text or code file, downloaded within the caps) is ever sent as a block; everything
else (a sticker, a voice note, a file over the cap, a failed download) is a placeholder line the
model reads, so nothing a person sent is silently missing from the conversation.
"""

from __future__ import annotations

import base64
import json
import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

# kept: the file is on disk (`sha256`); unsupported: a kind we do not read (stickers, voice, video);
# too_large: over the cap, never downloaded; failed: the download or the file itself failed.
Status = Literal["kept", "unsupported", "too_large", "failed"]

IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
PDF = "application/pdf"
# Why a message is in the context, for which its pictures and files are sent in full: the
# recent window and the message replied to. Older or recalled messages show the placeholder.
FULL_MEDIA_REASONS = frozenset({"recent", "all", "reply_to"})

# Anthropic scales an image down until its long edge is at most 1568 px and it has at most about
# 1.15 megapixels, then counts width × height / 750 tokens (about 1600 at most).
_IMAGE_EDGE = 1568
_IMAGE_PIXELS = 1_150_000
_UNKNOWN_IMAGE_TOKENS = 1600
# A PDF is sent as the text of each page plus an image of it: 1,500-3,000 text tokens a page by
# Anthropic's guide and up to ~1,600 for the image. Counted per page, at the generous end.
PDF_PAGE_TOKENS = 3000
PDF_MAX_PAGES = 100  # the API's limit for one request
_PDF_BYTES_PER_PAGE = 50_000  # a guess at the pages of a PDF whose pages could not be counted
# A request may be at most 32 MB and base64 adds a third: files beyond this many bytes in one
# request (the oldest first) are sent as their placeholders.
MAX_INLINE_BYTES = 20_000_000


@dataclass(frozen=True, slots=True)
class Media:
    """One picture or file of a message, as stored: what it is, and where its bytes are (if kept)."""

    kind: str  # photo, document, sticker, voice, audio, video, video_note, animation, location, ...
    status: Status
    sha256: str | None = None
    mime: str | None = None
    size: int | None = None
    width: int | None = None
    height: int | None = None
    name: str | None = None
    duration: int | None = None  # seconds
    pages: int | None = None
    emoji: str | None = None
    # What the user was told (the cap) or what went wrong, in a few words.
    note: str | None = None

    @property
    def sendable(self) -> bool:
        """Whether the model can be shown the file itself (an image, a PDF, a text file)."""
        return self.status == "kept" and self.sha256 is not None and self.mime is not None and (
            self.mime in IMAGE_TYPES or self.mime == PDF or self.mime.startswith("text/"))

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Any) -> Media:
        """A stored record; ValueError when it is not one."""
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str) or data.get("status") not in (
            "kept", "unsupported", "too_large", "failed"
        ):
            raise ValueError("a media record needs a kind and a known status")
        fields = {k: v for k, v in data.items() if k in _FIELDS}
        for name, value in fields.items():
            wanted = int if name in _NUMBERS else str
            if not isinstance(value, wanted) or isinstance(value, bool):
                raise ValueError(f"media field {name} is not a {wanted.__name__}")
        return cls(**fields)


_FIELDS = frozenset(Media.__dataclass_fields__)
_NUMBERS = frozenset(("size", "width", "height", "duration", "pages"))


def encode(media: tuple[Media, ...]) -> str | None:
    """The JSON kept in the message row (None: a message without pictures or files)."""
    return json.dumps([m.to_json() for m in media], ensure_ascii=False) if media else None


def decode(text: str | None) -> tuple[Media, ...]:
    if not text:
        return ()
    items = json.loads(text)
    if not isinstance(items, list):
        raise ValueError("media is not a JSON list")
    return tuple(Media.from_json(item) for item in items)


# -- placeholders ---------------------------------------------------------------------------------


def label(media: Media) -> str:
    """What the history shows for it: "[photo: 1280×960]", "[file: report.pdf, 3 pages, 120 KB]",
    "[sticker 😀]", "[voice 0:42]", with why it could not be opened when it could not."""
    if media.kind == "photo":
        text = "photo" + (f": {media.width}×{media.height}" if media.width and media.height else "")
    elif media.kind == "document":
        details = [media.name or "unnamed"]
        if media.pages:
            details.append(f"{media.pages} page" + ("s" if media.pages != 1 else ""))
        if media.size is not None:
            details.append(size_text(media.size))
        text = "file: " + ", ".join(details)
    elif media.kind == "sticker":
        text = "sticker" + (f" {media.emoji}" if media.emoji else f" '{media.name}'" if media.name else "")
    else:
        text = media.kind.replace("_", " ")
        if media.duration is not None:
            text += f" {media.duration // 60}:{media.duration % 60:02d}"
        if media.name:
            text += f", '{media.name}'"
    if media.status == "too_large":
        text += f" — not opened: {media.note or 'over the size limit'}"
    elif media.status == "failed":
        text += f" — could not be opened: {media.note or 'the download failed'}"
    elif media.status == "unsupported":
        text += " — not viewable"
    return f"[{text}]"


def size_text(size: int) -> str:
    """A byte count as people read it: 900 B, 120 KB, 4.5 MB."""
    if size < 1000:
        return f"{size} B"
    if size < 1_000_000:
        return f"{size / 1000:.0f} KB"
    return f"{size / 1_000_000:.1f} MB".replace(".0 MB", " MB")


def labels(media: tuple[Media, ...]) -> str:
    return " ".join(label(m) for m in media)


def with_labels(text: str, media: tuple[Media, ...]) -> str:
    """A message's text as people and models read it: its placeholders on a line before it."""
    if not media:
        return text
    return labels(media) + ("\n" + text if text else "")


# -- token estimates --------------------------------------------------------------------------------


def image_tokens(width: int | None, height: int | None) -> int:
    """Anthropic's estimate for one image: width × height / 750 after its own downscaling."""
    if not width or not height:
        return _UNKNOWN_IMAGE_TOKENS
    scale = min(1.0, _IMAGE_EDGE / max(width, height), math.sqrt(_IMAGE_PIXELS / (width * height)))
    return max(1, math.ceil(width * scale * height * scale / 750))


def block_tokens(media: Media) -> int:
    """What sending the file itself costs (images by their pixels, PDFs per page, text per byte)."""
    if not media.sendable:
        return 0
    if media.mime in IMAGE_TYPES:
        return image_tokens(media.width, media.height)
    if media.mime == PDF:
        pages = media.pages or max(1, (media.size or 0) // _PDF_BYTES_PER_PAGE + 1)
        return pages * PDF_PAGE_TOKENS
    return ((media.size or 0) + 3) // 4


def media_tokens(media: tuple[Media, ...], *, full: bool) -> int:
    """The placeholders' cost, plus the files' when they are sent in full."""
    tokens = sum((len(label(m)) + 4) // 4 for m in media)
    return tokens + (sum(block_tokens(m) for m in media) if full else 0)


# -- content blocks ---------------------------------------------------------------------------------


def content_block(media: Media, data: bytes) -> dict[str, Any] | None:
    """The Messages API block for a kept file's bytes; None when it cannot be sent as one."""
    if not media.sendable or media.mime is None:
        return None
    if media.mime in IMAGE_TYPES:
        return {"type": "image", "source": {"type": "base64", "media_type": media.mime,
                                            "data": base64.b64encode(data).decode("ascii")}}
    title = {"title": media.name} if media.name else {}
    if media.mime == PDF:
        return {"type": "document", "source": {"type": "base64", "media_type": PDF,
                                               "data": base64.b64encode(data).decode("ascii")}, **title}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": text},
            **title}


# -- what a downloaded file is ------------------------------------------------------------------------

_MAGIC = ((b"\xff\xd8\xff", "image/jpeg"), (b"\x89PNG\r\n\x1a\n", "image/png"), (b"GIF87a", "image/gif"),
          (b"GIF89a", "image/gif"), (b"%PDF-", PDF))
_PDF_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")


def sniff(data: bytes) -> str | None:
    """The type the bytes really are (the API refuses an image whose declared type is wrong)."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def pdf_pages(data: bytes) -> int | None:
    """Pages of a PDF, counted from its page objects (no parser: an estimate for the budget)."""
    count = len(_PDF_PAGE.findall(data))
    return count or None


def is_text(data: bytes) -> bool:
    """UTF-8 without NUL bytes: what a text or code file is."""
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
