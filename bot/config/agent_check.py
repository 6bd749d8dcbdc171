"""What `[[agents]]`, `[[bindings]]` and channel accounts must agree on beyond each value's own type:
unique agent ids, agents and channels that exist, one token per bot, and bindings that can be ordered."""

from __future__ import annotations

from collections.abc import Callable

from bot.config.provider_check import check_roles
from bot.config.root import Config, channel_key
from bot.core.errors import ConfigError
from bot.core.messages import AGENT_PROVIDER

# Turns a location (("bindings", "2", "agent")) into the key shown in the error.
KeyOf = Callable[[tuple[str, ...]], str]


def check_agents(config: Config, source: str, key_of: KeyOf) -> None:
    """Raise a ConfigError naming the first key that breaks one of the rules above."""
    agents = {config.agent.id}
    for index, entry in enumerate(config.agents):
        if entry.id in agents:
            raise ConfigError(source, key_of(("agents", str(index), "id")),
                              f"a unique agent id; {entry.id!r} is already [agent]'s or an earlier entry's")
        agents.add(entry.id)
    known = ", ".join(sorted(agents))
    for index, entry in enumerate(config.agents):
        if entry.roles.model_fields_set:
            check_roles(config.for_agent(entry.id), source, key_of(("agents", str(index), "roles")))
    _check_accounts(config, source, agents, known)
    channels = ["console", *config.chat_sections]
    for index, binding in enumerate(config.bindings):
        if binding.agent not in agents:
            raise ConfigError(source, key_of(("bindings", str(index), "agent")),
                              f"one of the agents ({known}); there is no agent {binding.agent!r}")
        if binding.channel is not None and binding.channel not in channels:
            raise ConfigError(source, key_of(("bindings", str(index), "channel")),
                              f"a channel of this config ({', '.join(channels)}); "
                              f"there is no {binding.channel!r}")
        if binding.guild is not None and (binding.channel or "discord").partition(".")[0] != "discord":
            raise ConfigError(source, key_of(("bindings", str(index), "guild")),
                              "a guild only on Discord; this binding names another channel")
    for first, second in config.routing().ties():
        raise ConfigError(source, key_of(("bindings", str(second.index))),
                          "a binding that can be put in order; it names exactly what "
                          f"bindings[{first.index}] names ({first.describe()}), so which wins cannot be "
                          "told: drop one or narrow it")
    for index, job in enumerate(config.schedules):
        key = config.job_key(job)
        if key.agent_id not in agents:
            raise ConfigError(source, key_of(("schedules", str(index), "deliver_to")),
                              f"a session key of one of the agents ({known}); there is no agent "
                              f"{key.agent_id!r}")
        if key.provider == AGENT_PROVIDER and key.peer not in agents:
            raise ConfigError(source, key_of(("schedules", str(index), "deliver_to")),
                              f"an agent to deliver to ({known}); there is no agent {key.peer!r}")
        if key.provider not in ("console", AGENT_PROVIDER) and key.provider not in config.chat_sections:
            raise ConfigError(source, key_of(("schedules", str(index), "deliver_to")),
                              f"a channel of this config; there is no {key.provider!r}")


def _check_accounts(config: Config, source: str, agents: set[str], known: str) -> None:
    tokens: dict[str, str] = {}
    for name, section in config.chat_sections.items():
        where = channel_key(name)
        if section.agent is not None and section.agent not in agents:
            raise ConfigError(source, f"{where}.agent",
                              f"one of the agents ({known}); there is no agent {section.agent!r}")
        platform = name.partition(".")[0]
        if not section.enabled:
            continue
        for key, env in section.token_envs().items():
            other = tokens.get(f"{platform} {env}")
            if other is not None:
                raise ConfigError(source, f"{where}.{key}",
                                  f"a variable of its own; {channel_key(other)} reads the same token "
                                  f"from {env}")
            tokens[f"{platform} {env}"] = name
    for platform in ("telegram", "discord", "slack", "matrix"):
        for name, account in getattr(config.channels, platform).accounts.items():
            if account.accounts:
                raise ConfigError(source, f"channels.{platform}.accounts.{name}.accounts",
                                  "no accounts inside an account (list every bot under "
                                  f"[channels.{platform}.accounts])")
    console = config.channels.console.agent
    if console is not None and console not in agents:
        raise ConfigError(source, "channels.console.agent",
                          f"one of the agents ({known}); there is no agent {console!r}")
