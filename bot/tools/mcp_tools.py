"""MCP tools as the model sees them: prefixed names, stable schemas, and results turned into text.

Pure functions over the SDK's types, no I/O: the server supervisor (`mcp_server`) lists and calls,
these decide what the model is offered and reads back.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import mcp_types as types

from bot.tools.base import JsonSchema, ToolContext, ToolResult


class McpServer(Protocol):
    """What a tool needs of its server (`mcp_server.McpServer`): its name, and a call."""

    @property
    def name(self) -> str: ...

    async def call(self, remote_name: str, arguments: Mapping[str, Any]) -> ToolResult: ...

# Anthropic's limits on a tool name.
MAX_NAME = 64
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]")
# What one result may put into the conversation; a server returning a whole file is cut here.
MAX_RESULT_CHARS = 20_000
MAX_SUMMARY_CHARS = 120


@dataclass(frozen=True, slots=True, eq=False)
class McpTool:
    """One tool of one MCP server, offered as `server__tool`; calls go to whichever process of that
    server runs now (a restarted server answers calls on tools listed before its crash)."""

    name: str
    description: str
    input_schema: JsonSchema
    writes: bool
    remote_name: str  # the tool's own name on its server
    server: McpServer = field(repr=False)

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        return await self.server.call(self.remote_name, arguments)


def offered_name(server: str, tool: str, taken: set[str]) -> str:
    """`server__tool`, made a valid Anthropic tool name: other characters become `_`, and a name
    too long or already taken ends in a short hash of the tool's own name (the same every time)."""
    name = _NOT_ALLOWED.sub("_", f"{server}__{tool}")
    if len(name) > MAX_NAME or name in taken:
        digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
        name = f"{name[:MAX_NAME - 9]}_{digest}"
    return name


def stable_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The input schema with its keys sorted at every level: the same bytes after a restart even if
    the server builds it in another order (tool definitions are part of the cached prompt)."""
    stable: dict[str, Any] = json.loads(json.dumps(schema, sort_keys=True))
    if stable.get("type") != "object":  # the API accepts object schemas only
        stable = {"properties": {}, "type": "object"}
    return stable


def offered_tools(
    server: McpServer, listing: Sequence[types.Tool], allowed: Sequence[str] | None,
    read_only: Sequence[str],
) -> tuple[McpTool, ...]:
    """The tools of one server the model is offered, sorted by name (a stable order)."""
    chosen = sorted((t for t in listing if allowed is None or t.name in allowed), key=lambda t: t.name)
    taken: set[str] = set()
    tools: list[McpTool] = []
    for tool in chosen:
        name = offered_name(server.name, tool.name, taken)
        taken.add(name)
        description = (tool.description or tool.title or "").strip()
        tools.append(McpTool(
            name=name,
            description=description or f"The {tool.name} tool of the {server.name} MCP server.",
            input_schema=stable_schema(tool.input_schema),
            writes=tool.name not in read_only,
            remote_name=tool.name,
            server=server,
        ))
    return tuple(sorted(tools, key=lambda t: t.name))


def tool_result(result: types.CallToolResult) -> ToolResult:
    """What the model reads back from a call: its text, or an error result it can act on."""
    text = _text(result)
    if result.is_error:
        return ToolResult.error(text or "the tool failed without saying why")
    return ToolResult(content=text or "(no output)", summary=summary(text or "(no output)"))


def summary(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_SUMMARY_CHARS else line[:MAX_SUMMARY_CHARS - 1] + "…"


def _text(result: types.CallToolResult) -> str:
    parts = [_block_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False, sort_keys=True)]
    text = "\n".join(part for part in parts if part)
    if len(text) > MAX_RESULT_CHARS:
        cut = len(text) - MAX_RESULT_CHARS
        text = f"{text[:MAX_RESULT_CHARS]}\n[… {cut} more characters not shown]"
    return text


def _block_text(block: types.ContentBlock) -> str:
    """A content block as text: images and audio are named, not sent (the loop speaks text)."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        return f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4} bytes, not shown]"
    if isinstance(block, types.ResourceLink):
        return f"[resource {block.uri}" + (f": {block.description}]" if block.description else "]")
    resource = block.resource
    if isinstance(resource, types.TextResourceContents):
        return resource.text
    return f"[resource {resource.uri} ({resource.mime_type or 'binary'}), not shown]"
