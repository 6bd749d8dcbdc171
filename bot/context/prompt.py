"""Prompt assembly: the system prompt and the alternating user/assistant turns sent to the model."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import structlog

from bot.config import Config
from bot.core.media import FULL_MEDIA_REASONS, content_block, with_labels
from bot.core.messages import StoredMessage
from bot.core.session_key import SessionKey
from bot.ranking.stages import Context

log = structlog.get_logger("switchboard.prompt")

_KIND_WORDS = {"direct": "a one-to-one chat", "group": "a group chat", "channel": "a channel",
               "room": "a room"}


def excerpt(text: str, limit: int, name: str) -> str:
    """`text` cut to `limit` characters, with a note saying how much was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[…truncated: the first {limit} of {len(text)} characters of {name}]"


# A file rewritten soon after it was read can keep its size, inode and timestamp (file system
# clocks tick coarsely): until a file is older than this it is read and hashed again every time.
_RACY_NS = 2_000_000_000


@dataclass(frozen=True, slots=True)
class _Loaded:
    signature: tuple[int, int, int] | None  # (mtime_ns, size, inode); None: the file is absent
    digest: str
    text: str | None
    # The file was already older than _RACY_NS when read: the same signature means the same text.
    settled: bool


class PromptFiles:
    """The stable system prompt, with SOUL/MEMORY files cached and reloaded when they change.

    Each call stats the files (cheap); a file is read again only when its mtime, size or inode
    moved (or it was written moments before it was read), and the prompt text is rebuilt only
    when a file's content hash changed, so the bytes sent stay identical between turns and the
    provider's prompt cache keeps hitting.
    """

    def __init__(self, config: Config) -> None:
        self._config = config
        agent = config.agent
        self._paths = {
            "soul": config.resolve(agent.soul_file) if agent.soul_file else None,
            "memory": config.resolve(agent.memory_file) if agent.memory_file else None,
        }
        self._loaded: dict[str, _Loaded] = {}
        self._prompt: str | None = None
        self._included: list[dict[str, Any]] = []

    def stable_prompt(self) -> str:
        changed = False
        for name, path in self._paths.items():
            if path is not None and self._refresh(name, path):
                changed = True
        if changed or self._prompt is None:
            self._prompt = self._compose()
        return self._prompt

    def included(self) -> list[dict[str, Any]]:
        """The files the last composed prompt holds: name, file, characters kept, and whether the
        total cap left a file out (what `switchboard context` shows for a turn)."""
        return [dict(entry) for entry in self._included]

    def _refresh(self, name: str, path: Path) -> bool:
        """Reload one file if it moved on disk; True when its content is not what was loaded."""
        try:
            stat = os.stat(path)
            signature: tuple[int, int, int] | None = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        except OSError:
            signature = None
        previous = self._loaded.get(name)
        if previous is not None and previous.signature == signature and previous.settled:
            return False
        read_at = time.time_ns()
        text: str | None = None
        if signature is not None:
            try:
                text = path.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                signature = None
        digest = hashlib.sha256(text.encode()).hexdigest() if text is not None else ""
        settled = signature is None or read_at - signature[0] > _RACY_NS
        self._loaded[name] = _Loaded(signature, digest, text, settled)
        if previous is None:
            return True
        if previous.digest != digest:
            log.info("prompt file reloaded", file=str(path), chars=len(text or ""))
            return True
        return False

    def _compose(self) -> str:
        agent = self._config.agent
        parts = [
            f"You are {agent.name}, an assistant people reach through chat apps "
            "(Telegram, Discord, a console). Reply in plain, concise chat style; Markdown is allowed.",
        ]
        left = agent.files_total_chars
        self._included = []
        for name, path in self._paths.items():
            loaded = self._loaded.get(name)
            if path is None or loaded is None or not loaded.text:
                continue
            limit = min(agent.file_excerpt_chars, left)
            if limit <= 0:
                parts.append(f"<{name}>\n[{path.name} left out: the prompt files' total cap "
                             f"({agent.files_total_chars} characters) is used up]\n</{name}>")
                self._included.append({"name": name, "file": str(path), "chars": 0, "left_out": True})
                continue
            text = excerpt(loaded.text, limit, path.name)
            left -= min(len(loaded.text), limit)
            parts.append(f"<{name}>\n{text}\n</{name}>")
            self._included.append({"name": name, "file": str(path), "chars": len(text), "left_out": False})
        return "\n\n".join(parts)


