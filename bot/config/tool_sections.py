"""The `[tools]` section: how many tool rounds a reply may take, and who may use which tool."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from bot.config.fields import PosFloat, Section

_PATTERN = re.compile(r"^[A-Za-z0-9_*?\[\]!-]{1,64}$")
# "telegram.work:42" is a user of an extra bot (channel "telegram.work").
_USER = re.compile(r"^[a-z]+(\.[a-z0-9][a-z0-9_-]*)?:-?[A-Za-z0-9_.-]+$")


def _tool_pattern(value: str) -> str:
    if not _PATTERN.match(value):
        raise ValueError("a tool name or glob of letters, digits, '_', '-' and '*?[]!', such as "
                         "'search_history' or 'files__*'")
    return value


def _user_ref(value: str) -> str:
    if not _USER.match(value):
        raise ValueError("a user as PROVIDER:ID, such as 'telegram:123456789' or 'console:local'")
    return value


# A tool name or a shell-style glob over names ("*", "search_*", "files__*").
ToolPattern = Annotated[str, AfterValidator(_tool_pattern)]
# A user as "provider:id" ("telegram:123456789"); "console:local" is the console's user.
UserRef = Annotated[str, AfterValidator(_user_ref)]
# Who may use a writing tool (reminders, notes) in a group, forum topic or guild channel.
SharedWrites = Literal["admins", "everyone", "nobody"]


class ToolRule(Section):
    """One override, applied in order after the section's own lists: for the sessions matching
    `sessions` (a session key glob) and, when given, only for the `users` listed."""

    sessions: str = "*"
    users: list[UserRef] = Field(default_factory=list)
    allow: list[ToolPattern] = Field(default_factory=list)
    deny: list[ToolPattern] = Field(default_factory=list)
    shared_writes: SharedWrites | None = None


class ToolsConfig(Section):
    enabled: bool = True
    # Model calls that may end in tool use per reply; after the last one the model is asked once
    # more to answer with what it has, tools shown but not callable.
    max_tool_rounds: Annotated[int, Field(ge=1, le=50)] = 5
    # Seconds one tool call may take before it is answered with a timeout error.
    tool_timeout: PosFloat = 30.0
    allow: list[ToolPattern] = Field(default_factory=lambda: ["*"])
    deny: list[ToolPattern] = Field(default_factory=list)
    shared_writes: SharedWrites = "admins"
    rules: list[ToolRule] = Field(default_factory=list)
    # The user's notes (`remember`) shown in the per-turn system prompt of their private chats.
    notes_max_chars: Annotated[int, Field(ge=0, le=20000)] = 2000
    max_notes: Annotated[int, Field(ge=1, le=1000)] = 50
    # `search_history`: most matches one call returns.
    search_results: Annotated[int, Field(ge=1, le=50)] = 8
    # What `search_history` reads (`bot.tools.scope`): "session", the chat it runs in alone; "user",
    # in a private chat also the person's own messages in their other chats (never others' words).
    search_scope: Literal["session", "user"] = "session"
