"""One MCP server kept running: started over stdio with the SDK, its tools listed, restarted after a
crash with capped backoff, and stopped cleanly.

While the server is down (starting, crashed, waiting to restart) it offers no tools, so the model
is never shown a tool that cannot answer. A call that was under way when it crashed, or that runs
past the configured timeout, becomes an error result the model reads.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import AsyncIterable, Callable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Literal

import anyio
import mcp_types as types
import structlog
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from bot.config import McpServerConfig
from bot.core.errors import describe
from bot.core.restart_delay import MAX_RESTART_DELAY, RESTART_DELAY
from bot.tools.base import ToolResult
from bot.tools.mcp_stderr import StderrRelay
from bot.tools.mcp_tools import McpTool, offered_tools, tool_result

log = structlog.get_logger("switchboard.mcp")

State = Literal["starting", "running", "restarting", "error", "stopped"]
# A server that fails is started again after RESTART_DELAY, doubling up to MAX_RESTART_DELAY (as a
# channel is); one that ran at least as long as the cap before failing starts again after the first.
# Starting the process, the handshake and listing its tools (`npx` may download the server first).
START_TIMEOUT = 60.0
_MAX_PAGES = 100
CLIENT = types.Implementation(name="switchboard", version="0.1.0")


class MissingEnvironmentError(Exception):
    """A variable the server's `env` names is not set: starting it again cannot help."""


class UnresponsiveError(Exception):
    """The server let a call time out and then did not answer a ping either: it is started again."""


