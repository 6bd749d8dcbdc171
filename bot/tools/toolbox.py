"""The tools a turn offers: gathered from every source, filtered by permission, and defined for the
API in the same bytes every turn (sorted by name, the last definition marked for prompt caching)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import structlog

from bot.config import ToolsConfig
from bot.core.errors import describe
from bot.tools.base import Tool, ToolContext, ToolSource
from bot.tools.permissions import permitted

log = structlog.get_logger("switchboard.tools")

VALID_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class ToolBox:
    """Every source's tools; `offered` is what one request's chat and user may call."""

    def __init__(self, config: ToolsConfig, sources: Sequence[ToolSource]) -> None:
        self.config = config
        self._sources = list(sources)
        self._warned: set[str] = set()

    def all_tools(self) -> dict[str, Tool]:
        """Each source's current tools by name; a bad or duplicate name is skipped with one warning
        (the first source listed keeps the name)."""
        found: dict[str, Tool] = {}
        for source in self._sources:
            try:
                tools = list(source.tools())
            except Exception as exc:  # a broken source offers nothing; the rest still work
                self._warn(f"source:{type(source).__name__}", "tool source failed",
                           error=describe(exc), exc_info=True)
                continue
            for tool in tools:
                if not VALID_NAME.match(tool.name):
                    self._warn(tool.name, "tool with an invalid name skipped", tool=tool.name)
                elif tool.name in found:
                    self._warn(tool.name, "tool name offered twice; the first source keeps it",
                               tool=tool.name)
                else:
                    found[tool.name] = tool
        return found

    def offered(self, context: ToolContext) -> list[Tool]:
        """The tools this request may use, sorted by name; none when `[tools].enabled` is false."""
        if not self.config.enabled:
            return []
        tools = self.all_tools()
        return [tools[name] for name in sorted(tools) if permitted(tools[name], context, self.config)]

    def _warn(self, key: str, event: str, **fields: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(event, **fields)


def definitions(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """The API's `tools` parameter: the same JSON for the same tools every turn (schemas
    re-serialised with sorted keys), the last one carrying the cache breakpoint so the definitions
    are cached with the stable system prompt."""
    defined: list[dict[str, Any]] = [
        {"name": tool.name, "description": tool.description,
         "input_schema": json.loads(json.dumps(tool.input_schema, sort_keys=True))}
        for tool in sorted(tools, key=lambda t: t.name)
    ]
    if defined:
        defined[-1]["cache_control"] = {"type": "ephemeral"}
    return defined
