"""A turn's first phase, compose: the context built and the reply call assembled, as one frozen value.

`Composer` asks the session's model, builds the context, reads the files the prompt sends in full,
and puts the system prompt (the stable part, where and when, the asker's notes, the tools offered)
and the conversation into a `ReplyRequest`. What it hands on, `Composed`, is all the later phases
read of it. A context that could not be built, or a prompt that could not be put together, still
composes: without a call, with the error, so the turn answers with its fallback.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from zoneinfo import ZoneInfo

import structlog

from bot.config import Config
from bot.config.provider_check import reply_timeout
from bot.context.prompt import conversation_turns, media_hashes, turn_system_prompt
from bot.core.errors import describe
from bot.core.media import MAX_INLINE_BYTES
from bot.core.messages import ChatRef, InboundMessage, StoredMessage
from bot.core.session_key import SessionKey
from bot.models.brain import ReplyRequest, TextSink
from bot.ranking.stages import Context
from bot.store import TurnOpening
from bot.turn.tool_loop import LoopOutcome

log = structlog.get_logger("switchboard.turn")


class ContextSource(Protocol):
    """What the turn asks of the context builder."""

    async def build(
        self, key: SessionKey, request: StoredMessage, chat: ChatRef | None = None
    ) -> Context: ...


class SessionModels(Protocol):
    """The model a session chose with /model (the store)."""

    async def session_model(self, session_key: str) -> str | None: ...


class ModelNames(Protocol):
    """A role's model, as the brain resolves it."""

    def model_for(self, role: str) -> str: ...


class FileSource(Protocol):
    """The kept files a prompt sends in full, by hash."""

    async def read(self, sha256: str) -> bytes | None: ...


class StablePrompt(Protocol):
    """The system prompt's part that is the same every turn, and the prompt files it holds."""

    def stable_prompt(self) -> str: ...

    def included(self) -> list[dict[str, Any]]: ...


class ToolRounds(Protocol):
    """The tool loop one turn answers through (`bot.turn.tool_loop.ToolLoop`)."""

    @property
    def offered(self) -> int: ...

    @property
    def definitions_chars(self) -> int: ...

    @property
    def outcome(self) -> LoopOutcome | None: ...

    async def run(self, call: ReplyRequest, on_text: TextSink | None = None) -> LoopOutcome: ...


class AskerAids(Protocol):
    """What the turn's tools add for the asker (`bot.turn.tools.TurnTools`)."""

    async def user_zone(self, inbound: InboundMessage, opening: TurnOpening | None = None) -> str | None: ...

    async def loop(
        self, inbound: InboundMessage, request: StoredMessage, zone: str | None,
        opening: TurnOpening | None = None,
    ) -> ToolRounds | None: ...

    async def notes(
        self, inbound: InboundMessage, zone: str | None, opening: TurnOpening | None = None
    ) -> list[tuple[str, str]]: ...


@dataclass(frozen=True, slots=True)
class Composed:
    """A turn's context and the reply call made of it; `call` is None when there is none to make
    (the context or the prompt failed: `error` says why)."""

    session_key: str
    context: Context
    model: str  # the session's model (its /model choice, else the main role's)
    call: ReplyRequest | None = None
    error: str | None = None
    loop: ToolRounds | None = None
    # The per-turn system prompt's parts and the prompt files in the stable part, for the snapshot.
    turn_parts: tuple[tuple[str, int], ...] = ()
    prompt_files: tuple[dict[str, Any], ...] = ()
    # The call's messages with every file as its placeholder; None when no file went in full.
    placeholders: Callable[[], list[dict[str, Any]]] | None = None
    context_ms: float = 0.0
    context_done: float = 0.0  # time.perf_counter() when the context was built
    # False when the turn's opening read found no compaction untold: commit need not look again.
    notice_due: bool = True

    def without_files(self) -> ReplyRequest | None:
        """The call again with its files as placeholders (the API refused what a file became)."""
        if self.call is None or self.placeholders is None:
            return None
        return dataclasses.replace(self.call, messages=self.placeholders())


