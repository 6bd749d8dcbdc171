"""A channel driven by the test: the in-process stand-in for a platform, for tests of the core.

`FakeChannel` is a `bot.intake.channel.Channel` that a daemon runs like any other: `inject` hands it
an inbound message as if a user had written it, `sent` records every reply the daemon sends back.
It speaks no wire protocol; the Telegram and Discord stand-ins are for that.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bot.core.messages import ChatRef, InboundMessage, OutboundMessage
from bot.core.session_key import SessionKey, build
from bot.intake.channel import ChunkSent, Intake, Submit


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
