"""Which tools a chat may use: `[tools]` allow and deny globs, rules per session and user, and the
rule for writing tools in shared chats. Pure: a decision from config and the asking context."""

from __future__ import annotations

from fnmatch import fnmatchcase

from bot.config import ToolsConfig
from bot.tools.base import Tool, ToolContext


def _matches(name: str, patterns: list[str]) -> bool:
    # "*" (the default allow) matches any name: found without a glob.
    return "*" in patterns or any(fnmatchcase(name, pattern) for pattern in patterns)


def permitted(tool: Tool, context: ToolContext, config: ToolsConfig) -> bool:
    """Whether `tool` is offered to this user in this chat.

    The section's `allow`/`deny` decide first; then each matching rule, in order, may deny or
    allow the tool again (a later rule wins). A writing tool in a shared chat also needs the
    `shared_writes` in force: "admins" (the channel's admins), "everyone" or "nobody".
    """
    allowed = _matches(tool.name, config.allow) and not _matches(tool.name, config.deny)
    shared_writes = config.shared_writes
    user = f"{context.chat.provider}:{context.user_id}" if config.rules else ""
    for rule in config.rules:
        if not fnmatchcase(str(context.session_key), rule.sessions):
            continue
        if rule.users and user not in rule.users:
            continue
        if _matches(tool.name, rule.deny):
            allowed = False
        elif _matches(tool.name, rule.allow):
            allowed = True
        if rule.shared_writes is not None:
            shared_writes = rule.shared_writes
    if not allowed:
        return False
    if tool.writes and context.shared:
        return shared_writes == "everyone" or (shared_writes == "admins" and context.is_admin)
    return True
