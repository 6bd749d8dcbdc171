"""A turn's tool definitions: built once per set of tools, and new for tools that are new (a
reloaded MCP server's), even under the same names."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bot.tools.base import FunctionTool, ToolContext, ToolResult
from bot.tools.toolbox import definitions
from bot.turn.tool_loop import _defined


async def _nothing(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    return ToolResult("", "")


def tool(name: str, field: str) -> FunctionTool:
    schema = {"type": "object", "properties": {field: {"type": "string"}}}
    return FunctionTool(name, f"The {name} tool.", schema, _nothing)


def test_the_same_tools_get_the_same_definitions_built_once() -> None:
    """A set offered again is given the very definitions of the first time, as the toolbox makes them."""
    tools = [tool("alpha", "a"), tool("beta", "b")]
    first, chars = _defined(tools)
    again, _ = _defined(list(tools))
    assert first == definitions(tools) and chars == len(json.dumps(first))
    assert again is first


def test_new_tools_under_the_same_names_get_their_own_definitions() -> None:
    """A tool rebuilt with another schema (a reloaded MCP server) is defined anew, not from the old set."""
    old = [tool("lookup", "query")]
    new = [tool("lookup", "terms")]
    assert _defined(old)[0][0]["input_schema"]["properties"] == {"query": {"type": "string"}}
    assert _defined(new)[0][0]["input_schema"]["properties"] == {"terms": {"type": "string"}}
    assert _defined(old)[0] == definitions(old)
