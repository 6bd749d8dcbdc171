"""An intake that records what a channel hands the core, for unit tests of a channel adapter.

A channel's `run(intake)` is given this in place of the daemon's router: `received` holds the
`InboundMessage`s it submitted, `quarantined` the updates it could not read, `files` the media it kept,
`cursors` the places channels kept at their platforms.
"""

from __future__ import annotations

import hashlib

from bot.config import MediaConfig
from bot.core.messages import InboundMessage
from bot.intake.channel import CatchUpPoint, Submit
from bot.models.voice import Transcribe


class RecordingIntake:
    """An intake for channel unit tests: records what is submitted and quarantined."""

    def __init__(self, submit: Submit | None = None) -> None:
        self.received: list[InboundMessage] = []
        self.quarantined: list[tuple[str, str | None, str, str]] = []
        self.files: dict[str, bytes] = {}
        self._submit = submit
        # Voice to text ([roles].transcribe); None: voice notes are noted as placeholders.
        self.transcribe: Transcribe | None = None
        # Channel cursors kept (bot.intake.cursor.CursorKeeper), by provider.
        self.cursors: dict[str, str] = {}

    async def submit(self, inbound: InboundMessage) -> None:
        self.received.append(inbound)
        if self._submit is not None:
            await self._submit(inbound)

    async def catch_up_points(self, provider: str, since: float) -> list[CatchUpPoint]:
        return []

    async def quarantine(self, provider: str, ref: str | None, raw: str, error: str) -> None:
        self.quarantined.append((provider, ref, raw, error))

    async def pair(self, provider: str, chat_id: str, user_id: str, user_name: str | None) -> bool:
        return False

    async def channel_cursor(self, provider: str) -> str | None:
        return self.cursors.get(provider)

    async def keep_channel_cursor(self, provider: str, cursor: str) -> None:
        self.cursors[provider] = cursor

    def media_limits(self) -> MediaConfig:
        return MediaConfig()

    def transcriber(self) -> Transcribe | None:
        return self.transcribe

    async def keep_file(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        self.files[digest] = data
        return digest
