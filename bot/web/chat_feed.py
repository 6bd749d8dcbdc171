"""The open chat pages' look at the store: what another instance stored reaches them too.

On a shared PostgreSQL store, another daemon may run an account's turn; it pushes the reply to
the pages open on *it* (the hub is one process's). So one `ChatFeed` per server looks at the store
every CHAT_EVERY seconds while any chat stream is open here, in one read for the sessions all of
them show, and hands each stream what is newer than it has seen as a `stored` event. The page
knows a message it shows already (a reply by its delivery key, its own by the id it gave it), so
what also came through this instance's push is not shown twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from bot.core.messages import StoredMessage
from channels.web.hub import ChatEvent, Subscription

CHAT_EVERY = 2.0  # seconds between looks while a chat page is open
READ_LIMIT = 200  # messages read per look at most (more come on the next one)

log = structlog.get_logger(__name__)


class ChatFeedStore(Protocol):
    async def messages_after(
        self, session_keys: Sequence[str], after_id: int, limit: int
    ) -> list[StoredMessage]: ...


@dataclass(eq=False, slots=True)
class _Watch:
    """One open stream: its session, the newest message it has had, where its events go."""

    session_key: str
    newest: int
    page: Subscription


class ChatFeed:
    """Looks at the store for the chat streams open on this server, one read for all of them."""

    def __init__(self, store: ChatFeedStore, row: Callable[[StoredMessage], Mapping[str, Any]]) -> None:
        self._store = store
        self._row = row  # a stored message as the page takes it
        self._watches: set[_Watch] = set()
        self._poller: asyncio.Task[None] | None = None

    @contextmanager
    def watching(self, session_key: str, newest: int, page: Subscription) -> Iterator[None]:
        """While the block runs, messages of `session_key` above `newest` go to `page`."""
        watch = _Watch(session_key, newest, page)
        self._watches.add(watch)
        if self._poller is None:
            self._poller = asyncio.create_task(self._poll(), name="web chat feed")
        try:
            yield
        finally:
            self._watches.discard(watch)
            if not self._watches and self._poller is not None:
                self._poller.cancel()
                self._poller = None

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(CHAT_EVERY)
            try:
                await self.look()
            except Exception:  # a failed look is logged and the next one tried; streams stay open
                log.warning("web chat look failed", exc_info=True)

    async def look(self) -> None:
        """One look: what is new in the watched sessions, to the streams that have not had it."""
        watches = list(self._watches)
        if not watches:
            return
        keys = sorted({watch.session_key for watch in watches})
        since = min(watch.newest for watch in watches)
        while True:
            found = await self._store.messages_after(keys, since, READ_LIMIT)
            for message in found:
                for watch in watches:
                    if watch.session_key == message.session_key and message.id > watch.newest:
                        watch.page.put(ChatEvent("stored", self._row(message)))
                        watch.newest = message.id
            if len(found) < READ_LIMIT:
                return
            since = found[-1].id
