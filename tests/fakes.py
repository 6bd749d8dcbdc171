"""In-process fakes of the outside world for core tests: a channel that records what it sends, and
a lease clock the test moves by hand."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bot.config import MediaConfig
from bot.core.messages import ChatRef, InboundMessage, OutboundMessage
from bot.core.session_key import SessionKey, build
from bot.intake.channel import CatchUpPoint, ChunkSent, Intake, Submit
from bot.intake.session_lease import LeaseClock
from bot.models.voice import Transcribe


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


class MovedClock(LeaseClock):
    """A lease clock that stands still until the test moves it (`advance`): a sleep ends once the
    clock has passed its end, and `asleep` waits until the code waits on the clock, which is how a
    test knows the code has done what it does before its next look."""

    def __init__(self) -> None:
        self.elapsed = 0.0
        self._monotonic, self._wall = time.monotonic(), time.time()
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []
        self._slept = asyncio.Event()

    def monotonic(self) -> float:
        return self._monotonic + self.elapsed

    def time(self) -> float:
        return self._wall + self.elapsed

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        entry = (self.elapsed + seconds, asyncio.get_running_loop().create_future())
        self._sleepers.append(entry)
        self._slept.set()
        try:
            await entry[1]
        finally:
            if entry in self._sleepers:
                self._sleepers.remove(entry)

    def advance(self, seconds: float) -> None:
        """Move the clock on, ending the sleeps it passes (their tasks run at the loop's next turn:
        moving the clock without awaiting is time passing while the loop is blocked)."""
        self.elapsed += seconds
        for entry in [e for e in self._sleepers if e[0] <= self.elapsed]:
            self._sleepers.remove(entry)
            if not entry[1].done():
                entry[1].set_result(None)

    async def asleep(self, count: int = 1, timeout: float = 30.0) -> None:
        """Return once `count` tasks wait on the clock."""
        async with asyncio.timeout(timeout):
            while len(self._sleepers) < count:
                self._slept.clear()
                await self._slept.wait()
