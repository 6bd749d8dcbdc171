"""The Messages API's prompt cache as the stand-in keeps it, and the usage split it reports.

As Anthropic documents it: the prompt is read in the order tools → system → messages; a
`cache_control` breakpoint on a block marks the prefix up to and including that block for caching
(at most four per request); a later request whose prefix up to a breakpoint — or up to one of the
20 blocks before it — is byte for byte one that was cached reads it; a prefix shorter than the
model's minimum is never cached (no error, simply billed in full); an entry lives five minutes
from its last use. Usage then reports `cache_read_input_tokens` (the prefix read),
`cache_creation_input_tokens` (what was written beyond it) and `input_tokens` (the rest).

Tokens are estimated (about four characters a token, as `bot.ranking.budget` does); the API's own
tool-use system prompt (346 tokens for Claude 4 models with tool_choice auto or none) counts with
the tools, as it does in the API's counts. Changing `tool_choice` invalidates only message-level
entries, as documented. `ttl: "1h"` entries are not modelled.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TTL_SECONDS = 300.0
LOOKBACK_BLOCKS = 20
MAX_BREAKPOINTS = 4
TOOL_PROMPT_TOKENS = 346
IMAGE_TOKENS = 1_600  # a picture near the API's size limit; its base64 length says nothing


def minimum_tokens(model: str) -> int:
    """The shortest prefix the model family caches: 2 048 for Haiku, 1 024 for Sonnet and Opus."""
    return 2048 if "haiku" in model.lower() else 1024


def estimate(text: str) -> int:
    return (len(text) + 3) // 4


@dataclass(frozen=True, slots=True)
class Metered:
    """One request's input as the API bills it."""

    input_tokens: int  # after the last cached (read or written) prefix: full price
    cache_write_tokens: int  # 1.25 × the input price (five-minute entries)
    cache_read_tokens: int  # 0.1 × the input price

    @property
    def total(self) -> int:
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens


@dataclass(frozen=True, slots=True)
class _Block:
    key: str  # the block's content without its cache_control (moving a breakpoint changes nothing)
    tokens: int
    breakpoint: bool


def breakpoints(body: dict[str, Any]) -> int:
    """How many blocks of a request carry cache_control."""
    return sum(block.breakpoint for block in _blocks(body))


def _is_block(value: Any) -> bool:
    return isinstance(value, dict)


def _bare(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def _content_tokens(block: dict[str, Any]) -> int:
    if block.get("type") == "text":
        return estimate(str(block.get("text", "")))
    if block.get("type") == "image":
        return IMAGE_TOKENS
    return estimate(json.dumps(_bare(block), sort_keys=True))


def _blocks(body: dict[str, Any]) -> list[_Block]:
    """The request as the cache sees it: every tool, system block and content block, in order."""
    found: list[_Block] = []
    tools = body.get("tools") or []
    for i, tool in enumerate(filter(_is_block, tools)):
        key = json.dumps(_bare(tool), sort_keys=True)
        found.append(_Block("tool:" + key, estimate(key) + (TOOL_PROMPT_TOKENS if i == 0 else 0),
                            "cache_control" in tool))
    system = body.get("system")
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    if isinstance(system, list):
        for block in filter(_is_block, system):
            found.append(_Block("system:" + json.dumps(_bare(block), sort_keys=True),
                                _content_tokens(block), "cache_control" in block))
    # tool_choice sits between system and messages: changing it keeps the tools and system entries.
    found.append(_Block("tool_choice:" + json.dumps(body.get("tool_choice"), sort_keys=True), 0, False))
    for message in filter(_is_block, body.get("messages") or []):
        role, content = message.get("role"), message.get("content")
        if isinstance(content, str):  # the same as one text block
            content = [{"type": "text", "text": content}]
        for block in filter(_is_block, content or []):
            found.append(_Block(f"{role}:" + json.dumps(_bare(block), sort_keys=True),
                                _content_tokens(block), "cache_control" in block))
    return found


class PromptCache:
    """The cache of one organisation: `meter(body)` bills a request and updates the entries.

    `enabled=False` bills as if no request carried a breakpoint (the same requests, uncached).
    `clock` (seconds) drives the TTL, so a test or bench can let minutes pass between turns.
    """

    def __init__(
        self, *, enabled: bool = True, clock: Callable[[], float] = time.monotonic,
        minimum: Callable[[str], int] = minimum_tokens, ttl: float = TTL_SECONDS,
    ) -> None:
        self.enabled = enabled
        self._clock = clock
        self._minimum = minimum
        self._ttl = ttl
        self._expires: dict[str, float] = {}  # prefix digest -> when the entry goes

    def meter(self, body: dict[str, Any]) -> Metered:
        blocks = _blocks(body)
        total = sum(block.tokens for block in blocks)
        if not self.enabled:
            return Metered(total, 0, 0)
        now = self._clock()
        self._expires = {key: at for key, at in self._expires.items() if at > now}
        running = hashlib.sha256(str(body.get("model", "")).encode())  # entries are per model
        digests: list[str] = []
        ends: list[int] = []
        for block in blocks:
            running.update(b"\0" + block.key.encode())
            digests.append(running.hexdigest())
            ends.append((ends[-1] if ends else 0) + block.tokens)
        marks = [i for i, block in enumerate(blocks) if block.breakpoint]
        read_end = -1
        for mark in marks:
            for i in range(mark, max(-1, mark - LOOKBACK_BLOCKS - 1), -1):
                if digests[i] in self._expires:
                    read_end = max(read_end, i)
                    break
        for i in [*marks, read_end]:
            if 0 <= i <= read_end and digests[i] in self._expires:
                self._expires[digests[i]] = now + self._ttl  # a hit refreshes the entries it covers
        read = ends[read_end] if read_end >= 0 else 0
        minimum = self._minimum(str(body.get("model", "")))
        written_end = -1
        for mark in marks:
            if mark > read_end and ends[mark] >= minimum:
                self._expires[digests[mark]] = now + self._ttl
                written_end = max(written_end, mark)
        written = ends[written_end] - read if written_end >= 0 else 0
        return Metered(total - read - written, written, read)
