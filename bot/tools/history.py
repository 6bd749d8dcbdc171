"""`search_history`: what the asking person said (and was answered) in this chat, by words and, with
the semantic extra, by meaning; in their private chat, with `search_scope = "user"`, also their own
messages elsewhere. What it may read is `bot.tools.scope`'s to say; never another person's words."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from bot.config import Config
from bot.core.session_key import parse
from bot.ranking.embedding import Embedder
from bot.store.seams import HistoryReads
from bot.tools.base import FunctionTool, ToolContext, ToolResult
from bot.tools.scope import read_scope

MATCH_CHARS = 300
FUSION_K = 60  # reciprocal rank fusion, as context candidates use


def history_tool(
    store: HistoryReads, config: Callable[[], Config], embedder: Embedder | None
) -> FunctionTool:
    async def search(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        query = str(arguments["query"]).strip()
        if not query:
            return ToolResult.error("the query is empty")
        zone = ZoneInfo(context.timezone)
        try:
            since = _moment(arguments.get("since"), zone, end=False)
            until = _moment(arguments.get("until"), zone, end=True)
        except ValueError as exc:
            return ToolResult.error(str(exc))
        settings = config().tools
        limit = settings.search_results
        scope = read_scope(context, settings.search_scope)
        elsewhere = await store.user_sessions(context.session_key.agent_id, context.chat.provider,
                                              context.user_id) if scope.elsewhere else []
        sessions = [scope.session_key, *(key for key in elsewhere if key != scope.session_key)]
        ranked = await store.lexical_history(sessions, query, limit=limit * 4)
        scores = {message_id: 1 / (FUSION_K + rank) for rank, (message_id, _) in enumerate(ranked, 1)}
        if embedder is not None:
            nearest = await _semantic(store, embedder, sessions, query, limit * 4)
            for rank, message_id in enumerate(nearest, 1):
                scores[message_id] = scores.get(message_id, 0.0) + 1 / (FUSION_K + rank)
        found = await store.owned_messages(list(scores), scope.session_key, scope.user_id,
                                           private=scope.private, elsewhere=sessions[1:],
                                           since=since, until=until)
        found.sort(key=lambda m: (-scores[m.id], -m.id))
        found = sorted(found[:limit], key=lambda m: m.id)
        if not found:
            return ToolResult("No matching messages from this user.", f"no matches for {query!r}")
        lines = []
        for message in found:
            when = datetime.fromtimestamp(message.created_at, zone).strftime("%Y-%m-%d %H:%M")
            key = parse(message.session_key)
            where = "this chat" if message.session_key == str(context.session_key) else \
                f"{key.provider} {'private chat' if key.is_direct else key.kind + ' ' + key.peer}"
            who = "user" if message.role == "user" else "you"
            text = " ".join(message.text.split())
            text = text if len(text) <= MATCH_CHARS else text[: MATCH_CHARS - 1] + "…"
            lines.append(f"[{when}, {where}] {who}: {text}")
        return ToolResult("\n".join(lines), f"{len(found)} match{'es' if len(found) != 1 else ''}")

    return FunctionTool(
        "search_history",
        "Search what the user you are talking to wrote earlier in this chat (and what you "
        "answered them), by words and meaning; in a private chat, if the admin allows it, also "
        "their own messages in their other chats with you. Dates are in the user's timezone "
        "(YYYY-MM-DD or YYYY-MM-DDTHH:MM).",
        {"type": "object", "properties": {
            "query": {"type": "string", "description": "what to look for"},
            "since": {"type": "string", "description": "only messages from this date or time on"},
            "until": {"type": "string", "description": "only messages up to this date (inclusive) or time"},
        }, "required": ["query"], "additionalProperties": False},
        search,
    )


async def _semantic(
    store: HistoryReads, embedder: Embedder, sessions: list[str], query: str, limit: int
) -> list[int]:
    vector = (await asyncio.to_thread(embedder.encode, [query]))[0]
    matches: list[tuple[int, float]] = []
    for session in sessions:
        matches += await store.semantic_matches(session, vector, model=embedder.model_id,
                                                before_id=2**62, limit=limit)
    return [message_id for message_id, _ in sorted(matches, key=lambda m: (-m[1], -m[0]))[:limit]]


def _moment(value: Any, zone: ZoneInfo, *, end: bool) -> float | None:
    """Epoch seconds of a date or date-time in the user's zone; a bare `until` date takes the day."""
    if value is None or value == "":
        return None
    text = str(value).strip()
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a date (YYYY-MM-DD) or time (YYYY-MM-DDTHH:MM)") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=zone)
    if end and len(text) == 10:
        parsed += timedelta(days=1)
    return parsed.timestamp()
