"""SOUL.md and MEMORY.md in the system prompt of a running daemon: caps, reloads, prompt caching."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.config import Config
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest
from bot.testing.fake_channel import FakeChannel
from tests.harness import config_data, daemon_with, reply_requests, say

MakeConfig = Callable[[dict[str, Any]], Config]


def files_config(api: AnthropicStandIn, make_config: MakeConfig, **agent: Any) -> Config:
    """A daemon config with SOUL.md and MEMORY.md next to the config file."""
    return make_config(config_data(
        api, agent={"name": "Penny", "soul_file": "SOUL.md", "memory_file": "MEMORY.md", **agent}
    ))


def stable_block(request: RecordedRequest) -> dict[str, Any]:
    """The first (cacheable) system block of a reply request."""
    system = request.body["system"]
    assert isinstance(system, list)
    block: dict[str, Any] = system[0]
    return block


def stable_text(request: RecordedRequest) -> str:
    return str(stable_block(request)["text"])


async def test_soul_and_memory_reach_the_model_in_the_cached_system_block(
    api: AnthropicStandIn, tmp_path: Path, make_config: MakeConfig
) -> None:
    """The soul and memory files are sent in the system prompt, soul first, in the cached block."""
    (tmp_path / "SOUL.md").write_text("You are Penny. Never share phone numbers.\n", encoding="utf-8")
    (tmp_path / "MEMORY.md").write_text("Ada's train leaves at 9:40.\n", encoding="utf-8")
    channel = FakeChannel()
    async with daemon_with(files_config(api, make_config), channel) as daemon:
        await say(daemon, channel, "hello")

    (request,) = reply_requests(api)
    block = stable_block(request)
    assert block["cache_control"] == {"type": "ephemeral"}
    text = block["text"]
    assert "<soul>\nYou are Penny. Never share phone numbers.\n</soul>" in text
    assert "<memory>\nAda's train leaves at 9:40.\n</memory>" in text
    assert text.index("<soul>") < text.index("<memory>")
    assert "Ada's train" not in request.body["system"][1]["text"]  # not in the per-turn block


async def test_each_file_is_capped_with_a_note(
    api: AnthropicStandIn, tmp_path: Path, make_config: MakeConfig
) -> None:
    """A file longer than `file_excerpt_chars` is cut there, and the prompt says how much was left out."""
    (tmp_path / "SOUL.md").write_text("S" * 300 + "SOULTAIL", encoding="utf-8")
    (tmp_path / "MEMORY.md").write_text("short memory", encoding="utf-8")
    channel = FakeChannel()
    config = files_config(api, make_config, file_excerpt_chars=100)
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "hello")

    text = stable_text(reply_requests(api)[0])
    assert "S" * 100 + "\n[…truncated: the first 100 of 308 characters of SOUL.md]" in text
    assert "S" * 101 not in text
    assert "SOULTAIL" not in text
    assert "<memory>\nshort memory\n</memory>" in text


async def test_both_files_share_a_total_cap(
    api: AnthropicStandIn, tmp_path: Path, make_config: MakeConfig
) -> None:
    """Memory gets what the soul left of `files_total_chars`, and is left out with a note when
    nothing is left."""
    (tmp_path / "SOUL.md").write_text("S" * 120, encoding="utf-8")
    (tmp_path / "MEMORY.md").write_text("M" * 120, encoding="utf-8")
    channel = FakeChannel()
    async with daemon_with(files_config(api, make_config, files_total_chars=150), channel) as daemon:
        await say(daemon, channel, "hello")
        (tmp_path / "SOUL.md").write_text("S" * 200, encoding="utf-8")
        await say(daemon, channel, "again")

    shared, used_up = (stable_text(r) for r in reply_requests(api))
    assert "<soul>\n" + "S" * 120 + "\n</soul>" in shared
    assert "M" * 30 + "\n[…truncated: the first 30 of 120 characters of MEMORY.md]" in shared
    assert "M" * 31 not in shared
    assert "S" * 150 + "\n[…truncated: the first 150 of 200 characters of SOUL.md]" in used_up
    assert "M" not in used_up.split("</soul>")[1].replace("MEMORY.md", "")
    assert "[MEMORY.md left out: the prompt files' total cap (150 characters) is used up]" in used_up


async def test_editing_memory_changes_the_next_turn_without_a_restart(
    api: AnthropicStandIn, tmp_path: Path, make_config: MakeConfig
) -> None:
    """An edit to MEMORY.md while the daemon runs is in the very next reply's system prompt."""
    memory = tmp_path / "MEMORY.md"
    (tmp_path / "SOUL.md").write_text("Be brief.", encoding="utf-8")
    memory.write_text("Ada likes tea.", encoding="utf-8")
    channel = FakeChannel()
    async with daemon_with(files_config(api, make_config), channel) as daemon:
        await say(daemon, channel, "one")
        memory.write_text("Ada likes green tea now.", encoding="utf-8")
        await say(daemon, channel, "two")

    before, after = (stable_text(r) for r in reply_requests(api))
    assert "Ada likes tea." in before
    assert "Ada likes green tea now." in after
    assert "Ada likes tea." not in after
    assert "Be brief." in after


