"""The Anthropic brain as the real SDK drives it against the local Messages API stand-in."""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.config import AnthropicConfig, Config
from bot.context.prompt import conversation_turns, stable_system_prompt, turn_system_prompt
from bot.core.errors import ModelError
from bot.core.messages import StoredMessage
from bot.core.session_key import build
from bot.models.brain import AnthropicBrain, ReplyRequest
from bot.ranking.stages import Context, ContextEntry, TriageReport
from bot.testing.anthropic_api import (
    AnthropicStandIn,
    DropConnection,
    Error,
    MalformedStream,
    Slow,
    Text,
    TruncatedStream,
)
from tests.harness import API_KEY, FAST, MODEL


def anthropic_config(api: AnthropicStandIn, **overrides: Any) -> AnthropicConfig:
    values: dict[str, Any] = {
        "base_url": api.base_url, "model": MODEL, "fast_model": FAST,
        "timeout": 2.0, "max_retries": 2,
    }
    values.update(overrides)
    return AnthropicConfig(**values)


def ask(text: str = "hello", *, within: float = 2.0) -> ReplyRequest:
    return ReplyRequest(
        system_stable="You are Switchboard.",
        system_turn="Current time: now.",
        messages=[{"role": "user", "content": text}],
        deadline=time.monotonic() + within,
    )


@pytest.fixture
async def api() -> AsyncIterator[AnthropicStandIn]:
    async with AnthropicStandIn() as standin:
        yield standin


@pytest.fixture
async def brain(api: AnthropicStandIn) -> AsyncIterator[AnthropicBrain]:
    made = AnthropicBrain(anthropic_config(api), API_KEY)
    yield made
    await made.aclose()


def stored(id_: int, role: str, text: str, name: str = "Ada") -> StoredMessage:
    return StoredMessage(
        id=id_, session_key="agent:main:fake:group:-5", role=role,  # type: ignore[arg-type]
        origin="interactive", text=text, created_at=1_700_000_000.0 + id_,
        sender_id="1" if role == "user" else None, sender_name=name if role == "user" else None,
    )


async def test_system_prompt_is_two_blocks_with_the_stable_one_cached(
    api: AnthropicStandIn, brain: AnthropicBrain
) -> None:
    """The SDK sends the system prompt as a cached stable block and an uncached block with the time."""
    config = Config(agent={"name": "Penny"})  # type: ignore[arg-type]
    key = build("main", "fake", "direct", "42")
    request = ReplyRequest(
        system_stable=stable_system_prompt(config),
        system_turn=turn_system_prompt(config, key, time.time()),
        messages=[{"role": "user", "content": "hi"}],
        deadline=time.monotonic() + 2,
    )
    await brain.reply(request)

    (sent,) = api.requests
    system = sent.body["system"]
    assert isinstance(system, list) and len(system) == 2
    stable, per_turn = system
    assert stable["cache_control"] == {"type": "ephemeral"}
    assert "Penny" in stable["text"] and "Current time" not in stable["text"]
    assert "cache_control" not in per_turn
    assert "Current time:" in per_turn["text"]
    assert time.strftime("%Y-%m-%d", time.gmtime()) in per_turn["text"]


async def test_turns_sent_alternate_and_start_with_the_user(
    api: AnthropicStandIn, brain: AnthropicBrain
) -> None:
    """Consecutive same-role messages reach the model merged, so roles alternate user/assistant."""
    entries = [
        ContextEntry(stored(1, "assistant", "morning all"), "all"),
        ContextEntry(stored(2, "user", "hi", "Ada"), "all"),
        ContextEntry(stored(3, "user", "hello", "Bob"), "all"),
        ContextEntry(stored(4, "assistant", "hey both"), "all"),
    ]
    context = Context(entries, [], None, TriageReport("skipped"), None)
    current = stored(5, "user", "what's up?", "Ada")
    turns = conversation_turns(context, current, group=True)
    await brain.reply(ReplyRequest("stable", "turn", turns, time.monotonic() + 2))

    roles = [m["role"] for m in api.requests[0].messages]
    assert roles[0] == roles[-1] == "user"
    assert all(a != b for a, b in itertools.pairwise(roles))
    assert roles[:2] == ["user", "assistant"]  # a placeholder opens before the bot's first line
    merged = api.requests[0].messages[2]["content"]
    assert "[Ada]: hi" in merged and "[Bob]: hello" in merged
    assert api.requests[0].messages[-1]["content"].endswith("] [Ada]: what's up?")


