"""The agent channel: agents writing to agents inside one daemon, as inbound messages of the receiving
agent's session (`bot.core.agent_chat` spells the chats, sessions and ids).

Sending to the chat "A/B" is A writing to B: the text is handed to the intake as a message from A in
B's session `agent:B:agent:direct:A`, answered by B's turn runner through the same path as a
person's message; B's reply is sent to "B/A" and so reaches A the same way. A message carries its
hop (one more than the message it answers); one past `[agent_messages].hop_limit`, or past
`per_pair_per_hour` from one agent to another, stays stored as its writer's reply but is not
passed on. `ask` passes a message and waits for its answer (the `message_agent` tool): an answer
someone waits for is handed to them, not passed on as a new message.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import deque
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import structlog

from bot.config import Config
from bot.core.agent_chat import agent_chat, agent_session, chat_agents, hop_message_id, hop_of, origin_thread
from bot.core.errors import AgentMessageRefused, ChannelNotStartedError, DeliveryError
from bot.core.messages import AGENT_PROVIDER, ChatRef, InboundMessage, OutboundMessage
from bot.intake.channel import ChunkSent, Intake

log = structlog.get_logger("switchboard.agent_messages")

HOUR = 3600.0
# A message sent before the channel took its intake (a reply resumed at start) waits this long.
START_WAIT = 30.0


class AgentChannel:
    """Passes messages between the agents of the config in force; nothing leaves the process."""

    provider = AGENT_PROVIDER

    def __init__(self, config: Callable[[], Config], clock: Callable[[], float] = time.time) -> None:
        self._config = config
        self._clock = clock
        self._intake: Intake | None = None
        self.ready = asyncio.Event()  # set once the intake is known
        self._stopped = asyncio.Event()
        # Answers someone waits for, by the id of the message they answer.
        self._waiting: dict[str, asyncio.Future[str]] = {}
        # When each (from, to) pair passed its messages within the last hour (kept in memory: a
        # restart starts the hour afresh).
        self._passed: dict[tuple[str, str], deque[float]] = {}

    async def run(self, intake: Intake) -> None:
        self._intake = intake
        self.ready.set()
        await self._stopped.wait()

    async def stop(self) -> None:
        self._stopped.set()

    def typing(self, chat: ChatRef) -> AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()

    async def send(self, message: OutboundMessage, on_chunk: ChunkSent | None = None) -> list[str]:
        """Pass a reply or a delivery on to the agent its chat names; a message not passed on
        (hop limit, rate, an agent that is gone) is logged and counts as delivered."""
        pair = chat_agents(message.chat)
        if pair is None:
            log.warning("agent message not passed on: not an agent chat", chat=message.chat.chat_id)
            return []
        if message.skip_chunks:
            return []  # one chunk, passed on before a restart
        sender, to = pair
        thread = message.chat.thread_id
        waiter = self._waiting.pop(message.reply_to_id or "", None)
        if waiter is not None and not waiter.done():
            waiter.set_result(message.text)
            return []
        # Stable across a resend after a restart (the store takes the same message once).
        name = message.delivery_key or uuid.uuid4().hex
        message_id = hop_message_id(hop_of(message.reply_to_id) + 1, name)
        try:
            await self._pass(sender, to, message.text, message_id, message.reply_to_id, thread)
        except AgentMessageRefused as exc:
            log.info(f"agent message not passed on: {exc.reason}", sender=sender, to=to,
                     provider_message_id=message_id, detail=str(exc))
            return []
        if on_chunk is not None:
            await on_chunk(0, message_id)
        return [message_id]

    async def ask(self, sender: str, to: str, text: str, hop: int, origin: str) -> str:
        """Pass a message from `sender`, writing from its session `origin`, to `to` at `hop` and wait
        for `to`'s answer (cancel to stop waiting: the answer then comes to `sender`'s session with
        `to` for that origin, as a message)."""
        message_id = hop_message_id(hop, uuid.uuid4().hex)
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiting[message_id] = answer
        try:
            await self._pass(sender, to, text, message_id, None, origin_thread(origin))
            return await answer
        finally:
            self._waiting.pop(message_id, None)

    def check(self, sender: str, to: str, hop: int) -> None:
        """Raise AgentMessageRefused when a message from `sender` to `to` at `hop` may not pass."""
        config = self._config()
        agents = config.agent_ids()
        if to not in agents or sender not in agents:
            missing = to if to not in agents else sender
            raise AgentMessageRefused("unknown agent", f"there is no agent {missing!r}; the agents are "
                                      f"{', '.join(agents)}")
        if to == sender:
            raise AgentMessageRefused("to itself", "an agent does not write to itself")
        limits = config.agent_messages
        if hop > limits.hop_limit:
            raise AgentMessageRefused("hop limit", f"this exchange between agents has passed "
                                      f"{limits.hop_limit} messages, its limit; answer without "
                                      f"writing to {to}")
        if len(self._recent(sender, to)) >= limits.per_pair_per_hour:
            raise AgentMessageRefused("rate limit", f"{sender} has reached its limit of "
                                      f"{limits.per_pair_per_hour} messages an hour to {to}; try again later")

    async def _pass(
        self, sender: str, to: str, text: str, message_id: str, reply_to: str | None, thread: str | None
    ) -> None:
        self.check(sender, to, hop_of(message_id))
        intake = await self._intake_ready()
        try:
            name = self._config().for_agent(sender).agent.name
        except KeyError:
            name = sender
        await intake.submit(InboundMessage(
            session_key=agent_session(to, sender, thread), chat=agent_chat(to, sender, thread),
            sender_id=sender,
            sender_name=name, text=text, provider_message_id=message_id, reply_to_id=reply_to,
            sent_at=self._clock(),
        ))
        self._recent(sender, to).append(self._clock())
        log.info("agent message passed", sender=sender, to=to, provider_message_id=message_id)

    def _recent(self, sender: str, to: str) -> deque[float]:
        passed = self._passed.setdefault((sender, to), deque())
        while passed and passed[0] <= self._clock() - HOUR:
            passed.popleft()
        return passed

    async def _intake_ready(self) -> Intake:
        if self._intake is None:
            try:
                await asyncio.wait_for(self.ready.wait(), START_WAIT)
            except TimeoutError as exc:
                raise DeliveryError("the agent channel has not started") from exc
        if self._intake is None:
            raise ChannelNotStartedError("the agent channel has not started")
        return self._intake
