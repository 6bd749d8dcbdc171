"""Discord attachments end to end: discord.py downloads them (`Attachment.read()`, from the CDN-like
URL the gateway stand-in hands out) and the model request carries them as content blocks."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from bot.config import Config
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest
from bot.testing.discord_api import DiscordStandIn, file
from tests.harness import reply_requests
from tests.test_discord import (
    ALICE,
    ALICE_ID,
    DM_ALICE,
    discord_daemon,
    settled,
    texts_to,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"p" * 500
NOTES = "shopping: eggs, flour\n"
DM = f"agent:main:discord:direct:{ALICE_ID}"




def blocks(request: RecordedRequest, kind: str) -> list[dict[str, Any]]:
    return [b for m in request.messages if isinstance(m["content"], list) for b in m["content"]
            if b["type"] == kind]


async def stored_media(config: Config) -> list[Any]:
    async with Store.open(config.database_path()) as store:
        return [m.media for m in await store.history(DM, 20) if m.role == "user"]


async def test_a_picture_and_a_text_file_reach_the_model_as_blocks(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """Both attachments of a DM are downloaded from the CDN and sent with the text: the picture as an
    image block (its real type, PNG), the text file as a text document."""
    config = discord_config()
    async with discord_daemon(config):
        dc.message_create(DM_ALICE, ALICE, "what should I buy?", attachments=[
            file("fridge.png", PNG, "image/png", width=800, height=600),
            file("notes.txt", NOTES.encode(), "text/plain; charset=utf-8"),
        ])
        await dc.wait_for(lambda: texts_to(dc, DM_ALICE))

    (request,) = reply_requests(api)
    (image,) = blocks(request, "image")
    assert image["source"]["media_type"] == "image/png"
    assert base64.b64decode(image["source"]["data"]) == PNG
    (notes,) = blocks(request, "document")
    assert notes["source"] == {"type": "text", "media_type": "text/plain", "data": NOTES}
    text = request.messages[-1]["content"][0]["text"]
    assert text.endswith("[photo: 800×600] [file: notes.txt, 22 B]\nwhat should I buy?")
    assert len(dc.cdn_requests) == 2


async def test_an_oversize_attachment_is_refused_without_a_download(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """A file over the cap, by the size Discord states, is refused in the DM naming the limit and
    never fetched; the message is stored with its placeholder."""
    config = discord_config()
    config = config.model_copy(update={"media": config.media.model_copy(update={"max_file_bytes": 100})})
    pdf = b"%PDF-1.4\n" + b"0" * 400
    async with discord_daemon(config) as daemon:
        dc.message_create(DM_ALICE, ALICE, "", attachments=[file("big.pdf", pdf, "application/pdf")])
        await dc.wait_for(lambda: texts_to(dc, DM_ALICE))
        await settled(dc, daemon)

    assert texts_to(dc, DM_ALICE) == [
        "Sorry, that file is too big for me (409 B, over the 100 B limit), so I haven't opened it."]
    assert dc.cdn_requests == [] and api.count == 0
    ((media,),) = await stored_media(config)
    assert (media.kind, media.status, media.name) == ("document", "too_large", "big.pdf")


async def test_a_cdn_failure_keeps_the_message_and_tells_the_model(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """When the CDN answers 500 the message is still stored and answered; the model reads that the
    picture could not be opened."""
    config = discord_config()
    dc.cdn_failures = 1
    async with discord_daemon(config):
        dc.message_create(DM_ALICE, ALICE, "see?", attachments=[file("a.png", PNG, "image/png")])
        await dc.wait_for(lambda: texts_to(dc, DM_ALICE))

    (request,) = reply_requests(api)
    assert request.messages[-1]["content"].endswith(
        "[photo — could not be opened: the download failed]\nsee?")
    ((media,),) = await stored_media(config)
    assert media.status == "failed"


async def test_a_voice_message_gets_the_short_answer(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """A Discord voice message (an ogg attachment with a duration and waveform) is noted, not fetched."""
    config = discord_config()
    voice = file("voice-message.ogg", b"OggS" + b"v" * 100, "audio/ogg", duration_secs=42.3,
                 waveform=base64.b64encode(b"\x00" * 32).decode(), flags=8192)
    async with discord_daemon(config) as daemon:
        dc.message_create(DM_ALICE, ALICE, "", attachments=[voice])
        await dc.wait_for(lambda: texts_to(dc, DM_ALICE))
        await settled(dc, daemon)

    assert texts_to(dc, DM_ALICE) == ["I can't take voice messages yet; send me text, a picture or a file."]
    assert dc.cdn_requests == [] and api.count == 0
    ((media,),) = await stored_media(config)
    assert (media.kind, media.duration) == ("voice", 42)
