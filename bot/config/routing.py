"""Which agent a message goes to: `[[bindings]]` first, most specific first, then the channel's own.

The order does not depend on where a binding sits in the file:
1. a binding naming a user goes before one that does not;
2. then one naming a chat (a group, a channel and its threads, a private chat);
3. then one naming a guild;
4. then one naming one extra account ("telegram.work"), then a platform (every bot on it), then none.
Two bindings that name exactly the same things cannot be put in order and the config is refused.
A message no binding matches goes to its channel's `agent` (unset: `[agent]`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.config.agent_sections import BindingConfig
from bot.config.channel_sections import platform_of


@dataclass(frozen=True, slots=True)
class Route:
    """One binding, where it is in the file, and how specific it is (larger goes first)."""

    index: int
    binding: BindingConfig

    @property
    def rank(self) -> tuple[int, int, int, int]:
        b = self.binding
        channel = 0 if b.channel is None else 1 if "." not in b.channel else 2
        return (int(b.user is not None), int(b.chat is not None), int(b.guild is not None), channel)

    def matches(self, channel: str, chats: Sequence[str | None], user: str | None, guild: str | None) -> bool:
        b = self.binding
        return ((b.channel is None or b.channel in (channel, platform_of(channel)))
                and (b.guild is None or b.guild == guild)
                and (b.chat is None or b.chat in chats)
                and (b.user is None or b.user == user))

    def describe(self) -> str:
        b = self.binding
        parts = [f"{name} {value}" for name, value in
                 (("user", b.user), ("chat", b.chat), ("guild", b.guild), ("on", b.channel))
                 if value is not None]
        return ", ".join(parts)


class Routing:
    """The resolved routing table of a config: bindings in match order, and each channel's agent."""

    def __init__(
        self, bindings: Sequence[BindingConfig], channel_agents: dict[str, str], default: str
    ) -> None:
        routes = [Route(index, binding) for index, binding in enumerate(bindings)]
        self.routes = sorted(routes, key=lambda r: r.rank, reverse=True)  # stable: file order in a tie
        self.channel_agents = channel_agents
        self.default = default

    def agent_for(self, channel: str, chats: Sequence[str | None], user: str | None = None,
                  guild: str | None = None) -> str:
        """The agent for a message on `channel` in a chat known by any of `chats` (its ids)."""
        for route in self.routes:
            if route.matches(channel, chats, user, guild):
                return route.binding.agent
        return self.channel_agents.get(channel, self.default)

    def ties(self) -> list[tuple[Route, Route]]:
        """Pairs of bindings naming exactly the same things: neither can be said to go first."""
        def named(route: Route) -> tuple[str | None, ...]:
            b = route.binding
            return (b.user, b.chat, b.guild, b.channel)

        ordered = sorted(self.routes, key=lambda r: r.index)
        return [(first, second) for i, first in enumerate(ordered) for second in ordered[i + 1:]
                if named(first) == named(second)]

    def table(self) -> list[str]:
        """The table as `check-config` prints it, in the order a message meets it."""
        lines = [f"  {route.describe()} -> {route.binding.agent}   (bindings[{route.index}])"
                 for route in self.routes]
        lines += [f"  anything else on {channel} -> {agent}"
                  for channel, agent in self.channel_agents.items()]
        return lines
