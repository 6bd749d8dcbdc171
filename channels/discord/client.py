"""The discord.py client a Discord channel runs: one unsharded gateway connection, or the shards of
the bot this daemon runs when several daemons split it (`[channels.discord] shard_count, shard_ids`).

Discord sends a guild's events only to shard `(guild_id >> 22) % shard_count` and DMs only to shard
0, so each daemon receives, answers and catches up exactly the chats of its own shards.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from bot.config import DiscordConfig

with warnings.catch_warnings():
    # discord.py imports the stdlib audioop (deprecated since 3.11) for voice, which we never use.
    warnings.simplefilter("ignore", DeprecationWarning)
    import discord

log = structlog.get_logger("switchboard.discord")


def shard_of(guild_id: int | None, shard_count: int) -> int:
    """The shard Discord sends a guild's events to; DMs (no guild) come on shard 0."""
    return 0 if guild_id is None else (guild_id >> 22) % shard_count


@dataclass(frozen=True, slots=True)
class Shards:
    """The gateway shards one daemon runs out of the `count` the bot is split into."""

    ids: tuple[int, ...]
    count: int

    @classmethod
    def of(cls, config: DiscordConfig) -> Shards | None:
        """The section's shards; None when it is not sharded (one connection gets everything)."""
        if config.shard_count is None:
            return None
        ids = range(config.shard_count) if config.shard_ids is None else config.shard_ids
        return cls(tuple(ids), config.shard_count)

    def carry(self, guild_id: int | None) -> bool:
        """Whether a guild's events (None: a DM's) arrive on one of these shards."""
        return shard_of(guild_id, self.count) in self.ids

    def describe(self) -> dict[str, Any]:
        """For `switchboard status`."""
        return {"ids": list(self.ids), "count": self.count}


class GatewayEvents(Protocol):
    """What the channel hears from its client, whichever kind it is."""

    def gateway_connected(self) -> None: ...
    def guild_available(self) -> None: ...
    def shard_ready(self) -> None: ...
    def gateway_ready(self, client: discord.Client) -> None: ...
    def message_received(self, message: discord.Message) -> None: ...


class _Events:
    """discord.py's event methods, handed to the owning channel."""

    _owner: GatewayEvents
    _client: discord.Client  # the instance itself, typed as the client it is mixed into

    def dispatch(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        # Nothing is dispatched once the client is closing: discord.py's wait for the guilds after
        # READY (ConnectionState._delay_ready, 2 s) outlives close() and then dispatches `ready`
        # on a client whose loop close() has taken away, so the event's coroutine is made but never
        # scheduled (an AttributeError in that task, a "never awaited" warning at garbage
        # collection). A channel that stops before its guilds arrived would leave that behind.
        if not self._client.is_closed():
            discord.Client.dispatch(self._client, event, *args, **kwargs)

    async def on_connect(self) -> None:
        # Dispatched while parsing READY (never for RESUMED), so it is queued before any message
        # of the new session; a sharded client dispatches it for each shard's READY.
        self._owner.gateway_connected()

    async def on_guild_available(self, guild: discord.Guild) -> None:
        self._owner.guild_available()

    async def on_shard_ready(self, shard_id: int) -> None:
        # A sharded client's on_ready comes once all its shards are first ready, not after a
        # shard's reconnect: each shard's own READY tells the catch-up its guilds are in.
        self._owner.shard_ready()

    async def on_ready(self) -> None:
        self._owner.gateway_ready(self._client)

    async def on_resumed(self) -> None:
        log.info("discord gateway resumed")

    async def on_message(self, message: discord.Message) -> None:
        self._owner.message_received(message)


class _Client(_Events, discord.Client):
    def __init__(self, owner: GatewayEvents, **options: Any) -> None:
        super().__init__(**options)
        self._owner = owner
        self._client = self


class _ShardedClient(_Events, discord.AutoShardedClient):
    def __init__(self, owner: GatewayEvents, **options: Any) -> None:
        super().__init__(**options)
        self._owner = owner
        self._client = self


def make_client(owner: GatewayEvents, shards: Shards | None, **options: Any) -> discord.Client:
    """A client for `shards`: unsharded, one shard on a plain client, or several on discord.py's
    AutoShardedClient (given the count, it never asks GET /gateway/bot for one)."""
    if shards is None:
        return _Client(owner, **options)
    if len(shards.ids) == 1:
        return _Client(owner, shard_id=shards.ids[0], shard_count=shards.count, **options)
    return _ShardedClient(owner, shard_ids=list(shards.ids), shard_count=shards.count, **options)
