"""The control socket: a local unix socket where `switchboard status` and `reload` reach the daemon.

One request per connection, one JSON object per line each way: `{"command": "status"}` in,
`{"ok": true, ...}` or `{"ok": false, "error": "..."}` out. The socket lives next to the database
with mode 0600, so only the daemon's own user can use it; there is no TCP port.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import socket
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import structlog

from bot.core.errors import BotError, describe

log = structlog.get_logger("switchboard.control")

SOCKET_NAME = "switchboard.sock"
Handler = Callable[[], Awaitable[dict[str, Any]]]
_MAX_REQUEST = 4096
_MAX_SOCKET_PATH = 107  # sun_path's 108 bytes, less the terminating NUL


class NotRunningError(BotError):
    """No daemon answers on the control socket."""


def socket_path(database: Path) -> Path:
    """Where the daemon using this database listens: next to the file, in its state directory.

    A unix socket's path has room for 107 bytes; where the state directory is deeper than that,
    the socket goes to the user's runtime directory (or, where that is deep too, the temporary one)
    under a name derived from the database's path, so the daemon and every command agree on it.
    """
    beside = database.parent / SOCKET_NAME
    if len(os.fsencode(beside)) <= _MAX_SOCKET_PATH:
        return beside
    name = f"switchboard-{hashlib.sha256(os.fsencode(os.path.abspath(database))).hexdigest()[:16]}.sock"
    places = [Path(folder) / name for folder in (os.environ.get("XDG_RUNTIME_DIR"), tempfile.gettempdir())
              if folder]
    return next((place for place in places if len(os.fsencode(place)) <= _MAX_SOCKET_PATH), places[-1])


@asynccontextmanager
async def serving(path: Path, handlers: Mapping[str, Handler]) -> AsyncIterator[bool]:
    """Serve the commands on `path` while the block runs; yields False when it could not be bound.

    A socket file left by a crashed daemon is replaced; one a live daemon answers on is left
    alone (this daemon then runs without a control socket, and says so).
    """
    if answers(path):
        log.error("another daemon answers on the control socket; this one serves none", socket=str(path))
        yield False
        return
    _remove(path)  # left by a daemon that crashed

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            reply = await _dispatch(await reader.readline(), handlers)
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client gave up; nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    try:
        server = await asyncio.start_unix_server(handle, path, limit=_MAX_REQUEST)
        os.chmod(path, 0o600)
    except OSError as exc:
        log.error("control socket not available; `switchboard status` will not reach this daemon",
                  socket=str(path), error=str(exc))
        yield False
        return
    try:
        yield True
    finally:
        server.close()
        # Connections in progress (a status request) are not waited for: stopping must not hang.
        _remove(path)


async def _dispatch(line: bytes, handlers: Mapping[str, Handler]) -> dict[str, Any]:
    try:
        request = json.loads(line)
        command = request["command"]
    except (ValueError, TypeError, KeyError):
        return {"ok": False, "error": 'expected one JSON line such as {"command": "status"}'}
    handler = handlers.get(command) if isinstance(command, str) else None
    if handler is None:
        return {"ok": False, "error": f"unknown command {command!r}; known: {', '.join(sorted(handlers))}"}
    try:
        return {"ok": True, **await handler()}
    except Exception as exc:  # an answer, not a dead socket, tells the admin what went wrong
        log.exception("control command failed", command=command)
        return {"ok": False, "error": describe(exc)}


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)


def answers(path: Path) -> bool:
    """Whether a daemon listens on the control socket at `path`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def request(path: Path, command: str, *, timeout: float = 60.0) -> dict[str, Any]:
    """Send one command to the daemon and return its answer; NotRunningError when none listens."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        try:
            conn.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise NotRunningError(f"not running (no daemon listens on {path})") from exc
        except PermissionError as exc:
            raise BotError(
                f"no permission to use {path}: run this as the daemon's user "
                "(e.g. `sudo -u switchboard switchboard ...`)"
            ) from exc
        conn.sendall(json.dumps({"command": command}).encode() + b"\n")
        with conn.makefile("rb") as answer:
            line = answer.readline()
    if not line:
        raise BotError(f"the daemon closed {path} without answering")
    reply: dict[str, Any] = json.loads(line)
    return reply
