"""What a channel is: the small interface every platform adapter implements for the core."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from bot.messages import ChatRef, InboundMessage, OutboundMessage

Submit = Callable[[InboundMessage], Awaitable[None]]


class Channel(Protocol):
    """A platform adapter: turns platform updates into InboundMessage and sends replies back."""

    provider: str

    async def run(self, submit: Submit) -> None:
        """Receive, passing every normalised message to `submit`, until cancelled.

        Sending must keep working after `stop()` until this task is cancelled: the daemon lets
        in-flight turns deliver their replies first. Resources are released on cancellation.
        """
        ...

    async def send(self, message: OutboundMessage) -> list[str]:
        """Send a reply (split as the platform needs); return every platform message id sent."""
        ...

    def typing(self, chat: ChatRef) -> AbstractAsyncContextManager[None]:
        """Show 'typing…' while the model works; stops when the block exits."""
        ...

    async def stop(self) -> None:
        """Stop taking input; when it returns, everything received has been submitted."""
        ...
