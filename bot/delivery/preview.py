"""Reply previews: the reply shown while the model writes it, paced to what the platform allows.

The brain hands over the text so far at every stream event; a background task shows it through a
channel's surface (a Telegram draft, a message edited in place) no more often than the surface's
interval and only when it changed, so a fast stream never costs more requests than a slow one.
The reply itself is still stored and sent by the outbox: a preview message becomes its first chunk
(edited to its final text), a draft is only ever a preview. Previews are best effort: a surface
skips an update when the platform's budget is wanted for replies (`PreviewSkipped`), and the
next one, with whatever text came meanwhile, is tried an interval later.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

import structlog

from bot.core.errors import BotError, describe
from bot.core.messages import ChatRef
from bot.intake.channel import Channel, Previewing, PreviewPosted, ReplyPreview
from bot.intake.session_lease import lease_lapsed
from bot.store import TurnOpening
from bot.store.seams import PreviewStore

log = structlog.get_logger("switchboard.preview")

# A message posted for a preview should read as a start, not a stray word: it waits for the end of
# a first sentence (or a line), or this much text.
FIRST_SENTENCE = re.compile(r"[.!?…:;](?:\s|$)|\n")
FIRST_SENTENCE_CHARS = 160
# What a preview shows in place of text that turned out not to be the answer, until the answer comes.
WORKING = "…"


class PreviewSkipped(BotError):
    """A preview update not sent: the platform's budget is wanted for replies (or held back by a
    flood wait). Nothing was shown; a later update may be."""


def has_first_sentence(text: str) -> bool:
    return len(text) >= FIRST_SENTENCE_CHARS or FIRST_SENTENCE.search(text.strip()) is not None


async def open_preview(
    channel: Channel | None, chat: ChatRef, reply_to_id: str | None, store: PreviewStore, request_id: int,
    opening: TurnOpening | None = None,
) -> ReplyPreview | None:
    """The preview of the reply to a stored request, where the channel shows one; it picks up the
    preview message an interrupted earlier turn for the same request left, and keeps the id of any
    message it posts with the request, so a crash mid-reply never leaves half an answer behind.
    The earlier preview is the turn's `opening`'s, when given."""
    if not isinstance(channel, Previewing):
        return None
    try:
        earlier = opening.preview_id if opening is not None else await store.preview_of(request_id)
    except Exception as exc:  # a preview is worth no failed turn
        log.warning("earlier preview unreadable", request_id=request_id, error=describe(exc), exc_info=True)
        earlier = None

    async def keep(posted: str) -> None:
        await store.record_preview(request_id, posted)

    return channel.preview(chat, reply_to_id, resume_id=earlier, on_posted=keep)


class PreviewRecords(Protocol):
    """What finishing or withdrawing a preview reads of the store."""

    async def preview_of(self, request_id: int) -> str | None: ...

    async def still_awaiting(self, message_id: int) -> bool: ...

    async def preview_taken(self, chat: ChatRef, provider_message_id: str) -> bool: ...


class PreviewSurface(Protocol):
    """Where one channel shows a reply while it is written."""

    @property
    def interval(self) -> float:
        """Least seconds between two updates (the platform's budget for this chat)."""
        ...

    def ready(self, text: str, elapsed: float) -> bool:
        """Whether the first update may go out, `elapsed` seconds after the first text arrived."""
        ...

    async def show(self, text: str) -> str | None:
        """Show the reply so far (Markdown, possibly cut mid-word); the id of a message it posted
        to do so, the first time; `PreviewSkipped` when it showed nothing this time, any other
        error ends the preview."""
        ...

    async def close(self, final: str) -> str | None:
        """After the last update: the id of a preview message the final reply takes over."""
        ...

    async def withdraw(self) -> None:
        """Delete a preview message posted (the reply it showed is not sent)."""
        ...


class PreviewStream:
    """Shows a reply through a surface while it streams; a ReplyPreview for the turn."""

    def __init__(
        self, surface: PreviewSurface, *, name: str = "preview", on_posted: PreviewPosted | None = None
    ) -> None:
        self._surface = surface
        self._name = name
        self._on_posted = on_posted
        self._latest = ""
        self._last_shown: str | None = None
        self._first_text_at: float | None = None
        self._changed = asyncio.Event()
        self._closing = asyncio.Event()
        self._shown = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def shown(self) -> asyncio.Event:
        return self._shown

    def update(self, text: str) -> None:
        if self._closing.is_set():
            return
        if not text and self._last_shown:
            # The text shown was void (a retried attempt, or a round that went on to call tools):
            # it must not stay on screen as if it were the answer.
            text = WORKING
        self._latest = text
        if text.strip() and self._first_text_at is None:
            self._first_text_at = asyncio.get_running_loop().time()
        self._changed.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self._name)

    async def finish(self, final: str) -> str | None:
        self._closing.set()
        self._changed.set()
        if self._task is not None:
            # An update in flight completes first: the final edit must land after it, not before.
            with contextlib.suppress(Exception):
                await self._task
        try:
            return await self._surface.close(final)
        except Exception as exc:  # the reply is still sent in full without its preview
            log.warning("preview not closed", error=describe(exc), exc_info=True)
            return None

    def abandon(self) -> None:
        self._closing.set()
        if self._task is not None:
            self._task.cancel()

    async def withdraw(self) -> None:
        self.abandon()
        try:
            await self._surface.withdraw()
        except Exception as exc:  # what it showed stays: said in the log
            log.warning("preview not withdrawn", error=describe(exc), exc_info=True)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last_update = -math.inf
        while not self._closing.is_set():
            await self._changed.wait()
            self._changed.clear()
            text = self._latest
            if self._closing.is_set() or not text.strip() or text == self._last_shown:
                continue
            if self._last_shown is None:
                started = self._first_text_at if self._first_text_at is not None else loop.time()
                if not self._surface.ready(text, loop.time() - started):
                    self._recheck_soon()
                    continue
            await self._pause(last_update + self._surface.interval - loop.time())
            text = self._latest  # whatever arrived meanwhile goes out in this one update
            if self._closing.is_set() or not text.strip() or text == self._last_shown:
                continue
            if lease_lapsed():  # the chat may be another instance's now: the turn looks at the end
                continue
            try:
                posted = await self._surface.show(text)
            except PreviewSkipped:
                # Replies come first: this text, or newer, is tried again an interval later.
                last_update = loop.time()
                loop.call_later(self._surface.interval, self._changed.set)
                continue
            except Exception as exc:  # the reply is sent in full at the end all the same
                log.warning("reply preview stopped", error=describe(exc), exc_info=True)
                return
            if posted is not None and self._on_posted is not None:
                try:
                    await self._on_posted(posted)
                except Exception as exc:  # only a restart mid-reply would miss it
                    log.warning("preview message not recorded", error=describe(exc), exc_info=True)
            self._last_shown = text
            last_update = loop.time()
            self._shown.set()

    def _recheck_soon(self) -> None:
        """A first update held back for time, not text, is looked at again without new text."""
        loop = asyncio.get_running_loop()
        loop.call_later(0.1, self._changed.set)

    async def _pause(self, seconds: float) -> None:
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), seconds)


