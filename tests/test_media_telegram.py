"""Pictures and files on Telegram, end to end: the real python-telegram-bot fetches them (getFile, then
the file URL) from the Bot API stand-in, the daemon keeps them by hash, and the model request (the
Anthropic stand-in records it) carries them as content blocks while they are recent."""

from __future__ import annotations

import base64
import json
import logging
import re
import stat
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from bot.config import Config
from bot.media.files import files_dir
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest, Response, Text
from bot.testing.telegram_api import TelegramStandIn, group_chat, private_chat, user
from tests.harness import FAST, config_data, reply_requests, router_of
from tests.test_telegram import settled, telegram_daemon, texts_to

ADA = user(42, "Ada", "ada")
GROUP = group_chat(-100123, "Friends", supergroup=True)
DM = "agent:main:telegram:direct:42"
# Bytes that are what they claim to be (the API stand-in checks an image's magic against its type).
SMALL_JPEG = b"\xff\xd8\xff\xe0" + b"s" * 200 + b"\xff\xd9"
LARGE_JPEG = b"\xff\xd8\xff\xe0" + b"L" * 3000 + b"\xff\xd9"
PDF = (b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
       b"2 0 obj << /Type /Pages /Kids [3 0 R 4 0 R] /Count 2 >> endobj\n"
       b"3 0 obj << /Type /Page /Parent 2 0 R >> endobj\n4 0 obj << /Type /Page /Parent 2 0 R >> endobj\n"
       b"trailer << /Root 1 0 R >>\n%%EOF\n")
CODE = "def add(a, b):\n    return a + b\n"



@pytest.fixture
def media_config(
    api: AnthropicStandIn, tg: TelegramStandIn, make_config: Callable[[dict[str, Any]], Config],
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., Config]:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)

    def make(**sections: Any) -> Config:
        telegram = {"enabled": True, "base_url": tg.base_url, "allow_from": [42], "groups": [-100123],
                    **sections.pop("telegram", {})}
        # Two recent messages: a picture leaves the window after one more exchange.
        conversation = {"always_include_recent": 2, "skip_selection_threshold": 0,
                        **sections.pop("conversation", {})}
        return make_config(config_data(api, channels={"telegram": telegram}, conversation=conversation,
                                       **sections))

    return make


def pick_everything(request: RecordedRequest) -> Response:
    """Triage keeps every older turn (so an old picture is in context, as a placeholder); the reply
    model echoes the last line it was sent."""
    text = "\n".join(str(m["content"]) for m in request.messages)
    if request.model == FAST:
        found = re.search(r"Which of \[1\]\.\.\[(\d+)\]", text)
        every = list(range(1, int(found.group(1)) + 1)) if found else []
        return Text(json.dumps({"relevant": every}))
    content = request.messages[-1]["content"]
    last = content if isinstance(content, str) else content[0]["text"]
    return Text(f"re: {last.strip().splitlines()[-1]}")


def blocks(request: RecordedRequest, kind: str) -> list[dict[str, Any]]:
    """Every content block of `kind` anywhere in a request's turns."""
    return [b for m in request.messages if isinstance(m["content"], list) for b in m["content"]
            if b["type"] == kind]


def last_turn_text(request: RecordedRequest) -> str:
    content = request.messages[-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b["text"] for b in content if b["type"] == "text")


async def exchange(tg: TelegramStandIn, count: int, **message: Any) -> dict[str, Any]:
    """Send Ada's next message and wait for the bot's answer (its `count`-th message to her)."""
    pushed = tg.push_message(private_chat(ADA), ADA, **message)
    await tg.wait_for(lambda: len(texts_to(tg, 42)) >= count)
    return pushed


async def history(config: Config) -> list[Any]:
    async with Store.open(config.database_path()) as store:
        return await store.history(DM, 50)


