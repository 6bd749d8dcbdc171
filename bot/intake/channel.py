"""What a channel is: the small interface every platform adapter implements for the core."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from bot.config import MediaConfig
from bot.core.messages import ChatRef, InboundMessage, OutboundMessage
from bot.models.voice import Transcribe

Submit = Callable[[InboundMessage], Awaitable[None]]


class ChunkSent(Protocol):
    """Called after each chunk of a reply reaches the platform, with its index and platform id, so
    the outbox can record it before the next one is sent (a restart then sends only the missing
    chunks). A channel that knows the chunk is the reply's last may say so (`last=True`): the
    reply then leaves the outbox with that record, one write instead of two."""

    def __call__(self, index: int, provider_id: str, /, *, last: bool = False) -> Awaitable[None]: ...


# Called with the platform id of a message posted to preview a reply, so it can be kept durably.
PreviewPosted = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class CatchUpPoint:
    """A chat active lately, and the newest platform message id stored for it (read history after it)."""

    chat_id: str
    after_id: str


class Intake(Protocol):
    """What a channel hands its input to: parse, store, enqueue; it never waits on a turn."""

    async def submit(self, inbound: InboundMessage) -> None:
        """Store (idempotently) and queue a message; when it returns the message is committed.

        Raises when it could not be stored: the channel must not confirm it to the platform.
        """
        ...

    async def catch_up_points(self, provider: str, since: float) -> list[CatchUpPoint]:
        """Every chat of `provider` with a message stored since `since`, for history catch-up."""
        ...

    async def quarantine(self, provider: str, ref: str | None, raw: str, error: str) -> None:
        """Keep an update that could not be parsed (or stored, twice the same way), with its
        error, and let intake go on.

        Raises like `submit` when it could not be kept: the update must then be fetched again.
        """
        ...

    async def pair(self, provider: str, chat_id: str, user_id: str, user_name: str | None) -> bool:
        """Under `dm_policy = "pairing"`, whether a user the allowlist does not know is approved;
        if not, the core sends them their code and id in `chat_id` (at most once an hour).

        Raises like `submit` when the store could not answer.
        """
        ...

    def media_limits(self) -> MediaConfig:
        """The size caps and document types in force for pictures and files (a reload changes them)."""
        ...

    async def keep_file(self, data: bytes) -> str:
        """Keep a downloaded file by content (mode 0600, beside the database); returns its sha256."""
        ...

    def transcriber(self) -> Transcribe | None:
        """Voice to text through the `transcribe` role; None when no role is set (voice is noted)."""
        ...


class Channel(Protocol):
    """A platform adapter: turns platform updates into InboundMessage and sends replies back."""

    provider: str

    async def run(self, intake: Intake) -> None:
        """Receive, passing every normalised message to `intake.submit`, until cancelled.

        Sending must keep working after `stop()` until this task is cancelled: the daemon lets
        in-flight turns deliver their replies first. Resources are released on cancellation.
        """
        ...

    async def send(self, message: OutboundMessage, on_chunk: ChunkSent | None = None) -> list[str]:
        """Send a reply (split as the platform needs, from chunk `message.skip_chunks` on); return
        every platform message id sent by this call, calling `on_chunk` after each."""
        ...

    def typing(self, chat: ChatRef) -> AbstractAsyncContextManager[None]:
        """Show 'typing…' while the model works; stops when the block exits."""
        ...

    async def stop(self) -> None:
        """Stop taking input; when it returns, everything received has been submitted."""
        ...


class ReplyPreview(Protocol):
    """A reply shown while the model writes it (a Telegram draft, a message edited in place)."""

    @property
    def shown(self) -> asyncio.Event:
        """Set once the user sees any of the reply ("typing…" stops then)."""
        ...

    def update(self, text: str) -> None:
        """The reply so far (it may start over when a failed attempt is retried); never blocks."""
        ...

    async def finish(self, final: str) -> str | None:
        """Stop updating once the reply is known; the platform id of a preview message that must
        become the reply's first chunk (`OutboundMessage.preview_id`), if one was posted."""
        ...

    def abandon(self) -> None:
        """Stop updating at once, without a final word (the turn was cancelled)."""
        ...

    async def withdraw(self) -> None:
        """The reply is not sent after all (another instance answered the request): a message
        posted to show it is deleted; a draft lapses on its own."""
        ...


@runtime_checkable
class Previewing(Protocol):
    """A channel that can show replies while they are written."""

    def preview(
        self, chat: ChatRef, reply_to_id: str | None, *, resume_id: str | None = None,
        on_posted: PreviewPosted | None = None,
    ) -> ReplyPreview | None:
        """A preview for one reply, or None where streaming is off or the chat has none.

        `resume_id`: a preview message an interrupted earlier turn left, edited instead of posting
        a new one; `on_posted` is told the id of a preview message when one is posted.
        """
        ...


@runtime_checkable
class MessageProbe(Protocol):
    """A channel that can ask its platform whether a message is the bot's own without changing it:
    how a send in doubt is found instead of repeated where the platform has no idempotency key
    (`bot.delivery.sent_probe`)."""

    def shares_ids(self, chat: ChatRef, other_chat_id: str) -> bool:
        """Whether message ids in `other_chat_id` come from the same sequence as `chat`'s."""
        ...

    async def caught_up(self) -> None:
        """Returns once the messages that waited at the platform while the daemon was away are
        stored: their ids are then known, and not asked about."""
        ...

    async def is_own(self, chat: ChatRef, message_id: int) -> bool | None:
        """True: `message_id` is the bot's own message in `chat`; False: it is not (someone else's,
        or none there); None: the platform did not say."""
        ...


@runtime_checkable
class Announcing(Protocol):
    """A channel that tells its person which channels the daemon started (the console: the log
    goes to a file while it has the terminal)."""

    def started(self, channels: list[str]) -> None: ...
