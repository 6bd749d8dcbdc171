"""The console on a real terminal: a prompt with editing and history, "thinking…", Markdown replies.

prompt_toolkit owns the input line (arrow keys, history, bracketed paste: a pasted block is one
message) and rich renders replies; anything printed while the prompt is up goes above it.
"""

from __future__ import annotations

import asyncio
import io
import shutil
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from prompt_toolkit import PromptSession
from prompt_toolkit.formatted_text import ANSI, FormattedText
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.keys import Keys
from prompt_toolkit.shortcuts import print_formatted_text
from prompt_toolkit.styles import Style
from rich.console import Console
from rich.markdown import Markdown
from rich.padding import Padding

from channels.console.limits import too_long

_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_STYLE = Style.from_dict({
    "you": "bold",
    "bottom-toolbar": "noreverse",
    "thinking": "italic fg:ansicyan",
})


class TerminalConsole:
    """The terminal side of the console channel: reads messages, shows replies and notices."""

    def __init__(self, *, agent_name: str, user_name: str, max_bytes: int) -> None:
        self._agent_name = agent_name
        self._max_bytes = max_bytes
        self._thinking = 0
        self._session: PromptSession[str] = PromptSession(
            FormattedText([("class:you", f"{user_name}> ")]),
            history=InMemoryHistory(),
            key_bindings=self._bindings(),
            style=_STYLE,
            bottom_toolbar=self._toolbar,
            prompt_continuation=lambda width, line, wrap: " " * width,
        )

    async def read(self) -> str | None:
        """The next message typed or pasted; None at Ctrl-D on an empty line.

        Ctrl-C raises KeyboardInterrupt, as it would without the prompt.
        """
        try:
            # prompt_toolkit must not take SIGINT from the daemon, which stops on it.
            return await self._session.prompt_async(handle_sigint=False)
        except EOFError:
            return None

    async def ask(self, question: str) -> str | None:
        """One answer typed at `question`; None at Ctrl-D."""
        try:
            return await PromptSession[str]().prompt_async(question, handle_sigint=False)
        except EOFError:
            return None

    def close(self) -> None:
        """End a prompt in progress (the daemon is stopping); read() then returns None."""
        app = self._session.app
        if app.is_running and not app.is_done:
            app.exit(exception=EOFError())

    def show_reply(self, text: str) -> None:
        width = shutil.get_terminal_size().columns
        buffer = io.StringIO()
        console = Console(file=buffer, force_terminal=True, width=max(20, width), highlight=False,
                          emoji=False)
        console.print(f"[bold cyan]{_escape(self._agent_name)}[/]")
        console.print(Padding(Markdown(hard_breaks(text), hyperlinks=False), (0, 0, 0, 2)))
        print_formatted_text(ANSI(buffer.getvalue()), end="")

    def notice(self, text: str) -> None:
        print_formatted_text(FormattedText([("fg:ansiyellow", text)]))

    @asynccontextmanager
    async def thinking(self) -> AsyncIterator[None]:
        """Show '<agent> is thinking…' under the prompt, spinning, until the block exits."""
        self._thinking += 1
        spin = asyncio.create_task(self._spin())
        try:
            yield
        finally:
            self._thinking -= 1
            spin.cancel()
            self._redraw()

    async def _spin(self) -> None:
        while True:
            self._redraw()
            await asyncio.sleep(0.1)

    def _redraw(self) -> None:
        app = self._session.app
        if app.is_running:
            app.invalidate()

    def _toolbar(self) -> Any:
        if not self._thinking:
            return None
        frame = _SPINNER[int(time.monotonic() * 10) % len(_SPINNER)]
        return FormattedText([("class:thinking", f"{frame} {self._agent_name} is thinking…")])

    def _bindings(self) -> KeyBindings:
        bindings = KeyBindings()

        @bindings.add(Keys.BracketedPaste)
        def _paste(event: KeyPressEvent) -> None:
            # A paste too big to send is refused whole: inserting it would fill the screen first.
            data = event.data.replace("\r\n", "\n").replace("\r", "\n")
            size = len(data.encode()) + len(event.current_buffer.text.encode())
            if size > self._max_bytes:
                self.notice(too_long(size, self._max_bytes))
                return
            event.current_buffer.insert_text(data)

        return bindings


def hard_breaks(text: str) -> str:
    """Markdown whose line breaks stay breaks, as a chat shows them (a command's answer, a list
    the model wrote line by line); Markdown alone would join lines into one paragraph. Fenced code
    is left as it is."""
    lines = text.split("\n")
    fenced = False
    for index, line in enumerate(lines[:-1]):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced and line.strip() and lines[index + 1].strip():
            lines[index] = line.rstrip() + "  "  # CommonMark's hard line break (ignored at a block's end)
    return "\n".join(lines)


def _escape(text: str) -> str:
    return text.replace("[", r"\[")
