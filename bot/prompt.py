"""Prompt assembly: the system prompt and the alternating user/assistant turns sent to the model."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from bot.config import Config
from bot.context import Context
from bot.messages import StoredMessage
from bot.session_key import SessionKey

_KIND_WORDS = {"direct": "a one-to-one chat", "group": "a group chat", "channel": "a channel"}


def read_excerpt(path: Path | None, limit: int) -> str | None:
    """The head of a soul/memory file, capped at `limit` characters; None if absent."""
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return text if len(text) <= limit else text[:limit] + "\n[…truncated]"


def stable_system_prompt(config: Config) -> str:
    """The part of the system prompt that is the same every turn (and so worth caching)."""
    agent = config.agent
    parts = [
        f"You are {agent.name}, an assistant people reach through chat apps "
        "(Telegram, Discord, a console). Reply in plain, concise chat style; Markdown is allowed.",
    ]
    limit = agent.file_excerpt_chars
    soul = read_excerpt(config.resolve(agent.soul_file) if agent.soul_file else None, limit)
    if soul:
        parts.append(f"<soul>\n{soul}\n</soul>")
    memory = read_excerpt(config.resolve(agent.memory_file) if agent.memory_file else None, limit)
    if memory:
        parts.append(f"<memory>\n{memory}\n</memory>")
    return "\n\n".join(parts)


def turn_system_prompt(config: Config, key: SessionKey, now: float) -> str:
    """The per-turn part: where the conversation happens and what time it is."""
    zone = ZoneInfo(config.agent.timezone)
    local = datetime.fromtimestamp(now, zone).strftime("%A %Y-%m-%d %H:%M %Z")
    utc = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M UTC")
    where = f"{_KIND_WORDS[key.kind]} on {key.provider}"
    if key.suffix_kind:
        where += f" (inside a {key.suffix_kind})"
    lines = [f"This conversation is {where}.", f"Current time: {local} ({utc})."]
    if key.kind != "direct":
        lines.append("Several people may speak; each user line starts with the speaker's name.")
    return "\n".join(lines)


def conversation_turns(
    context: Context, request: StoredMessage, *, group: bool
) -> list[dict[str, str]]:
    """Context and request as alternating user/assistant turns, same-role neighbours merged."""
    turns: list[dict[str, str]] = []
    for entry in context.entries:
        _append(turns, entry.message.role, _render(entry.message, group))
    final = _render(request, group)
    if context.scheduled:
        final = _scheduled_block(context.scheduled) + "\n\n" + final
    if context.reply_to is not None:
        final = f"[replying to: {_quote(context.reply_to.text)}]\n" + final
    _append(turns, "user", final)
    if turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": "[earlier conversation]"})
    return turns


def _append(turns: list[dict[str, str]], role: str, text: str) -> None:
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"] += "\n\n" + text
    else:
        turns.append({"role": role, "content": text})


def _render(message: StoredMessage, group: bool) -> str:
    if message.role == "user":
        return f"[{message.sender_name or message.sender_id}]: {message.text}" if group else message.text
    text = message.text
    if message.origin == "scheduled":
        text = f"[scheduled message{f' from job {message.job_id}' if message.job_id else ''}]\n{text}"
    if message.actions:
        text += "\n[actions: " + "; ".join(message.actions) + "]"
    return text


def _scheduled_block(messages: Sequence[StoredMessage]) -> str:
    lines = ["[Scheduled messages you sent in this chat since the user's previous message:]"]
    for message in messages:
        when = datetime.fromtimestamp(message.created_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
        job = f" job {message.job_id}," if message.job_id else ""
        lines.append(f"---{job} {when}\n{message.text}")
    lines.append("[End of scheduled messages.]")
    return "\n".join(lines)


def _quote(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return "«" + (flat if len(flat) <= limit else flat[: limit - 1] + "…") + "»"
