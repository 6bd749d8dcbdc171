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
from bot.models.anthropic_events import StreamedReply, read_answer

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
            # The answer's JSON read as it is (`bot.models.anthropic_events`), not as SDK models.
            response = await client.messages.with_raw_response.create(
                model=model,
                max_tokens=max_tokens,
                system=system,
                messages=[{"role": "user", "content": prompt}],
                stream=False,
                timeout=timeout,  # per request: `with_options` would build a whole client per call
            )
            answer = read_answer(json.loads(response.http_response.content))
            return Completion(
                answer.text, answer.model or model, answer.input_tokens, answer.output_tokens,
                stop_reason=answer.stop_reason, cache_write_tokens=answer.cache_write_tokens,
                cache_read_tokens=answer.cache_read_tokens,
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
    """One streamed reply. The SDK makes the call and raises its status errors; the events are read
    as raw server-sent events (`bot.models.anthropic_events`), as its typed stream reads them: pings
    and nameless events skipped, an `error` event raised as the status error it would raise."""
    import anthropic  # loaded by `_require_client` before any call

    reply = StreamedReply(model)
    async with client.messages.with_streaming_response.create(
        model=model, max_tokens=max_tokens, system=system, messages=messages, stream=True,
        timeout=timeout, **(extra or {}),
    ) as response:
        http_response = response.http_response
        async for sse in anthropic.AsyncStream.raw_events(http_response):
            name = sse.event
            if name is None or name == "ping":
                continue
            if name == "error":
                body: object = sse.data
                try:
                    body = sse.json()
                    message = f"{body}"
                except Exception:
                    message = sse.data or f"Error code: {http_response.status_code}"
                raise anthropic.APIStatusError(message, response=http_response, body=body)
            if sse.data and reply.feed(sse.json()):
                tell(on_text, reply.text)
    if not reply.finished:
        raise IncompleteStreamError("the reply stream ended before message_stop")
    return Completion(reply.text, reply.model, reply.input_tokens, reply.output_tokens,
                      stop_reason=reply.stop_reason, cache_write_tokens=reply.cache_write_tokens,
                      cache_read_tokens=reply.cache_read_tokens, content=reply.content())


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
