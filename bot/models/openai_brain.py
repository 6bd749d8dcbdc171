"""An OpenAI-compatible provider (Chat Completions): Ollama, llama.cpp, vLLM, LM Studio, OpenRouter.

Through the official `openai` SDK with its own retries off: the same bounded retries under one
deadline as the Anthropic path (`bot.models.brain.with_retries`). Tokens are taken from the server's
usage when it reports them, else estimated from the text (and the completion says so).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import structlog

from bot.config.provider_sections import ProviderConfig
from bot.core.misconfiguration import Misconfigurations, ProblemKind, ProviderFacts, problem_kind, told
from bot.models import sdks as model_sdks
from bot.models.brain import (
    RETRYABLE_STATUS,
    Completion,
    FastCompleter,
    IncompleteStreamError,
    ReplyRequest,
    TextSink,
    tell,
    with_retries,
)
from bot.models.openai_messages import (
    STOP_REASONS,
    chat_messages,
    chat_tool_choice,
    chat_tools,
    tool_use_blocks,
)
from bot.ranking.budget import estimate_tokens

if TYPE_CHECKING:  # the SDK itself is imported when the first call needs it (`bot.models.sdks`)
    import openai

log = structlog.get_logger("switchboard.brain")

# Local servers want no key, but the SDK refuses to start without one.
NO_KEY = "no-key"


class OpenAIBrain:
    """One OpenAI-compatible endpoint; `model` is the model a reply uses unless the request names one."""

    def __init__(
        self, name: str, config: ProviderConfig, model: str, *, misconfigured: Misconfigurations | None = None
    ) -> None:
        self.name = name
        self._config = config
        self._model = model
        self._facts = ProviderFacts(name, config.url(), config.api_key_env)
        self._misconfigured = misconfigured
        self._client: openai.AsyncOpenAI | None = None  # made by the first call
        self.estimated = 0  # calls whose tokens were estimated (the server reported none)

    async def client(self) -> openai.AsyncOpenAI:
        """The SDK's client, made (and the SDK imported, off the event loop) on first use."""
        if self._client is None:
            sdk = await model_sdks.load("openai")
            if self._client is None:  # another call may have made it while the SDK loaded
                self._client = sdk.AsyncOpenAI(
                    api_key=self._config.api_key() or NO_KEY, base_url=self._config.url(), max_retries=0,
                    timeout=self._config.timeout,
                    http_client=sdk.DefaultAioHttpClient(),  # as bot.models.brain's: HTTP parsed in C
                )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()

    def model_for(self, role: str) -> str:
        return self._model if role in ("main", "fast", "summary") else role

    def fast_completer(self) -> FastCompleter | None:
        return self

    async def reply(self, request: ReplyRequest, on_text: TextSink | None = None) -> Completion:
        messages = chat_messages(f"{request.system_stable}\n\n{request.system_turn}", request.messages)
        extra: dict[str, Any] = {}
        if request.tools:
            extra["tools"] = chat_tools(request.tools)
            choice = chat_tool_choice(request.tool_choice)
            if choice is not None:
                extra["tool_choice"] = choice
        model = request.model or self._model
        attempts = 0
        _, deadline = await model_sdks.beside_deadline(self.client(), request.deadline)

        async def attempt(timeout: float) -> Completion:
            nonlocal attempts
            attempts += 1
            if attempts > 1:
                tell(on_text, "")  # a retry writes the reply anew
            return await self._stream(model, messages, self._config.max_tokens, timeout, on_text, extra)

        return await self._with_retries(attempt, deadline, "reply", model)

    async def complete(
        self, prompt: str, *, system: str, model: str, deadline: float, max_tokens: int = 256
    ) -> Completion:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        _, deadline = await model_sdks.beside_deadline(self.client(), deadline)

        async def attempt(timeout: float) -> Completion:
            return await self._stream(model, messages, max_tokens, timeout, None, {})

        return await self._with_retries(attempt, deadline, "fast completion", model)

    async def transcribe(self, data: bytes, name: str, mime: str | None, model: str) -> str:
        """The words of an audio file, from /audio/transcriptions (whisper.cpp, faster-whisper,
        OpenAI); retried like a reply, each try within the provider's timeout."""
        deadline = time.monotonic() + self._config.timeout * (self._config.max_retries + 1)

        async def attempt(timeout: float) -> Completion:
            create: Any = (await self.client()).audio.transcriptions.create
            result = await create(model=model, file=(name, data, mime or "application/octet-stream"),
                                  timeout=timeout)
            return Completion(str(getattr(result, "text", "")), model, provider=self.name)

        completion = await self._with_retries(attempt, deadline, "transcription", model)
        return completion.text

    async def _with_retries(
        self, call: Callable[[float], Awaitable[Completion]], deadline: float, what: str, model: str
    ) -> Completion:
        return await told(self._misconfigured, with_retries(
            call, deadline, what, self._config.max_retries + 1, classify,
            blame=lambda kind, error: self._facts.problem(kind, model, error)))

    async def _stream(
        self, model: str, messages: list[dict[str, Any]], max_tokens: int, timeout: float,
        on_text: TextSink | None, extra: dict[str, Any],
    ) -> Completion:
        """One streamed call; a stream that ends without a finish_reason is incomplete."""
        text = ""
        used_model = model
        finish: str | None = None
        usage: Any = None
        calls: dict[int, dict[str, str]] = {}
        # The timeout per request: `with_options` would build a whole client per call.
        create: Any = (await self.client()).chat.completions.create
        stream = await create(model=model, messages=messages, max_tokens=max_tokens, stream=True,
                              stream_options={"include_usage": True}, timeout=timeout, **extra)
        async with stream:
            async for chunk in stream:
                used_model = chunk.model or used_model
                if chunk.usage is not None:
                    usage = chunk.usage
                for choice in chunk.choices or ():  # the usage chunk has none
                    delta = choice.delta
                    if delta.content:
                        text += delta.content
                        tell(on_text, text)
                    for call in delta.tool_calls or ():
                        slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                        if call.id:
                            slot["id"] = call.id
                        if call.function is not None:
                            slot["name"] += call.function.name or ""
                            slot["arguments"] += call.function.arguments or ""
                    finish = choice.finish_reason or finish
        if finish is None:
            raise IncompleteStreamError("the reply stream ended without a finish_reason")
        content = ([{"type": "text", "text": text}] if text else []) + tool_use_blocks(calls)
        if usage is not None:
            tokens_in, tokens_out = usage.prompt_tokens or 0, usage.completion_tokens or 0
        else:  # the server reported nothing: estimated, so /usage is not silently zero
            self.estimated += 1
            tokens_in = sum(estimate_tokens(json.dumps(m.get("content") or "")) for m in messages)
            tokens_out = estimate_tokens(text) + sum(estimate_tokens(c["arguments"]) for c in calls.values())
        return Completion(text, used_model, tokens_in, tokens_out,
                          stop_reason=STOP_REASONS.get(finish, finish), content=tuple(content),
                          provider=self.name)


def classify(exc: Exception) -> tuple[bool, float | None, str, ProblemKind | None]:
    """(retryable, server-suggested wait, short description, misconfiguration), as `bot.models.brain`
    does for Anthropic."""
    import httpx2
    import openai  # loaded by the call that failed

    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        problem = problem_kind(status, exc.type, exc.code, exc.message)
        return (status in RETRYABLE_STATUS, _retry_after(exc), f"HTTP {status} ({type(exc).__name__})",
                problem)
    if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
        return True, None, f"connection error ({type(exc).__name__})", None
    if isinstance(exc, openai.APIError):  # an error object inside the stream
        return True, None, f"stream error ({exc.message})", None
    if isinstance(exc, IncompleteStreamError):
        return True, None, str(exc), None
    if isinstance(exc, json.JSONDecodeError):
        return True, None, f"malformed stream chunk ({exc.msg})", None
    raise exc


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after")
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None
