"""`switchboard chat` on a real terminal: tmux runs it in a pane, the test types, pastes and reads
the screen, while the Messages API stand-in serves the model."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bot.daemon.control import request, socket_path
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest, Response, Text
from tests.harness import API_KEY, FAST, MODEL, ROOT, last_user_line, reply_requests, wait_until

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")

TIMEOUT = 20.0
SLOW = 1.5  # seconds the model takes for a message containing "slowly"


def markdown_echo(request: RecordedRequest) -> Response:
    """Replies in Markdown (the console should render it); "slowly" makes the model take a while."""
    if request.model == FAST:
        return Text('{"relevant": []}')
    line = last_user_line(request)
    return Text(f"re: **{line}**", delay=SLOW if "slowly" in line else 0.0)


class Pane:
    """A command running in its own tmux server's pane: type into it, paste into it, read it."""

    def __init__(self, socket: str) -> None:
        self._socket = socket

    async def tmux(
        self, *args: str, env: dict[str, str] | None = None, check: bool = True, stdin: str | None = None
    ) -> str:
        result = await asyncio.to_thread(
            subprocess.run, ["tmux", "-u", "-L", self._socket, *args],
            capture_output=True, text=True, env=env, input=stdin,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args[:2])} failed: {result.stderr.strip()}")
        return result.stdout

    async def screen(self) -> str:
        """Everything the pane has shown, scrollback included, wrapped lines joined."""
        return await self.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "chat")

    async def wait_for(self, check: Callable[[str], bool], what: str) -> str:
        deadline = time.monotonic() + TIMEOUT
        while True:
            screen = await self.screen()
            if check(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the screen:\n{screen}")
            await asyncio.sleep(0.05)

    async def wait_text(self, text: str) -> str:
        return await self.wait_for(lambda screen: text in screen, repr(text))

    async def prompt(self) -> str:
        """Wait until the prompt is the screen's last line (a reply printing above it is done)."""
        def ready(screen: str) -> bool:
            lines = screen.rstrip().splitlines()
            return bool(lines) and lines[-1].startswith("you>")
        return await self.wait_for(ready, "the prompt")

    async def type(self, text: str) -> None:
        await self.tmux("send-keys", "-t", "chat", "-l", text)

    async def keys(self, *names: str) -> None:
        await self.tmux("send-keys", "-t", "chat", *names)

    async def paste(self, text: str) -> None:
        """Paste as a terminal does: wrapped in bracketed-paste markers when the program asked."""
        await self.tmux("load-buffer", "-b", "paste", "-", stdin=text)
        await self.tmux("paste-buffer", "-p", "-d", "-b", "paste", "-t", "chat")


@pytest.fixture
async def chat(tmp_path: Path, api: AnthropicStandIn) -> AsyncIterator[Pane]:
    """`python -m bot chat --config <file>` in a 120x40 tmux pane; its exit status goes to a file."""
    async with _pane(tmp_path, api, "chat") as pane:
        yield pane


@pytest.fixture
async def run_here(tmp_path: Path, api: AnthropicStandIn) -> AsyncIterator[Pane]:
    """`python -m bot run` on a terminal (as `make run`), the console attached, in a tmux pane."""
    async with _pane(tmp_path, api, "run") as pane:
        yield pane


@asynccontextmanager
async def _pane(tmp_path: Path, api: AnthropicStandIn, command_name: str) -> AsyncIterator[Pane]:
    api.default = markdown_echo
    config = tmp_path / "config.toml"
    config.write_text(f"""
[agent]
name = "Penny"

[database]
path = "{tmp_path / 'state' / 'switchboard.db'}"

[anthropic]
base_url = "{api.base_url}"
model = "{MODEL}"
fast_model = "{FAST}"
timeout = 10.0
max_retries = 1

[semantic]
enabled = "off"

[logging]
level = "INFO"
""", encoding="utf-8")
    command = (f"{shlex.quote(sys.executable)} -m bot {command_name} --config {shlex.quote(str(config))}; "
               f"echo $? > {shlex.quote(str(tmp_path / 'exit'))}; sleep 600")
    env = {key: value for key, value in os.environ.items() if not key.startswith("TMUX")}
    env.update({
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "ANTHROPIC_API_KEY": API_KEY, "LANG": "C.UTF-8", "TERM": "xterm-256color",
    })
    pane = Pane(f"switchboard-test-{uuid.uuid4().hex[:12]}")
    await pane.tmux("new-session", "-d", "-s", "chat", "-x", "120", "-y", "40", "-c", str(tmp_path),
                    command, env=env)
    try:
        yield pane
    finally:
        await pane.tmux("kill-server", check=False)


async def exit_status(tmp_path: Path) -> int:
    path = tmp_path / "exit"
    deadline = time.monotonic() + TIMEOUT
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, "chat did not exit"
        await asyncio.sleep(0.05)
    return int(path.read_text())


async def test_chat_on_a_terminal_prompts_pastes_thinks_renders_and_keeps_logs_out(
    chat: Pane, api: AnthropicStandIn, tmp_path: Path
) -> None:
    """On a terminal, chat shows a prompt, sends a pasted block as one message with one reply,
    shows "thinking…" while the model works, renders Markdown, refuses an over-64-KiB paste in one
    line and goes on, keeps log lines in a file beside the database, and ends with Ctrl-D."""
    await chat.prompt()

    # Line editing: the arrow keys move the cursor instead of landing in the message.
    await chat.type("helo")
    await chat.keys("Left", "Left")
    await chat.type("l")
    await chat.keys("Enter")
    await chat.wait_text("re: hello")
    assert "**" not in await chat.screen()  # Markdown rendered, not shown raw

    await chat.prompt()
    await chat.paste("alpha\nbeta\ngamma")
    await chat.keys("Enter")
    screen = await chat.wait_text("re: gamma")
    assert len(reply_requests(api)) == 2
    pasted = reply_requests(api)[-1].messages[-1]["content"]
    assert all(word in str(pasted) for word in ("alpha", "beta", "gamma"))
    assert "re: alpha" not in screen and "re: beta" not in screen

    await chat.prompt()
    await chat.type("answer slowly")
    await chat.keys("Enter")
    await chat.wait_text("Penny is thinking…")
    await chat.wait_for(lambda s: "re: answer slowly" in s and "thinking…" not in s,
                        "the reply, with the thinking line gone")

    await chat.prompt()
    await chat.paste("x" * (70 * 1024))
    screen = await chat.wait_text("Not sent: that message is 70 KiB; the console takes up to 64 KiB.")
    assert screen.count("Not sent") == 1
    await chat.prompt()
    await chat.type("still here")
    await chat.keys("Enter")
    screen = await chat.wait_text("re: still here")
    assert len(reply_requests(api)) == 4

    for log_sign in ('"event"', "session_key", "[info", "started"):
        assert log_sign not in screen
    log_path = tmp_path / "state" / "switchboard.log"
    assert f"Logging to {log_path}" in screen

    def events() -> list[str]:
        return [json.loads(line)["event"] for line in log_path.read_text().splitlines()]

    # The turn's log line follows its delivery: wait for it rather than race it.
    await wait_until(lambda: events().count("turn") >= 4, timeout=TIMEOUT)
    assert events().count("turn") == 4

    await chat.prompt()
    await chat.keys("C-d")
    assert await exit_status(tmp_path) == 0


async def test_ctrl_c_stops_chat_cleanly(chat: Pane, tmp_path: Path) -> None:
    """Ctrl-C at the prompt stops the chat daemon cleanly (exit status 0), as SIGINT did."""
    await chat.prompt()
    await chat.type("never sent")
    await chat.keys("C-c")
    assert await exit_status(tmp_path) == 0
    log_path = tmp_path / "state" / "switchboard.log"
    assert "stopping" in [json.loads(line)["event"] for line in log_path.read_text().splitlines()]


async def test_run_on_a_terminal_says_what_runs_renders_line_breaks_and_asks_at_ctrl_d(
    run_here: Pane, tmp_path: Path
) -> None:
    """`make run` with the console: it says which channels run, a command's answer keeps its
    lines, and Ctrl-D asks whether to stop: "n" closes only the console (it says so and the daemon
    goes on), and Ctrl-C then stops it cleanly."""
    await run_here.wait_text("Running: no other channel, and this console. Ctrl-D closes it or stops "
                             "Switchboard.")
    await run_here.prompt()
    await run_here.type("/help")
    await run_here.keys("Enter")
    screen = await run_here.wait_text("/whoami")
    lines = [line.strip() for line in screen.splitlines()]
    assert any(line.startswith("/reset") for line in lines), screen  # one command a line
    assert any(line.startswith("/status") for line in lines), screen

    await run_here.prompt()
    await run_here.keys("C-d")
    await run_here.wait_text("Stop Switchboard too? [y/N]")
    await run_here.type("n")
    await run_here.keys("Enter")
    await run_here.wait_text("Console closed; Switchboard goes on running here (Ctrl-C stops it).")
    # Still running: it answers on its control socket after the console closed.
    status = await asyncio.to_thread(request, socket_path(tmp_path / "state" / "switchboard.db"), "status")
    assert status["ok"] and not (tmp_path / "exit").exists()
    await run_here.keys("C-c")
    assert await exit_status(tmp_path) == 0
