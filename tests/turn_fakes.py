"""Small values and fakes of the turn phases' protocols, for the phases' unit tests."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bot.core.messages import ChatRef, InboundMessage, StoredMessage
from bot.core.session_key import build
from bot.models.brain import Completion, ReplyRequest, TextSink
from bot.ranking.stages import Context, ContextEntry, TriageReport
from bot.turn.answer import Answer
from bot.turn.compose import Composed
from bot.turn.record import TurnRecord
from bot.turn.tool_loop import LoopOutcome, ToolCallRecord

KEY = build("main", "fake", "direct", "42")
CHAT = ChatRef("fake", "42")


def request(text: str = "hello?", message_id: int = 7) -> StoredMessage:
    return StoredMessage(message_id, str(KEY), "user", "interactive", text, time.time(), sender_id="42",
                         sender_name="Ada", provider_message_id="m7")


def inbound(text: str = "hello?", provider: str = "fake") -> InboundMessage:
    return InboundMessage(KEY, ChatRef(provider, "42"), "42", "Ada", text, provider_message_id="m7")


def context(*texts: str, triage: TriageReport | None = None) -> Context:
    """A context of earlier messages `texts` (alternately the user's and the agent's)."""
    entries = [ContextEntry(StoredMessage(index + 1, str(KEY), "user" if index % 2 == 0 else "assistant",
                                          "interactive", text, time.time()), "recent")
               for index, text in enumerate(texts)]
    return Context(entries, [], None, triage or TriageReport("skipped"), None, chat=CHAT)


def call(text: str = "hello?") -> ReplyRequest:
    return ReplyRequest("You are Switchboard.", "This conversation is a private chat.",
                        [{"role": "user", "content": text}], time.monotonic() + 30, model="claude-test")


def composed(*, with_call: bool = True, loop: FakeLoop | None = None, error: str | None = None) -> Composed:
    return Composed(str(KEY), context("earlier", "answer"), "claude-test",
                    call=call() if with_call else None, error=error, loop=loop,
                    turn_parts=(("where and when (this chat, the time)", 36),),
                    prompt_files=({"name": "soul", "file": "/srv/SOUL.md", "chars": 12, "left_out": False},),
                    context_ms=3.0)


def record(answer: Answer, composed_as: Composed | None = None, *, model_ms: float = 40.0) -> TurnRecord:
    return TurnRecord(request(), "42", CHAT, None, composed_as or composed(), answer, model_ms=model_ms)


def tool_call(name: str = "set_timezone", summary: str = "set") -> ToolCallRecord:
    return ToolCallRecord(1, name, {"zone": "Europe/Paris"}, summary, False, 5.0)


class FakeBrain:
    """Answers every reply call with `answers` in turn (an exception is raised); records the calls."""

    def __init__(self, *answers: Completion | BaseException) -> None:
        self.answers = list(answers)
        self.calls: list[ReplyRequest] = []
        self.sinks: list[TextSink | None] = []

    async def reply(self, request: ReplyRequest, on_text: TextSink | None = None) -> Completion:
        self.calls.append(request)
        self.sinks.append(on_text)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def model_for(self, role: str) -> str:
        return {"main": "claude-main", "fast": "claude-fast"}.get(role, role)


class FakeLoop:
    """A tool loop that ran `calls` and then answered `answer` (or raised it)."""

    def __init__(self, answer: Completion | BaseException, calls: list[ToolCallRecord] | None = None) -> None:
        self.answer = answer
        self.calls = calls or []
        self.offered = 2
        self.definitions_chars = 321
        self.outcome: LoopOutcome | None = None
        self.ran: list[ReplyRequest] = []

    async def run(self, call: ReplyRequest, on_text: TextSink | None = None) -> LoopOutcome:
        self.ran.append(call)
        self.outcome = LoopOutcome(Completion("", "claude-test"), ["get_time", "set_timezone"],
                                   calls=list(self.calls), rounds=len(self.calls))
        if isinstance(self.answer, BaseException):
            raise self.answer
        self.outcome.completion = self.answer
        return self.outcome


class FakePreview:
    """A preview message the reply takes over (`posted`), recording what was done to it."""

    def __init__(self, posted: str | None = "p1") -> None:
        self.posted = posted
        self.shown = asyncio.Event()
        self.finished: list[str] = []
        self.abandoned = False
        self.withdrawn = False

    def update(self, text: str) -> None:
        self.shown.set()

    async def finish(self, final: str) -> str | None:
        self.finished.append(final)
        return self.posted

    def abandon(self) -> None:
        self.abandoned = True

    async def withdraw(self) -> None:
        self.withdrawn = True


def completion(text: str = "hi there", **facts: Any) -> Completion:
    return Completion(text, facts.pop("model", "claude-test"), facts.pop("input_tokens", 120),
                      facts.pop("output_tokens", 8), **facts)
