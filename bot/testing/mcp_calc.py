"""A small MCP server ("calc"), written with the SDK's own server and run over stdio.

    python -m bot.testing.mcp_calc [--pidfile PATH] [--say-env NAME] [--exit-at-start]
                                   [--sleep-at-start SECONDS]

The suite's MCP tests, `switchboard doctor`'s tests and `bench.mcp_soak` start it as the program
of an `[[mcp_servers]]` entry (`server_entry` writes one). Its tools cover what a real server does
and what goes wrong with one: `add`, `echo`, `env` and `pid` answer; `fail` raises (a tool error);
`crash` ends the process mid-call; `slow` answers late; `hang` blocks the whole server, pings
included; `grow` adds a `square` tool and says the list changed; `notes.read` has a name Anthropic
tool names may not contain.

`--pidfile` appends the process id at every start (so a caller can count starts and check that
every process has gone), `--say-env` writes an environment variable's value to stderr at start
(the daemon's log must redact it), `--exit-at-start` fails before the handshake, saying why on
stderr, `--sleep-at-start` is slow to answer it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bot.testing.mcp_calc")
    parser.add_argument("--pidfile")
    parser.add_argument("--say-env")
    parser.add_argument("--exit-at-start", action="store_true")
    parser.add_argument("--sleep-at-start", type=float, default=0.0)
    return parser.parse_args(argv)


def _begin(args: argparse.Namespace) -> None:
    """A start's first steps; `--exit-at-start` ends the process here."""
    if args.pidfile:
        with open(args.pidfile, "a", encoding="utf-8") as out:
            out.write(f"{os.getpid()}\n")
    if args.say_env:
        print(f"starting with {args.say_env}={os.environ.get(args.say_env)}", file=sys.stderr, flush=True)
    if args.exit_at_start:
        print("calc: cannot open the abacus", file=sys.stderr, flush=True)
        sys.exit(2)


# Run as a program, a start that fails does so before the SDK's import (most of a start's CPU time:
# a daemon restarts a failing server again and again while a test runs).
_STARTED = _arguments(None) if __name__ == "__main__" else None
if _STARTED is not None:
    _begin(_STARTED)

# At module level: the SDK finds a tool's Context parameter by resolving its annotation here.
from mcp.server.mcpserver import Context, MCPServer  # noqa: E402

# The process an `[[mcp_servers]]` entry runs: this module, under the interpreter running now.
COMMAND = sys.executable
ARGS = ("-m", "bot.testing.mcp_calc")


def server_entry(name: str = "calc", *args: str, **options: Any) -> dict[str, Any]:
    """An `[[mcp_servers]]` table running this server as `name`, with its command-line `args`
    (`--pidfile`, …) and any other keys of the entry (`env`, `tools`, `call_timeout`, …)."""
    return {"name": name, "command": COMMAND, "args": [*ARGS, *args], **options}


def build() -> MCPServer:
    """The server with its tools."""
    server = MCPServer("calc", log_level="ERROR")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool()
    def fail(reason: str) -> str:
        """Always raise an error with the reason given."""
        raise ValueError(reason)

    @server.tool()
    def crash() -> str:
        """End this server's process at once, mid-call."""
        os._exit(1)

    @server.tool()
    def env(name: str) -> str:
        """The value of an environment variable in this process, or <unset>."""
        return os.environ.get(name, "<unset>")

    @server.tool()
    def pid() -> int:
        """This server's process id."""
        return os.getpid()

    @server.tool()
    def slow(seconds: float) -> str:
        """Answer after the given number of seconds."""
        time.sleep(seconds)
        return "done"

    @server.tool()
    async def hang(seconds: float) -> str:
        """Block this whole server (pings included) for the given number of seconds."""
        time.sleep(seconds)  # noqa: ASYNC251 - blocking the server's loop is the point
        return "woke up"

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add a `square` tool and tell the client the tool list changed."""

        def square(x: int) -> int:
            """The square of an integer."""
            return x * x

        server.add_tool(square, name="square")
        await ctx.request_context.session.send_tool_list_changed()
        return "grown"

    @server.tool(name="notes.read")
    def notes_read() -> str:
        """A tool whose name has a character Anthropic tool names may not contain."""
        return "no notes"

    return server


def main(argv: Sequence[str] | None = None) -> None:
    args = _arguments(argv)
    _begin(args)
    serve(args)


def serve(args: argparse.Namespace) -> None:
    time.sleep(args.sleep_at_start)
    build().run("stdio")


if _STARTED is not None:
    serve(_STARTED)
