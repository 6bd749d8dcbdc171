"""What the Anthropic stand-in answers with (`Text`, `ToolUse`, `Error`, faults of the stream) and
what it records of each request (`RecordedRequest`)."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from bot.testing.prompt_cache import Metered


@dataclass(frozen=True)
class Text:
    """A normal assistant reply: JSON, or a complete SSE stream when the request streams."""

    text: str
    input_tokens: int = 10
    output_tokens: int = 5
    delay: float = 0.0
    stop_reason: str = "end_turn"  # "max_tokens": the answer was cut at the request's limit
    # Prompt-cache tokens, reported apart from input_tokens as the API does.
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    # A stream sends the text in `parts` deltas, `delta_delay` seconds apart (a model writing).
    parts: int = 3
    delta_delay: float = 0.0
    # A stream stops after its first delta until this is set (a test looks at what the user sees
    # while the model is still writing, with no clock involved).
    hold: asyncio.Event | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ToolUse:
    """The model calling tools: optional text, then one tool_use block per (name, input) in `calls`,
    stop_reason "tool_use". A stream sends each input as input_json_delta fragments."""

    calls: tuple[tuple[str, dict[str, Any]], ...]
    text: str = ""
    input_tokens: int = 10
    output_tokens: int = 5
    delay: float = 0.0


@dataclass(frozen=True)
class Error:
    """An API error. `mid_stream=True` sends it as an SSE `error` event (status 200) to streams."""

    status: int
    type: str
    message: str = "stand-in error"
    retry_after: float | None = None
    delay: float = 0.0
    mid_stream: bool = False
    # With mid_stream: text written before the error event (a model failing half-way), in
    # `parts` deltas `delta_delay` seconds apart.
    partial: str = ""
    parts: int = 3
    delta_delay: float = 0.0


@dataclass(frozen=True)
class Slow:
    """Sleep `seconds` (cancelled if the client goes away), then answer with `then`."""

    seconds: float
    then: Response


@dataclass(frozen=True)
class TruncatedStream:
    """A stream that ends cleanly before message_delta/message_stop; a plain reply otherwise."""

    text: str
    input_tokens: int = 10


@dataclass(frozen=True)
class MalformedStream:
    """A stream whose second text delta is not valid JSON (seen from real proxies); a plain reply
    otherwise."""

    text: str


@dataclass(frozen=True)
class DropConnection:
    """Abort the TCP connection: before any response, or after message_start + one delta."""


Response: TypeAlias = Text | ToolUse | Error | Slow | TruncatedStream | MalformedStream | DropConnection


@dataclass
class RecordedRequest:
    """One request as the stand-in received it."""

    body: dict[str, Any]
    headers: dict[str, str]
    model: str
    stream: bool
    retry_count: int = 0
    # The input as billed, when the stand-in meters requests with a `PromptCache`.
    metered: Metered | None = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.body.get("messages", [])
        return messages

    @property
    def system_text(self) -> str:
        system = self.body.get("system")
        if system is None:
            return ""
        if isinstance(system, str):
            return system
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))


def chunks(text: str, parts: int = 3) -> list[str]:
    size = max(1, math.ceil(len(text) / parts))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
