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
        """Receive until stopped or cancelled, passing every normalised message to `submit`."""
        ...

    async def send(self, message: OutboundMessage) -> list[str]:
        """Send a reply (split as the platform needs); return every platform message id sent."""
        ...

    def typing(self, chat: ChatRef) -> AbstractAsyncContextManager[None]:
        """Show 'typing…' while the model works; stops when the block exits."""
        ...

    async def stop(self) -> None:
        """Stop taking input; `run` returns soon after."""
        ...