class McpServer:
    """Supervises one configured server; `tools` are those offered now (none while it is down)."""

    def __init__(
        self, config: McpServerConfig, *, resolve: Callable[[str], Path], on_change: Callable[[], None],
        restart_delay: float = RESTART_DELAY, max_restart_delay: float = MAX_RESTART_DELAY,
    ) -> None:
        self.config = config
        self._resolve = resolve
        self._on_change = on_change
        self._restart_delay = restart_delay
        self._max_restart_delay = max_restart_delay
        self.state: State = "starting"
        self.error: str | None = None
        self.restarts = 0
        self.tools: tuple[McpTool, ...] = ()
        self._session: ClientSession | None = None
        self._listing: tuple[types.Tool, ...] = ()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._starting: anyio.CancelScope | None = None  # the handshake under way, for a prompt stop
        self._stderr: deque[str] = deque(maxlen=5)
        self._hung = asyncio.Event()
        self._pings: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return self.config.name

    def start(self) -> None:
        self._task = asyncio.create_task(self._supervise(), name=f"mcp {self.name}")

    async def stop(self, timeout: float = 15.0) -> None:
        """Shut the server down as the SDK does (stdin closed, then SIGTERM, then SIGKILL to its
        process group), waiting for it; cancelling is only the last resort past `timeout`."""
        self._stop.set()
        if self._starting is not None:
            self._starting.cancel()
        for ping in self._pings:
            ping.cancel()
        task = self._task
        if task is None:
            return
        done, _ = await asyncio.wait([task], timeout=timeout)
        if not done:
            log.warning("mcp server did not stop in time; cancelling it", server=self.name)
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if self.state != "stopped":  # cancelled before it could say so itself
            self._down("stopped", self.error)

    def reconfigure(self, config: McpServerConfig) -> None:
        """Apply a change that needs no new process (allowed tools, read-only tools, timeout)."""
        self.config = config
        if self._session is not None:
            self._offer(self._session, self._listing)

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state, "error": self.error, "restarts": self.restarts,
                "tools": [tool.name for tool in self.tools]}

    # -- calls -----------------------------------------------------------------------------------

    async def call(self, remote_name: str, arguments: Mapping[str, Any]) -> ToolResult:
        session = self._session
        if session is None or all(tool.remote_name != remote_name for tool in self.tools):
            return ToolResult.error(f"the {self.name} MCP server is not available now ({self.state}); "
                                    "its tools are back when it has restarted")
        timeout = self.config.timeout
        try:
            result = await session.call_tool(remote_name, dict(arguments), read_timeout_seconds=timeout)
        except MCPError as exc:
            if exc.code == types.REQUEST_TIMEOUT:
                self._check_alive(session)
                return ToolResult.error(f"{remote_name} did not answer within {timeout:g} s")
            if exc.code == types.CONNECTION_CLOSED:
                self._lost(session)
                return ToolResult.error(f"the {self.name} MCP server stopped during the call; "
                                        "it is being restarted")
            return ToolResult.error(exc.message)
        except Exception as exc:  # a result the SDK refuses (bad shape, input it would need)
            log.warning("mcp call failed", server=self.name, tool=remote_name, error=_describe(exc),
                        exc_info=True)
            return ToolResult.error(_describe(exc))
        return tool_result(result)

    def _check_alive(self, session: ClientSession) -> None:
        """After a timeout, ping the server: one that does not answer within `timeout` either is
        hung, and is started again rather than left to time out every call."""

        async def ping() -> None:
            try:
                with anyio.fail_after(self.config.timeout):
                    await session.send_ping()
            except Exception:
                # The restart that follows says so at warning; why the ping failed is detail.
                log.debug("mcp ping failed", server=self.name, exc_info=True)
                if self._session is session:
                    self._hung.set()

        task = asyncio.create_task(ping(), name=f"mcp {self.name} ping")
        self._pings.add(task)
        task.add_done_callback(self._pings.discard)

    # -- supervision -----------------------------------------------------------------------------

    async def _supervise(self) -> None:
        loop = asyncio.get_running_loop()
        delay = self._restart_delay
        while not self._stop.is_set():
            began = loop.time()
            try:
                await self._serve()
                error = None if self._stop.is_set() else self._exited("the server exited")
            except MissingEnvironmentError as exc:
                self._down("error", str(exc))
                log.error("mcp server not started", server=self.name, error=str(exc))
                return
            except Exception as exc:
                error = self._exited(_describe(exc))
                log.debug("mcp server session ended", server=self.name, exc_info=True)
            if error is None:
                break
            if loop.time() - began >= self._max_restart_delay:
                delay = self._restart_delay
            self.restarts += 1
            self._down("restarting", error)
            log.warning("mcp server stopped; restarting it", server=self.name, error=error,
                        restarts=self.restarts, restart_in=delay)
            stop = asyncio.ensure_future(self._stop.wait())
            await asyncio.wait([stop], timeout=delay)
            stop.cancel()
            delay = min(delay * 2, self._max_restart_delay)
        self._down("stopped", self.error)
        log.info("mcp server stopped", server=self.name)

    async def _serve(self) -> None:
        """One life of the process: start, handshake, list tools, offer them until it ends or we stop."""
        params = StdioServerParameters(command=self._command(), args=list(self.config.args),
                                       env=self._environment())
        self._stderr.clear()
        self._hung.clear()
        closed, relist = asyncio.Event(), asyncio.Event()

        async def on_message(message: types.ServerNotification | Exception) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                relist.set()

        async with AsyncExitStack() as stack:
            stderr = await stack.enter_async_context(StderrRelay(self.name, self._stderr))
            read, write = await stack.enter_async_context(stdio_client(params, errlog=stderr.file))
            stderr.spawned()
            # The session reads through this pump, which tells us when the server's output ends.
            forward, session_read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            group = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(group.cancel_scope.cancel)
            group.start_soon(_pump, read, forward, closed)
            session = await stack.enter_async_context(
                ClientSession(session_read, write, client_info=CLIENT, message_handler=on_message))
            listing: tuple[types.Tool, ...] | None = None
            try:
                with anyio.move_on_after(START_TIMEOUT) as self._starting:
                    await session.initialize()
                    listing = await _list_tools(session)
            finally:
                self._starting = None
            if listing is None:
                if self._stop.is_set():  # stopped while it started
                    return
                raise TimeoutError
            self._offer(session, listing)
            log.info("mcp server running", server=self.name, tools=[t.name for t in self.tools])
            try:
                while (event := await _first(closed, self._stop, relist, self._hung)) is relist:
                    relist.clear()
                    await self._relist(session)
                if event is self._hung and not self._stop.is_set():
                    raise UnresponsiveError(f"it stopped answering (a call and then a ping got no answer "
                                            f"within {self.config.timeout:g} s)")
            finally:
                self._lost(session)

    async def _relist(self, session: ClientSession) -> None:
        """The server said its tools changed: offer the new list (the old one stays if listing fails)."""
        try:
            with anyio.fail_after(self.config.timeout):
                listing = await _list_tools(session)
        except Exception as exc:
            error = f"no answer within {self.config.timeout:g} s" if isinstance(exc, TimeoutError) else exc
            log.warning("mcp server's new tool list could not be read; the old one stays",
                        server=self.name, error=str(error), exc_info=not isinstance(exc, TimeoutError))
            return
        self._offer(session, listing)
        log.info("mcp server's tools changed", server=self.name, tools=[t.name for t in self.tools])

    def _offer(self, session: ClientSession, listing: tuple[types.Tool, ...]) -> None:
        config = self.config
        names = {tool.name for tool in listing}
        unknown = sorted(set(config.tools or ()) - names)
        if unknown:
            log.warning("mcp_servers.tools names tools the server does not list", server=self.name,
                        unknown=unknown, listed=sorted(names))
        self._session, self._listing, self.state = session, listing, "running"
        self.tools = offered_tools(self, listing, config.tools, config.read_only_tools)
        self._on_change()

    def _lost(self, session: ClientSession) -> None:
        """Take the tools out as soon as the session is known to be gone."""
        if self._session is session:
            self._down("restarting" if not self._stop.is_set() else "stopped", self.error)

    def _down(self, state: State, error: str | None) -> None:
        self._session, self.tools, self.state, self.error = None, (), state, error
        self._on_change()

    def _exited(self, error: str) -> str:
        last = self._stderr[-1] if self._stderr else None
        return f"{error} (stderr: {last})" if last else error

    def _command(self) -> str:
        command = self.config.command
        # A path relative to config.toml is found from there; a bare name is looked up on PATH.
        return str(self._resolve(command)) if "/" in command else command

    def _environment(self) -> dict[str, str]:
        """The variables `env` names, from the daemon's environment (values never logged)."""
        missing = [name for name in self.config.env if name not in os.environ]
        if missing:
            raise MissingEnvironmentError(
                f"environment variable {', '.join(missing)} named in mcp_servers.env is not set; "
                "export it for the daemon and restart")
        return {name: os.environ[name] for name in self.config.env}


async def _first(*events: asyncio.Event) -> asyncio.Event:
    """Wait until one of the events is set; the first set (in the order given) is returned."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waits:
            waiter.cancel()
    return next(event for event in events if event.is_set())


async def _list_tools(session: ClientSession) -> tuple[types.Tool, ...]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tuple(tools)


async def _pump(
    source: AsyncIterable[SessionMessage | Exception],
    sink: MemoryObjectSendStream[SessionMessage | Exception],
    closed: asyncio.Event,
) -> None:
    try:
        async with sink:
            async for item in source:
                await sink.send(item)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    finally:
        closed.set()


def _describe(exc: BaseException) -> str:
    """One line for an error; the SDK's task groups wrap the real one in exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return f"no answer to the handshake and tool listing within {START_TIMEOUT:g} s"
    if isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED:
        return "the server exited before it answered"
    if isinstance(exc, UnresponsiveError):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return f"could not start it: {exc.strerror}" + (f": {exc.filename}" if exc.filename else "")
    return describe(exc)
