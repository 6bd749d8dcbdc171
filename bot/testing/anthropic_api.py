"""Local aiohttp stand-in of the Anthropic Messages API (POST /v1/messages) and its Models API
(GET /v1/models, GET /v1/models/{model_id}) for the real SDK."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Literal

from aiohttp import web

from bot.testing.anthropic_checks import (
    cache_problem,
    content_problem,
    tools_problem,
)
from bot.testing.anthropic_responses import (
    DropConnection,
    Error,
    MalformedStream,
    RecordedRequest,
    Response,
    Slow,
    Text,
    ToolUse,
    TruncatedStream,
    chunks,
)
from bot.testing.inflight import InFlight
from bot.testing.prompt_cache import PromptCache

__all__ = [
    "AnthropicStandIn",
    "DropConnection",
    "Error",
    "MalformedStream",
    "PromptCache",
    "RecordedRequest",
    "Response",
    "Slow",
    "Text",
    "ToolUse",
    "TruncatedStream",
]


class AnthropicStandIn:
    """`async with AnthropicStandIn() as api:` serves the Messages API on 127.0.0.1:<free port>."""

    def __init__(
        self, *, valid_keys: set[str] | None = None, models: Iterable[str] | None = None,
        prompt_cache: PromptCache | None = None,
    ) -> None:
        self.requests: list[RecordedRequest] = []
        # With a cache, a reply's input and cache tokens are counted from the request as the API
        # counts them (its prompt cache included), not taken from the scripted response.
        self.prompt_cache = prompt_cache
        self.valid_keys: set[str] | None = valid_keys
        # The model ids this API knows. None: every id (any model answers, none is listed); a set:
        # the Models API lists and retrieves only these, and a message for another model gets the
        # 404 not_found_error ("model: <id>") the real API answers.
        self.models: set[str] | None = set(models) if models is not None else None
        self.model_lookups: list[str] = []  # the path (and query) of every Models API request
        self.default: Callable[[RecordedRequest], Response] = lambda rec: Text("ok")
        self._queues: defaultdict[str | None, deque[Response]] = defaultdict(deque)
        self._ids = itertools.count(1)
        self._inflight = InFlight()
        self._runner: web.AppRunner | None = None
        self._port = 0

    async def __aenter__(self) -> AnthropicStandIn:
        app = web.Application()
        app.router.add_post("/v1/messages", self._handle)
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_get("/v1/models/{model_id}", self._get_model)
        # handler_cancellation: a client that times out and disconnects cancels its slow handler.
        self._runner = web.AppRunner(
            app, handler_cancellation=True, shutdown_timeout=0.1, access_log=None
        )
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self._port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Cancel in-flight handlers and stop the server; safe to call twice."""
        await self._inflight.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def script(self, *responses: Response, model: str | None = None) -> None:
        """Queue responses (FIFO) for `model`; model=None queues for any model."""
        self._queues[model].extend(responses)

    @property
    def count(self) -> int:
        return len(self.requests)

    def requests_for(self, model: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.model == model]

    def _next_response(self, rec: RecordedRequest) -> Response:
        for key in (rec.model, None):
            queue = self._queues.get(key)
            if queue:
                return queue.popleft()
        return self.default(rec)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        with self._inflight.serving():
            return await self._serve(request)

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            body = json.loads(await request.read())
        except ValueError:
            body = None
        parsed: dict[str, Any] = body if isinstance(body, dict) else {}
        retries = headers.get("x-stainless-retry-count", "0")
        model, stream = str(parsed.get("model", "")), bool(parsed.get("stream", False))
        rec = RecordedRequest(
            parsed, headers, model, stream, int(retries) if retries.isdigit() else 0
        )
        self.requests.append(rec)

        auth = headers.get("authorization", "")
        bearer = auth.lower().startswith("bearer ")
        key = auth[7:].strip() if bearer else headers.get("x-api-key", "")
        if not key or (self.valid_keys is not None and key not in self.valid_keys):
            return self._error(Error(401, "authentication_error", "invalid x-api-key"))
        if body is None or not isinstance(body, dict):
            return self._error(Error(400, "invalid_request_error", "body is not a JSON object"))
        for name, kind in (("model", str), ("messages", list), ("max_tokens", int)):
            if not isinstance(parsed.get(name), kind):
                return self._error(Error(400, "invalid_request_error", f"{name}: Field required"))
        problem = content_problem(parsed["messages"]) or tools_problem(parsed) or cache_problem(parsed)
        if problem is not None:
            return self._error(Error(400, "invalid_request_error", problem))
        if self.models is not None and model not in self.models:
            return self._error(Error(404, "not_found_error", f"model: {model}"))
        return await self._respond(request, rec, self._next_response(rec))

    # -- the Models API

    def _key_refused(self, request: web.Request) -> web.Response | None:
        """The 401 the API answers a missing or wrong key with (either header style), or None."""
        auth = request.headers.get("authorization", "")
        key = auth[7:].strip() if auth.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
        if not key or (self.valid_keys is not None and key not in self.valid_keys):
            return self._error(Error(401, "authentication_error", "invalid x-api-key"))
        return None

    def _model_info(self, model_id: str) -> dict[str, Any]:
        return {"type": "model", "id": model_id, "display_name": model_id,
                "created_at": "2025-01-01T00:00:00Z", "lifecycle": "active", "deprecated_at": None,
                "retires_at": None, "max_input_tokens": 200000, "max_tokens": 64000}

    async def _get_model(self, request: web.Request) -> web.Response:
        self.model_lookups.append(request.path_qs)
        model_id = request.match_info["model_id"]
        refused = self._key_refused(request)
        if refused is not None:
            return refused
        if self.models is not None and model_id not in self.models:
            return self._error(Error(404, "not_found_error", f"model: {model_id}"))
        return web.json_response(self._model_info(model_id), headers={"request-id": self._request_id()})

    async def _list_models(self, request: web.Request) -> web.Response:
        """One page of the known models (newest first on the real API; sorted here), with
        `limit` (default 20) and the `after_id` cursor."""
        self.model_lookups.append(request.path_qs)
        refused = self._key_refused(request)
        if refused is not None:
            return refused
        ids = sorted(self.models or ())
        after = request.query.get("after_id")
        if after in ids:
            ids = ids[ids.index(after) + 1:]
        limit = int(request.query.get("limit", "20"))
        page = ids[:limit]
        body = {"data": [self._model_info(i) for i in page], "has_more": len(ids) > limit,
                "first_id": page[0] if page else None, "last_id": page[-1] if page else None}
        return web.json_response(body, headers={"request-id": self._request_id()})

    async def _respond(
        self, request: web.Request, rec: RecordedRequest, response: Response
    ) -> web.StreamResponse:
        match response:
            case Slow(seconds=seconds, then=then):
                await asyncio.sleep(seconds)
                return await self._respond(request, rec, then)
            case Error(delay=delay, mid_stream=mid_stream):
                await asyncio.sleep(delay)
                if mid_stream and rec.stream:
                    partial = Text(response.partial, parts=response.parts, delta_delay=response.delta_delay)
                    return await self._stream(request, rec, partial, "complete", response)
                return self._error(response)
            case Text(delay=delay):
                await asyncio.sleep(delay)
                response = self._metered(rec, response)
                if rec.stream:
                    return await self._stream(request, rec, response, "complete")
                return self._message(rec, response)
            case ToolUse(delay=delay):
                await asyncio.sleep(delay)
                blocks = self._tool_blocks(response)
                reply = self._metered(rec, Text(response.text, response.input_tokens,
                                                response.output_tokens, stop_reason="tool_use"))
                if rec.stream:
                    return await self._stream(request, rec, reply, "complete", tool_blocks=blocks)
                body = self._message_json(rec, reply)
                said = [{"type": "text", "text": response.text}] if response.text else []
                body["content"] = said + blocks
                return web.json_response(body, headers={"request-id": self._request_id()})
            case TruncatedStream(text=text, input_tokens=tin):
                reply = Text(text, input_tokens=tin)
                if rec.stream:
                    return await self._stream(request, rec, reply, "truncated")
                return self._message(rec, reply)
            case MalformedStream(text=text):
                if rec.stream:
                    return await self._stream(request, rec, Text(text), "malformed")
                return self._message(rec, Text(text))
            case DropConnection():
                if rec.stream:
                    return await self._stream(request, rec, Text("dropped reply"), "drop")
                _abort(request)
                # aiohttp fails to write this and treats it as a premature client disconnect.
                return web.Response(status=500)
        raise TypeError(f"not a stand-in response: {response!r}")

    def _metered(self, rec: RecordedRequest, reply: Text) -> Text:
        """The reply with the input the request is billed for, when requests are metered."""
        if self.prompt_cache is None:
            return reply
        rec.metered = metered = self.prompt_cache.meter(rec.body)
        return replace(reply, input_tokens=metered.input_tokens,
                       cache_write_tokens=metered.cache_write_tokens,
                       cache_read_tokens=metered.cache_read_tokens)

    def _tool_blocks(self, response: ToolUse) -> list[dict[str, Any]]:
        return [{"type": "tool_use", "id": f"toolu_standin_{next(self._ids):08d}", "name": name,
                 "input": arguments} for name, arguments in response.calls]

    def _request_id(self) -> str:
        return f"req_standin_{next(self._ids):08d}"

    def _error(self, error: Error) -> web.Response:
        request_id = self._request_id()
        headers = {"request-id": request_id}
        if error.retry_after is not None:
            headers["retry-after"] = f"{error.retry_after:g}"
        err = {"type": error.type, "message": error.message}
        body = {"type": "error", "error": err, "request_id": request_id}
        return web.json_response(body, status=error.status, headers=headers)

    def _message_json(self, rec: RecordedRequest, reply: Text, started: bool = False) -> Any:
        return {
            "id": f"msg_standin_{next(self._ids):08d}",
            "type": "message",
            "role": "assistant",
            "model": rec.model,
            "content": [] if started else [{"type": "text", "text": reply.text}],
            "stop_reason": None if started else reply.stop_reason,
            "stop_sequence": None,
            "usage": {
                "input_tokens": reply.input_tokens,
                "output_tokens": 1 if started else reply.output_tokens,
                "cache_creation_input_tokens": reply.cache_write_tokens,
                "cache_read_input_tokens": reply.cache_read_tokens,
            },
        }

    def _message(self, rec: RecordedRequest, reply: Text) -> web.Response:
        body = self._message_json(rec, reply)
        return web.json_response(body, headers={"request-id": self._request_id()})

    async def _stream(
        self,
        request: web.Request,
        rec: RecordedRequest,
        reply: Text,
        end: Literal["complete", "truncated", "drop", "malformed"],
        error: Error | None = None,
        tool_blocks: list[dict[str, Any]] | None = None,
    ) -> web.StreamResponse:
        request_id = self._request_id()
        headers = {"content-type": "text/event-stream; charset=utf-8", "request-id": request_id}
        resp = web.StreamResponse(headers={**headers, "cache-control": "no-cache"})
        await resp.prepare(request)
        message = self._message_json(rec, reply, started=True)
        events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
        events.append({"type": "ping"})
        deltas = [{"type": "text_delta", "text": chunk} for chunk in chunks(reply.text, reply.parts)]
        keep = {"complete": len(deltas), "truncated": max(1, len(deltas) - 1), "drop": 1,
                "malformed": 1}[end]
        has_text = error is None or bool(reply.text)
        if tool_blocks and not reply.text:
            has_text = False  # a tool call with nothing said first: tool_use blocks only
        if has_text:
            block = {"type": "text", "text": ""}
            events.append({"type": "content_block_start", "index": 0, "content_block": block})
            events += [
                {"type": "content_block_delta", "index": 0, "delta": d} for d in deltas[:keep]
            ]
        if error is not None:
            err = {"type": error.type, "message": error.message}
            events.append({"type": "error", "error": err, "request_id": request_id})
        if error is None and end == "complete":
            stop = {"stop_reason": reply.stop_reason, "stop_sequence": None}
            # The final usage repeats the cumulative input and cache counts, as the API does.
            usage = {"input_tokens": reply.input_tokens,
                     "cache_creation_input_tokens": reply.cache_write_tokens,
                     "cache_read_input_tokens": reply.cache_read_tokens,
                     "output_tokens": reply.output_tokens}
            if has_text:
                events.append({"type": "content_block_stop", "index": 0})
            for index, tool in enumerate(tool_blocks or [], start=int(has_text)):
                start = {**tool, "input": {}}
                events.append({"type": "content_block_start", "index": index, "content_block": start})
                events += [{"type": "content_block_delta", "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": piece}}
                           for piece in ["", *chunks(json.dumps(tool["input"]), 3)]]
                events.append({"type": "content_block_stop", "index": index})
            events.append({"type": "message_delta", "delta": stop, "usage": usage})
            events.append({"type": "message_stop"})
        written = 0
        for event in events:
            if event["type"] == "content_block_delta":
                if written and reply.delta_delay:
                    await asyncio.sleep(reply.delta_delay)
                if written == 1 and reply.hold is not None:
                    await reply.hold.wait()
                written += 1
            await resp.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        if end == "malformed":
            broken = json.dumps({"type": "content_block_delta", "index": 0, "delta": deltas[-1]})[:-7]
            await resp.write(f"event: content_block_delta\ndata: {broken}\n\n".encode())
        if end == "drop":
            _abort(request)
        else:
            await resp.write_eof()
        return resp


def _abort(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()
