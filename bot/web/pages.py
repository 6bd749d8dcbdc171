"""The console's session pages: the sessions, one session's history, a turn explained.

Each page reads what the matching CLI command reads, through the same functions: a turn is
`bot.context.turn_explained`'s record (`switchboard context --json`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from bot.config.sections import ModelPrice
from bot.context.turn_explained import context_record, ordered_counts, read_turn, speaker
from bot.core.errors import BotError
from bot.core.media import with_labels
from bot.core.messages import StoredMessage
from bot.core.session_key import SessionKey, parse
from bot.store.records import SessionSummary, SnapshotRecord
from bot.web.guard import SESSION_KEY
from bot.web.rendering import Renderer

PAGE = 50  # messages on one page of a session's history
FOUND = 50  # search hits shown


class PageStore(Protocol):
    """What the pages read: sessions, messages, snapshots (the admin commands' reads)."""

    async def list_sessions(self, agent_id: str | None = None) -> list[SessionSummary]: ...
    async def session(self, session_key: str) -> SessionSummary: ...
    async def history(
        self, session_key: str, limit: int, *, before_id: int | None = None
    ) -> list[StoredMessage]: ...
    async def lexical_history(
        self, sessions: Sequence[str], query: str, *, limit: int
    ) -> list[tuple[int, float]]: ...
    async def message_by_id(self, message_id: int) -> StoredMessage | None: ...
    async def messages_after(
        self, session_keys: Sequence[str], after_id: int, limit: int
    ) -> list[StoredMessage]: ...
    async def snapshot_count(self, session_key: str) -> int: ...
    async def snapshots(self, session_key: str) -> list[SnapshotRecord]: ...
    async def snapshot_of_turn(self, session_key: str, turn: int) -> list[SnapshotRecord]: ...


def _key(text: str) -> SessionKey | None:
    try:
        return parse(text)
    except ValueError:
        return None


def message_row(message: StoredMessage) -> dict[str, Any]:
    """A stored message as a history row: who, when, what, and its marks (scheduled, tools, unanswered)."""
    return {"id": message.id, "at": message.created_at, "who": speaker(message), "role": message.role,
            "scheduled": message.origin == "scheduled", "job_id": message.job_id,
            "actions": list(message.actions), "unanswered": message.unanswered,
            "text": with_labels(message.text, message.media), "session": message.session_key}


def call_cost(call: Mapping[str, Any] | None, prices: Mapping[str, ModelPrice]) -> float | None:
    """The reply call's estimated cost from its tokens and the model's price (None: no price)."""
    price = prices.get(str((call or {}).get("model")))
    if call is None or price is None:
        return None
    return price.cost(int(call.get("tokens_in") or 0), int(call.get("tokens_out") or 0),
                      int(call.get("cache_write_tokens") or 0), int(call.get("cache_read_tokens") or 0))


@dataclass(frozen=True, slots=True)
class Pages:
    """The read-only pages; every handler runs behind the door (a session is there)."""

    base: str
    store: PageStore
    prices: Callable[[], Mapping[str, ModelPrice]]
    renderer: Renderer

    def routes(self, app: web.Application) -> None:
        app.router.add_get(f"{self.base}/sessions", self.sessions)
        app.router.add_get(f"{self.base}/sessions/{{key}}", self.session_history)
        app.router.add_get(f"{self.base}/sessions/{{key}}/turns/{{turn}}", self.turn)

    def _page(self, request: web.Request, template: str, *, status: int = 200, **values: Any) -> web.Response:
        return self.renderer.page(template, request[SESSION_KEY], status=status, **values)

    def _missing(self, request: web.Request, error: str) -> web.Response:
        return self._page(request, "missing.html", status=404, error=error)

    async def sessions(self, request: web.Request) -> web.Response:
        agent = request.query.get("agent", "").strip()
        channel = request.query.get("channel", "").strip()
        query = request.query.get("q", "").strip()
        every = await self.store.list_sessions()
        keys = {s.key: _key(s.key) for s in every}
        agents = sorted({k.agent_id for k in keys.values() if k is not None})
        channels = sorted({k.provider for k in keys.values() if k is not None})
        shown = [s for s in every if (parsed := keys[s.key]) is not None
                 and (not agent or parsed.agent_id == agent) and (not channel or parsed.provider == channel)]
        found: list[dict[str, Any]] = []
        if query:
            hits = await self.store.lexical_history([s.key for s in shown], query, limit=FOUND)
            for message_id, _ in hits:
                message = await self.store.message_by_id(message_id)
                if message is not None:
                    found.append(message_row(message))
            named = [s for s in shown if query.lower() in s.key.lower()]
            shown = named or [s for s in shown if s.key in {row["session"] for row in found}]
        return self._page(request, "sessions.html", sessions=shown, agents=agents, channels=channels,
                          agent=agent, channel=channel, query=query, found=found)

    async def session_history(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        before_text = request.query.get("before", "")
        before = int(before_text) if before_text.isdigit() else None
        try:
            summary = await self.store.session(key)
        except BotError as exc:
            return self._missing(request, str(exc))
        messages = await self.store.history(key, PAGE, before_id=before)
        turns = await self.store.snapshot_count(key)
        older = messages[0].id if len(messages) == PAGE else None
        return self._page(request, "session.html", summary=summary, rows=[message_row(m) for m in messages],
                          older=older, paged=before is not None, turns=turns)

    async def turn(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        try:
            number = int(request.match_info["turn"])
            await self.store.session(key)
            read = await read_turn(self.store, key, number)
        except ValueError:
            return self._missing(request, "a turn is a number: 1 for the first, -1 (or 0) for the newest")
        except BotError as exc:
            return self._missing(request, str(exc))
        record = context_record(key, read.record, read.total, read.messages)
        snap = record["snapshot"]
        call = record["reply_call"] or {}
        return self._page(
            request, "turn.html", turn=record, call=call, cost=call_cost(call, self.prices()),
            counts=ordered_counts(snap.get("counts") or {}), triage=snap.get("triage") or {},
            tokens=snap.get("tokens") or {}, tools=call.get("tools") or {},
        )