def stable_system_prompt(config: Config) -> str:
    """The part of the system prompt that is the same every turn (and so worth caching)."""
    return PromptFiles(config).stable_prompt()


def turn_system_prompt(
    config: Config, key: SessionKey, now: float, speaker: str | None = None
) -> str:
    """The per-turn part: where the conversation happens, with whom (in a one-to-one chat: a person
    or, in the same words, another agent), and what time it is."""
    zone = ZoneInfo(config.agent.timezone)
    local = datetime.fromtimestamp(now, zone).strftime("%A %Y-%m-%d %H:%M %Z")
    utc = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M UTC")
    where = f"{_KIND_WORDS[key.kind]} on {key.provider}"
    if key.suffix_kind:
        where += f" (inside a {key.suffix_kind})"
    if key.kind == "direct" and speaker and speaker != "you":  # the console's default name says nothing
        where += f" with {speaker}"
    lines = [f"This conversation is {where}.", f"Current time: {local} ({utc})."]
    if key.kind != "direct":
        lines.append("Several people may speak; each user line starts with the speaker's name.")
    return "\n".join(lines)


def conversation_turns(
    context: Context, request: StoredMessage, *, group: bool, zone: tzinfo = UTC,
    files: Mapping[str, bytes] | None = None,
) -> list[dict[str, Any]]:
    """Context and request as alternating user/assistant turns, same-role neighbours merged.

    Each user message (and each scheduled output) carries the time it was written in `zone`, with
    a date line whenever the day changes, so "when did I…" can be answered; the agent's replies
    follow their message and carry none (a model shown stamped replies starts stamping its own).
    The text depends only on the messages and the zone, so the same history gives the same bytes
    and the provider's prompt cache keeps hitting.

    A message's pictures and files show as placeholder lines; the request's, the replied-to
    message's and those of the recent window are also sent as content blocks, from `files`
    (their bytes by hash). A turn holding a block is a list of blocks; every other turn stays a
    plain string, byte for byte what it was before files existed.
    """
    turns: list[dict[str, Any]] = []
    clock = _Clock(zone)
    files = files or {}
    if context.summary:
        _append(turns, "user", _summary_block(context.summary))
    for entry in context.entries:
        full = entry.reason in FULL_MEDIA_REASONS
        _append(turns, entry.message.role, _with_blocks(entry.message, _render(entry.message, group, clock),
                                                        files if full else {}))
    final = _render(request, group, clock)
    if context.scheduled:
        final = _scheduled_block(context.scheduled, zone) + "\n\n" + final
    if context.reply_to is not None:
        target = context.reply_to
        final = f"[replying to the message of {clock.moment(target)}: {_quote(_quoted(target))}]\n" + final
    _append(turns, "user", _with_blocks(request, final, files))
    if turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": "[earlier conversation]"})
    return turns


def media_hashes(context: Context, request: StoredMessage) -> list[str]:
    """The files `conversation_turns` sends in full for this context, newest message first: what
    to read from disk."""
    recent = [e.message for e in context.entries if e.reason in FULL_MEDIA_REASONS]
    messages = [request, *sorted(recent, key=lambda m: m.id, reverse=True)]
    found = [m.sha256 for message in messages for m in message.media if m.sendable and m.sha256]
    return list(dict.fromkeys(found))


