"""The overview's live feed: one look at the daemon's state serves every open stream."""

from __future__ import annotations

import asyncio

import pytest

from bot.web.live import LiveFeed


async def test_open_streams_share_one_look_and_the_feed_stops_with_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fifty streams opened together all get the same parts from a single render; once the last
    closes the feed stops, and a later stream starts it again with a fresh look; a stream that has
    seen the newest parts waits for a change and hears nothing."""
    monkeypatch.setattr("bot.web.live.LIVE_EVERY", 3600.0)
    looks: list[str] = []

    async def render() -> str:
        looks.append("look")
        return f"parts {len(looks)}"

    feed = LiveFeed(render)

    async def stream() -> tuple[int, str | None]:
        async with feed.watching():
            return await feed.after(0, timeout=30)

    seen = await asyncio.gather(*(stream() for _ in range(50)))
    assert set(seen) == {(1, "parts 1")} and looks == ["look"]
    await asyncio.sleep(0)  # the cancelled poller finishes
    assert looks == ["look"]

    async with feed.watching():
        first = await feed.after(0, timeout=30)
        nothing = await feed.after(first[0], timeout=0.01)
    assert first == (1, "parts 2") and nothing == (1, None)
