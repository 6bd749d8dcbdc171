"""The conversation as OpenAI Chat Completions messages and tools, and tool calls back as blocks.

The brain's requests are written in the Messages API's shape (content blocks, tool_use and
tool_result); this module turns them into what a Chat Completions server reads: one system
message, images as `image_url` data URLs, tool calls on the assistant message, each result a
`tool` message. Pure functions.
"""

from __future__ import annotations

import json
from typing import Any


def chat_messages(system: str, turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The system prompt and the turns as Chat Completions messages."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for turn in turns:
        role, content = turn["role"], turn["content"]
        if isinstance(content, str):
            out.append({"role": role, "content": content})
        elif role == "assistant":
            out.append(_assistant(content))
        else:
            out.extend(_user(content))
    return out


def _assistant(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    calls = [{"id": str(b["id"]), "type": "function",
              "function": {"name": str(b["name"]), "arguments": json.dumps(b.get("input") or {})}}
             for b in blocks if b.get("type") == "tool_use"]
    if calls:
        message["tool_calls"] = calls
    return message


def _user(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool results first (each its own `tool` message, right after the calls), then the rest."""
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "tool_result":
            text = _result_text(block.get("content"))
            out.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id")),
                        "content": f"error: {text}" if block.get("is_error") else text})
        elif kind == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind == "image" and block.get("source", {}).get("type") == "base64":
            source = block["source"]
            url = f"data:{source['media_type']};base64,{source['data']}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif kind == "document":
            parts.append({"type": "text", "text": _document_text(block)})
    if parts:
        images = any(part["type"] == "image_url" for part in parts)
        content: Any = parts if images else "\n\n".join(part["text"] for part in parts)
        out.append({"role": "user", "content": content})
    return out


def _document_text(block: dict[str, Any]) -> str:
    """A text file goes in as text; a PDF cannot go through Chat Completions: named, not sent."""
    source = block.get("source", {})
    title = block.get("title") or "a file"
    if source.get("type") == "text":
        return f"[file {title}]\n{source.get('data', '')}"
    return f"[{title}: a PDF this model cannot read]"


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return str(content)


def chat_tools(definitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool definitions (name, description, input_schema) as functions."""
    return [{"type": "function", "function": {
        "name": d["name"], "description": d.get("description", ""),
        "parameters": d.get("input_schema") or {"type": "object", "properties": {}}}}
        for d in definitions]


def chat_tool_choice(choice: dict[str, Any] | None) -> Any:
    """{"type": "none" | "auto" | "any" | "tool"} as Chat Completions' tool_choice."""
    if choice is None:
        return None
    kind = choice.get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": choice["name"]}}
    return {"none": "none", "any": "required"}.get(str(kind), "auto")


STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "function_call": "tool_use", "content_filter": "refusal"}


def tool_use_blocks(calls: dict[int, dict[str, str]]) -> list[dict[str, Any]]:
    """Streamed tool calls (by index: id, name, argument text) as tool_use blocks; arguments
    that are not a JSON object are passed on raw for the tool loop to answer with an error."""
    blocks = []
    for index in sorted(calls):
        call = calls[index]
        raw = call.get("arguments", "")
        try:
            arguments: Any = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            arguments = {"__unparsed__": raw}
        blocks.append({"type": "tool_use", "id": call.get("id") or f"call_{index}",
                       "name": call.get("name", ""), "input": arguments})
    return blocks
