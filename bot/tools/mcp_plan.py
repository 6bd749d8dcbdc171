"""What a reload does to the MCP servers: a pure function of the old and the new config."""

from __future__ import annotations

from dataclasses import dataclass

from bot.config import Config


@dataclass(frozen=True, slots=True)
class McpPlan:
    """What a reload does to the MCP servers, by name: `stop` and `start` (a changed command, args
    or env is in both: its process starts again), and `update` (allowed tools or timeout, applied
    to the running process)."""

    start: list[str]
    stop: list[str]
    update: list[str]


def plan_mcp_servers(old: Config, new: Config) -> McpPlan:
    """The servers to stop, start and update when `new` replaces `old` (disabled ones do not run)."""
    before = {s.name: s for s in old.mcp_servers if s.enabled}
    after = {s.name: s for s in new.mcp_servers if s.enabled}
    relaunch = [name for name in before.keys() & after.keys()
                if before[name].launch_key() != after[name].launch_key()]
    stop = sorted(before.keys() - after.keys() | set(relaunch))
    start = [s.name for s in new.mcp_servers if s.enabled and (s.name not in before or s.name in relaunch)]
    update = sorted(name for name in before.keys() & after.keys()
                    if name not in relaunch and before[name] != after[name])
    return McpPlan(start, stop, update)