async def test_streamed_reply_is_assembled_with_usage(
    api: AnthropicStandIn, brain: AnthropicBrain
) -> None:
    """A streamed answer arrives as one text with its input and output token counts."""
    api.script(Text("a reply that arrives in several pieces", input_tokens=123, output_tokens=45))
    completion = await brain.reply(ask())
    assert completion.text == "a reply that arrives in several pieces"
    assert (completion.input_tokens, completion.output_tokens) == (123, 45)
    assert completion.model == MODEL
    assert api.requests[0].stream is True and api.requests[0].model == MODEL


async def test_rate_limit_is_retried_after_the_servers_wait(
    api: AnthropicStandIn, brain: AnthropicBrain
) -> None:
    """A 429 with retry-after is waited out and retried, and the user still gets the reply."""
    api.script(Error(429, "rate_limit_error", retry_after=0.05), Text("after the wait"))
    completion = await brain.reply(ask())
    assert completion.text == "after the wait"
    assert completion.attempts == 2
    assert api.count == 2


@pytest.mark.parametrize(("status", "kind"), [(529, "overloaded_error"), (500, "api_error")])
async def test_overloaded_and_server_errors_are_retried(
    api: AnthropicStandIn, brain: AnthropicBrain, status: int, kind: str
) -> None:
    """An overloaded (529) or internal (500) error is retried and the retry's answer is returned."""
    api.script(Error(status, kind, retry_after=0.01), Text("recovered"))
    assert (await brain.reply(ask())).text == "recovered"
    assert api.count == 2


async def test_retries_stop_at_max_retries(api: AnthropicStandIn, brain: AnthropicBrain) -> None:
    """A model that keeps failing is tried max_retries + 1 times, then a ModelError is raised."""
    api.default = lambda rec: Error(529, "overloaded_error", retry_after=0.01)
    with pytest.raises(ModelError) as info:
        await brain.reply(ask())
    assert info.value.retryable is True
    assert api.count == 3  # max_retries=2


async def test_one_deadline_bounds_a_slow_reply(api: AnthropicStandIn, brain: AnthropicBrain) -> None:
    """A reply slower than the turn's deadline ends in ModelError instead of waiting it out."""
    api.default = lambda rec: Slow(5.0, Text("too late"))
    with pytest.raises(ModelError):
        await brain.reply(ask(within=0.3))
    assert 1 <= api.count <= 3


async def test_a_stream_that_ends_early_is_retried(
    api: AnthropicStandIn, brain: AnthropicBrain
) -> None:
    """A stream that stops before message_stop is a failure; the retry's full answer is used."""
    api.script(TruncatedStream("half an ans"), Text("the whole answer"))
    completion = await brain.reply(ask())
    assert completion.text == "the whole answer"
    assert api.count == 2


async def test_a_dropped_connection_mid_stream_is_retried(
    api: AnthropicStandIn, brain: AnthropicBrain
) -> None:
    """A connection dropped in the middle of a stream is retried rather than returning a fragment."""
    api.script(DropConnection(), Text("second try"))
    completion = await brain.reply(ask())
    assert completion.text == "second try"
    assert api.count == 2


