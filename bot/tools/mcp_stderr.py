"""An MCP server's stderr, relayed line by line into our log (redacted like every line) and kept
short in memory, so why a server failed to start shows in the log and in `switchboard status`.

A server writing to a pipe nobody reads would block once the pipe fills, so it is always read.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from types import TracebackType
from typing import TextIO

import structlog

log = structlog.get_logger("switchboard.mcp")

_MAX_LINE = 1000


class StderrRelay:
    """A pipe whose write end (`file`) goes to the server process, read here until it closes."""

    def __init__(self, server: str, tail: deque[str]) -> None:
        self._server = server
        self._tail = tail
        self._task: asyncio.Task[None] | None = None
        self._transport: asyncio.ReadTransport | None = None
        read_fd, write_fd = os.pipe()
        self._read = os.fdopen(read_fd, "rb", buffering=0)
        self.file: TextIO = os.fdopen(write_fd, "w", encoding="utf-8")

    async def __aenter__(self) -> StderrRelay:
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), self._read)
        self._task = asyncio.create_task(self._relay(reader), name=f"mcp {self._server} stderr")
        return self

    def spawned(self) -> None:
        """The process holds its own copy of the write end now: ours closes, so the relay ends
        when the server (and anything it started) has gone."""
        self.file.close()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.file.close()
        if self._task is not None:
            # The last lines (why it exited) arrive with the process's end; a descendant that
            # keeps the pipe open must not hold us up.
            await asyncio.wait([self._task], timeout=1.0)
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._transport is not None:
            self._transport.close()
        else:
            self._read.close()

    async def _relay(self, reader: asyncio.StreamReader) -> None:
        pending = b""
        while chunk := await reader.read(4096):
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                self._emit(line)
            if len(pending) > _MAX_LINE:
                self._emit(pending)
                pending = b""
        if pending:
            self._emit(pending)

    def _emit(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip()
        if not line.strip():
            return
        line = line[:_MAX_LINE]
        self._tail.append(line)
        with contextlib.suppress(Exception):  # a log line must never stop the relay
            log.info("mcp server stderr", server=self._server, line=line)
