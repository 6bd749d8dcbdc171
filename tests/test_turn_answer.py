"""The answer phase: the model's reply to a composed call, or the words said instead, with a fake brain."""

from __future__ import annotations

import dataclasses

from structlog.testing import capture_logs

from bot.core.errors import MissingApiKeyError, ModelError
from bot.core.misconfiguration import Misconfiguration
from bot.turn.answer import FALLBACK_REPLY, Answerer
from tests.turn_fakes import FakeBrain, FakeLoop, completion, composed, tool_call


class Reporter:
    def __init__(self) -> None:
        self.told: list[Misconfiguration] = []

    async def report(self, problem: Misconfiguration) -> bool:
        self.told.append(problem)
        return True


REFUSED = Misconfiguration("provider", "anthropic", "auth", "the key was refused (401)", "set a valid key",
                           reason="the model key was refused")


async def test_the_model_reply_is_the_answer() -> None:
    """The reply's text, stripped, is kept as the agent's words; the preview sink reaches the brain."""
    brain = FakeBrain(completion("  hi there \n"))
    seen: list[str] = []
    answer = await Answerer(brain, Reporter())(composed(), on_text=seen.append)

    assert (answer.text, answer.written, answer.fallback, answer.error) == ("hi there", True, False, None)
    assert answer.completion is not None and answer.completion.input_tokens == 120
    assert brain.sinks == [seen.append] and answer.tools is None and answer.actions == ()


async def test_an_empty_reply_says_so() -> None:
    """A reply with no text is stored as "(no reply)", not as nothing."""
    answer = await Answerer(FakeBrain(completion("  ")), Reporter())(composed())

    assert answer.text == "(no reply)" and answer.written


async def test_no_call_answers_with_the_fallback_and_the_composed_error() -> None:
    """A turn composed without a call (its context failed) gets the apology, without asking the model."""
    brain = FakeBrain()
    answer = await Answerer(brain, Reporter())(composed(with_call=False, error="context_build_error: boom"))

    assert (answer.text, answer.error, answer.fallback, answer.written) == (
        FALLBACK_REPLY, "context_build_error: boom", True, False)
    assert brain.calls == []


async def test_a_passing_model_failure_gets_the_apology() -> None:
    """An outage or a timeout: the apology, the error kept, nothing stored as the agent's words."""
    answer = await Answerer(FakeBrain(ModelError("overloaded (529)")), Reporter())(composed())

    assert (answer.text, answer.error, answer.fallback, answer.written) == (
        FALLBACK_REPLY, "overloaded (529)", True, False)


async def test_a_misconfiguration_is_told_and_says_so_in_the_chat() -> None:
    """A refused key: the chat is told the setup is wrong, the admin is told what to fix."""
    reporter = Reporter()
    refused = ModelError("401", retryable=False, problem=REFUSED)
    answer = await Answerer(FakeBrain(refused), reporter)(composed())

    assert answer.text == REFUSED.reply() and answer.fallback and not answer.written
    assert reporter.told == [REFUSED]


async def test_a_missing_key_on_the_console_names_what_to_set() -> None:
    """At the console the admin is the user: the error itself is the reply, which is no apology."""
    missing = MissingApiKeyError("set ANTHROPIC_API_KEY")

    local = await Answerer(FakeBrain(missing), Reporter())(composed(), local=True)
    chat = await Answerer(FakeBrain(missing), Reporter())(composed())

    assert (local.text, local.fallback) == ("set ANTHROPIC_API_KEY", False)
    assert (chat.text, chat.fallback) == (FALLBACK_REPLY, True)


async def test_a_crash_in_the_provider_path_still_gets_the_apology() -> None:
    """A bug is logged with its traceback and answered with the apology."""
    with capture_logs() as logs:
        answer = await Answerer(FakeBrain(RuntimeError("bug")), Reporter())(composed())

    assert (answer.text, answer.error, answer.fallback) == (FALLBACK_REPLY, "RuntimeError: bug", True)
    assert [(e["event"], e.get("exc_info")) for e in logs] == [("model call crashed", True)]


async def test_refused_files_are_asked_again_as_placeholders() -> None:
    """The API refusing what a file became is answered from the placeholders, once."""
    placeholder = [{"role": "user", "content": "[picture: cat.jpg]"}]
    with_files = dataclasses.replace(composed(), placeholders=lambda: placeholder)
    brain = FakeBrain(ModelError("could not process image", retryable=False), completion("a cat"))

    answer = await Answerer(brain, Reporter())(with_files)

    assert answer.text == "a cat"
    assert [c.messages for c in brain.calls][1] == placeholder


async def test_a_refusal_without_files_is_not_asked_again() -> None:
    """Without files inlined there is nothing to ask again with: the refusal stands."""
    brain = FakeBrain(ModelError("bad request", retryable=False), completion())

    answer = await Answerer(brain, Reporter())(composed())

    assert answer.text == FALLBACK_REPLY and len(brain.calls) == 1


async def test_the_tool_loop_answers_when_tools_are_offered() -> None:
    """With tools the loop runs the call; what the tools did comes with the answer and its actions."""
    loop = FakeLoop(completion("done"), [tool_call()])
    brain = FakeBrain()

    answer = await Answerer(brain, Reporter())(composed(loop=loop))

    assert brain.calls == [] and len(loop.ran) == 1
    assert answer.text == "done" and answer.tools is not None
    assert (answer.tools.rounds, answer.tools.calls) == (1, 1)
    assert answer.actions == answer.tools.actions and len(answer.actions) == 1
    assert answer.tools.record["offered"] == ["get_time", "set_timezone"]


async def test_tools_that_acted_before_the_model_failed_are_reported_as_the_reply() -> None:
    """The model failing after a tool acted: the reply says what was done, kept as the agent's words."""
    loop = FakeLoop(ModelError("timed out"), [tool_call()])

    answer = await Answerer(FakeBrain(), Reporter())(composed(loop=loop))

    assert answer.text.startswith("I couldn't finish my answer") and answer.written
    assert not answer.fallback and answer.error == "timed out" and len(answer.actions) == 1


async def test_a_tool_loop_that_failed_before_any_tool_keeps_the_apology() -> None:
    """No tool ran: the apology, and no actions on what is stored."""
    answer = await Answerer(FakeBrain(), Reporter())(composed(loop=FakeLoop(ModelError("timed out"))))

    assert answer.text == FALLBACK_REPLY and answer.fallback and answer.actions == ()
    assert answer.tools is not None and answer.tools.rounds == 0
