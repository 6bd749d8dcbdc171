"""The brain: the model provider seam (reply, fast completion); Anthropic is the first provider."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, cast

import structlog

from bot.config import AnthropicConfig
from bot.core.errors import MissingApiKeyError, ModelError, describe
from bot.core.misconfiguration import (
    Misconfiguration,
    Misconfigurations,
    ProblemKind,
    ProviderFacts,
    problem_kind,
    told,
)
from bot.models import sdks as model_sdks

if TYPE_CHECKING:  # the SDK itself is imported when the first call needs it (`bot.models.sdks`)
    import anthropic
    from anthropic.types import MessageParam, TextBlockParam

log = structlog.get_logger("switchboard.brain")

# Sees a reply's text while it is written: the whole text of the current attempt so far, starting
# over from "" when a failed attempt is retried. Called between stream reads, so it must not block.
TextSink = Callable[[str], None]

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
MAX_BACKOFF = 8.0


@dataclass(frozen=True, slots=True)
class ReplyRequest:
    """Everything one reply call sends: a cacheable and a per-turn system part, and the turns."""

    system_stable: str
    system_turn: str
    # Each turn's content is a string, or a list of content blocks when it carries pictures or files.
    messages: list[dict[str, Any]]
    deadline: float  # time.monotonic() by which the reply must be complete
    # The session's model (chosen with /model); None: the provider's configured one.
    model: str | None = None
    # Tool definitions offered (byte-stable, the last one marked for caching; `bot.tools.toolbox`)
    # and how the model may use them ({"type": "none"}: answer without calling one).
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    attempts: int = 1
    # "max_tokens" when the answer was cut at the limit (the provider's own word for it).
    stop_reason: str | None = None
    # Prompt-cache tokens, apart from `input_tokens` as the API reports them (priced apart).
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    # The reply's content blocks as the API gave them (text, tool_use with its parsed input), for
    # the tool loop; "tool_use" in stop_reason means the model waits for their results.
    content: tuple[dict[str, Any], ...] = ()
    # The provider that answered (a [providers] name), when the brain routes by role.
    provider: str | None = None


class FastCompleter(Protocol):
    """A small, quick model call (triage, summaries), through whichever provider the agent uses."""

    async def complete(
        self, prompt: str, *, system: str, model: str, deadline: float, max_tokens: int = 256
    ) -> Completion: ...


class Brain(Protocol):
    """A model provider: replies for chats, and a fast completer when one can be built."""

    async def reply(self, request: ReplyRequest, on_text: TextSink | None = None) -> Completion: ...

    def fast_completer(self) -> FastCompleter | None: ...

    def model_for(self, role: str) -> str: ...


class AnthropicBrain:
    """Claude through the official SDK; our own bounded retries under one deadline per call.

    The SDK's own retries are off: it honours any `retry-after` with no cap, which an
    interactive reply cannot afford. A refusal only the admin can fix (a refused key, an unknown
    model, no credit) is told to `misconfigured` and raised with what to fix.
    """

    def __init__(
        self, config: AnthropicConfig, api_key: str | None, *, name: str = "anthropic",
        misconfigured: Misconfigurations | None = None,
    ) -> None:
        self._config = config
        self._facts = ProviderFacts(name, config.base_url, config.api_key_env)
        self._misconfigured = misconfigured
        self._api_key = api_key or None
        self._client: anthropic.AsyncAnthropic | None = None  # made by the first call

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()

    def model_for(self, role: str) -> str:
        """Resolve a role alias ("fast", "main") or pass an explicit model id through."""
        return {"fast": self._config.fast_model, "main": self._config.model}.get(
            role, role
        )

    def fast_completer(self) -> FastCompleter | None:
        return self if self._api_key is not None else None

    async def reply(self, request: ReplyRequest, on_text: TextSink | None = None) -> Completion:
        client, deadline = await model_sdks.beside_deadline(self._require_client(), request.deadline)
        system: list[TextBlockParam] = [
            {"type": "text", "text": request.system_stable, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": request.system_turn},
        ]
        messages = cast("list[MessageParam]", request.messages)
        model = request.model or self._config.model
        attempts = 0

        async def attempt(timeout: float) -> Completion:
            nonlocal attempts
            attempts += 1
            if attempts > 1:
                tell(on_text, "")  # a retry writes the reply anew: what was shown is void
            extra: dict[str, Any] = {}
            if request.tools:
                extra["tools"] = request.tools
            if request.tool_choice is not None:
                extra["tool_choice"] = request.tool_choice
            return await _stream_reply(
                client,
                timeout=timeout,
                model=model,
                max_tokens=self._config.max_tokens,
                system=system,
                messages=messages,
                on_text=on_text,
                extra=extra,
            )

        return await self._with_retries(attempt, deadline, "reply", model)

    async def complete(
        self, prompt: str, *, system: str, model: str, deadline: float, max_tokens: int = 256
    ) -> Completion:
        client, deadline = await model_sdks.beside_deadline(self._require_client(), deadline)

        async def attempt(timeout: float) -> Completion:
            message = await client.messages.create(
                model=model,
                max_tokens=max_tokens,
                system=system,
                messages=[{"role": "user", "content": prompt}],
                stream=False,
                timeout=timeout,  # per request: `with_options` would build a whole client per call
            )
            text = "".join(block.text for block in message.content if block.type == "text")
            usage = message.usage
            return Completion(
                text, message.model or model, usage.input_tokens, usage.output_tokens,
                stop_reason=message.stop_reason,
                cache_write_tokens=usage.cache_creation_input_tokens or 0,
                cache_read_tokens=usage.cache_read_input_tokens or 0,
            )

        return await self._with_retries(attempt, deadline, "fast completion", model)

    async def _require_client(self) -> anthropic.AsyncAnthropic:
        if self._client is None:
            if self._api_key is None:
                raise MissingApiKeyError(
                    f"no Anthropic API key: set the {self._config.api_key_env} environment variable"
                )
            sdk = await model_sdks.load("anthropic")
            if self._client is None:  # another call may have made it while the SDK loaded
                self._client = sdk.AsyncAnthropic(
                    api_key=self._api_key,
                    base_url=self._config.base_url,
                    max_retries=0,
                    timeout=self._config.timeout,
                    # The SDK's aiohttp transport (aiohttp is the Telegram channel's client too):
                    # HTTP parsed in C, about a quarter less CPU per call than its default httpx one.
                    http_client=sdk.DefaultAioHttpClient(),
                    open_telemetry=model_sdks.anthropic_open_telemetry(),
                )
        return self._client

    async def _with_retries(
        self, call: Callable[[float], Awaitable[Completion]], deadline: float, what: str, model: str
    ) -> Completion:
        return await told(self._misconfigured, with_retries(
            call, deadline, what, self._config.max_retries + 1, _classify,
            blame=lambda kind, error: self._facts.problem(kind, model, error)))


# (retryable, server-suggested wait, short description, the misconfiguration it shows if any)
Classifier = Callable[[Exception], tuple[bool, float | None, str, ProblemKind | None]]
Blame = Callable[[ProblemKind, str], Misconfiguration]


async def with_retries(
    call: Callable[[float], Awaitable[Completion]], deadline: float, what: str, attempts: int,
    classify: Classifier, *, blame: Blame,
) -> Completion:
    """At most `attempts` calls, each given the time left, with backoff (or the server's
    retry-after) between them, all before `deadline`; a ModelError when none succeeds (with the
    misconfiguration `blame` names when the refusal was one)."""
    last_error = "no attempt made"
    for attempt in range(1, attempts + 1):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            async with asyncio.timeout(remaining):
                result = await call(remaining)
            return replace(result, attempts=attempt)
        except TimeoutError:
            last_error = "timed out"
            break
        except Exception as exc:
            retryable, wait_hint, last_error, kind = classify(exc)
            if kind is not None:
                raise ModelError(f"{what} failed: {last_error}", problem=blame(kind, last_error)) from exc
            if not retryable:
                raise ModelError(f"{what} failed: {last_error}", retryable=False) from exc
            if attempt == attempts:
                break
            wait = wait_hint if wait_hint is not None else _backoff(attempt)
            if time.monotonic() + wait >= deadline:
                break
            log.warning("model call failed, retrying", what=what, attempt=attempt,
                        error=last_error, wait_s=round(wait, 2))
            await asyncio.sleep(wait)
    raise ModelError(f"{what} failed after retries: {last_error}")


class IncompleteStreamError(Exception):
    """The reply stream ended without `message_stop`: the answer may be cut off."""


async def _stream_reply(
    client: anthropic.AsyncAnthropic, *, timeout: float, model: str, max_tokens: int,
    system: list[TextBlockParam], messages: list[MessageParam], on_text: TextSink | None = None,
    extra: dict[str, Any] | None = None,
) -> Completion:
    text = ""
    input_tokens = output_tokens = cache_write = cache_read = 0
    used_model = model
    finished = False
    stop_reason: str | None = None
    blocks: dict[int, dict[str, Any]] = {}
    partial_json: dict[int, str] = {}
    stream = await client.messages.create(
        model=model, max_tokens=max_tokens, system=system, messages=messages, stream=True,
        timeout=timeout, **(extra or {}),
    )
    async with stream:
        async for event in stream:
            if event.type == "message_start":
                usage = event.message.usage
                used_model = event.message.model or model  # the model that actually answered
                input_tokens = usage.input_tokens
                cache_write = usage.cache_creation_input_tokens or 0
                cache_read = usage.cache_read_input_tokens or 0
            elif event.type == "content_block_start":
                block = event.content_block
                if block.type == "tool_use":
                    blocks[event.index] = {"type": "tool_use", "id": block.id, "name": block.name,
                                           "input": {}}
                    partial_json[event.index] = ""
                elif block.type == "text":
                    blocks[event.index] = {"type": "text", "text": ""}
            elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                text += event.delta.text
                if event.index in blocks and blocks[event.index]["type"] == "text":
                    blocks[event.index]["text"] += event.delta.text
                tell(on_text, text)
            elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                partial_json[event.index] = partial_json.get(event.index, "") + event.delta.partial_json
            elif event.type == "content_block_stop" and event.index in partial_json:
                # An unreadable input is passed on as the raw text: the tool loop answers it with
                # an error result the model can read.
                raw = partial_json.pop(event.index)
                try:
                    blocks[event.index]["input"] = json.loads(raw) if raw.strip() else {}
                except json.JSONDecodeError:
                    blocks[event.index]["input"] = {"__unparsed__": raw}
            elif event.type == "message_delta":
                stop_reason = event.delta.stop_reason or stop_reason
                # Cumulative counts: where the final event repeats a figure, it is the one to keep.
                delta = event.usage
                output_tokens = delta.output_tokens
                input_tokens = delta.input_tokens if delta.input_tokens is not None else input_tokens
                cache_write = delta.cache_creation_input_tokens \
                    if delta.cache_creation_input_tokens is not None else cache_write
                cache_read = delta.cache_read_input_tokens \
                    if delta.cache_read_input_tokens is not None else cache_read
            elif event.type == "message_stop":
                finished = True
    if not finished:
        raise IncompleteStreamError("the reply stream ended before message_stop")
    content = tuple(blocks[index] for index in sorted(blocks)
                    if blocks[index]["type"] != "text" or blocks[index]["text"])
    return Completion(text, used_model, input_tokens, output_tokens, stop_reason=stop_reason,
                      cache_write_tokens=cache_write, cache_read_tokens=cache_read, content=content)


def tell(on_text: TextSink | None, text: str) -> None:
    """Show the text so far; a failing preview never costs the reply."""
    if on_text is None:
        return
    try:
        on_text(text)
    except Exception as exc:
        log.warning("reply preview failed", error=describe(exc), exc_info=True)


def _classify(exc: Exception) -> tuple[bool, float | None, str, ProblemKind | None]:
    """(retryable, server-suggested wait, short description, misconfiguration) for a failed call."""
    import anthropic  # loaded by the call that failed
    import httpx2

    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        error_type = getattr(exc, "type", None)
        kind = error_type or type(exc).__name__
        if status == 200:  # a mid-stream error event, e.g. overloaded_error
            return True, None, f"stream error ({kind})", None
        problem = problem_kind(status, error_type, None, getattr(exc, "api_message", None))
        return status in RETRYABLE_STATUS, _retry_after(exc), f"HTTP {status} ({kind})", problem
    if isinstance(exc, anthropic.APIConnectionError | httpx2.TransportError):
        return True, None, f"connection error ({type(exc).__name__})", None
    if isinstance(exc, IncompleteStreamError):
        return True, None, str(exc), None
    if isinstance(exc, json.JSONDecodeError):  # a stream event the SDK could not decode: cut short
        return True, None, f"malformed stream event ({exc.msg})", None
    raise exc


def _retry_after(exc: anthropic.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after")
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None


def _backoff(attempt: int) -> float:
    base: float = min(0.5 * 2 ** (attempt - 1), MAX_BACKOFF)
    return base * (0.75 + random.random() / 2)


class BrainsByModel:
    """The brain for a job's `model`: the agent's own unless it names another model, each other
    one built once and closed with the daemon (an async context manager)."""

    def __init__(self, main: Brain, config: AnthropicConfig) -> None:
        self._main = main
        self._config = config
        self._others: dict[str, AnthropicBrain] = {}

    def __call__(self, model: str | None) -> Brain:
        resolved = self._main.model_for(model) if model else self._config.model
        if resolved == self._config.model:
            return self._main
        if resolved not in self._others:
            notices = self._main._misconfigured if isinstance(self._main, AnthropicBrain) else None
            self._others[resolved] = AnthropicBrain(
                self._config.model_copy(update={"model": resolved}), self._config.api_key(),
                misconfigured=notices,
            )
        return self._others[resolved]

    async def __aenter__(self) -> BrainsByModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for brain in self._others.values():
            await brain.aclose()
