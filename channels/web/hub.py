"""The web chat's hub: what the channel sends is handed to every page open for that account.

Each open page holds a subscription: a short queue of events its stream writes out. Nothing is
kept for a page that is not open: the history lives in the store, and a page that opens (or
reconnects) reads it there first. A page too slow to keep up is told to reload instead of
holding the channel up; a stream of previews keeps only the newest one waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

# "inbound": a message an account posted (another page of theirs shows it too); "preview": the
# reply so far; "reply": a stored reply delivered; "notice": a line that is not stored (a command's
# answer, a pairing code); "typing": the model works (on) or stopped (off); "withdraw": the preview
# shown is not the reply after all.
EventKind = Literal["inbound", "preview", "reply", "notice", "typing", "withdraw", "stored"]
# Events one page may have waiting; past this it is told to reload.
QUEUE_LIMIT = 256


@dataclass(frozen=True, slots=True)
class ChatEvent:
    """One event for the pages of an account: its kind and its JSON-able data."""

    kind: EventKind
    data: Mapping[str, Any]


class Subscription:
    """One open page's events, in order, until it is closed or falls behind."""

    def __init__(self, account: str, limit: int = QUEUE_LIMIT) -> None:
        self.account = account
        self._limit = limit
        self._events: deque[ChatEvent] = deque()
        self._ready = asyncio.Event()
        self.lagged = False  # fell behind: the page must reload (its stream ends)
        self.closed = False  # the server stops: the stream ends, the page reconnects later

    def put(self, event: ChatEvent) -> None:
        if self.closed or self.lagged:
            return
        if event.kind == "preview" and self._events and self._events[-1].kind == "preview":
            self._events[-1] = event  # only the newest text of a growing reply is worth sending
        elif len(self._events) >= self._limit:
            self.lagged = True
            self._events.clear()
        else:
            self._events.append(event)
        self._ready.set()

    def close(self) -> None:
        self.closed = True
        self._ready.set()

    async def next(self, timeout: float) -> ChatEvent | None:
        """The next event; None after `timeout` seconds without one, or once closed or lagged."""
        if not self._events and not (self.closed or self.lagged):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), timeout)
        if self.closed or self.lagged or not self._events:
            self._ready.clear()
            return None
        event = self._events.popleft()
        if not self._events:
            self._ready.clear()
        return event

    @property
    def ended(self) -> bool:
        return self.closed or self.lagged


class ChatHub:
    """The open pages by account, and what is published to them."""

    def __init__(self) -> None:
        self._pages: dict[str, set[Subscription]] = {}

    @contextlib.contextmanager
    def subscribe(self, account: str) -> Iterator[Subscription]:
        """A page's subscription for as long as the block runs."""
        subscription = Subscription(account)
        self._pages.setdefault(account, set()).add(subscription)
        try:
            yield subscription
        finally:
            pages = self._pages.get(account)
            if pages is not None:
                pages.discard(subscription)
                if not pages:
                    del self._pages[account]

    def publish(self, account: str, kind: EventKind, **data: Any) -> int:
        """Hand an event to every page open for `account`; how many there were."""
        pages = self._pages.get(account, set())
        event = ChatEvent(kind, data)
        for page in pages:
            page.put(event)
        return len(pages)

    def open_pages(self) -> int:
        return sum(len(pages) for pages in self._pages.values())

    def close(self) -> None:
        """End every stream (the server stops); pages reconnect and catch up from the store."""
        for pages in self._pages.values():
            for page in pages:
                page.close()