async def test_an_edit_that_keeps_size_and_timestamp_is_still_seen(
    api: AnthropicStandIn, tmp_path: Path, make_config: MakeConfig
) -> None:
    """A same-length rewrite within the file system's timestamp resolution is picked up too."""
    memory = tmp_path / "MEMORY.md"
    memory.write_text("Ada likes tea.", encoding="utf-8")
    channel = FakeChannel()
    async with daemon_with(files_config(api, make_config), channel) as daemon:
        await say(daemon, channel, "one")
        stat = memory.stat()
        memory.write_text("Ada likes pie.", encoding="utf-8")
        # What a second write in the same clock tick looks like: same size, inode and mtime.
        os.utime(memory, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        await say(daemon, channel, "two")

    before, after = (stable_text(r) for r in reply_requests(api))
    assert "Ada likes tea." in before
    assert "Ada likes pie." in after


async def test_unchanged_files_give_a_byte_identical_cached_prompt(
    api: AnthropicStandIn, tmp_path: Path, make_config: MakeConfig
) -> None:
    """Between turns with untouched files the cached system block is sent byte for byte the same."""
    (tmp_path / "SOUL.md").write_text("You are Penny.\n", encoding="utf-8")
    (tmp_path / "MEMORY.md").write_text("Ada likes tea.\n", encoding="utf-8")
    channel = FakeChannel()
    async with daemon_with(files_config(api, make_config), channel) as daemon:
        for text in ("one", "two", "three"):
            await say(daemon, channel, text)

    blocks = [stable_block(r) for r in reply_requests(api)]
    assert len(blocks) == 3
    assert blocks[0] == blocks[1] == blocks[2]
    assert blocks[0]["cache_control"] == {"type": "ephemeral"}


async def test_a_deleted_file_leaves_the_prompt_quietly(
    api: AnthropicStandIn, tmp_path: Path, make_config: MakeConfig
) -> None:
    """Deleting MEMORY.md removes it from the next prompt; the turn is answered normally; a file
    that comes back is used again."""
    memory = tmp_path / "MEMORY.md"
    (tmp_path / "SOUL.md").write_text("Be brief.", encoding="utf-8")
    memory.write_text("Ada likes tea.", encoding="utf-8")
    channel = FakeChannel()
    async with daemon_with(files_config(api, make_config), channel) as daemon:
        await say(daemon, channel, "one")
        memory.unlink()
        await say(daemon, channel, "two")
        memory.write_text("Ada is back.", encoding="utf-8")
        await say(daemon, channel, "three")

    first, gone, back = (stable_text(r) for r in reply_requests(api))
    assert "<memory>" in first
    assert "<memory>" not in gone and "Ada likes tea." not in gone
    assert "Be brief." in gone
    assert "<memory>\nAda is back.\n</memory>" in back
    assert [m.text for m in channel.sent] == ["re: one", "re: two", "re: three"]
