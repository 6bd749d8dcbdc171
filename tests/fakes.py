"""In-process fakes of the outside world for core tests: a channel that records what it sends."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bot.channel import CatchUpPoint, ChunkSent, Intake, Submit
from bot.config import MediaConfig
from bot.messages import ChatRef, InboundMessage, OutboundMessage
from bot.session_key import SessionKey, build
from bot.voice import Transcribe


class FakeChannel:
    """A channel driven by the test: `inject` sends an inbound message, `sent` records replies."""

    def __init__(self, provider: str = "fake", agent_id: str = "main") -> None:
        self.provider = provider
        self.agent_id = agent_id
        self.sent: list[OutboundMessage] = []
        self.typing_chats: list[ChatRef] = []
        self._submit: Submit | None = None
        self._ready = asyncio.Event()
        self._stopped = asyncio.Event()
        self._next_id = 1000

    async def run(self, intake: Intake) -> None:
        self._submit = intake.submit
        self._ready.set()
        await self._stopped.wait()

    async def stop(self) -> None:
        self._stopped.set()

    async def send(self, message: OutboundMessage, on_chunk: ChunkSent | None = None) -> list[str]:
        self.sent.append(message)
        self._next_id += 1
        # Distinct from any inbound id a test injects, so a reply never shadows one.
        sent = f"out-{self._next_id}"
        if on_chunk is not None:
            await on_chunk(0, sent)
        return [sent]

    @asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        self.typing_chats.append(chat)
        yield

    def key(self, kind: str = "direct", peer: str = "42", **suffix: str) -> SessionKey:
        return build(self.agent_id, self.provider, kind, peer, **suffix)  # type: ignore[arg-type]

    def message(
        self,
        text: str,
        *,
        kind: str = "direct",
        peer: str = "42",
        sender: str = "42",
        name: str = "Ada",
        message_id: str | None = None,
        reply_to: str | None = None,
        starts_turn: bool = True,
        command: str | None = None,
        sent_at: float | None = None,
    ) -> InboundMessage:
        key = self.key(kind, peer)
        return InboundMessage(
            session_key=key,
            chat=ChatRef(self.provider, peer),
            sender_id=sender,
            sender_name=name,
            text=text,
            provider_message_id=message_id,
            reply_to_id=reply_to,
            starts_turn=starts_turn,
            command=command,
            sent_at=sent_at,
        )

    async def inject(self, message: InboundMessage) -> None:
        await self._ready.wait()
        assert self._submit is not None
        await self._submit(message)


class RecordingIntake:
    """An intake for channel unit tests: records what is submitted and quarantined."""

    def __init__(self, submit: Submit | None = None) -> None:
        self.received: list[InboundMessage] = []
        self.quarantined: list[tuple[str, str | None, str, str]] = []
        self.files: dict[str, bytes] = {}
        self._submit = submit
        # Voice to text ([roles].transcribe); None: voice notes are noted as placeholders.
        self.transcribe: Transcribe | None = None

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

    def media_limits(self) -> MediaConfig:
        return MediaConfig()

    def transcriber(self) -> Transcribe | None:
        return self.transcribe

    async def keep_file(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        self.files[digest] = data
        return digest
