"""Pictures and files in the core: placeholders and token estimates, the turns sent to the model
(text-only turns unchanged), the budget, replay, the reply-to target, and `db prune` of kept files."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.config import Config, MediaConfig, parse_config
from bot.context.prompt import conversation_turns, media_hashes
from bot.context.replay import replay
from bot.core.errors import ConfigError
from bot.core.media import Media, block_tokens, image_tokens, label
from bot.core.messages import StoredMessage
from bot.media.files import MediaFiles, files_dir
from bot.media.intake import Offer, category, take
from bot.models.brain import AnthropicBrain
from bot.ranking.budget import message_cost
from bot.ranking.stages import Context, ContextEntry, TriageReport
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, Error
from bot.testing.fake_channel import FakeChannel
from tests.harness import API_KEY, MODEL, config_data, daemon_with, reply_requests, say, turn
from tests.test_cli import switchboard

JPEG = b"\xff\xd8\xff\xe0" + b"j" * 100
PHOTO = Media("photo", "kept", sha256="a" * 64, mime="image/jpeg", size=104, width=1280, height=960)


def stored(id: int, text: str, *media: Media, role: str = "user") -> StoredMessage:
    return StoredMessage(id, "agent:main:fake:direct:42", role, "interactive", text,  # type: ignore[arg-type]
                         1_700_000_000.0 + id, "42", "Ada", media=media)


# -- placeholders and estimates ---------------------------------------------------------------------


def test_placeholders_say_what_was_sent_and_why_it_is_not_shown() -> None:
    """Each kind reads as a short bracketed line, with the cap or the failure when not opened."""
    assert label(PHOTO) == "[photo: 1280×960]"
    pdf = Media("document", "kept", mime="application/pdf", size=120_000, name="report.pdf", pages=3)
    assert label(pdf) == "[file: report.pdf, 3 pages, 120 KB]"
    assert label(Media("sticker", "unsupported", emoji="😀")) == "[sticker 😀 — not viewable]"
    assert label(Media("voice", "unsupported", duration=42)) == "[voice 0:42 — not viewable]"
    assert label(Media("video", "unsupported", duration=72)) == "[video 1:12 — not viewable]"
    big = Media("document", "too_large", size=30_000_000, name="scan.pdf", note="over the 10 MB limit")
    assert label(big) == "[file: scan.pdf, 30 MB — not opened: over the 10 MB limit]"


def test_token_estimates_follow_anthropics_image_formula_and_count_pdfs_per_page() -> None:
    """Images cost width × height / 750 after scaling to 1568 px and ~1.15 MP; PDFs 3000 a page;
    text files a token per four bytes."""
    assert image_tokens(200, 150) == 40
    assert image_tokens(1000, 1000) == 1334
    assert image_tokens(4000, 3000) == image_tokens(1238, 929) <= 1600
    assert block_tokens(Media("document", "kept", sha256="b" * 64, mime="application/pdf", pages=2)) == 6000
    assert block_tokens(Media("document", "kept", sha256="c" * 64, mime="text/plain", size=4000)) == 1000
    assert block_tokens(Media("voice", "unsupported")) == 0


def test_the_budget_counts_a_picture_in_full_only_where_it_is_sent() -> None:
    """A message's picture costs its image tokens when sent in full, its placeholder otherwise."""
    message = stored(1, "receipt", PHOTO)
    full, placeholder, bare = (message_cost(message, full_media=True), message_cost(message),
                               message_cost(stored(1, "receipt")))
    assert full - placeholder >= 1.2 * image_tokens(1280, 960) - 1
    assert 0 < placeholder - bare < 10


# -- the turns sent --------------------------------------------------------------------------------------


def test_text_only_turns_are_plain_strings_and_pictures_become_blocks_after_their_text() -> None:
    """Without pictures every turn is the same string as before; a recent picture is an image block
    right after its message's text, an older one only its placeholder."""
    old, reply = stored(1, "old one", PHOTO), stored(2, "nice", role="assistant")
    recent, request = stored(3, "", PHOTO), stored(4, "which is better?")
    entries = [ContextEntry(old, "triaged"), ContextEntry(reply, "triaged"), ContextEntry(recent, "recent")]
    ctx = Context(entries, [], None, TriageReport("skipped"), None)
    files = {PHOTO.sha256 or "": JPEG}
    assert media_hashes(ctx, request) == [PHOTO.sha256]
    turns = conversation_turns(ctx, request, group=False, files=files)
    plain = conversation_turns(dataclasses.replace(ctx, entries=ctx.entries[:2]), request, group=False)
    assert all(isinstance(t["content"], str) for t in plain)
    assert plain[0]["content"].endswith("[photo: 1280×960]\nold one")
    first, second, last = turns
    assert first == plain[0] and second == plain[1]
    text, image, question = last["content"]
    assert text["text"].endswith("[photo: 1280×960]") and image["type"] == "image"
    assert question["type"] == "text" and question["text"].endswith("which is better?")


# -- through the daemon -------------------------------------------------------------------------------------


