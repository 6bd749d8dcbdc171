"""The way in from every channel: parse is the channel's, this is route, store and enqueue.

Routing picks the agent ([[bindings]], then the channel's account): the session key the channel
built is given that agent's id before anything is stored, so history is per agent from the start.

Nothing here waits on a turn or a command: late messages are kept but not answered; /reset and
/compact are recorded and wait in their session's queue (so they apply in order, and a restart
still runs them); /stop runs at once; read-only commands (/status, /help, …) are answered beside
the queue; everything else is stored and queued by the router.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping

import structlog

from bot.config import Config
from bot.context.compaction import Compactor
from bot.core.errors import describe
from bot.core.messages import AGENT_PROVIDER, InboundMessage, OutboundMessage
from bot.intake.channel import Channel
from bot.intake.commands import QUEUED_COMMANDS, CommandHandler
from bot.intake.router import Router
from bot.store import PendingCommand
from bot.store.seams import InboxStore

log = structlog.get_logger("switchboard.inbox")


class Inbox:
    """What a channel's `submit` calls for every normalised message."""

    def __init__(
        self, config: Config, store: InboxStore, router: Router, channels: Mapping[str, Channel],
        compactors: Mapping[str, Compactor],
    ) -> None:
        self._config = config
        self._store = store
        self._router = router
        self._channels = channels
        self._routing = config.routing()
        # Each agent answers commands as itself (its name, its models, its limits).
        self._commands = {agent: CommandHandler(config.for_agent(agent), store, router, compactor)
                          for agent, compactor in compactors.items()}

    async def submit(self, inbound: InboundMessage) -> None:
        inbound = self.routed(inbound)
        late = self.is_late(inbound.chat.provider, inbound.sent_at)
        if inbound.command is not None:
            if late:
                log.info("late command ignored", session_key=str(inbound.session_key),
                         command=inbound.command)
                return
            await self._take_command(inbound, inbound.command)
            return
        if late and inbound.starts_turn:
            # Stored for context, but an answer hours later would only confuse.
            log.info("late message stored, not answered", session_key=str(inbound.session_key),
                     provider_message_id=inbound.provider_message_id)
            inbound = dataclasses.replace(inbound, starts_turn=False)
        await self._router.submit(inbound)

    def routed(self, inbound: InboundMessage) -> InboundMessage:
        """The message in the session of the agent it goes to. A message between agents is
        addressed already (`agent:<to>:agent:direct:<from>`); bindings do not move it."""
        key = inbound.session_key
        if key.provider == AGENT_PROVIDER:
            return inbound
        chats = (key.peer, key.suffix_id, inbound.chat.chat_id)
        agent = self._routing.agent_for(inbound.chat.provider, chats, inbound.sender_id, inbound.guild_id)
        if agent == key.agent_id:
            return inbound
        return dataclasses.replace(inbound, session_key=dataclasses.replace(key, agent_id=agent))

    def is_late(self, provider: str, sent_at: float | None) -> bool:
        """Whether a message sent at `sent_at` is past its channel's `max_reply_age`."""
        section = self._config.chat_channel(provider)
        if section is None or not section.max_reply_age or sent_at is None:
            return False
        return time.time() - sent_at > section.max_reply_age

    async def _take_command(self, inbound: InboundMessage, name: str) -> None:
        # Every command is recorded, so one delivered again (Discord's history catch-up, an
        # unconfirmed Telegram update) is answered once. Only the queued ones wait to be run.
        key = str(inbound.session_key)
        queued = name in QUEUED_COMMANDS
        recorded = await self._store.append_command(inbound, name, "pending" if queued else "done")
        if recorded is None:
            log.info("duplicate command ignored", session_key=key, command=name)
        elif queued:
            self.queue_command(recorded)
        elif name == "stop":
            await self._answer_command(inbound, name)  # goes first: it clears the queue
        else:
            self._router.run_now(key, f"/{name}", lambda: self._answer_command(inbound, name))

    def queue_command(self, command: PendingCommand) -> None:
        """Queue a recorded command behind its session's work; it is marked done once answered."""
        inbound = command.inbound
        assert inbound.command is not None

        async def run() -> None:
            # Several daemons on one store: this runs under the session's lease, and another
            # instance may have run it first (it took over from the one that received it).
            if self._store.shared and not await self._store.command_pending(command.id):
                log.info("command already run elsewhere; skipped", session_key=str(inbound.session_key),
                         command_id=command.id)
                return
            try:
                await self._answer_command(inbound, inbound.command or "")
            finally:
                await self._store.finish_command(command.id)

        self._router.enqueue_work(str(inbound.session_key), f"/{inbound.command}", run)

    async def _answer_command(self, inbound: InboundMessage, name: str) -> None:
        agent = inbound.session_key.agent_id
        commands = self._commands.get(agent) or self._commands[self._config.agent.id]
        text = await commands.run(name, inbound)
        log.info("command", session_key=str(inbound.session_key), command=name,
                 sender_id=inbound.sender_id)
        channel = self._channels.get(inbound.chat.provider)
        if channel is None:
            return
        reply_to = None if inbound.session_key.is_direct else inbound.provider_message_id
        try:
            await channel.send(OutboundMessage(inbound.chat, text, reply_to))
        except Exception as exc:  # a failed command answer must not take the channel down
            log.error("command answer not delivered", session_key=str(inbound.session_key),
                      command=name, error=describe(exc), exc_info=True)
