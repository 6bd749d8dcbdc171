"""Local aiohttp stand-in of an OpenAI-compatible API (Chat Completions, audio transcriptions) for
the real `openai` SDK: what Ollama, llama.cpp, vLLM or OpenAI itself serve under /v1."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from aiohttp import BodyPartReader, web

__all__ = ["Cut", "Error", "Malformed", "OpenAIStandIn", "Reply", "Slow", "ToolCalls", "Transcript"]


@dataclass(frozen=True)
class Reply:
    """A streamed answer in `parts` content deltas; usage in a last chunk when the request asks
    (stream_options.include_usage) and `usage` is true (some local servers never send it)."""

    text: str
    prompt_tokens: int = 12
    completion_tokens: int = 7
    finish_reason: str = "stop"
    parts: int = 3
    usage: bool = True


@dataclass(frozen=True)
class ToolCalls:
    """The model calling functions: each (name, arguments) streamed as tool_calls deltas."""

    calls: tuple[tuple[str, dict[str, Any]], ...]
    text: str = ""
    raw_arguments: str | None = None  # sent instead of the JSON of the first call's arguments


@dataclass(frozen=True)
class Error:
    status: int
    message: str = "stand-in error"
    retry_after: float | None = None
    type: str = "server_error"


@dataclass(frozen=True)
class Slow:
    """Wait `seconds` before the first byte (a local model loading), then answer with `then`."""

    seconds: float
    then: Response


@dataclass(frozen=True)
class Malformed:
    """A stream whose second chunk is not valid JSON (a proxy mangling it)."""

    text: str


@dataclass(frozen=True)
class Cut:
    """A stream that stops after one content delta with no finish_reason and no [DONE]."""

    text: str


@dataclass(frozen=True)
class Transcript:
    """The answer of /v1/audio/transcriptions."""

    text: str


Response: TypeAlias = Reply | ToolCalls | Error | Slow | Malformed | Cut | Transcript


@dataclass
class Recorded:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    files: dict[str, bytes] = field(default_factory=dict)

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))


class OpenAIStandIn:
    """`async with OpenAIStandIn() as api:` serves /v1 on 127.0.0.1:<free port>."""

    def __init__(self, *, valid_keys: set[str] | None = None) -> None:
        self.requests: list[Recorded] = []
        self.valid_keys = valid_keys
        self.default: Callable[[Recorded], Response] = lambda rec: Reply("ok")
        self._queue: deque[Response] = deque()
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._port = 0

    async def __aenter__(self) -> OpenAIStandIn:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1,
                                     access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self._port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/v1"

    def script(self, *responses: Response) -> None:
        self._queue.extend(responses)

    def chats(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def _next(self, rec: Recorded) -> Response:
        return self._queue.popleft() if self._queue else self.default(rec)

    def _refused(self, headers: dict[str, str]) -> web.Response | None:
        auth = headers.get("authorization", "")
        key = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        if self.valid_keys is not None and key not in self.valid_keys:
            return _error(Error(401, "Incorrect API key provided", type="invalid_request_error"))
        return None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            body = json.loads(await request.read())
        except ValueError:
            body = None
        rec = Recorded(request.path, body if isinstance(body, dict) else {}, headers)
        self.requests.append(rec)
        refused = self._refused(headers)
        if refused is not None:
            return refused
        problem = _request_problem(rec.body)
        if problem is not None:
            return _error(Error(400, problem, type="invalid_request_error"))
        return await self._respond(request, rec, self._next(rec))

    async def _respond(self, request: web.Request, rec: Recorded, response: Response) -> web.StreamResponse:
        match response:
            case Slow(seconds=seconds, then=then):
                await asyncio.sleep(seconds)
                return await self._respond(request, rec, then)
            case Error():
                return _error(response)
            case Reply() | ToolCalls() | Malformed() | Cut():
                if not rec.body.get("stream"):
                    return _error(Error(400, "this stand-in serves streams only",
                                        type="invalid_request_error"))
                return await self._stream(request, rec, response)
        return _error(Error(500, f"not a chat response: {response!r}"))

    async def _stream(self, request: web.Request, rec: Recorded, response: Response) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache"})
        await resp.prepare(request)
        ident, created = f"chatcmpl-standin{next(self._ids):06d}", int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None,
                  choices: bool = True) -> bytes:
            body = {"id": ident, "object": "chat.completion.chunk", "created": created,
                    "model": rec.model, "system_fingerprint": None,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                 "finish_reason": finish}] if choices else []}
            if usage is not None:
                body["usage"] = usage
            return f"data: {json.dumps(body)}\n\n".encode()

        await resp.write(chunk({"role": "assistant", "content": ""}))
        text = getattr(response, "text", "")
        pieces = _pieces(text, getattr(response, "parts", 3)) if text else []
        if isinstance(response, Cut):
            await resp.write(chunk({"content": pieces[0] if pieces else ""}))
            _abort(request)
            return resp
        for index, piece in enumerate(pieces):
            if isinstance(response, Malformed) and index == 1:
                await resp.write(chunk({"content": piece})[:-9] + b"\n\n")
                await resp.write_eof()
                return resp
            await resp.write(chunk({"content": piece}))
        finish = "stop"
        prompt, completion, with_usage = 12, 7, True
        if isinstance(response, Reply):
            finish, prompt, completion, with_usage = (response.finish_reason, response.prompt_tokens,
                                                      response.completion_tokens, response.usage)
        if isinstance(response, ToolCalls):
            finish = "tool_calls"
            for index, (name, arguments) in enumerate(response.calls):
                raw = response.raw_arguments if index == 0 and response.raw_arguments is not None \
                    else json.dumps(arguments)
                call_id = f"call_standin{next(self._ids):06d}"
                await resp.write(chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                                        "function": {"name": name, "arguments": ""}}]}))
                for piece in _pieces(raw, 3):
                    fragment = {"index": index, "function": {"arguments": piece}}
                    await resp.write(chunk({"tool_calls": [fragment]}))
        await resp.write(chunk({}, finish))
        if with_usage and (rec.body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                     "total_tokens": prompt + completion}
            await resp.write(chunk({}, usage=usage, choices=False))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _transcribe(self, request: web.Request) -> web.Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        fields: dict[str, Any] = {}
        files: dict[str, bytes] = {}
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            # A transcription form is flat: a nested multipart is not a field.
            if not isinstance(part, BodyPartReader) or part.name is None:
                continue
            data = await part.read()
            if part.filename:
                files[part.name] = bytes(data)
            else:
                fields[part.name] = bytes(data).decode()
        rec = Recorded(request.path, fields, headers, files)
        self.requests.append(rec)
        refused = self._refused(headers)
        if refused is not None:
            return refused
        if "file" not in files or "model" not in fields:
            return _error(Error(400, "file and model are required", type="invalid_request_error"))
        response = self._next(rec)
        if isinstance(response, Error):
            return _error(response)
        text = response.text if isinstance(response, Transcript) else "stand-in transcript"
        return web.json_response({"text": text})


def _pieces(text: str, parts: int) -> list[str]:
    size = max(1, math.ceil(len(text) / max(parts, 1)))
    return [text[i: i + size] for i in range(0, len(text), size)] or [""]


def _error(error: Error) -> web.Response:
    headers = {"retry-after": f"{error.retry_after:g}"} if error.retry_after is not None else {}
    body = {"error": {"message": error.message, "type": error.type, "param": None, "code": None}}
    return web.json_response(body, status=error.status, headers=headers)


def _abort(request: web.Request) -> None:
    if request.transport is not None:
        request.transport.abort()


def _request_problem(body: dict[str, Any]) -> str | None:
    """What Chat Completions refuses: no model or messages, a tool message that answers no
    tool_call of the assistant message before it, a tool_call left unanswered."""
    messages = body.get("messages")
    if not isinstance(body.get("model"), str) or not isinstance(messages, list) or not messages:
        return "model and messages are required"
    asked: set[str] = set()
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"messages[{index}].role: unknown role {role!r}"
        if role == "tool":
            if message.get("tool_call_id") not in asked:
                return (f"messages[{index}]: messages with role 'tool' must be a response to a "
                        "preceeding message with 'tool_calls'")
            asked.discard(message["tool_call_id"])
            continue
        if asked:
            return f"messages[{index - 1}]: tool_call_ids did not have response messages: {sorted(asked)}"
        if role == "assistant":
            asked = {call["id"] for call in message.get("tool_calls") or []}
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                if part.get("type") not in ("text", "image_url"):
                    return f"messages[{index}].content: unknown part type {part.get('type')!r}"
                if part["type"] == "image_url" and not str(part["image_url"].get("url", "")).startswith(
                        ("data:image/", "http")):
                    return f"messages[{index}].content: image_url must be a URL or a data URL"
    for tool in body.get("tools") or []:
        if tool.get("type") != "function" or "name" not in tool.get("function", {}):
            return "tools: each tool must be {type: function, function: {name, parameters}}"
    return None