@pytest.fixture
def channel() -> FakeChannel:
    return FakeChannel()


async def photo_message(channel: FakeChannel, config: Config, text: str, message_id: str) -> Any:
    sha = await MediaFiles(files_dir(config.database_path())).keep(JPEG)
    media = (dataclasses.replace(PHOTO, sha256=sha),)
    return dataclasses.replace(channel.message(text, message_id=message_id), media=media)


async def test_a_reply_to_an_old_picture_sends_it_again_and_replay_matches(
    api: AnthropicStandIn, channel: FakeChannel, make_config: Callable[[dict[str, Any]], Config]
) -> None:
    """A picture that left the recent window is a placeholder, but replying to it sends it in full
    again; the budget counted it and `replay` rebuilds the same contexts."""
    config = make_config(config_data(api, conversation={"always_include_recent": 2, "use_selection": False,
                                                        "lookback_count": 2}))
    async with daemon_with(config, channel) as daemon:
        await turn(daemon, channel, await photo_message(channel, config, "my cat", "p1"))
        await say(daemon, channel, "second")
        await say(daemon, channel, "third")
        await say(daemon, channel, "is it cute?", reply_to="p1")

    requests = reply_requests(api)
    images = [sum(isinstance(m["content"], list) for m in r.messages) for r in requests]
    assert images == [1, 1, 0, 1]
    async with Store.open(config.database_path()) as store:
        key = str(channel.key())
        records = await store.snapshots(key)
        assert records[-1].snapshot["tokens"]["estimate"] > image_tokens(1280, 960)
        for number in range(1, len(records) + 1):
            result = await replay(config, store, AnthropicBrain(config.anthropic, API_KEY), key, number)
            assert result.matches, number


async def test_a_picture_the_api_refuses_is_answered_from_its_placeholder(
    api: AnthropicStandIn, channel: FakeChannel, make_config: Callable[[dict[str, Any]], Config]
) -> None:
    """When the API refuses a request for what a file became, the turn is asked again with the
    placeholder instead, and the user gets a real answer rather than the apology."""
    config = make_config(config_data(api))
    api.script(Error(400, "invalid_request_error", "Could not process image"), model=MODEL)
    async with daemon_with(config, channel) as daemon:
        await turn(daemon, channel, await photo_message(channel, config, "my cat", "p1"))

    refused, answered = reply_requests(api)
    assert isinstance(refused.messages[-1]["content"], list)
    assert answered.messages[-1]["content"].endswith("[photo: 1280×960]\nmy cat")
    assert channel.sent[-1].text == "re: my cat"


