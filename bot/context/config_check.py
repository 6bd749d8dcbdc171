"""What `switchboard check-config` finds in a config: whether `run` would start on it, and notes.

One reading for the command and the console's config page: `run` refuses what
`check_startable` raises; `findings` lists what a valid config still deserves a word about.
"""

from __future__ import annotations

import os

from bot.config import Config
from bot.core.errors import ConfigError


def platforms(config: Config) -> list[str]:
    """The enabled chat platforms (Telegram, Discord and their extra accounts)."""
    return [name for name, section in config.chat_sections.items() if section.enabled]


def check_startable(config: Config, *, terminal: bool) -> None:
    """Refuse what `run` would: a missing bot token, a job for a disabled channel, no channel,
    semantic recall required but not installed."""
    from bot.config import check_startable as config_startable
    from bot.ranking.embedding import check_semantic

    config_startable(config)
    if config.semantic.enabled == "on":
        check_semantic(config)
    if not platforms(config) and not (config.channels.console.enabled and terminal):
        raise ConfigError(
            config.source, "channels",
            "no channel is enabled: enable a channel, or run `switchboard chat` on a terminal",
        )


def _unset(name: str) -> bool:
    return not os.environ.get(name)


def findings(config: Config, path: str | None = None) -> list[str]:
    """The lines `check-config` prints for a config that passed: what it runs, the routing, notes
    (the file named as `path` when given, as the admin typed it)."""
    enabled = platforms(config)
    channels = ", ".join((["console"] if config.channels.console.enabled else []) + enabled)
    agents = ", ".join(repr(agent) for agent in config.agent_ids())
    lines = [f"{path or config.source}: OK (agent{'s' if config.agents else ''} {agents}, database "
             f"{config.database_path()}, channels: {channels})"]
    if config.agents or config.bindings:
        lines.append("routing (first match wins, most specific first):")
        lines += config.routing().table()
    if config.model_dump() == Config().model_dump():
        lines.append("note: the file sets nothing: every value is the built-in default")
    if not enabled:
        lines.append("note: no channel but the console is enabled, so `switchboard run` needs a terminal; "
                     "enable [channels.telegram] or [channels.discord] to run as a service")
    if not config.uses_providers() and _unset(config.anthropic.api_key_env):
        lines.append(f"note: environment variable {config.anthropic.api_key_env} is not set "
                     "(replies will be the fallback message)")
    if config.uses_providers():
        lines += _roles(config)
    for server in config.mcp_servers:
        unset = [name for name in server.env if name not in os.environ]
        if server.enabled and unset:
            lines.append(f"note: environment variable {', '.join(unset)} for MCP server {server.name!r} "
                         "is not set (that server will not start)")
    return lines


def _roles(config: Config) -> list[str]:
    """Each role's chain, and a note for each provider it uses whose key variable is unset."""
    providers = config.all_providers()
    used: set[str] = set()
    lines = []
    for role in ("main", "fast", "summary", "transcribe"):
        chain = config.role_chain(role)
        used.update(name for name, _ in chain)
        lines.append(f"role {role}: " + (" -> ".join(f"{name}:{model}" for name, model in chain) or "off"))
    for name in sorted(used):
        env = providers[name].api_key_env
        if env and _unset(env):
            lines.append(f"note: environment variable {env} for provider {name!r} is not set "
                         "(its calls fail and the next provider in the chain answers)")
    return lines
