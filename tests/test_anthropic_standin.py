"""Tests of the Anthropic Messages API stand-in, driven by the real `anthropic` SDK."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

import aiohttp
import anthropic
import httpx2
import pytest
from anthropic.types import (
    Message,
    MessageParam,
    RawContentBlockDeltaEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStreamEvent,
    TextBlock,
    TextBlockParam,
    TextDelta,
)

from bot.testing.anthropic_api import (
    AnthropicStandIn,
    DropConnection,
    Error,
    RecordedRequest,
    Response,
    Slow,
    Text,
    TruncatedStream,
)

MODEL = "test-model"  # made-up ids: real ones can trigger deprecation warnings (-W error)
FAST = "test-fast"
USER: list[MessageParam] = [{"role": "user", "content": "hi"}]


@pytest.fixture(autouse=True)
def _no_anthropic_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # SDK 2.x reads ANTHROPIC_API_KEY / _BASE_URL / _PROFILE / _CUSTOM_HEADERS and more.
    for name in list(os.environ):
        if name.startswith("ANTHROPIC_"):
            monkeypatch.delenv(name)


@pytest.fixture
async def api() -> AsyncIterator[AnthropicStandIn]:
    async with AnthropicStandIn() as standin:
        yield standin


def make_client(
    api: AnthropicStandIn, *, key: str = "test-key", max_retries: int = 0, timeout: float = 5
) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key=key, base_url=api.base_url, max_retries=max_retries, timeout=timeout
    )


@pytest.fixture
async def client(api: AnthropicStandIn) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with make_client(api) as sdk:
        yield sdk


async def ask(
    client: anthropic.AsyncAnthropic,
    model: str = MODEL,
    system: str | anthropic.Omit = anthropic.omit,
) -> Message:
    return await client.messages.create(model=model, max_tokens=64, messages=USER, system=system)


def text_of(message: Message) -> str:
    return "".join(block.text for block in message.content if isinstance(block, TextBlock))


async def stream_events(client: anthropic.AsyncAnthropic) -> list[RawMessageStreamEvent]:
    stream = await client.messages.create(model=MODEL, max_tokens=64, messages=USER, stream=True)
    return [event async for event in stream]


def streamed_text(events: list[RawMessageStreamEvent]) -> str:
    return "".join(
        e.delta.text
        for e in events
        if isinstance(e, RawContentBlockDeltaEvent) and isinstance(e.delta, TextDelta)
    )


async def test_non_stream_returns_scripted_text_and_usage(
    api: AnthropicStandIn, client: anthropic.AsyncAnthropic
) -> None:
    api.script(Text("hello there", input_tokens=42, output_tokens=7))
    message = await ask(client)
    assert text_of(message) == "hello there"
    assert message.model == MODEL
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (42, 7)
    assert message.id.startswith("msg_")


async def test_default_reply_is_ok_and_replaceable(
    api: AnthropicStandIn, client: anthropic.AsyncAnthropic
) -> None:
    assert text_of(await ask(client)) == "ok"

    def echo(request: RecordedRequest) -> Response:
        return Text(f"echo: {request.messages[-1]['content']}")

    api.default = echo
    assert text_of(await ask(client)) == "echo: hi"


async def test_stream_yields_text_and_message_stop(
    api: AnthropicStandIn, client: anthropic.AsyncAnthropic
) -> None:
    api.script(Text("streamed reply text", input_tokens=11, output_tokens=4))
    events = await stream_events(client)
    types = [e.type for e in events]
    assert types[:2] == ["message_start", "content_block_start"]  # the SDK swallows `ping`
    assert types[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert types.count("content_block_delta") > 1  # the text arrives in several chunks
    assert streamed_text(events) == "streamed reply text"
    start, delta = events[0], events[-2]
    assert isinstance(start, RawMessageStartEvent) and isinstance(delta, RawMessageDeltaEvent)
    assert start.message.usage.input_tokens == 11
    assert (delta.delta.stop_reason, delta.usage.output_tokens) == ("end_turn", 4)
    assert api.requests[0].stream is True


async def test_stream_helper_accumulates_final_message(
    api: AnthropicStandIn, client: anthropic.AsyncAnthropic
) -> None:
    api.script(Text("helper text", output_tokens=3))
    async with client.messages.stream(model=MODEL, max_tokens=64, messages=USER) as stream:
        chunks = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert "".join(chunks) == "helper text" == text_of(final)
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 3


async def test_rate_limit_with_retry_after(
    api: AnthropicStandIn, client: anthropic.AsyncAnthropic
) -> None:
    api.script(Error(429, "rate_limit_error", "slow down", retry_after=7))
    with pytest.raises(anthropic.RateLimitError) as info:
        await ask(client)
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "7"
    assert (info.value.type, info.value.api_message) == ("rate_limit_error", "slow down")
    assert (info.value.request_id or "").startswith("req_")


async def test_overloaded_and_server_errors(
    api: AnthropicStandIn, client: anthropic.AsyncAnthropic
) -> None:
    api.script(Error(529, "overloaded_error"), Error(500, "api_error"))
    with pytest.raises(anthropic.OverloadedError) as info:  # subclass of InternalServerError
        await ask(client)
    assert (info.value.status_code, info.value.type) == (529, "overloaded_error")
    with pytest.raises(anthropic.InternalServerError) as info500:
        await ask(client)
    assert info500.value.status_code == 500


async def test_retries_are_counted(api: AnthropicStandIn) -> None:
    # retry-after is honoured as given (a positive value; 0 falls back to ~0.5 s backoff).
    api.script(Error(529, "overloaded_error", retry_after=0.01), Text("second time"))
    async with make_client(api, max_retries=1) as sdk:
        assert text_of(await ask(sdk)) == "second time"
    assert [r.retry_count for r in api.requests] == [0, 1]


async def test_requests_are_recorded(
    api: AnthropicStandIn, client: anthropic.AsyncAnthropic
) -> None:
    await ask(client, system="be brief")
    blocks: list[TextBlockParam] = [
        {"type": "text", "text": "part one"},
        {"type": "text", "text": "part two"},
    ]
    history: list[MessageParam] = [
        *USER,
        {"role": "assistant", "content": "yo"},
        {"role": "user", "content": "again"},
    ]
    await client.messages.create(model=FAST, max_tokens=8, system=blocks, messages=history)

    assert api.count == 2
    first, second = api.requests
    assert (first.model, first.stream, first.retry_count) == (MODEL, False, 0)
    assert first.system_text == "be brief"
    assert first.messages == USER
    assert first.body["max_tokens"] == 64
    assert second.system_text == "part one\npart two"
    assert second.messages == history
    assert api.requests_for(FAST) == [second]
    assert first.headers["authorization"] == "Bearer test-key"  # 2.x sends a bearer token
    assert "x-api-key" not in first.headers
    assert first.headers["anthropic-version"]


async def test_script_queues_are_per_model_with_a_shared_fallback(
    api: AnthropicStandIn, client: anthropic.AsyncAnthropic
) -> None:
    api.script(Text("fast one"), model=FAST)
    api.script(Text("any one"), Text("any two"))
    replies = [text_of(await ask(client, model)) for model in (FAST, FAST, MODEL, MODEL)]
    assert replies == ["fast one", "any one", "any two", "ok"]


async def test_invalid_key_is_rejected(api: AnthropicStandIn) -> None:
    api.valid_keys = {"the-real-key"}
    async with make_client(api) as sdk:
        with pytest.raises(anthropic.AuthenticationError) as info:
            await ask(sdk)
    assert (info.value.status_code, info.value.type) == (401, "authentication_error")
    assert api.count == 1  # rejected requests are recorded too
    async with make_client(api, key="the-real-key") as sdk:
        assert text_of(await ask(sdk)) == "ok"


async def test_raw_http_x_api_key_and_validation(api: AnthropicStandIn) -> None:
    url = f"{api.base_url}/v1/messages"
    body = {"model": MODEL, "max_tokens": 8, "messages": USER}
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=body, headers={"x-api-key": "k"}) as resp:
            assert resp.status == 200
            assert resp.headers["request-id"].startswith("req_")
        async with session.post(url, json=body) as resp:
            assert resp.status == 401
            assert (await resp.json())["error"]["type"] == "authentication_error"
        no_max = {"model": MODEL, "messages": USER}
        async with session.post(url, json=no_max, headers={"x-api-key": "k"}) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["type"] == "invalid_request_error"


async def test_truncated_stream_has_no_message_stop(
    api: AnthropicStandIn, client: anthropic.AsyncAnthropic
) -> None:
    api.script(TruncatedStream("this reply gets cut off"), TruncatedStream("whole if not streamed"))
    events = await stream_events(client)  # ends without an exception
    types = [e.type for e in events]
    assert types[:2] == ["message_start", "content_block_start"]
    assert "message_stop" not in types and "message_delta" not in types
    assert 0 < len(streamed_text(events)) < len("this reply gets cut off")
    assert text_of(await ask(client)) == "whole if not streamed"


async def test_truncated_stream_helper_leaves_stop_reason_unset(
    api: AnthropicStandIn, client: anthropic.AsyncAnthropic
) -> None:
    api.script(TruncatedStream("cut short here"))
    async with client.messages.stream(model=MODEL, max_tokens=64, messages=USER) as stream:
        final = await stream.get_final_message()  # no exception either
    assert final.stop_reason is None


async def test_drop_connection(api: AnthropicStandIn, client: anthropic.AsyncAnthropic) -> None:
    api.script(DropConnection(), DropConnection())
    # Before any response: httpx2 "Server disconnected" -> anthropic.APIConnectionError.
    with pytest.raises(anthropic.APIConnectionError) as info:
        await ask(client)
    assert not isinstance(info.value, anthropic.APITimeoutError)
    # Mid-stream: a raw httpx2.RemoteProtocolError escapes, not an anthropic.APIError.
    seen: list[str] = []
    stream = await client.messages.create(model=MODEL, max_tokens=64, messages=USER, stream=True)
    with pytest.raises(httpx2.RemoteProtocolError):
        async for event in stream:
            seen.append(event.type)
    assert seen == ["message_start", "content_block_start", "content_block_delta"]


async def test_mid_stream_error_event(
    api: AnthropicStandIn, client: anthropic.AsyncAnthropic
) -> None:
    api.script(Error(529, "overloaded_error", "busy", mid_stream=True))
    with pytest.raises(anthropic.APIStatusError) as info:
        await stream_events(client)
    assert (info.value.status_code, info.value.type) == (200, "overloaded_error")
    assert not isinstance(info.value, anthropic.OverloadedError)


async def test_slow_reply_beyond_timeout_raises_timeout(api: AnthropicStandIn) -> None:
    api.script(Slow(30, Text("too late")), Text("fine", delay=0.05))
    async with make_client(api, timeout=0.3) as sdk:
        started = time.monotonic()
        with pytest.raises(anthropic.APITimeoutError):
            await ask(sdk)
        assert time.monotonic() - started < 5
        assert text_of(await ask(sdk)) == "fine"


async def test_close_cancels_in_flight_slow_handlers() -> None:
    arrived = asyncio.Event()

    def slow(request: RecordedRequest) -> Response:
        arrived.set()
        return Slow(30, Text("never"))

    async with AnthropicStandIn() as standin:
        standin.default = slow
        async with make_client(standin) as sdk:
            call = asyncio.create_task(ask(sdk))
            await arrived.wait()
            started = time.monotonic()
            await standin.close()  # __aexit__ calls it again: harmless
            assert time.monotonic() - started < 2
            with pytest.raises(anthropic.APIConnectionError):
                await call