def test_db_prune_removes_only_files_no_message_refers_to(tmp_path: Path) -> None:
    """`db prune` deletes kept files no stored message names, says how many and how many bytes, and
    leaves referenced files; --dry-run only counts."""
    (tmp_path / "config.toml").write_text('[database]\npath = "data/bot.db"\n', encoding="utf-8")
    db = tmp_path / "data" / "bot.db"
    files = MediaFiles(files_dir(db))

    async def setup() -> tuple[str, str]:
        kept, orphan = await files.keep(JPEG), await files.keep(b"orphan")
        channel = FakeChannel()
        async with Store.open(db) as store:
            photo = dataclasses.replace(PHOTO, sha256=kept)
            message = dataclasses.replace(channel.message("cat"), media=(photo,))
            await store.append_inbound(message)
        return kept, orphan

    kept, orphan = asyncio.run(setup())
    dry = switchboard(tmp_path, "db", "prune", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would remove 1 kept file(s) (6 B)")
    assert files.path_of(orphan).exists()
    done = switchboard(tmp_path, "db", "prune")
    assert done.stdout.startswith("removed 1 kept file(s) (6 B) that no stored message refers to; "
                                  "1 referenced file(s) stay")
    assert not files.path_of(orphan).exists() and files.path_of(kept).read_bytes() == JPEG

    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE messages SET media = '[{\"kind\": 1}]'")
    refused = switchboard(tmp_path, "db", "prune")
    assert refused.returncode != 0 and "unreadable media" in refused.stderr
    assert files.path_of(kept).exists()


async def test_kept_files_are_read_back_and_pruned_when_no_message_refers_to_them(store: Store) -> None:
    """Whichever store keeps them (files beside SQLite, a table on PostgreSQL): the same bytes kept
    twice are one file; pruning counts and removes only what no message names; a dry run only counts."""
    files = store.kept_files()
    kept = await files.keep(JPEG)
    assert await files.keep(JPEG) == kept
    orphan = await files.keep(b"orphan")
    photo = dataclasses.replace(PHOTO, sha256=kept)
    message = dataclasses.replace(FakeChannel().message("cat"), media=(photo,))
    await store.append_inbound(message)
    referenced = await store.referenced_files()

    assert await files.prune(referenced, dry_run=True) == (1, 6)
    assert await files.read(orphan) == b"orphan"
    assert await files.prune(referenced) == (1, 6)
    assert await files.read(orphan) is None and await files.read(kept) == JPEG
    assert await files.prune(referenced) == (0, 0)


# -- taking a file in: caps, types, failures ---------------------------------------------------------


def offered(data: bytes, kind: str = "document", **fields: Any) -> Offer:
    async def download() -> bytes:
        return data

    return Offer(kind, download, **fields)


PAGES = b"%PDF-1.4\n" + b"<< /Type /Page >>\n" * 101


@pytest.mark.parametrize(
    ("offer", "limits", "status", "note"),
    [
        (offered(b"PK\x03\x04zip", name="a.zip", mime="application/zip"), {}, "unsupported",
         "a file type I do not open"),
        (offered(b"x = 1\n", name="a.py"), {"documents": ["pdf"]}, "unsupported",
         "a file type I do not open"),
        (offered(b"\xff\xfe\x00bin", name="a.txt", mime="text/plain"), {}, "failed", "not UTF-8 text"),
        (offered(b"GIF89a...", "photo"), {}, "kept", None),
        (offered(b"<html>", "photo", mime="image/jpeg"), {}, "failed", "not a picture format I can read"),
        (offered(b"%PDF-" + b"0" * 50, name="a.pdf", size=10), {"max_file_bytes": 20}, "too_large",
         "over the 20 B limit"),
        (offered(PAGES, name="long.pdf"), {}, "too_large", "over the 100-page limit"),
    ],
)
async def test_what_is_opened_refused_or_noted(
    offer: Offer, limits: dict[str, Any], status: str, note: str | None
) -> None:
    """Types, caps (the stated size and the real one), page limits and content checks decide what
    is kept; what is not gets a note instead of an error."""
    kept: list[bytes] = []

    async def keep(data: bytes) -> str:
        kept.append(data)
        return "d" * 64

    media = await take(offer, MediaConfig(**limits), keep)
    assert (media.status, media.note) == (status, note)
    assert (media.sha256 is not None) == (status == "kept") == bool(kept)


async def test_a_download_that_hangs_or_a_full_disk_leaves_a_note() -> None:
    """A download past its timeout and a file the disk will not take both become "failed" notes."""
    async def never() -> bytes:
        await asyncio.sleep(10)
        return b""

    async def full(data: bytes) -> str:
        raise OSError(28, "No space left on device")

    slow = await take(Offer("photo", never), MediaConfig(), full, timeout=0.01)
    assert (slow.status, slow.note) == ("failed", "the download failed")
    stuck = await take(offered(JPEG, "photo"), MediaConfig(), full)
    assert (stuck.status, stuck.note) == ("failed", "it could not be saved")


def test_a_malformed_media_record_skips_only_its_row(tmp_path: Path) -> None:
    """A media column no write path stores (a width that is text) makes its message unreadable, as
    any malformed row is, instead of failing a whole read or a later render."""
    async def scenario() -> list[str]:
        channel = FakeChannel()
        async with Store.open(tmp_path / "bot.db") as store:
            await store.append_inbound(dataclasses.replace(channel.message("one"), media=(PHOTO,)))
            await store.append_inbound(channel.message("two"))
        with sqlite3.connect(tmp_path / "bot.db") as conn:
            bad = '[{"kind": "photo", "status": "kept", "width": "wide"}]'
            conn.execute("UPDATE messages SET media = ? WHERE text = 'one'", (bad,))
        async with Store.open(tmp_path / "bot.db") as store:
            return [m.text for m in await store.history(str(channel.key()), 10)]

    assert asyncio.run(scenario()) == ["two"]


@pytest.mark.parametrize(
    ("offer", "expected"),
    [
        (offered(b"", "photo", mime="image/jpeg"), "image"),
        (offered(b"", name="scan.JPG", mime="application/octet-stream"), "image"),
        (offered(b"", "photo", mime="image/heic", name="a.heic"), None),
        (offered(b"", name="paper.pdf"), "pdf"),
        (offered(b"", name="main.rs", mime="application/octet-stream"), "text"),
        (offered(b"", name="data.json", mime="application/json"), "text"),
        (offered(b"", name="book.docx", mime="application/vnd.openxmlformats"), None),
    ],
)
def test_what_kind_of_file_the_platform_describes(offer: Offer, expected: str | None) -> None:
    """The declared type decides; when the platform does not know it, the file name does."""
    assert category(offer) == expected


@pytest.mark.parametrize(
    ("media", "key"),
    [({"documents": ["docx"]}, "media.documents"), ({"max_file_bytes": 30_000_000}, "media.max_file_bytes"),
     ({"max_photo_bytes": 0}, "media.max_photo_bytes"), ({"max_pictures": 3}, "media.max_pictures")],
)
def test_a_wrong_media_setting_names_the_key_and_the_file(
    media: dict[str, Any], key: str, tmp_path: Path
) -> None:
    """An unknown document type, a cap beyond what the platforms allow or an unknown key stops the
    config with an error naming the key and the file."""
    with pytest.raises(ConfigError) as caught:
        parse_config({"media": media}, str(tmp_path / "config.toml"))
    assert key in str(caught.value) and "config.toml" in str(caught.value)
