"""The preview driver on its own, with a surface that records what it was asked to show."""

from __future__ import annotations

import asyncio

from bot.delivery.preview import PreviewSkipped, PreviewStream, has_first_sentence


class RecordingSurface:
    """A surface that shows instantly, or waits for `gate` when one is set; it logs every call."""

    def __init__(self, *, interval: float = 0.0, ready_after_sentence: bool = False) -> None:
        self.interval = interval
        self.ready_after_sentence = ready_after_sentence
        self.calls: list[tuple[str, str]] = []
        self.gate: asyncio.Event | None = None
        self.fail = False
        self.skip = 0  # how many updates to skip (the platform's budget wanted for replies)

    def ready(self, text: str, elapsed: float) -> bool:
        return has_first_sentence(text) if self.ready_after_sentence else True

    async def show(self, text: str) -> str | None:
        self.calls.append(("show", text))
        if self.fail:
            raise RuntimeError("platform refused")
        if self.skip:
            self.skip -= 1
            raise PreviewSkipped("the send budget is kept for replies")
        if self.gate is not None:
            await self.gate.wait()
        self.calls.append(("shown", text))
        return "preview-1" if len(self.calls) == 2 else None  # posted by the first update

    async def close(self, final: str) -> str | None:
        self.calls.append(("close", final))
        return "preview-1"


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_burst_of_text_is_shown_once_as_its_latest_state() -> None:
    """Many updates while one is being shown collapse into one more update with the newest text."""
    surface = RecordingSurface()
    surface.gate = asyncio.Event()
    stream = PreviewStream(surface)
    stream.update("One.")
    await settle()
    for n in range(2, 20):
        stream.update("One." + " two" * n)
    surface.gate.set()
    await settle()
    final = "One." + " two" * 19
    assert [text for call, text in surface.calls if call == "show"] == ["One.", final]
    assert stream.shown.is_set()
    assert await stream.finish(final) == "preview-1"


async def test_finish_waits_for_the_update_in_flight_before_closing() -> None:
    """The final word never overtakes a preview update still on its way to the platform."""
    surface = RecordingSurface()
    surface.gate = asyncio.Event()
    stream = PreviewStream(surface)
    stream.update("Half an answer.")
    await settle()
    finishing = asyncio.create_task(stream.finish("The whole answer."))
    await settle()
    assert not finishing.done()
    surface.gate.set()
    assert await finishing == "preview-1"
    assert surface.calls == [("show", "Half an answer."), ("shown", "Half an answer."),
                             ("close", "The whole answer.")]


async def test_nothing_is_shown_before_the_surface_is_ready_and_nothing_after_finish() -> None:
    """A surface waiting for a first sentence sees nothing of a stray word; updates after finish
    are ignored."""
    surface = RecordingSurface(ready_after_sentence=True)
    stream = PreviewStream(surface)
    stream.update("Well")
    await settle()  # the stream looked at it, and held it back
    assert surface.calls == [] and not stream.shown.is_set()
    stream.update("Well, tides follow the moon. And")
    await asyncio.wait_for(stream.shown.wait(), 30)
    assert surface.calls[-1] == ("shown", "Well, tides follow the moon. And")
    await stream.finish("Well, tides follow the moon. And the sun.")
    stream.update("late text")
    await settle()
    assert [text for call, text in surface.calls if call == "show"] == ["Well, tides follow the moon. And"]


async def test_a_surface_that_fails_ends_the_preview_but_not_the_reply() -> None:
    """A refused update stops previewing quietly; finish still closes the surface."""
    surface = RecordingSurface()
    surface.fail = True
    stream = PreviewStream(surface)
    stream.update("Some text.")
    await settle()
    stream.update("Some text. More.")
    await settle()
    assert await stream.finish("Some text. More.") == "preview-1"
    assert [call for call, _ in surface.calls] == ["show", "close"]
    assert not stream.shown.is_set()


async def test_a_restarted_reply_replaces_what_was_shown() -> None:
    """Text that starts over (a retried attempt, a round that went on to call a tool) is shown even
    though it is shorter, and the void text gives way to "…" until it comes."""
    surface = RecordingSurface()
    stream = PreviewStream(surface)
    stream.update("First attempt, long and doomed.")
    await settle()
    stream.update("")
    await settle()
    stream.update("Second.")
    await settle()
    assert [text for call, text in surface.calls if call == "shown"] == [
        "First attempt, long and doomed.", "…", "Second."]
    await stream.finish("Second.")


async def test_the_message_posted_for_a_preview_is_reported_once_and_a_failed_report_is_harmless() -> None:
    """The id of the message a preview posts is handed over once (to be kept with the request);
    a report that fails does not stop the preview."""
    surface = RecordingSurface()
    reported: list[str] = []

    async def keep(posted: str) -> None:
        reported.append(posted)
        raise RuntimeError("database locked")

    stream = PreviewStream(surface, on_posted=keep)
    stream.update("One.")
    await settle()
    stream.update("One. Two.")
    await settle()
    assert reported == ["preview-1"]
    assert [text for call, text in surface.calls if call == "shown"] == ["One.", "One. Two."]
    await stream.finish("One. Two.")


async def test_a_skipped_update_shows_nothing_and_is_tried_again_with_the_newest_text() -> None:
    """An update the platform's budget had no room for counts as not shown ("typing…" goes on) and
    does not end the preview: the next try, an interval later, shows whatever text is newest."""
    surface = RecordingSurface(interval=0.05)
    surface.skip = 2
    stream = PreviewStream(surface)
    stream.update("One.")
    await settle()
    assert surface.calls == [("show", "One.")] and not stream.shown.is_set()
    stream.update("One. Two.")
    await asyncio.wait_for(stream.shown.wait(), 5)
    assert [text for call, text in surface.calls if call == "shown"] == ["One. Two."]
    assert [text for call, text in surface.calls if call == "show"] == ["One.", "One. Two.", "One. Two."]
    assert stream.shown.is_set()
    assert await stream.finish("One. Two.") == "preview-1"