class Composer:
    """Composes each turn of one agent's config."""

    def __init__(
        self, config: Config, contexts: ContextSource, models: SessionModels, names: ModelNames,
        prompt: StablePrompt, files: FileSource, aids: AskerAids,
    ) -> None:
        self._config = config
        self._contexts = contexts
        self._models = models
        self._names = names
        self._prompt = prompt
        self._files = files
        self._aids = aids

    async def __call__(
        self, request: StoredMessage, inbound: InboundMessage, started: float,
        opening: TurnOpening | None = None,
    ) -> Composed:
        """`started`: the turn's start (time.perf_counter()), which `context_ms` counts from;
        `opening`: what the turn read of itself in one go (None: each part is read here)."""
        key = inbound.session_key
        model = await self.session_model(str(key), opening)
        try:
            context = await self._contexts.build(key, request, inbound.chat)
        except Exception as exc:  # a store or pipeline failure still gets the fallback reply
            error = f"context_build_error: {describe(exc)}"
            log.exception("context build failed", session_key=str(key), error_class="context_build_error")
            context = Context.failed(error, inbound.chat)
        done = time.perf_counter()
        composed = Composed(str(key), context, model, error=context.error,
                            context_ms=(done - started) * 1000, context_done=done,
                            notice_due=opening is None or opening.untold_compaction)
        if context.status == "failed":
            return composed
        try:
            return await self._assemble(composed, request, inbound, opening)
        except Exception as exc:  # a bug or surprise in assembling the prompt still gets a reply
            log.exception("reply prompt not assembled", session_key=str(key))
            return dataclasses.replace(composed, error=describe(exc))

    async def session_model(self, key: str, opening: TurnOpening | None = None) -> str:
        """The model this session chose with /model (if still allowed), else the configured one."""
        allowed = self._config.anthropic.models
        try:
            chosen = opening.model if opening is not None else await self._models.session_model(key)
        except Exception as exc:  # the default model beats no reply
            log.warning("session model unreadable", session_key=key, error=describe(exc), exc_info=True)
            chosen = None
        # The main role's model ("provider:model" when the brain routes by role).
        return allowed[chosen] if chosen in allowed else self._names.model_for("main")

    async def _assemble(
        self, composed: Composed, request: StoredMessage, inbound: InboundMessage,
        opening: TurnOpening | None,
    ) -> Composed:
        context, key = composed.context, inbound.session_key
        files = await self.read_files(media_hashes(context, request))
        # The asker's own timezone, read once for the tools and the prompt.
        zone = await self._aids.user_zone(inbound, opening)
        loop = await self._aids.loop(inbound, request, zone, opening)
        where = turn_system_prompt(self._config, key, time.time(), inbound.sender_name)
        personal = await self._aids.notes(inbound, zone, opening)
        parts = [("where and when (this chat, the time)", len(where)),
                 *((label, len(text)) for label, text in personal)]
        if loop is not None:
            parts.append((f"tool definitions ({loop.offered} offered)", loop.definitions_chars))
        group, agent_zone = not key.is_direct, ZoneInfo(self._config.agent.timezone)
        call = ReplyRequest(
            system_stable=self._prompt.stable_prompt(),
            system_turn=where + "".join("\n\n" + text for _, text in personal),
            messages=conversation_turns(context, request, group=group, zone=agent_zone, files=files),
            deadline=time.monotonic() + reply_timeout(self._config),
            model=composed.model,
        )
        placeholders = ((lambda: conversation_turns(context, request, group=group, zone=agent_zone))
                        if files else None)
        return dataclasses.replace(
            composed, call=call, loop=loop, turn_parts=tuple(parts),
            prompt_files=tuple(self._prompt.included()), placeholders=placeholders,
        )

    async def read_files(self, hashes: Sequence[str]) -> dict[str, bytes]:
        """The kept files this turn sends in full, newest first up to MAX_INLINE_BYTES; one gone
        from disk, or beyond that total, shows as its placeholder."""
        files: dict[str, bytes] = {}
        total = 0
        for sha256 in hashes:
            data = await self._files.read(sha256)
            if data is None:
                log.warning("a kept file is missing; the model sees its placeholder", sha256=sha256)
            elif total + len(data) <= MAX_INLINE_BYTES:
                files[sha256] = data
                total += len(data)
        return files
