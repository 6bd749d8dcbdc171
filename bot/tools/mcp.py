"""The MCP servers of a config, as one tool source: started with the daemon, changed by a reload,
stopped with it; the tools offered are those of the servers running now, in a stable order.

Every tool keeps its server's name as a prefix (`files__read_file`), so two servers may both have
a `search`. Tools count as writing unless `read_only_tools` names them: what a tool of someone
else's server changes cannot be known, so by default shared chats allow them to admins only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import structlog

from bot.config import Config, McpServerConfig
from bot.core.restart_delay import MAX_RESTART_DELAY, RESTART_DELAY
from bot.tools.base import Tool
from bot.tools.mcp_plan import plan_mcp_servers

if TYPE_CHECKING:  # the SDK is imported only when a server is configured (0.4 s, 40 MB otherwise)
    from bot.tools.mcp_server import McpServer

log = structlog.get_logger("switchboard.mcp")


class McpManager:
    """Runs the enabled `[[mcp_servers]]`; a `ToolSource` whose tools follow their servers' state."""

    def __init__(
        self, config: Config, *, restart_delay: float = RESTART_DELAY,
        max_restart_delay: float = MAX_RESTART_DELAY,
    ) -> None:
        self._config = config
        self._restart_delay = restart_delay
        self._max_restart_delay = max_restart_delay
        self._servers: dict[str, McpServer] = {}
        self._tools: tuple[Tool, ...] = ()
        self._running = False

    async def __aenter__(self) -> McpManager:
        self._running = True
        for server in self._config.mcp_servers:
            if server.enabled:
                self._start(server)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def tools(self) -> Sequence[Tool]:
        """The tools of the servers running now: servers in config order, tools by name."""
        return self._tools

    def status(self) -> list[dict[str, Any]]:
        """Each server's state (starting, running, restarting, error, stopped), last error and tools."""
        return [server.status() for server in self._servers.values()]

    async def reconfigure(self, config: Config) -> dict[str, list[str]]:
        """Apply a reloaded config: servers removed or with a new command, args or env stop (and
        start again if still there), new ones start, others take the new tool lists and timeout."""
        plan = plan_mcp_servers(self._config, config)
        self._config = config
        if not self._running:
            return {"started": [], "stopped": [], "updated": []}
        await asyncio.gather(*(self._servers.pop(name).stop() for name in plan.stop if name in self._servers))
        wanted = {s.name: s for s in config.mcp_servers if s.enabled}
        for name in plan.update:
            self._servers[name].reconfigure(wanted[name])
        for name in plan.start:
            self._start(wanted[name])
        # Keep the config order (status and the tools offered follow it).
        self._servers = {name: self._servers[name] for name in wanted if name in self._servers}
        self._refresh()
        return {"started": plan.start, "stopped": plan.stop, "updated": plan.update}

    async def close(self) -> None:
        """Stop every server and wait until its process has gone."""
        self._running = False
        servers = list(self._servers.values())
        await asyncio.gather(*(server.stop() for server in servers))
        self._refresh()

    def _start(self, config: McpServerConfig) -> None:
        from bot.tools.mcp_server import McpServer

        server = McpServer(config, resolve=self._config.resolve, on_change=self._refresh,
                           restart_delay=self._restart_delay, max_restart_delay=self._max_restart_delay)
        self._servers[config.name] = server
        log.info("starting mcp server", server=config.name, command=config.command, env=config.env)
        server.start()

    def _refresh(self) -> None:
        self._tools = tuple(tool for server in self._servers.values() for tool in server.tools)
