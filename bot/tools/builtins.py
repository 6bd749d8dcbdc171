"""The built-in tools' source: the time, the user's own timezone, notes and history search."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bot.config import Config
from bot.ranking.embedding import Embedder
from bot.store.seams import ToolStore
from bot.tools.base import FunctionTool, Tool, ToolContext, ToolResult
from bot.tools.history import history_tool
from bot.tools.notes import note_tools


async def _current_time(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    local = datetime.fromtimestamp(context.now, ZoneInfo(context.timezone))
    utc = datetime.fromtimestamp(context.now, UTC)
    text = f"{local.strftime('%A %Y-%m-%d %H:%M:%S %Z')} ({context.timezone}); {utc.strftime('%H:%M UTC')}"
    return ToolResult(text, local.strftime("%Y-%m-%d %H:%M %Z"))


class BuiltinTools:
    """A ToolSource: always the same tools (their config is read when they run)."""

    def __init__(
        self, store: ToolStore, config: Callable[[], Config], embedder: Embedder | None = None
    ) -> None:
        async def set_timezone(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
            zone = str(arguments["zone"]).strip()
            try:
                ZoneInfo(zone)
            except (ZoneInfoNotFoundError, ValueError):
                return ToolResult.error(f"{zone!r} is not an IANA timezone name (such as Europe/Berlin)")
            await store.set_user_timezone(context.chat.provider, context.user_id, zone)
            return ToolResult(f"The user's timezone is now {zone}.", f"timezone {zone}")

        self._tools: list[Tool] = [
            FunctionTool("current_time", "The current date and time in the user's timezone.",
                         {"type": "object", "properties": {}, "additionalProperties": False},
                         _current_time),
            FunctionTool(
                "set_timezone",
                "Set the timezone of the user you are talking to, when they tell you where they are "
                "or which zone they use; times you give and reminders they set use it.",
                {"type": "object", "properties": {"zone": {
                    "type": "string", "description": "an IANA zone name such as Europe/Berlin"}},
                 "required": ["zone"], "additionalProperties": False},
                set_timezone, writes=True,
            ),
            *note_tools(store, config),
            history_tool(store, config, embedder),
        ]

    def tools(self) -> Sequence[Tool]:
        return self._tools