async def test_a_photo_is_an_image_block_while_recent_and_a_placeholder_once_older(
    tg: TelegramStandIn, api: AnthropicStandIn, media_config: Callable[..., Config]
) -> None:
    """The largest photo size is fetched and sent as an image with its caption; once the photo has
    left the recent window the history shows "[photo: 1280×960]" and no image is sent."""
    api.default = pick_everything
    config = media_config()
    photo = tg.photo_sizes((90, 68, SMALL_JPEG), (1280, 960, LARGE_JPEG))
    async with telegram_daemon(config):
        await exchange(tg, 1, caption="receipt", photo=photo)
        await exchange(tg, 2, text="how much was it?")
        await exchange(tg, 3, text="and the tip?")

    first, second, third = reply_requests(api)
    (image,) = blocks(first, "image")
    assert image["source"] == {"type": "base64", "media_type": "image/jpeg",
                               "data": base64.b64encode(LARGE_JPEG).decode()}
    assert last_turn_text(first).endswith("[photo: 1280×960]\nreceipt")
    assert len(blocks(second, "image")) == 1  # still one of the two newest messages
    assert blocks(third, "image") == []
    assert all(isinstance(m["content"], str) for m in third.messages)
    assert "[photo: 1280×960]\nreceipt" in third.messages[0]["content"]
    assert tg.downloads == [tg.files[photo[1]["file_id"]][1]]  # only the largest size was fetched
    (stored, *_) = await history(config)
    assert stored.text == "receipt" and stored.media[0].width == 1280


async def test_pdf_and_code_files_are_document_blocks(
    tg: TelegramStandIn, api: AnthropicStandIn, media_config: Callable[..., Config]
) -> None:
    """A PDF goes to the model as a base64 document with its page count in the placeholder, a code
    file as a text document with its name as the title."""
    config = media_config()
    async with telegram_daemon(config):
        await exchange(tg, 1, caption="summarise", document=tg.document(PDF, "report.pdf", "application/pdf"))
        await exchange(tg, 2, document=tg.document(CODE.encode(), "add.py", "text/x-python"))

    pdf_turn, code_turn = reply_requests(api)
    (pdf,) = blocks(pdf_turn, "document")
    assert pdf == {"type": "document", "title": "report.pdf",
                   "source": {"type": "base64", "media_type": "application/pdf",
                              "data": base64.b64encode(PDF).decode()}}
    assert f"[file: report.pdf, 2 pages, {len(PDF)} B]\nsummarise" in last_turn_text(pdf_turn)
    code = blocks(code_turn, "document")[-1]
    assert code == {"type": "document", "title": "add.py",
                    "source": {"type": "text", "media_type": "text/plain", "data": CODE}}


async def test_an_oversize_file_is_refused_politely_without_a_download_and_kept_as_a_placeholder(
    tg: TelegramStandIn, api: AnthropicStandIn, media_config: Callable[..., Config]
) -> None:
    """A photo over the cap is refused in the chat, naming the cap, before any download; the message
    is stored as a placeholder, and a later question sees it."""
    config = media_config(media={"max_photo_bytes": 1000})
    big = tg.photo_sizes((1280, 960, LARGE_JPEG))
    async with telegram_daemon(config) as daemon:
        pushed = tg.push_message(private_chat(ADA), ADA, photo=big)
        await settled(tg, daemon, pushed)
        await exchange(tg, 2, text="did you get it?")

    refusal, answer = texts_to(tg, 42)
    assert refusal == ("Sorry, that picture is too big for me (3 KB, over the 1 KB limit), "
                       "so I haven't opened it.")
    assert answer == "re: did you get it?"
    assert tg.calls_of("getFile") == [] and tg.downloads == []
    (request,) = reply_requests(api)
    assert "[photo: 1280×960 — not opened: over the 1 KB limit]" in request.messages[0]["content"]
    photo_message = (await history(config))[0]
    assert (photo_message.media[0].status, photo_message.media[0].sha256) == ("too_large", None)


async def test_a_failed_download_keeps_the_message_with_a_note(
    tg: TelegramStandIn, api: AnthropicStandIn, media_config: Callable[..., Config]
) -> None:
    """When the file server fails, the message is still stored and answered, and the model is told
    the picture could not be opened; the update is confirmed once, nothing crashes."""
    config = media_config()
    tg.fail_next("file", status=500)
    async with telegram_daemon(config):
        pushed = await exchange(tg, 1, caption="look", photo=tg.photo_sizes((1280, 960, LARGE_JPEG)))
        await tg.wait_for(lambda: tg.confirmed_offset > pushed["update_id"])

    (request,) = reply_requests(api)
    assert last_turn_text(request).endswith(
        "[photo: 1280×960 — could not be opened: the download failed]\nlook")
    assert blocks(request, "image") == []
    (stored, _) = await history(config)
    assert stored.media[0].status == "failed"


