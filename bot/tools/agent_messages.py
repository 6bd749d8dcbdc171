"""The message_agent tool: an agent writes to another agent of the daemon and reads its answer.

The message reaches the other agent as an inbound message of its session with the writer for the
chat it is written from (`agent:<to>:agent:direct:<from>:thread:<tag>`, `bot.core.agent_chat`), answered
by its own turn runner like any message; the tool waits for that answer and returns it. An answer
that comes after the tool stopped waiting goes to the writer's session with the other agent for
that chat instead, as a message it answers there. One conversation per chat: the other agent never
answers one chat from what it was told for another. Offered only
when the config has more than one agent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from bot.config import Config
from bot.core.agent_chat import hop_of
from bot.core.errors import AgentMessageRefused
from bot.core.messages import AGENT_PROVIDER
from bot.intake.channel import Channel
from bot.store.seams import MessageReads
from bot.tools.base import FunctionTool, Tool, ToolContext, ToolResult

MAX_TEXT = 8000  # characters: a question or a briefing, not a document


@runtime_checkable
class AgentPost(Protocol):
    """What the agent channel offers the tool (channels/agent.py)."""

    async def ask(self, sender: str, to: str, text: str, hop: int, origin: str) -> str:
        """Pass a message written from the session `origin` and wait for the answer (the
        conversation is that origin's alone); AgentMessageRefused when it may not pass."""
        ...


class AgentMessageTools:
    """A ToolSource of `message_agent`, described with the agents of the config in force."""

    def __init__(
        self, store: MessageReads, config: Callable[[], Config], channels: Mapping[str, Channel]
    ) -> None:
        self._store = store
        self._config = config
        self._channels = channels
        self._built: tuple[Config, Sequence[Tool]] | None = None

    def tools(self) -> Sequence[Tool]:
        config = self._config()
        # Built once per config (a reload builds it again): the same bytes every turn keep the
        # prompt cache warm.
        if self._built is None or self._built[0] is not config:
            agents = [f"{agent} ({config.for_agent(agent).agent.name})" for agent in config.agent_ids()]
            self._built = (config, (self._tool(agents),) if len(agents) > 1 else ())
        return self._built[1]

    def _tool(self, agents: list[str]) -> Tool:
        return FunctionTool(
            name="message_agent",
            description=(
                "Write to another agent of this assistant and get its answer (it answers as itself, "
                f"from what you told it for this chat). The agents: {', '.join(agents)}. If its answer "
                "takes too long, it comes later as a message in your conversation with that agent."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "agent": {"type": "string", "description": "The id of the agent to write to."},
                    "text": {"type": "string", "description": "What to tell or ask it, complete in "
                             "itself: it does not see this conversation."},
                },
                "required": ["agent", "text"],
                "additionalProperties": False,
            },
            handler=self._message,
            # Writing: it makes another agent act and speak (model calls, and an answer that may be
            # passed on again), so in shared chats only admins may have it by default.
            writes=True,
        )

    async def _message(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        to, text = str(arguments.get("agent", "")).strip(), str(arguments.get("text", "")).strip()
        if not text:
            return ToolResult.error("`text` is required: what to tell or ask the agent")
        if len(text) > MAX_TEXT:
            return ToolResult.error(f"`text` is {len(text)} characters; keep it under {MAX_TEXT}")
        key = context.session_key
        me = key.agent_id
        if to == me:
            return ToolResult.error("that is you; write to another agent")
        hop = 1
        if key.provider == AGENT_PROVIDER:
            if to == key.peer:
                return ToolResult.error(f"you are answering {to} now: your reply goes to {to}; put "
                                        "what you want to tell it in your answer")
            request = await self._store.message_by_id(context.request_id)
            hop = hop_of(request.provider_message_id if request is not None else None) + 1
        channel = self._channels.get(AGENT_PROVIDER)
        if not isinstance(channel, AgentPost):
            return ToolResult.error("messages between agents are not running in this daemon")
        try:
            answer = await channel.ask(me, to, text, hop, str(key))
        except AgentMessageRefused as exc:
            return ToolResult.error(str(exc))
        return ToolResult(content=answer, summary=f"{to} answered: {answer}")
