"""What webhook channels must agree on beyond each key's own type: a Telegram webhook channel names
its public URL and its secret's variable, and no two bots (Telegram's webhooks, Slack apps in HTTP
mode) share a listen address or a URL."""

from __future__ import annotations

from bot.config.channel_sections import SlackConfig, TelegramConfig
from bot.config.root import Config, channel_key
from bot.core.errors import ConfigError


def check_webhooks(config: Config, source: str) -> None:
    """Raise a ConfigError naming the first webhook key that breaks one of the rules above.

    Each channel runs its own server, so an account in webhook mode needs a `webhook_listen` and a
    `webhook_url` of its own (what it inherits from [channels.telegram] is taken already)."""
    listens: dict[str, str] = {}
    urls: dict[str, str] = {}
    for name, section in config.chat_sections.items():
        where = channel_key(name)
        if isinstance(section, SlackConfig) and section.enabled and section.mode == "http":
            _own(source, where, name, "webhook_listen", section.webhook_listen, listens)
            continue
        if not (isinstance(section, TelegramConfig) and section.enabled and section.mode == "webhook"):
            continue
        if section.webhook_url is None:
            raise ConfigError(source, f"{where}.webhook_url",
                              "the public https:// URL Telegram posts updates to, with mode = \"webhook\"")
        if section.webhook_secret_env is None:
            raise ConfigError(source, f"{where}.webhook_secret_env",
                              "the environment variable holding the webhook secret, with mode = \"webhook\"")
        _own(source, where, name, "webhook_listen", section.webhook_listen, listens)
        _own(source, where, name, "webhook_url", section.webhook_url, urls)


def _own(source: str, where: str, name: str, key: str, value: str, seen: dict[str, str]) -> None:
    other = seen.get(value)
    if other is not None:
        raise ConfigError(source, f"{where}.{key}",
                          f"one of its own; {channel_key(other)} uses {value!r} too (each bot's "
                          "webhook has its own server and URL)")
    seen[value] = name
