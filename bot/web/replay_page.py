"""A turn replayed in the console: its context built again from the stored log and the config in
force (`bot.context.replay`, as `switchboard replay`), next to what the turn recorded, as a diff."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from bot.context.replay import ReplayResult, replay
from bot.context.replay_settings import changed_settings
from bot.context.turn_explained import speaker
from bot.core.errors import BotError
from bot.core.messages import StoredMessage
from bot.models.brain import AnthropicBrain
from bot.store.records import SessionSummary
from bot.store.seams import ReplayStore
from bot.web.guard import SESSION_KEY
from bot.web.rendering import Renderer
from bot.web.running import RunningDaemon


class ReplayPageStore(ReplayStore, Protocol):
    async def session(self, session_key: str) -> SessionSummary: ...


def diff_rows(result: ReplayResult, messages: dict[int, StoredMessage | None]) -> list[dict[str, Any]]:
    """Every message in either context, oldest first: in both, only recorded, or only rebuilt, with
    the reason each side gave it."""
    recorded = {int(e["id"]): str(e.get("reason", "")) for e in result.record.snapshot.get("entries", [])}
    rebuilt = {entry.message.id: str(entry.reason) for entry in result.rebuilt.entries}
    rows = []
    for message_id in sorted(recorded.keys() | rebuilt.keys()):
        message = messages.get(message_id)
        side = "both" if message_id in recorded and message_id in rebuilt else (
            "recorded" if message_id in recorded else "rebuilt")
        rows.append({"id": message_id, "side": side, "recorded": recorded.get(message_id),
                     "rebuilt": rebuilt.get(message_id), "stored": message is not None,
                     "who": speaker(message) if message else "", "text": message.text if message else ""})
    return rows


@dataclass(frozen=True, slots=True)
class ReplayPage:
    """GET /sessions/<key>/turns/<n>/replay: read-only (it stores nothing and calls no model)."""

    base: str
    store: ReplayPageStore
    daemon: RunningDaemon
    renderer: Renderer

    def routes(self, app: web.Application) -> None:
        app.router.add_get(f"{self.base}/sessions/{{key}}/turns/{{turn}}/replay", self.replay)

    async def replay(self, request: web.Request) -> web.Response:
        key, session = request.match_info["key"], request[SESSION_KEY]
        config = self.daemon.config
        try:
            number = int(request.match_info["turn"])
            await self.store.session(key)
            # No key: replay never calls a model (triage's answer comes from the snapshot).
            result = await replay(config, self.store, AnthropicBrain(config.anthropic, None), key, number)
        except ValueError:
            return self.renderer.page("missing.html", session, status=404,
                                      error="a turn is a number: 1 for the first, -1 (or 0) for the newest")
        except BotError as exc:
            return self.renderer.page("missing.html", session, status=404, error=str(exc))
        messages: dict[int, StoredMessage | None] = {e.message.id: e.message for e in result.rebuilt.entries}
        for message_id in result.recorded_ids:
            if message_id not in messages:
                messages[message_id] = await self.store.message_by_id(message_id)
        snap = result.record.snapshot
        return self.renderer.page(
            "replay.html", session, key=key, result=result, rows=diff_rows(result, messages),
            gone=[i for i in result.recorded_ids if messages.get(i) is None],
            settings=changed_settings(snap.get("settings"), config.for_session(key)),
            failed=snap.get("error") if snap.get("status") == "failed" else None,
        )
