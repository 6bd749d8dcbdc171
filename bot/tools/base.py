"""What a tool is: a name, a description and a JSON schema the model sees, and a coroutine we run.

Every source of tools (the built-ins, reminders, each MCP server) hands out `Tool`s through a
`ToolSource`; the tool loop offers the model those the chat may use (`ToolContext` says who asks,
where and when) and records each call. A tool never raises to the loop for a bad argument or a
failed action: it returns a `ToolResult` with `is_error` set, which the model reads and can act on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bot.core.messages import ChatRef
from bot.core.session_key import SessionKey

JsonSchema = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who asks, where and when: everything a tool may act on besides its arguments."""

    session_key: SessionKey
    chat: ChatRef
    user_id: str  # the sender of the request being answered
    request_id: int  # the stored request message
    is_admin: bool  # the user is in the channel's `admins`
    shared: bool  # a group, forum topic or guild channel (not a private chat)
    now: float  # epoch seconds; tests pass a clock they control
    timezone: str  # the user's IANA zone (their own if set, else the agent's)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What the model reads back (`content`), and the one-line `summary` later context shows after
    the reply ("reminder #12 at 09:00 Mon 24 Nov")."""

    content: str
    summary: str
    is_error: bool = False

    @classmethod
    def error(cls, message: str) -> ToolResult:
        return cls(content=f"error: {message}", summary=f"error: {message}", is_error=True)


class Tool(Protocol):
    """One tool as the model sees it, and how to run it."""

    @property
    def name(self) -> str:
        """Unique among the tools offered (MCP tools are `server__tool`); [a-zA-Z0-9_-], ≤ 64."""
        ...

    @property
    def description(self) -> str: ...

    @property
    def input_schema(self) -> JsonSchema:
        """A JSON schema object; the same bytes every time (prompt caching covers tool definitions)."""
        ...

    @property
    def writes(self) -> bool:
        """Whether it changes anything (reminders, notes): denied in shared chats to non-admins unless
        config allows it."""
        ...

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult: ...


class ToolSource(Protocol):
    """Where tools come from; what it offers may change (an MCP server restarting offers none)."""

    def tools(self) -> Sequence[Tool]: ...


Handler = Callable[[Mapping[str, Any], ToolContext], Awaitable[ToolResult]]


@dataclass(frozen=True, slots=True)
class FunctionTool:
    """A tool made of a handler coroutine: how the built-ins are written."""

    name: str
    description: str
    input_schema: JsonSchema
    handler: Handler
    writes: bool = False

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        return await self.handler(arguments, context)