class _Clock:
    """Stamps messages with their local time, and the date when it differs from the last stamp's."""

    def __init__(self, zone: tzinfo) -> None:
        self._zone = zone
        self._day: str | None = None

    def stamp(self, message: StoredMessage) -> str:
        local = datetime.fromtimestamp(message.created_at, self._zone)
        day = local.strftime("%A %Y-%m-%d")
        prefix = "" if day == self._day else f"[{day}]\n"
        self._day = day
        return f"{prefix}[{local.strftime('%H:%M')}] "

    def moment(self, message: StoredMessage) -> str:
        return datetime.fromtimestamp(message.created_at, self._zone).strftime("%Y-%m-%d %H:%M")


Part = str | list[dict[str, Any]]


def _append(turns: list[dict[str, Any]], role: str, part: Part) -> None:
    if not turns or turns[-1]["role"] != role:
        turns.append({"role": role, "content": part})
        return
    last = turns[-1]
    if isinstance(part, str) and isinstance(last["content"], str):
        last["content"] += "\n\n" + part
        return
    blocks = _blocks(last["content"])
    for block in _blocks(part):
        if block["type"] == "text" and blocks and blocks[-1]["type"] == "text":
            blocks[-1] = {"type": "text", "text": blocks[-1]["text"] + "\n\n" + block["text"]}
        else:
            blocks.append(block)
    last["content"] = blocks


def _blocks(part: Part) -> list[dict[str, Any]]:
    return [{"type": "text", "text": part}] if isinstance(part, str) else list(part)


def _with_blocks(message: StoredMessage, text: str, files: Mapping[str, bytes]) -> Part:
    """The message's text, followed by a block for each of its files found in `files`."""
    blocks = []
    for media in message.media:
        data = files.get(media.sha256) if media.sha256 else None
        block = content_block(media, data) if data is not None else None
        if block is not None:
            blocks.append(block)
    return [{"type": "text", "text": text}, *blocks] if blocks else text


def _quoted(message: StoredMessage) -> str:
    return with_labels(message.text, message.media)


def _render(message: StoredMessage, group: bool, clock: _Clock) -> str:
    if message.role == "user":
        speaker = f"[{message.sender_name or message.sender_id}]: " if group else ""
        return clock.stamp(message) + speaker + with_labels(message.text, message.media)
    text = message.text
    if message.origin == "scheduled":
        job = f" from job {message.job_id}" if message.job_id else ""
        text = f"{clock.stamp(message)}[scheduled message{job}]\n{text}"
    if message.actions:
        text += "\n[actions: " + "; ".join(message.actions) + "]"
    return text


def _summary_block(summary: str) -> str:
    return (
        "[Summary of the earlier part of this conversation (the messages themselves are not shown):]"
        f"\n{summary}\n[End of summary.]"
    )


def _scheduled_block(messages: Sequence[StoredMessage], zone: tzinfo) -> str:
    lines = ["[Scheduled messages you sent in this chat since the user's previous message:]"]
    for message in messages:
        when = datetime.fromtimestamp(message.created_at, zone).strftime("%Y-%m-%d %H:%M")
        job = f" job {message.job_id}," if message.job_id else ""
        lines.append(f"---{job} {when}\n{message.text}")
    lines.append("[End of scheduled messages.]")
    return "\n".join(lines)


def _quote(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return "«" + (flat if len(flat) <= limit else flat[: limit - 1] + "…") + "»"


def system_parts(
    stable_chars: int, files: Sequence[dict[str, Any]], turn_parts: Sequence[tuple[str, int]]
) -> list[dict[str, Any]]:
    """The system prompt part by part with its size in characters, for `switchboard context`: the
    agent's own words ([agent] and the prompt files' frame), each prompt file, then this turn's
    parts (where and when, the asker's timezone and notes, the tool definitions)."""
    included = [f for f in files if not f.get("left_out")]
    own = stable_chars - sum(int(f.get("chars") or 0) for f in included)
    return [{"part": "the agent's instructions ([agent], prompt files' frame)", "chars": max(own, 0)},
            *({"part": f"prompt file {f.get('name')}", "source": str(f.get("file")),
               "chars": int(f.get("chars") or 0)} for f in included),
            *({"part": label, "chars": chars} for label, chars in turn_parts)]
