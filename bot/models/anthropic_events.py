"""The Anthropic Messages API's answers read as the JSON they are: a stream's events folded into a
reply, and a whole answer's text and usage.

The SDK still makes every call (its request building, its status errors, its transport); only its
typed models are skipped. Building one per server-sent event (`construct_type` over a union of
event types, a dozen or more per reply) was about a tenth of the daemon's CPU per message
(bench/message_cost.py); these functions read the few fields a reply needs from the decoded JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class StreamedReply:
    """What a reply's stream has said so far; `feed` takes each event's decoded JSON in order."""

    model: str  # the model asked for, until message_start names the one that answered
    text: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    stop_reason: str | None = None
    finished: bool = False  # message_stop was seen: the answer is whole
    # The content blocks by index (text, tool_use with its parsed input), for the tool loop.
    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    _partial_json: dict[int, str] = field(default_factory=dict)

    def feed(self, event: dict[str, Any]) -> bool:
        """Take one event; True when it added text to the reply."""
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event["delta"]
            index = event["index"]
            if delta["type"] == "text_delta":
                piece: str = delta["text"]
                self.text += piece
                block = self.blocks.get(index)
                if block is not None and block["type"] == "text":
                    block["text"] += piece
                return True
            if delta["type"] == "input_json_delta":
                self._partial_json[index] = self._partial_json.get(index, "") + delta["partial_json"]
        elif kind == "message_start":
            message = event["message"]
            usage = message["usage"]
            self.model = message.get("model") or self.model  # the model that actually answered
            self.input_tokens = usage["input_tokens"]
            self.cache_write_tokens = usage.get("cache_creation_input_tokens") or 0
            self.cache_read_tokens = usage.get("cache_read_input_tokens") or 0
        elif kind == "content_block_start":
            block = event["content_block"]
            if block["type"] == "tool_use":
                self.blocks[event["index"]] = {"type": "tool_use", "id": block["id"],
                                               "name": block["name"], "input": {}}
                self._partial_json[event["index"]] = ""
            elif block["type"] == "text":
                self.blocks[event["index"]] = {"type": "text", "text": ""}
        elif kind == "content_block_stop" and event["index"] in self._partial_json:
            # An unreadable input is passed on as the raw text: the tool loop answers it with an
            # error result the model can read.
            raw = self._partial_json.pop(event["index"])
            try:
                self.blocks[event["index"]]["input"] = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError:
                self.blocks[event["index"]]["input"] = {"__unparsed__": raw}
        elif kind == "message_delta":
            self.stop_reason = event["delta"].get("stop_reason") or self.stop_reason
            # Cumulative counts: where the final event repeats a figure, it is the one to keep.
            usage = event["usage"]
            self.output_tokens = usage.get("output_tokens", self.output_tokens)
            self.input_tokens = _given(usage, "input_tokens", self.input_tokens)
            self.cache_write_tokens = _given(usage, "cache_creation_input_tokens", self.cache_write_tokens)
            self.cache_read_tokens = _given(usage, "cache_read_input_tokens", self.cache_read_tokens)
        elif kind == "message_stop":
            self.finished = True
        return False

    def content(self) -> tuple[dict[str, Any], ...]:
        """The reply's content blocks in order, empty text blocks left out."""
        return tuple(self.blocks[index] for index in sorted(self.blocks)
                     if self.blocks[index]["type"] != "text" or self.blocks[index]["text"])


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole (not streamed) answer: its text blocks joined, the model, the stop reason, usage."""

    text: str
    model: str | None
    stop_reason: str | None
    input_tokens: int
    output_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int


def read_answer(body: dict[str, Any]) -> Answer:
    """The fields of a Messages API answer (`POST /v1/messages` without streaming) a completion needs."""
    usage = body["usage"]
    return Answer(
        text="".join(block["text"] for block in body["content"] if block.get("type") == "text"),
        model=body.get("model"),
        stop_reason=body.get("stop_reason"),
        input_tokens=usage["input_tokens"],
        output_tokens=usage["output_tokens"],
        cache_write_tokens=usage.get("cache_creation_input_tokens") or 0,
        cache_read_tokens=usage.get("cache_read_input_tokens") or 0,
    )


def _given(usage: dict[str, Any], key: str, before: int) -> int:
    value = usage.get(key)
    return before if value is None else int(value)
