"""The daemon's side of `bot.intake.cursor.CursorKeeper`: each channel's cursor in the store."""

from __future__ import annotations

from bot.store import Store


class KeptCursors:
    """Mixed into the daemon, whose `_open()` gives the store once `run` opened it."""

    def _open(self) -> Store:
        raise NotImplementedError

    async def channel_cursor(self, provider: str) -> str | None:
        return await self._open().channel_cursor(provider)

    async def keep_channel_cursor(self, provider: str, cursor: str) -> None:
        await self._open().keep_channel_cursor(provider, cursor)
