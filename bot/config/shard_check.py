"""What a Discord channel's shard keys must agree on: the shards it runs exist (0 to shard_count - 1),
each named once, and none without the count they belong to."""

from __future__ import annotations

from bot.config.channel_sections import DiscordConfig
from bot.config.root import Config, channel_key
from bot.core.errors import ConfigError


def check_shards(config: Config, source: str) -> None:
    """Raise a ConfigError naming the first shard key that breaks one of the rules above.

    An account inherits both keys from [channels.discord], so a count set only on the account is
    checked against the ids it inherits too."""
    for name, section in config.chat_sections.items():
        if not isinstance(section, DiscordConfig) or section.shard_ids is None:
            continue
        where = f"{channel_key(name)}.shard_ids"
        count = section.shard_count
        if count is None:
            raise ConfigError(source, where, "only with shard_count: a shard id means nothing without "
                              "the number of shards the bot is split into")
        if not section.shard_ids:
            raise ConfigError(source, where, "at least one shard (leave it unset to run all of them)")
        for shard in section.shard_ids:
            if shard >= count:
                raise ConfigError(source, where, f"shard ids from 0 to {count - 1} (shard_count = "
                                  f"{count}); {shard} is not one")
        repeated = sorted({shard for shard in section.shard_ids if section.shard_ids.count(shard) > 1})
        if repeated:
            raise ConfigError(source, where, f"each shard once; {repeated[0]} is listed twice")
