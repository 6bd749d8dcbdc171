"""A channel's cursor at its platform, kept by the core: for platforms that keep no offset for us.

Matrix's `/sync` returns a `next_batch` token the client must remember; the channel asks for it at
start and hands the next one over only once every event it moved past is stored (`Intake.submit`
returned for each), as Telegram's offset moves only past stored updates. An intake without this
capability (a test's) leaves the channel keeping the token in memory.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class CursorKeeper(Protocol):
    """What an intake offers a channel to keep its place at the platform across restarts."""

    async def channel_cursor(self, provider: str) -> str | None:
        """The cursor last kept for `provider`'s channel; None before the first."""
        ...

    async def keep_channel_cursor(self, provider: str, cursor: str) -> None:
        """Keep `cursor` (durably when this returns); raises when it could not be kept."""
        ...
