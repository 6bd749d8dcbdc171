"""The agents a daemon runs: each its own turn runner (prompt files, models, tools, limits), built
from the config as that agent sees it; a turn goes to the agent its session key names.

Agents whose `[roles]` are the top-level ones share one brain (one HTTP client per service); an
agent with roles of its own gets its own. A reload builds every runner again: turns already
running finish with the runner they started with, queued ones get the new. An agent a reload
removes keeps its last runner for the turns still queued for it; nothing new is routed to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack

import structlog

from bot.config import Config
from bot.context.compaction import Compactor
from bot.core.messages import InboundMessage, StoredMessage
from bot.core.misconfiguration import Misconfigurations
from bot.delivery.outbox import Outbox
from bot.intake.channel import Channel
from bot.models.brain import Brain
from bot.models.providers import build_brain
from bot.ranking.embedding import Embedder
from bot.store import Store
from bot.tools.base import ToolSource
from bot.tools.toolbox import ToolBox
from bot.turn.runner import TurnRunner

log = structlog.get_logger("switchboard.agents")


class Agents:
    """Every agent's turn runner; called with a turn, it runs it as the session's agent."""

    def __init__(
        self, store: Store, channels: Mapping[str, Channel], outbox: Outbox, *,
        brain: Brain | None, stack: AsyncExitStack, embedder: Embedder | None,
        tool_sources: Sequence[ToolSource], misconfigured: Misconfigurations | None = None,
    ) -> None:
        self._store = store
        self._channels = channels
        self._outbox = outbox
        self._given = brain  # a brain handed in (tests, `chat` with a stub) answers for every agent
        self._stack = stack  # closes the brains built here when the daemon stops
        self._embedder = embedder
        self._tool_sources = tool_sources
        # Refused keys, unknown models, no credit: told once an hour, kept for status.
        self._misconfigured = misconfigured or Misconfigurations(channels)
        self._brains: dict[str, Brain] = {}  # by the roles they answer for
        self.runners: dict[str, TurnRunner] = {}
        self._retired: dict[str, TurnRunner] = {}

    def brain(self, config: Config) -> Brain:
        """The brain of an agent's config, built on first use for its roles."""
        if self._given is not None:
            return self._given
        roles = config.roles.model_dump_json()
        if roles not in self._brains:
            built, closing = build_brain(config, self._misconfigured)
            self._stack.push_async_callback(closing.aclose)
            self._brains[roles] = built
        return self._brains[roles]

    def configure(self, config: Config) -> None:
        """Build every agent's runner from `config`; turns started from now on use them."""
        runners = {}
        for agent in config.agent_ids():
            own = config.for_agent(agent)
            runners[agent] = TurnRunner(own, self._store, self.brain(own), self._channels, self._outbox,
                                        embedder=self._embedder, tools=ToolBox(own.tools, self._tool_sources),
                                        misconfigured=self._misconfigured)
        removed = {agent: runner for agent, runner in self.runners.items() if agent not in runners}
        self._retired = {**{a: r for a, r in self._retired.items() if a not in runners}, **removed}
        self.runners = runners

    @property
    def compactors(self) -> dict[str, Compactor]:
        return {agent: runner.compactor for agent, runner in self.runners.items()}

    @staticmethod
    def status(config: Config, sessions: Mapping[str, tuple[bool, int]]) -> list[dict[str, object]]:
        """Per agent, for `switchboard status`: its channel accounts, bindings and queued work."""
        routing = config.routing()
        shown = []
        for agent in config.agent_ids():
            mine = [state for key, state in sessions.items() if key.startswith(f"agent:{agent}:")]
            shown.append({
                "id": agent,
                "name": config.for_agent(agent).agent.name,
                "channels": sorted(name for name, owner in routing.channel_agents.items() if owner == agent
                                   and (name != "console" or config.channels.console.enabled)),
                "bindings": sum(1 for route in routing.routes if route.binding.agent == agent),
                "running": sum(1 for running, _ in mine if running),
                "waiting": sum(waiting for _, waiting in mine),
            })
        return shown

    async def __call__(self, request: StoredMessage, inbound: InboundMessage) -> None:
        agent = inbound.session_key.agent_id
        runner = self.runners.get(agent) or self._retired.get(agent)
        if runner is None:  # stored by an earlier run whose config had this agent
            log.warning("request for an agent this config does not have; not answered",
                        session_key=str(inbound.session_key), request_id=request.id)
            return
        await runner(request, inbound)
