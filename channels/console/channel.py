"""The console channel: a local terminal (or any pair of streams) as session `…:console:direct:local`.

On a terminal it is interactive (channels/console/terminal.py: a prompt with line editing and
history, pasted blocks as one message, "thinking…", Markdown replies). Anywhere else (a pipe, a
file, the tests) it reads plain lines and prints plain replies.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TextIO

from bot.core.messages import ChatRef, InboundMessage, OutboundMessage
from bot.core.session_key import build
from bot.intake.channel import ChunkSent, Intake
from bot.intake.commands import is_known, parse_command
from channels.console.limits import MAX_MESSAGE_BYTES, too_long

if TYPE_CHECKING:
    from channels.console.terminal import TerminalConsole

PROVIDER = "console"
PEER = "local"
# One message at most this big: a pasted log this size is almost surely a mistake, and it would
# crowd everything else out of the model's context.
_READ_SIZE = 64 * 1024


class ConsoleChannel:
    """Reads messages from a terminal or a stream, prints replies; one person, one session."""

    provider = PROVIDER

    def __init__(
        self,
        agent_id: str,
        *,
        agent_name: str = "Switchboard",
        user_name: str = "you",
        reader: asyncio.StreamReader | None = None,
        output: TextIO | None = None,
        interactive: bool | None = None,
        detachable: bool = False,
    ) -> None:
        self.session_key = build(agent_id, PROVIDER, "direct", PEER)
        self.chat = ChatRef(PROVIDER, PEER)
        self._agent_name = agent_name
        self._user_name = user_name
        self._reader = reader
        self._output = output or sys.stdout
        if interactive is None:
            interactive = reader is None and output is None and sys.stdin.isatty() and sys.stdout.isatty()
        self._interactive = interactive
        self._terminal: TerminalConsole | None = None
        self._stopped = asyncio.Event()
        # `switchboard run`: the daemon serves other channels and can go on without this one, so
        # Ctrl-D asks whether to stop it or only leave; under `chat` Ctrl-D ends the chat.
        self._detachable = detachable

    async def run(self, intake: Intake) -> None:
        if self._interactive:
            await self._run_terminal(intake)
        else:
            await self._run_lines(intake)

    async def _run_lines(self, intake: Intake) -> None:
        reader = self._reader or await _stdin_reader()
        async for text in _lines(reader, self._stopped, self.notice):
            if text:
                await intake.submit(self._inbound(text))

    async def _run_terminal(self, intake: Intake) -> None:
        from channels.console.terminal import TerminalConsole

        terminal = self._terminal = TerminalConsole(
            agent_name=self._agent_name, user_name=self._user_name, max_bytes=MAX_MESSAGE_BYTES
        )
        while not self._stopped.is_set():
            try:
                text = await terminal.read()
            except KeyboardInterrupt:
                # The prompt takes the terminal out of cooked mode, so Ctrl-C arrives as a key:
                # hand it to the daemon as the signal it was (a clean stop), then wait for it.
                signal.raise_signal(signal.SIGINT)
                await self._stopped.wait()
                return
            if text is None:  # Ctrl-D, or the daemon is stopping
                if self._detachable and not self._stopped.is_set():
                    await self._leave(terminal)
                return
            text = text.strip()
            if len(text.encode()) > MAX_MESSAGE_BYTES:
                self.notice(too_long(len(text.encode()), MAX_MESSAGE_BYTES))
            elif text:
                await intake.submit(self._inbound(text))

    async def _leave(self, terminal: TerminalConsole) -> None:
        """Ctrl-D under `run`: stop the daemon (yes, or Ctrl-D again) or only close the console."""
        answer = await terminal.ask("Stop Switchboard too? [y/N] (no: only this console closes) ")
        if answer is None or answer.strip().lower() in ("y", "yes"):
            signal.raise_signal(signal.SIGTERM)  # the daemon's own clean stop
            await self._stopped.wait()
            return
        terminal.notice("Console closed; Switchboard goes on running here (Ctrl-C stops it).")

    def started(self, channels: list[str]) -> None:
        """Say, on the terminal, which channels the daemon started (the log is in a file)."""
        if self._interactive:  # plain output stays exactly the replies
            others = [name for name in channels if name != PROVIDER]
            running = ", ".join(others) if others else "no other channel"
            self.notice(f"Running: {running}, and this console. Ctrl-D closes it"
                         + (" or stops Switchboard." if self._detachable else "."))

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

    def notice(self, text: str) -> None:
        """A line that is not a reply (a refused paste, a setup problem, what runs)."""
        if self._terminal is not None:
            self._terminal.notice(text)
        else:
            self._output.write(f"{text}\n")
            self._output.flush()

    async def send(self, message: OutboundMessage, on_chunk: ChunkSent | None = None) -> list[str]:
        if message.skip_chunks:
            return []  # a console reply is one chunk, already printed
        if self._terminal is not None:
            self._terminal.show_reply(message.text)
        else:
            self._output.write(f"{self._agent_name}> {message.text}\n")
            self._output.flush()
        # The terminal has no message ids: a local one says the reply was shown (the turn's log
        # line counts it as delivered, and the outbox records it like any platform's).
        shown = f"shown-{time.time_ns()}"
        if on_chunk is not None:
            await on_chunk(0, shown)
        return [shown]

    @asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        if self._terminal is None:  # plain output stays exactly the replies
            yield
            return
        async with self._terminal.thinking():
            yield

    async def stop(self) -> None:
        self._stopped.set()
        if self._terminal is not None:
            self._terminal.close()


async def _lines(
    reader: asyncio.StreamReader, stopped: asyncio.Event, notice: Callable[[str], None]
) -> AsyncIterator[str]:
    """Stripped lines from `reader` until end of input or `stopped`; a line over the limit is
    skipped with one notice (StreamReader.readline would raise on it and lose the rest)."""
    pending = b""
    skipping = 0  # bytes of an over-long line seen so far; 0 when not inside one
    while not stopped.is_set():
        read = asyncio.ensure_future(reader.read(_READ_SIZE))
        stop = asyncio.ensure_future(stopped.wait())
        done, _ = await asyncio.wait({read, stop}, return_when=asyncio.FIRST_COMPLETED)
        for task in (read, stop):
            if task not in done:
                task.cancel()
        if read not in done:
            return
        chunk = read.result()
        if not chunk:  # end of input
            break
        *complete, pending = (pending + chunk).split(b"\n")
        for line in complete:
            if skipping:
                notice(too_long(skipping + len(line), MAX_MESSAGE_BYTES))
                skipping = 0
            elif len(line) > MAX_MESSAGE_BYTES:
                notice(too_long(len(line), MAX_MESSAGE_BYTES))
            else:
                yield line.decode("utf-8", errors="replace").strip()
        if len(pending) > MAX_MESSAGE_BYTES:
            skipping += len(pending)
            pending = b""
    if skipping:
        notice(too_long(skipping + len(pending), MAX_MESSAGE_BYTES))
    elif pending:
        yield pending.decode("utf-8", errors="replace").strip()


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