@asynccontextmanager
async def typing_until(
    typing: AbstractAsyncContextManager[None], preview: ReplyPreview | None
) -> AsyncIterator[None]:
    """Show "typing…" for the block, or until the preview first shows text; a block that fails
    (a cancelled turn) abandons the preview."""
    if preview is None:
        async with typing:
            yield
        return
    done = asyncio.Event()

    async def hold() -> None:
        async with typing:
            waiters = [asyncio.ensure_future(preview.shown.wait()), asyncio.ensure_future(done.wait())]
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()

    task = asyncio.create_task(hold(), name="typing until shown")
    try:
        yield
    except BaseException:
        preview.abandon()
        raise
    finally:
        done.set()
        with contextlib.suppress(Exception):
            await task


async def finish_preview(
    preview: ReplyPreview, final: str, request_id: int, store: PreviewRecords
) -> str | None:
    """The preview message the reply takes over, edited to its final text. Not when the turn
    outlived its session's lease (and took it again, `lease_retaken`) and another instance
    answered meanwhile: that instance's reply may have taken the message over, so it is left as
    it is (the reply is then refused), and only its id is given back, as the request recorded it."""
    if not lease_lapsed():
        return await preview.finish(final)
    try:
        waiting = await store.still_awaiting(request_id)
    except Exception as exc:  # unknown: storing the reply tells
        log.warning("request's state unreadable", request_id=request_id, error=describe(exc), exc_info=True)
        waiting = True
    if waiting:
        return await preview.finish(final)
    preview.abandon()
    try:
        return await store.preview_of(request_id)
    except Exception:  # then nothing is taken back
        log.warning("preview of a dropped reply unreadable", request_id=request_id, exc_info=True)
        return None


async def withdraw_preview(
    preview: ReplyPreview, chat: ChatRef, preview_id: str, store: PreviewRecords
) -> None:
    """Delete a dropped reply's preview message, unless a stored reply took it over."""
    try:
        taken = await store.preview_taken(chat, preview_id)
    except Exception as exc:  # unknown: better a stray preview than a deleted answer
        log.warning("preview left in place", error=describe(exc), exc_info=True)
        return
    if not taken:
        await preview.withdraw()
