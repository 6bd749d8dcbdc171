"""The `[[mcp_servers]]` entries: MCP servers the daemon runs over stdio and whose tools it offers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field, field_validator

from bot.config.fields import EnvName, PosFloat, Section

# An MCP tool's own name as its server lists it (the spec allows letters, digits, `_-./`).
McpToolName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_./-]{1,128}$")]


class McpServerConfig(Section):
    """One MCP server: how to start it, what it may see, which of its tools the model is offered."""

    # The prefix of its tools as the model sees them (`name__tool`), so short and plain.
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")]
    command: Annotated[str, Field(min_length=1)]
    args: list[str] = Field(default_factory=list)
    # Names of environment variables passed on to the server; their values stay in the environment.
    env: list[EnvName] = Field(default_factory=list)
    # The server's tools the model may use (its own names); unset = all it lists.
    tools: list[McpToolName] | None = None
    # Tools that only read: every other tool counts as writing (denied in shared chats to
    # non-admins unless [tools] allows it), since we cannot know what a server's tool changes.
    read_only_tools: list[McpToolName] = Field(default_factory=list)
    # Seconds one call may take before the model is told it timed out.
    timeout: PosFloat = 30.0
    enabled: bool = True

    @field_validator("name")
    @classmethod
    def _no_double_underscore(cls, value: str) -> str:
        if "__" in value:
            raise ValueError("a name without '__' (it separates the server from the tool in tool names)")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _names_not_values(cls, value: Any) -> Any:
        if isinstance(value, dict):  # the shape other MCP clients use, values and all
            raise ValueError(
                'a list of environment variable names such as ["GITHUB_TOKEN"]: the server gets '
                "their values from the daemon's environment, and no value goes in the file"
            )
        return value

    @field_validator("command")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.strip() or not value.isprintable():
            raise ValueError("a program to run, such as 'npx' or '/usr/local/bin/my-server'")
        return value

    def launch_key(self) -> tuple[object, ...]:
        """What starting the process depends on: a change here means starting it again."""
        return (self.command, tuple(self.args), tuple(self.env), self.enabled)


def duplicate_name(servers: Sequence[McpServerConfig]) -> tuple[int, str] | None:
    """The index and name of the first entry whose name an earlier one already has."""
    seen: set[str] = set()
    for index, server in enumerate(servers):
        if server.name in seen:
            return index, server.name
        seen.add(server.name)
    return None
