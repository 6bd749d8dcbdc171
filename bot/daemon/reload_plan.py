"""What a config reload changes, decided without a running daemon: a pure function of two configs."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from bot.config import Config
from bot.config.channel_sections import platform_of

PLATFORMS = ("telegram", "discord", "slack", "matrix")
# A channel's keys read once, when it connects: changing one starts it again (polling <-> webhook too).
CONNECTION_KEYS = ("token_env", "base_url", "mode", "webhook_listen", "webhook_url", "webhook_secret_env",
                   "shard_count", "shard_ids", "bot_token_env", "app_token_env", "webhook_path",
                   "signing_secret_env",
                   "homeserver", "user_id", "access_token_env")


@dataclass(frozen=True, slots=True)
class ReloadPlan:
    """The config to put in force and what applying it takes.

    `start` and `stop` name platform channels, one per bot ("telegram", "telegram.work", see
    `Config.chat_sections`; a reconnect is in both: stop the old, start the new); `reconfigure`
    those whose section (`Config.channel(name)`) changed but keep their connection.
    """

    config: Config
    changed: list[str]
    restart_required: list[str]
    start: list[str]
    stop: list[str]
    reconfigure: list[str]


def reloadable(old: Config, new: Config) -> tuple[Config, list[str]]:
    """The config a reload puts in force, and the changed keys that only a restart applies.

    The database, the model provider, logging, the agent id, the turn concurrency, the console
    and the web chat keep their running values: they are wired into objects that live as long as
    the daemon. Everything else (conversation, history limits, access lists, channels, schedules,
    prompt files) is taken from the new file.
    """
    updates: dict[str, Any] = {}
    restart: list[str] = []
    for name in ("database", "anthropic", "providers", "roles", "semantic", "logging", "web"):
        if getattr(old, name) != getattr(new, name):
            restart.append(name)
            updates[name] = getattr(old, name)
    if old.agent.id != new.agent.id:
        restart.append("agent.id")
        updates["agent"] = new.agent.model_copy(update={"id": old.agent.id})
    if old.router.max_concurrent_turns != new.router.max_concurrent_turns:
        restart.append("router.max_concurrent_turns")
        updates["router"] = new.router.model_copy(
            update={"max_concurrent_turns": old.router.max_concurrent_turns})
    kept = {name: getattr(old.channels, name) for name in ("console", "web")
            if getattr(old.channels, name) != getattr(new.channels, name)}
    if kept:
        restart += [f"channels.{name}" for name in kept]
        updates["channels"] = new.channels.model_copy(update=kept)
    return new.model_copy(update=updates), restart


def changed_sections(old: Config, new: Config) -> list[str]:
    before, after = old.model_dump(), new.model_dump()
    return sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))


def plan_reload(old: Config, new: Config, running: Collection[str], *, platforms: bool = True) -> ReloadPlan:
    """What reloading from `old` to `new` does, given the platform channels `running` now.

    Each bot is planned on its own: an enabled channel that is not running starts (an account
    added to the file); one disabled or gone from the file that runs stops; a changed token
    variable, base URL, webhook or shard setting (`CONNECTION_KEYS`) reconnects it; any other change to its
    section, its agent included, is applied in place. With `platforms` false (`switchboard chat`)
    no platform channel is touched.
    """
    config, restart = reloadable(old, new)
    start: list[str] = []
    stop: list[str] = []
    reconfigure: list[str] = []
    # Running bots whose account is gone from the file are planned too (they stop).
    gone = sorted(name for name in running
                  if platform_of(name) in PLATFORMS and name not in config.chat_sections)
    names = [*config.chat_sections, *gone]
    for name in names if platforms else ():
        before, after = old.chat_sections.get(name), config.chat_sections.get(name)
        runs = name in running
        if after is None or not after.enabled:
            if runs:
                stop.append(name)
            continue
        # A new agent needs no new connection: the inbox routes by the config in force.
        reconnect = before is None or any(
            getattr(before, key, None) != getattr(after, key, None) for key in CONNECTION_KEYS
        )
        if not runs or reconnect:
            start.append(name)
            if runs:
                stop.append(name)
        elif before != after:
            reconfigure.append(name)
    return ReloadPlan(config, changed_sections(old, config), restart, start, stop, reconfigure)
