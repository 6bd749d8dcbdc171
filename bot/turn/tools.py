"""A turn's tools: who is asking (`ToolContext`), the tools they may use, the loop that runs them,
and their notes for the per-turn system prompt."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import structlog

from bot.config import Config
from bot.core.errors import describe
from bot.core.messages import InboundMessage, StoredMessage
from bot.models.brain import Brain
from bot.store import StoredToolCall, TurnOpening
from bot.store.seams import TurnToolStore
from bot.tools.base import ToolContext
from bot.tools.notes import notes_block
from bot.tools.scope import is_person
from bot.tools.toolbox import ToolBox
from bot.turn.tool_loop import LoopOutcome, ToolLoop

log = structlog.get_logger("switchboard.tools")


class TurnTools:
    """Built once per config; asked once per turn."""

    def __init__(
        self, config: Config, store: TurnToolStore, brain: Brain, toolbox: ToolBox | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._store = store
        self._brain = brain
        self._toolbox = toolbox
        self._clock = clock

    def is_admin(self, inbound: InboundMessage) -> bool:
        """In the channel's `admins`; the console's user is its admin."""
        section = self._config.chat_channel(inbound.chat.provider)
        if section is None:
            return inbound.chat.provider == "console"
        return inbound.sender_id in section.admins

    async def user_zone(self, inbound: InboundMessage, opening: TurnOpening | None = None) -> str | None:
        """The zone the user set with `set_timezone`, if it is still one this machine knows (as the
        turn's `opening` read it, when given)."""
        try:
            zone = (opening.timezone if opening is not None
                    else await self._store.user_timezone(inbound.chat.provider, inbound.sender_id))
            if zone:
                ZoneInfo(zone)
            return zone
        except Exception as exc:  # the agent's zone beats no answer
            log.warning("user timezone unusable", error=describe(exc), exc_info=True)
            return None

    def context(self, inbound: InboundMessage, request: StoredMessage, zone: str | None) -> ToolContext:
        """What the tools know of this turn; `zone`: the asker's own (`user_zone`), else the agent's."""
        zone = zone or self._config.agent.timezone
        return ToolContext(
            session_key=inbound.session_key, chat=inbound.chat, user_id=inbound.sender_id,
            request_id=request.id, is_admin=self.is_admin(inbound),
            shared=not inbound.session_key.is_direct, now=self._clock(), timezone=zone,
        )

    async def loop(
        self, inbound: InboundMessage, request: StoredMessage, zone: str | None,
        opening: TurnOpening | None = None,
    ) -> ToolLoop | None:
        """The loop for this request, or None when no tool is offered (a plain reply)."""
        if self._toolbox is None:
            return None
        context = self.context(inbound, request, zone)
        offered = self._toolbox.offered(context)
        if not offered:
            return None
        settings = self._toolbox.config
        return ToolLoop(self._brain, self._store, offered, context,
                        max_rounds=settings.max_tool_rounds, tool_timeout=settings.tool_timeout,
                        none_open=opening is not None and not opening.open_calls)

    def remember_loop(self, inbound: InboundMessage, request: StoredMessage) -> ToolLoop | None:
        """A memory flush's loop: `remember` alone, where this asker may use it in their private
        chat (notes are a person's, shown in private chats only); None where it is not offered.
        Its rounds are kept in memory: the request they would be stored under is answered already."""
        if self._toolbox is None or not inbound.session_key.is_direct:
            return None
        if not is_person(inbound.chat.provider, inbound.sender_id):
            return None
        context = self.context(inbound, request, None)
        offered = [tool for tool in self._toolbox.offered(context) if tool.name == "remember"]
        if not offered:
            return None
        settings = self._toolbox.config
        return ToolLoop(self._brain, RoundsInMemory(), offered, context,
                        max_rounds=settings.max_tool_rounds, tool_timeout=settings.tool_timeout,
                        none_open=True)

    async def notes(
        self, inbound: InboundMessage, zone: str | None, opening: TurnOpening | None = None
    ) -> list[tuple[str, str]]:
        """For the per-turn system prompt, as (what it is, text): the asking user's own timezone
        (`zone`, from `user_zone`) when they set one, and their notes in private chats only (a group
        would read them too; an agent writing to another is no person: its chats with another agent
        are apart, one per conversation it writes from). The notes are the `opening`'s, when given."""
        parts: list[tuple[str, str]] = []
        try:
            if zone:
                local = datetime.fromtimestamp(self._clock(), ZoneInfo(zone)).strftime("%A %Y-%m-%d %H:%M")
                parts.append((f"the asker's timezone (set_timezone: {zone})",
                              f"The person asking uses the timezone {zone} (their time now: {local})."))
            if inbound.session_key.is_direct and is_person(inbound.chat.provider, inbound.sender_id):
                notes = (list(opening.notes) if opening is not None
                         else await self._store.notes_of(inbound.chat.provider, inbound.sender_id))
                name = inbound.sender_name or "the user"
                block = notes_block(notes, name, self._config.tools.notes_max_chars)
                if block:
                    parts.append((f"notes of {inbound.chat.provider}:{inbound.sender_id} "
                                  f"({len(notes)}, remember)", block))
        except Exception as exc:  # the reply matters more than the notes
            log.warning("user notes unreadable", error=describe(exc), exc_info=True)
        return parts


class RoundsInMemory:
    """A tool loop's ledger that keeps its rounds in memory only (a memory flush's)."""

    def __init__(self) -> None:
        self._next = 0

    async def begin_tool_round(
        self, session_key: str, request_id: int, round_number: int, text: str,
        calls: Sequence[tuple[str, str, dict[str, Any]]],
    ) -> list[int]:
        first, self._next = self._next, self._next + len(calls)
        return list(range(first, self._next))

    async def finish_tool_call(
        self, call_id: int, *, result: str, summary: str, is_error: bool, duration_ms: float
    ) -> None:
        return None

    async def open_tool_calls(self, request_id: int) -> list[StoredToolCall]:
        return []


def partial_reply(outcome: LoopOutcome | None) -> str | None:
    """The reply when tools acted but the model failed before answering: what was done, so nobody
    (the user, or the model in the next turn) does it again. None when no tool ran."""
    if outcome is None or not outcome.calls:
        return None
    done = "\n".join(f"- {action}" for action in outcome.actions)
    return f"I couldn't finish my answer (the model did not respond), but this was done:\n{done}"
