"""The Messages API's request checks the Anthropic stand-in applies, each a function returning the
API's error message for a body it would refuse, or None."""

from __future__ import annotations

import base64
import re
from typing import Any

from bot.testing.prompt_cache import MAX_BREAKPOINTS, breakpoints

_IMAGE_MAGIC: dict[str, tuple[bytes, ...]] = {
    "image/jpeg": (b"\xff\xd8\xff",), "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/gif": (b"GIF87a", b"GIF89a"), "image/webp": (b"RIFF",),
}


def content_problem(messages: list[Any]) -> str | None:
    """What the Messages API would refuse in the turns' content blocks (text, image, document,
    tool_use in assistant turns, tool_result in user turns), and tool pairing across turns."""
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            continue
        if not isinstance(content, list) or not content:
            return f"messages.{i}.content: Input should be a valid string or a non-empty list"
        role = message.get("role")
        for j, block in enumerate(content):
            where = f"messages.{i}.content.{j}"
            block = block if isinstance(block, dict) else {}
            kind = block.get("type")
            if kind == "tool_use" and role == "assistant":
                ok = (isinstance(block.get("id"), str) and isinstance(block.get("name"), str)
                      and isinstance(block.get("input"), dict))
                problem = None if ok else f"{where}.tool_use: id, name and an input object are required"
            elif kind == "tool_result" and role == "user":
                problem = _result_problem(where, block)
            else:
                problem = _block_problem(where, block)
            if problem is not None:
                return problem
    return _pairing_problem(messages)


def _ids(message: Any, kind: str, key: str) -> list[str]:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [str(b.get(key)) for b in content if isinstance(b, dict) and b.get("type") == kind]


def _pairing_problem(messages: list[Any]) -> str | None:
    """Every tool_use answered by a tool_result in the very next (user) turn, and no result for a
    call the previous turn did not make: the API's own words for each."""
    for i, message in enumerate(messages):
        uses = _ids(message, "tool_use", "id")
        following = messages[i + 1] if i + 1 < len(messages) else None
        answered = set(_ids(following, "tool_result", "tool_use_id")) if following else set()
        missing = [use for use in uses if use not in answered]
        if missing:
            return (f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
                    f"after: {', '.join(missing)}. Each `tool_use` block must have a corresponding "
                    "`tool_result` block in the next message.")
        results = _ids(message, "tool_result", "tool_use_id")
        previous = set(_ids(messages[i - 1], "tool_use", "id")) if i > 0 else set()
        for j, result in enumerate(results):
            if result not in previous:
                return (f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                        f"blocks: {result}. Each `tool_result` block must have a corresponding "
                        "`tool_use` block in the previous message.")
    return None


def _result_problem(where: str, block: dict[str, Any]) -> str | None:
    if not isinstance(block.get("tool_use_id"), str):
        return f"{where}.tool_result.tool_use_id: Field required"
    content = block.get("content", "")
    if isinstance(content, list):
        if not all(isinstance(b, dict) and b.get("type") in ("text", "image", "document") for b in content):
            return f"{where}.tool_result.content: Input should be a valid string or a list of blocks"
    elif not isinstance(content, str):
        return f"{where}.tool_result.content: Input should be a valid string or a list of blocks"
    if "is_error" in block and not isinstance(block["is_error"], bool):
        return f"{where}.tool_result.is_error: Input should be a valid boolean"
    return None


def cache_problem(body: dict[str, Any]) -> str | None:
    """More breakpoints than the API takes, in its words."""
    found = breakpoints(body)
    if found > MAX_BREAKPOINTS:
        return f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {found}."
    return None


_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def tools_problem(body: dict[str, Any]) -> str | None:
    """The `tools` and `tool_choice` parameters as the API checks them, and that a request holding
    tool blocks defines tools."""
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            return "tools: Input should be a valid list"
        names: set[str] = set()
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                return f"tools.{i}.custom.name: Field required"
            if not _TOOL_NAME.match(tool["name"]):
                return f"tools.{i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            schema = tool.get("input_schema")
            if not isinstance(schema, dict) or schema.get("type") != "object":
                return f"tools.{i}.custom.input_schema.type: Input should be 'object'"
            if tool["name"] in names:
                return "tools: Tool names must be unique."
            names.add(tool["name"])
    choice = body.get("tool_choice")
    if choice is not None and (not isinstance(choice, dict)
                               or choice.get("type") not in ("auto", "any", "tool", "none")):
        return "tool_choice: Input tag does not match any of the expected tags: 'auto', 'any', 'tool', 'none'"
    holds_tools = any(_ids(m, "tool_use", "id") or _ids(m, "tool_result", "tool_use_id")
                      for m in body.get("messages", []))
    if holds_tools and not tools:
        return "Requests which include `tool_use` or `tool_result` blocks must define tools."
    return None


def _block_problem(where: str, block: dict[str, Any]) -> str | None:
    kind, source = block.get("type"), block.get("source")
    if kind == "text":
        return None if isinstance(block.get("text"), str) and block["text"] else (
            "text content blocks must be non-empty")
    if kind not in ("image", "document"):
        return f"{where}: Input tag '{kind}' found using 'type' does not match any expected tag"
    if not isinstance(source, dict) or source.get("type") not in ("base64", "text"):
        return f"{where}.{kind}.source: Input tag does not match the expected tags"
    media_type = source.get("media_type")
    if source["type"] == "text":
        text_ok = kind == "document" and media_type == "text/plain" and isinstance(source.get("data"), str)
        return None if text_ok else f"{where}.{kind}.source.text: expected text/plain string data"
    allowed = _IMAGE_MAGIC if kind == "image" else {"application/pdf": (b"%PDF-",)}
    if not isinstance(media_type, str) or media_type not in allowed:
        return f"{where}.{kind}.source.base64.media_type: Input should be one of {sorted(allowed)}"
    try:
        data = base64.b64decode(str(source.get("data")), validate=True)
    except ValueError:
        return f"{where}.{kind}.source.base64.data: invalid base64 data"
    if not data.startswith(allowed[media_type]):
        return (f"{where}.image.source.base64: Image does not match the provided media type {media_type}"
                if kind == "image" else "The PDF specified was not valid.")
    return None
