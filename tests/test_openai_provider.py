"""The OpenAI-compatible provider as the real `openai` SDK drives it against the local /v1 stand-in."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.config.provider_sections import ProviderConfig
from bot.core.errors import ModelError
from bot.models.brain import ReplyRequest
from bot.models.openai_brain import OpenAIBrain
from bot.testing.openai_api import Cut, Error, Malformed, OpenAIStandIn, Reply, Slow, ToolCalls

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16


def ask(content: Any = "hello", *, within: float = 2.0, **extra: Any) -> ReplyRequest:
    return ReplyRequest(system_stable="You are Switchboard.", system_turn="Current time: now.",
                        messages=[{"role": "user", "content": content}],
                        deadline=time.monotonic() + within, **extra)


@pytest.fixture
async def local() -> AsyncIterator[OpenAIStandIn]:
    async with OpenAIStandIn() as standin:
        yield standin


@pytest.fixture
async def brain(local: OpenAIStandIn) -> AsyncIterator[OpenAIBrain]:
    made = OpenAIBrain("local", ProviderConfig(kind="openai", base_url=local.base_url, timeout=2.0,
                                               max_retries=2), "qwen-test")
    yield made
    await made.aclose()


async def test_a_streamed_reply_reaches_the_sink_with_the_servers_usage(
    local: OpenAIStandIn, brain: OpenAIBrain
) -> None:
    """The reply grows in the preview as chunks arrive; tokens are the server's own figures,
    and the system prompt goes first as a system message."""
    local.script(Reply("Hello from a local model", prompt_tokens=31, completion_tokens=9))
    seen: list[str] = []
    completion = await brain.reply(ask(), on_text=seen.append)
    assert completion.text == "Hello from a local model" and seen[-1] == completion.text
    assert len(seen) >= 2  # it grew in steps
    assert (completion.input_tokens, completion.output_tokens) == (31, 9)
    assert completion.model == "qwen-test" and completion.provider == "local"
    assert completion.stop_reason == "end_turn" and brain.estimated == 0
    sent = local.chats()[0].body
    assert sent["messages"][0] == {"role": "system",
                                   "content": "You are Switchboard.\n\nCurrent time: now."}
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


async def test_usage_is_estimated_when_the_server_reports_none(
    local: OpenAIStandIn, brain: OpenAIBrain
) -> None:
    """A server that sends no usage still gives /usage a figure (an estimate), never zero."""
    local.script(Reply("a fairly long answer " * 10, usage=False))
    completion = await brain.reply(ask("a question that costs tokens"))
    assert completion.input_tokens > 0 and completion.output_tokens > 10
    assert brain.estimated == 1


@pytest.mark.parametrize("failure", [
    Error(429, "rate limited", retry_after=0.05, type="rate_limit_error"),
    Error(503, "overloaded"),
    Malformed("a reply mangled in transit"),
    Cut("a reply cut short"),
])
async def test_a_failed_attempt_is_retried_and_the_retry_answers(
    local: OpenAIStandIn, brain: OpenAIBrain, failure: Any
) -> None:
    """A 429 (after its retry-after), a 5xx, a malformed chunk or a cut stream costs one retry,
    not the reply; what the failed attempt showed is voided first."""
    local.script(failure, Reply("second time lucky"))
    seen: list[str] = []
    completion = await brain.reply(ask(), on_text=seen.append)
    assert completion.text == "second time lucky" and completion.attempts == 2
    assert len(local.chats()) == 2
    if isinstance(failure, Malformed | Cut):
        assert "" in seen[1:]  # the half answer was withdrawn before the retry wrote anew


async def test_a_client_error_is_not_retried(local: OpenAIStandIn, brain: OpenAIBrain) -> None:
    """A 400 (the server refuses the request) fails at once: retrying cannot help."""
    local.script(Error(400, "unknown model", type="invalid_request_error"))
    with pytest.raises(ModelError) as info:
        await brain.reply(ask())
    assert not info.value.retryable and "400" in str(info.value) and len(local.chats()) == 1


async def test_a_slow_first_token_past_the_deadline_fails_in_time(
    local: OpenAIStandIn, brain: OpenAIBrain
) -> None:
    """A local model still loading when the turn's time is up gives a ModelError at the deadline."""
    local.script(Slow(5.0, Reply("too late")))
    started = time.monotonic()
    with pytest.raises(ModelError):
        await brain.reply(ask(within=0.4))
    assert time.monotonic() - started < 3.0


async def test_pictures_go_as_data_urls(local: OpenAIStandIn, brain: OpenAIBrain) -> None:
    """A picture block becomes an image_url part with a data URL, beside the message's text."""
    data = base64.b64encode(PNG).decode()
    content = [{"type": "text", "text": "what is this?"},
               {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]
    await brain.reply(ask(content))
    user = local.chats()[0].body["messages"][1]
    assert user["content"][0] == {"type": "text", "text": "what is this?"}
    assert user["content"][1]["image_url"]["url"] == f"data:image/png;base64,{data}"


async def test_tool_calls_come_back_as_tool_use_and_results_go_as_tool_messages(
    local: OpenAIStandIn, brain: OpenAIBrain
) -> None:
    """Function calls streamed in pieces become tool_use blocks the tool loop runs; the next
    request carries the call on the assistant message and its result as a tool message."""
    local.script(ToolCalls((("current_time", {"zone": "Europe/Berlin"}),), text="Let me check."),
                 Reply("It is noon."))
    tools = [{"name": "current_time", "description": "The time", "input_schema": {
        "type": "object", "properties": {"zone": {"type": "string"}}}}]
    first = await brain.reply(ask("time?", tools=tools))
    assert first.stop_reason == "tool_use"
    text, use = first.content
    assert text == {"type": "text", "text": "Let me check."}
    assert use["type"] == "tool_use" and use["name"] == "current_time"
    assert use["input"] == {"zone": "Europe/Berlin"}
    sent = local.chats()[0].body
    assert sent["tools"][0]["function"]["name"] == "current_time"
    assert sent["tools"][0]["function"]["parameters"]["properties"] == {"zone": {"type": "string"}}
    follow = ask("time?", tools=tools, tool_choice={"type": "none"})
    turns = [*follow.messages, {"role": "assistant", "content": list(first.content)},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"],
                                           "content": "12:00"}]}]
    second = await brain.reply(ReplyRequest(follow.system_stable, follow.system_turn, turns,
                                            follow.deadline, tools=tools, tool_choice={"type": "none"}))
    assert second.text == "It is noon."
    body = local.chats()[1].body
    assert body["tool_choice"] == "none"
    assistant, result = body["messages"][2:4]
    assert assistant["tool_calls"][0]["id"] == use["id"]
    assert result == {"role": "tool", "tool_call_id": use["id"], "content": "12:00"}


async def test_arguments_that_are_not_json_reach_the_loop_as_unparsed(
    local: OpenAIStandIn, brain: OpenAIBrain
) -> None:
    """A small model writing broken JSON arguments does not fail the reply: the loop answers the
    call with an error the model can read."""
    local.script(ToolCalls((("current_time", {}),), raw_arguments='{"zone": '))
    (use,) = (await brain.reply(ask("time?"))).content
    assert use["input"] == {"__unparsed__": '{"zone": '}