async def test_a_malformed_stream_event_is_retried_like_a_cut_stream(
    api: AnthropicStandIn, brain: AnthropicBrain
) -> None:
    """A text delta that is not valid JSON is retried, not answered with the fallback at once."""
    api.script(MalformedStream("a garbled answer"), Text("the clean answer"))
    completion = await brain.reply(ask())
    assert completion.text == "the clean answer"
    assert api.count == 2


async def test_an_invalid_key_fails_at_once() -> None:
    """A key the API rejects gives a non-retryable ModelError after a single request."""
    async with AnthropicStandIn(valid_keys={"the-real-key"}) as api:
        brain = AnthropicBrain(anthropic_config(api), "a-wrong-key")
        try:
            with pytest.raises(ModelError) as info:
                await brain.reply(ask())
        finally:
            await brain.aclose()
        assert info.value.retryable is False
        assert api.count == 1


async def test_no_key_means_no_fast_completer_and_a_model_error(api: AnthropicStandIn) -> None:
    """Without an API key there is no triage completer and a reply fails without any request."""
    brain = AnthropicBrain(anthropic_config(api), None)
    assert brain.fast_completer() is None
    with pytest.raises(ModelError) as info:
        await brain.reply(ask())
    assert info.value.retryable is False
    assert "ANTHROPIC_API_KEY" in str(info.value)
    assert api.count == 0
    await brain.aclose()


async def test_triage_completion_uses_the_fast_model(
    api: AnthropicStandIn, brain: AnthropicBrain
) -> None:
    """The fast completer asks the configured fast model, without streaming, and returns its text."""
    api.script(Text('{"relevant": [2]}', input_tokens=30, output_tokens=6), model=FAST)
    completer = brain.fast_completer()
    assert completer is not None
    completion = await completer.complete(
        "which are relevant?", system="pick", model=brain.model_for("fast"),
        deadline=time.monotonic() + 1,
    )
    assert completion.text == '{"relevant": [2]}'
    assert (completion.input_tokens, completion.output_tokens) == (30, 6)
    (sent,) = api.requests
    assert sent.model == FAST and sent.stream is False
    assert sent.system_text == "pick"
    assert sent.messages == [{"role": "user", "content": "which are relevant?"}]


async def test_the_text_so_far_is_shown_as_it_streams_and_the_result_is_unchanged(
    api: AnthropicStandIn, brain: AnthropicBrain
) -> None:
    """A text sink sees the reply grow, one call per delta, each the whole text so far; the reply
    returned is the same as without a sink."""
    api.script(Text("The tide comes in twice a day.", parts=5))
    seen: list[str] = []
    completion = await brain.reply(ask(), on_text=seen.append)
    assert completion.text == "The tide comes in twice a day."
    assert len(seen) == 5
    assert all(b.startswith(a) and len(b) > len(a) for a, b in itertools.pairwise(seen))
    assert seen[-1] == completion.text


async def test_a_retried_stream_starts_the_shown_text_over(
    api: AnthropicStandIn, brain: AnthropicBrain
) -> None:
    """When a stream fails half-way and is retried, the sink is told the text starts over ("")
    before the retry's text, which never carries the failed attempt's words."""
    api.script(Error(200, "overloaded_error", mid_stream=True, partial="Half an ans", parts=2),
               Text("A whole answer.", parts=2))
    seen: list[str] = []
    completion = await brain.reply(ask(), on_text=seen.append)
    assert completion.text == "A whole answer." and completion.attempts == 2
    restart = seen.index("")
    assert all("Half" in text for text in seen[:restart])
    assert seen[restart + 1:] == ["A whole ", "A whole answer."]


async def test_a_failing_sink_never_costs_the_reply(api: AnthropicStandIn, brain: AnthropicBrain) -> None:
    """A preview that raises is logged and ignored: the reply still comes back whole."""
    api.script(Text("Still answered.", parts=3))

    def broken(text: str) -> None:
        raise RuntimeError("preview broke")

    assert (await brain.reply(ask(), on_text=broken)).text == "Still answered."