async def test_stickers_and_voice_get_one_short_answer_in_private_and_are_stored(
    tg: TelegramStandIn, api: AnthropicStandIn, media_config: Callable[..., Config]
) -> None:
    """A sticker or voice note in a DM gets a short answer and no model call; in a group it is kept
    silently; both are stored as placeholders the next turn reads."""
    config = media_config(telegram={"group_settings": {"-100123": {"require_mention": False}}})
    async with telegram_daemon(config) as daemon:
        tg.push_message(private_chat(ADA), ADA, sticker=True)
        tg.push_message(private_chat(ADA), ADA, voice=True)
        tg.push_message(GROUP, ADA, voice=True)
        last = tg.push_message(GROUP, ADA, "what did I say?")
        await tg.wait_for(lambda: texts_to(tg, -100123))
        await settled(tg, daemon, last)
        await router_of(daemon).idle()

    assert texts_to(tg, 42) == ["I can't take stickers yet; send me text, a picture or a file.",
                                "I can't take voice messages yet; send me text, a picture or a file."]
    (request,) = reply_requests(api)
    assert "[Ada]: [voice 0:42 — not viewable]" in request.messages[0]["content"]
    stored = await history(config)
    assert [m.media[0].kind for m in stored] == ["sticker", "voice"]
    assert stored[0].media[0].emoji == "🙂"


async def test_files_are_private_under_the_state_directory_and_kept_once(
    tg: TelegramStandIn, api: AnthropicStandIn, media_config: Callable[..., Config]
) -> None:
    """Kept files live in a 0700 folder beside the database, each 0600, one per content however
    often it is sent."""
    config = media_config()
    async with telegram_daemon(config):
        await exchange(tg, 1, photo=tg.photo_sizes((1280, 960, LARGE_JPEG)))
        await exchange(tg, 2, photo=tg.photo_sizes((1280, 960, LARGE_JPEG)))

    root = files_dir(config.database_path())
    assert root.parent == config.database_path().parent
    kept = [p for p in root.rglob("*") if p.is_file()]
    assert len(kept) == 1 and kept[0].read_bytes() == LARGE_JPEG
    assert stat.S_IMODE(kept[0].stat().st_mode) == 0o600
    assert {stat.S_IMODE(d.stat().st_mode) for d in (root, kept[0].parent)} == {0o700}
    first, second = [m for m in await history(config) if m.role == "user"]
    assert first.media[0].sha256 == second.media[0].sha256 == kept[0].name


async def test_a_file_gone_from_the_file_server_logs_one_warning_and_keeps_the_message(
    tg: TelegramStandIn, api: AnthropicStandIn, media_config: Callable[..., Config],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A download answered 404 with a page that is no JSON is one warning line without a traceback
    (python-telegram-bot logs nothing), and the message is stored and answered with a placeholder."""
    config = media_config()
    tg.answer_next("file", "<html><body><h1>404 Not Found</h1></body></html>", status=404)
    caplog.set_level(logging.WARNING)
    with capture_logs() as logs:
        async with telegram_daemon(config):
            pushed = await exchange(tg, 1, caption="look", photo=tg.photo_sizes((1280, 960, LARGE_JPEG)))
            await tg.wait_for(lambda: tg.confirmed_offset > pushed["update_id"])

    loud = [e for e in logs if e["log_level"] not in ("debug", "info")]
    assert [(e["event"], e["log_level"]) for e in loud] == [
        ("file download failed; the message is stored with a note", "warning")]
    assert "exc_info" not in loud[0] and "404" in loud[0]["error"]
    assert [(r.name, r.levelname, r.getMessage()[:60]) for r in caplog.records] == []
    (request,) = reply_requests(api)
    assert last_turn_text(request).endswith(
        "[photo: 1280×960 — could not be opened: the download failed]\nlook")
    (stored, _) = await history(config)
    assert stored.media[0].status == "failed"
