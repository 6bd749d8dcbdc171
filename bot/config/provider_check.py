"""Across `[roles]` and `[providers]`: every role names a provider that exists and can do it, the
prices given per provider model, and the models each provider offers (for `/model`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.config.provider_sections import ROLE_NAMES
from bot.core.errors import ConfigError

if TYPE_CHECKING:
    from bot.config.root import Config


def check_roles(config: Config, source: str, where: str = "roles") -> None:
    """A ConfigError naming the role when it names an unknown provider, or transcription on a
    provider that has no /audio/transcriptions (Anthropic); `where` is the roles' table in the file."""
    providers = config.all_providers()
    for role in ROLE_NAMES:
        value = getattr(config.roles, role)
        if value is None:
            continue
        specs = value
        if not specs:
            raise ConfigError(source, f"{where}.{role}", "at least one PROVIDER:MODEL (or leave the key out)")
        for index, spec in enumerate(specs):
            key = f"{where}.{role}" if len(specs) == 1 else f"{where}.{role}[{index}]"
            name = spec.partition(":")[0]
            if name not in providers:
                raise ConfigError(source, key, f"a provider defined as [providers.<name>] or "
                                  f"'anthropic'; known: {', '.join(sorted(providers))} (got {spec!r})")
            if role == "transcribe" and providers[name].kind != "openai":
                raise ConfigError(source, key, "a provider of kind \"openai\" with an "
                                  f"/audio/transcriptions endpoint; {name!r} is {providers[name].kind!r}")


def with_provider_prices(config: Config) -> Config:
    """The config with each provider model's `price` among [prices] (an entry there wins)."""
    found = {model: entry.price for provider in config.providers.values()
             for model, entry in provider.models.items() if entry.price is not None}
    if not found:
        return config
    return config.model_copy(update={"prices": {**found, **config.prices}})


def model_lines(config: Config) -> list[str]:
    """One line per provider: its models, each with the roles it plays and the `/model` names
    that stand for it ("local: qwen3:8b (fast, summary; /model qwen)")."""
    found: dict[str, dict[str, list[str]]] = {name: {} for name in config.all_providers()}
    for role in ROLE_NAMES:
        for name, model in config.role_chain(role):
            found[name].setdefault(model, []).append(role)
    for name, settings in config.providers.items():
        for model in settings.models:
            found[name].setdefault(model, [])
    for alias, target in config.anthropic.models.items():
        name, _, model = target.partition(":")
        name, model = (name, model) if model and name in found else ("anthropic", target)
        found[name].setdefault(model, []).append(f"/model {alias}")
    lines = []
    for name, models in found.items():
        if models:
            shown = [f"{model} ({', '.join(uses)})" if uses else model for model, uses in models.items()]
            lines.append(f"{name}: {'; '.join(shown)}")
    return lines


def main_model(config: Config, fallback: str) -> tuple[str, int]:
    """The main role's first model id and its configured window (0: unknown), for the budget;
    without providers, `fallback` (the brain's main model) and 0."""
    if not config.uses_providers():
        return fallback, 0
    name, model = config.role_chain("main")[0]
    entry = config.all_providers()[name].models.get(model)
    return model, (entry.context_window or 0) if entry is not None else 0


def reply_timeout(config: Config) -> float:
    """Seconds a reply may take: [anthropic].timeout, or with providers the main chain's timeouts
    added up (each link but the last gets at most its own, so every fallback has its time)."""
    if not config.uses_providers():
        return config.anthropic.timeout
    providers = config.all_providers()
    return sum(providers[name].timeout for name, _ in config.role_chain("main"))
