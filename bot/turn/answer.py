"""A turn's second phase, answer: the model's reply to the composed call, or what is said instead.

`Answerer` sends the call (through the tool loop when tools are offered), asks again with the
files as placeholders when the API refuses what a file became, and turns a failure into the words
the user gets: the fallback apology for a failure that may pass, a misconfiguration's own reply
(told to the admin) for one that will not, what the tools did when they acted but the model never
answered. `Answer` is the frozen result the later phases read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from bot.core.errors import MissingApiKeyError, ModelError, describe
from bot.core.misconfiguration import Misconfiguration
from bot.models.brain import Completion, ReplyRequest, TextSink
from bot.turn.compose import Composed, ToolRounds
from bot.turn.tool_loop import LoopOutcome
from bot.turn.tools import partial_reply

log = structlog.get_logger("switchboard.turn")

# What the user gets when the model failed in a way that may pass (an outage, a timeout); a
# misconfiguration (a refused key, an unknown model, no credit) says so instead (`Misconfiguration.reply`).
FALLBACK_REPLY = "I couldn't reach the model, try again in a moment."


class Replier(Protocol):
    """The model call of a turn without tools (the brain)."""

    async def reply(self, request: ReplyRequest, on_text: TextSink | None = None) -> Completion: ...


class ProblemReporter(Protocol):
    """Where a misconfiguration is told (`bot.core.misconfiguration.Misconfigurations`)."""

    async def report(self, problem: Misconfiguration) -> object: ...


@dataclass(frozen=True, slots=True)
class ToolUse:
    """What the tools did in a turn, as its snapshot, its log line and its stored reply show it."""

    record: dict[str, Any]  # `LoopOutcome.snapshot()`
    rounds: int
    calls: int
    actions: tuple[str, ...]

    @classmethod
    def of(cls, outcome: LoopOutcome | None) -> ToolUse | None:
        if outcome is None:
            return None
        return cls(outcome.snapshot(), outcome.rounds, len(outcome.calls), tuple(outcome.actions))


@dataclass(frozen=True, slots=True)
class Answer:
    """The reply's text and how it came about."""

    text: str
    completion: Completion | None = None  # None: the model gave no reply
    error: str | None = None
    # An apology stands in for the reply (the snapshot's "fallback").
    fallback: bool = False
    # The model (or, when it failed after them, its tools) wrote it: kept as the agent's words,
    # sent back to the model in later turns. A reply the model did not write is delivered and
    # kept, but never shown to the model as something the agent said.
    written: bool = False
    tools: ToolUse | None = None

    @property
    def actions(self) -> tuple[str, ...]:
        """The tools' actions the stored reply carries (none on a reply the model did not write)."""
        return self.tools.actions if self.tools is not None and self.written else ()


class Answerer:
    """Answers each composed turn of one agent."""

    def __init__(self, brain: Replier, misconfigured: ProblemReporter) -> None:
        self._brain = brain
        self._misconfigured = misconfigured

    async def __call__(
        self, composed: Composed, *, local: bool = False, on_text: TextSink | None = None
    ) -> Answer:
        """`local`: the asker is the admin at the console, told what to set rather than the apology."""
        if composed.call is None:
            return Answer(FALLBACK_REPLY, error=composed.error, fallback=True)
        try:
            completion = await self._reply_with_files(composed, composed.call, on_text)
        except ModelError as exc:
            said = await self._model_failed(exc, local)
        except Exception as exc:  # a bug or surprise in the provider path still gets a reply
            log.exception("model call crashed", session_key=composed.session_key)
            said = Answer(FALLBACK_REPLY, error=describe(exc), fallback=True)
        else:
            tools = ToolUse.of(composed.loop.outcome if composed.loop is not None else None)
            return Answer(completion.text.strip() or "(no reply)", completion, written=True, tools=tools)
        outcome = composed.loop.outcome if composed.loop is not None else None
        # Tools acted but the model never answered: the user (and the next turn) learn what was done.
        partial = partial_reply(outcome)
        if partial is not None:
            return Answer(partial, error=said.error, written=True, tools=ToolUse.of(outcome))
        return Answer(said.text, error=said.error, fallback=said.fallback, tools=ToolUse.of(outcome))

    async def _model_failed(self, exc: ModelError, local: bool) -> Answer:
        apology = FALLBACK_REPLY
        if exc.problem is not None:  # "not set up", not "try again"; the admin is told the fix
            apology = exc.problem.reply()
            await self._misconfigured.report(exc.problem)
        # On the console the admin is the user: say what to set. Chats get the apology (no
        # configuration detail reaches a chat).
        text = str(exc) if local and isinstance(exc, MissingApiKeyError) else apology
        return Answer(text, error=str(exc), fallback=text == apology)

    async def _reply_with_files(
        self, composed: Composed, call: ReplyRequest, on_text: TextSink | None
    ) -> Completion:
        """The model's reply (through the tool loop when tools are offered); when the API refuses
        the request for what a file became (a damaged picture, a PDF it cannot read), asked again
        with the placeholders rather than failing every turn while the file is recent (tool rounds
        already run are sent again from the store, not run again)."""
        try:
            return await self._ask(call, on_text, composed.loop)
        except ModelError as exc:
            again = composed.without_files()
            if again is None or exc.retryable or exc.problem or isinstance(exc, MissingApiKeyError):
                raise
            log.warning("the model refused the files; answering from their placeholders", error=str(exc))
            return await self._ask(again, on_text, composed.loop)

    async def _ask(self, call: ReplyRequest, on_text: TextSink | None, loop: ToolRounds | None) -> Completion:
        if loop is None:
            return await self._brain.reply(call, on_text=on_text)
        return (await loop.run(call, on_text)).completion
