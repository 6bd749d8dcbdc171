"""Voice notes end to end: with a `transcribe` role, Telegram and Discord voice messages are
downloaded through the platform's library, transcribed by an OpenAI-compatible
/v1/audio/transcriptions (the stand-in, driven by the real `openai` SDK) and stored as the
message's text with a marker; the model answers the words."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from bot.config import Config, MediaConfig
from bot.daemon.assembly import Daemon, build_channels
from bot.media.intake import Offer
from bot.models.providers import build_brain
from bot.models.voice import hear
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.discord_api import DiscordStandIn, file
from bot.testing.openai_api import Error, OpenAIStandIn, Transcript
from bot.testing.telegram_api import TelegramStandIn, private_chat, user
from tests.harness import API_KEY, config_data, reply_requests, running
from tests.test_discord import ALICE, ALICE_ID, DM_ALICE, GUILD, make_channel, settled, texts_to
from tests.test_telegram import texts_to as telegram_texts

ADA = user(42, "Ada", "ada")
OGG = b"OggS" + b"\x00voice" * 300


@pytest.fixture
async def whisper() -> AsyncIterator[OpenAIStandIn]:
    async with OpenAIStandIn() as standin:
        yield standin


def _transcribing(whisper: OpenAIStandIn) -> dict[str, Any]:
    return {"providers": {"whisper": {"kind": "openai", "base_url": whisper.base_url, "timeout": 2.0,
                                      "max_retries": 1}},
            "roles": {"transcribe": "whisper:whisper-1"}}


@asynccontextmanager
async def daemon_of(config: Config, channel: Any) -> AsyncIterator[Daemon]:
    brain, _ = build_brain(config)
    async with running(config, [channel], brain) as daemon:  # type: ignore[arg-type]
        await asyncio.wait_for(channel.ready.wait(), 5)
        yield daemon


async def test_a_telegram_voice_note_is_stored_as_its_words_and_answered(
    tg: TelegramStandIn, api: AnthropicStandIn, whisper: OpenAIStandIn,
    make_config: Callable[[dict[str, Any]], Config], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ada's voice note is fetched (getFile, file URL), transcribed, stored as "[voice 0:42] …"
    and answered by the model from those words; she gets no "can't take voice" notice."""
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    whisper.script(Transcript("turn the lights off please"))
    config = make_config({**config_data(api, channels={"telegram": {
        "enabled": True, "base_url": tg.base_url, "allow_from": [42]}}), **_transcribing(whisper)})
    voice = tg.add_file(OGG, "voice", ".oga") | {"duration": 42, "mime_type": "audio/ogg"}
    (channel,) = build_channels(config, console=False)
    async with daemon_of(config, channel):
        tg.push_message(private_chat(ADA), ADA, voice=voice)
        await tg.wait_for(lambda: telegram_texts(tg, 42))
    (transcription,) = whisper.requests
    assert transcription.files["file"] == OGG and transcription.body["model"] == "whisper-1"
    (request,) = reply_requests(api)
    assert "[voice 0:42] turn the lights off please" in str(request.messages[-1]["content"])
    assert "can't take voice" not in " ".join(telegram_texts(tg, 42))
    async with Store.open(config.database_path()) as store:
        (stored, _reply) = await store.history("agent:main:telegram:direct:42", 5)
    assert stored.text == "[voice 0:42] turn the lights off please" and stored.media == ()


async def test_a_discord_voice_message_is_transcribed_and_answered(
    dc: DiscordStandIn, api: AnthropicStandIn, whisper: OpenAIStandIn,
    make_config: Callable[[dict[str, Any]], Config], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Discord voice message is read from the CDN, transcribed and answered as its words."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("DISCORD_BOT_TOKEN", dc.token)
    whisper.script(Transcript("what is on my list"))
    section = {"enabled": True, "allow_from": [ALICE_ID], "guilds": {str(GUILD): {}}}
    config = make_config({**config_data(api, channels={"discord": section}), **_transcribing(whisper)})
    voice = file("voice-message.ogg", OGG, "audio/ogg", duration_secs=7.9,
                 waveform=base64.b64encode(b"\x00" * 32).decode(), flags=8192)
    async with daemon_of(config, make_channel(config)) as daemon:
        dc.message_create(DM_ALICE, ALICE, "", attachments=[voice])
        await dc.wait_for(lambda: texts_to(dc, DM_ALICE))
        await settled(dc, daemon)
    assert len(dc.cdn_requests) == 1 and whisper.requests[0].files["file"] == OGG
    (request,) = reply_requests(api)
    assert "[voice 0:07] what is on my list" in str(request.messages[-1]["content"])
    async with Store.open(config.database_path()) as store:
        stored = [m for m in await store.history(f"agent:main:discord:direct:{ALICE_ID}", 5)
                  if m.role == "user"]
    assert [m.text for m in stored] == ["[voice 0:07] what is on my list"]


def _voice(data: bytes = OGG, size: int | None = None) -> Offer:
    async def download() -> bytes:
        return data

    return Offer("voice", download, size=len(data) if size is None else size, mime="audio/ogg",
                 duration=42)


async def test_without_a_transcriber_a_voice_note_stays_a_placeholder() -> None:
    """No transcribe role: the placeholder as before (the sender gets the one clear answer)."""
    items, heard = await hear([_voice()], MediaConfig(), None)
    (media,) = items
    assert heard == [] and (media.kind, media.status, media.duration) == ("voice", "unsupported", 42)


async def test_a_failed_transcription_keeps_the_message_with_a_note(whisper: OpenAIStandIn) -> None:
    """The endpoint failing costs the words, never the message: a placeholder says what happened."""
    from bot.config.provider_sections import ProviderConfig
    from bot.models.openai_brain import OpenAIBrain

    brain = OpenAIBrain("whisper", ProviderConfig(kind="openai", base_url=whisper.base_url,
                                                  max_retries=0, timeout=2.0), "")
    whisper.script(Error(500, "model crashed"))

    async def transcribe(data: bytes, name: str, mime: str | None) -> str:
        return await brain.transcribe(data, name, mime, "whisper-1")

    try:
        items, heard = await hear([_voice()], MediaConfig(), transcribe)
    finally:
        await brain.aclose()
    (media,) = items
    assert heard == [] and media.status == "failed" and "transcribed" in (media.note or "")


async def test_a_voice_note_over_the_cap_is_not_downloaded() -> None:
    """A voice note whose stated size is over the media cap is refused before any download."""
    called: list[bytes] = []

    async def transcribe(data: bytes, name: str, mime: str | None) -> str:
        called.append(data)
        return "never"

    items, heard = await hear([_voice(size=50_000_000)], MediaConfig(max_file_bytes=1000), transcribe)
    (media,) = items
    assert media.status == "too_large" and called == [] and heard == []
