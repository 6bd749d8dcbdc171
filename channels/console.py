"""The console channel: a local terminal (or any pair of streams) as session `…:console:direct:local`."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TextIO

from bot.channel import ChunkSent, Intake
from bot.commands import is_known, parse_command
from bot.messages import ChatRef, InboundMessage, OutboundMessage
from bot.session_key import build

PROVIDER = "console"
PEER = "local"


class ConsoleChannel:
    """Reads lines from a stream, prints replies; one person, one session."""

    provider = PROVIDER

    def __init__(
        self,
        agent_id: str,
        *,
        agent_name: str = "Switchboard",
        user_name: str = "you",
        reader: asyncio.StreamReader | None = None,
        output: TextIO | None = None,
    ) -> None:
        self.session_key = build(agent_id, PROVIDER, "direct", PEER)
        self.chat = ChatRef(PROVIDER, PEER)
        self._agent_name = agent_name
        self._user_name = user_name
        self._reader = reader
        self._output = output or sys.stdout
        self._stopped = asyncio.Event()

    async def run(self, intake: Intake) -> None:
        reader = self._reader or await _stdin_reader()
        while not self._stopped.is_set():
            read = asyncio.ensure_future(reader.readline())
            stop = asyncio.ensure_future(self._stopped.wait())
            done, _ = await asyncio.wait({read, stop}, return_when=asyncio.FIRST_COMPLETED)
            for task in (read, stop):
                if task not in done:
                    task.cancel()
            if read not in done:
                break
            raw = read.result()
            if not raw:  # end of input
                break
            text = raw.decode("utf-8", errors="replace").strip()
            if text:
                await intake.submit(self._inbound(text))

    def _inbound(self, text: str) -> InboundMessage:
        name = parse_command(text)
        return InboundMessage(
            session_key=self.session_key,
            chat=self.chat,
            sender_id=PEER,
            sender_name=self._user_name,
            text=text,
            # Only known commands: a line like "/etc/hosts is broken" is a message.
            command=name if name is not None and is_known(name) else None,
        )

    async def send(self, message: OutboundMessage, on_chunk: ChunkSent | None = None) -> list[str]:
        if message.skip_chunks:
            return []  # a console reply is one chunk, already printed
        self._output.write(f"{self._agent_name}> {message.text}\n")
        self._output.flush()
        return []

    @asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        yield

    async def stop(self) -> None:
        self._stopped.set()


async def _stdin_reader() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    except ValueError:
        # stdin redirected from a regular file: asyncio cannot watch it, so read it whole.
        reader.feed_data(await asyncio.to_thread(sys.stdin.buffer.read))
        reader.feed_eof()
    return reader
