"""Replay: one recorded turn's context built again from the stored log and config, and compared.

Triage is not asked again: the fast model's answer is not reproducible, so replay answers it with
the decision the snapshot recorded (the ids picked, or the failure). Everything else — the history
read (up to the log position the turn saw), recency (at the recorded time), the compaction summary
the turn used, recall, the reply-to target and the token budget — runs as it did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.config import Config
from bot.context.builder import ContextBuilder, Pin
from bot.context.replay_settings import changed_settings
from bot.context.semantic_recall import SemanticRecall
from bot.context.turn_choice import read_chosen_turn
from bot.core.errors import BotError
from bot.core.messages import ChatRef, StoredMessage
from bot.core.session_key import parse
from bot.models.brain import Brain
from bot.ranking.embedding import load_embedder
from bot.ranking.stages import Context, TriageReport
from bot.store import SnapshotRecord
from bot.store.seams import ReplayStore


class RecordedTriage:
    """A triager that gives the answer a snapshot recorded instead of asking the model."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        triage = snapshot.get("triage") or {}
        self._outcome = str(triage.get("outcome", "skipped"))
        self._triage = triage
        picked = snapshot.get("triaged")
        if picked is None:  # snapshots from before `triaged` was recorded
            picked = [e["id"] for e in snapshot.get("entries", []) if e.get("reason") == "triaged"]
        self._picked = {int(message_id) for message_id in picked}

    @property
    def available(self) -> bool:
        return self._outcome != "fail_open"

    async def __call__(
        self, older: Sequence[StoredMessage], request_text: str
    ) -> tuple[list[StoredMessage] | None, TriageReport]:
        report = TriageReport(
            self._outcome,  # type: ignore[arg-type]
            candidates=int(self._triage.get("candidates", 0)),
            selected=int(self._triage.get("selected", 0)),
            error=self._triage.get("error"),
        )
        if self._outcome != "selected":
            return None, report
        return [message for message in older if message.id in self._picked], report


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """A recorded turn next to its rebuilt context."""

    record: SnapshotRecord
    rebuilt: Context
    # `[conversation]` and the other selection settings differ now from the recorded ones
    settings_changed: bool = False

    @property
    def recorded_ids(self) -> list[int]:
        return [int(entry["id"]) for entry in self.record.snapshot.get("entries", [])]

    @property
    def rebuilt_ids(self) -> list[int]:
        return [entry.message.id for entry in self.rebuilt.entries]

    @property
    def only_recorded(self) -> list[int]:
        """Messages the turn had in its context that the rebuild left out."""
        rebuilt = set(self.rebuilt_ids)
        return [i for i in self.recorded_ids if i not in rebuilt]

    @property
    def only_rebuilt(self) -> list[int]:
        """Messages the rebuild put in that the turn did not have."""
        recorded = set(self.recorded_ids)
        return [i for i in self.rebuilt_ids if i not in recorded]

    @property
    def matches(self) -> bool:
        if self.recorded_ids != self.rebuilt_ids:
            return False
        # The hash covers the candidates' scores, rounded to 6 places. Computed in another float
        # order (a numpy or BLAS upgrade, numpy's float32 sums against the int8 search's exact
        # ones) a score can move in its last place: the same picks with scores that close match.
        return self.record.hash == self.rebuilt.input_hash or (
            not self.settings_changed and same_candidates(
                self.record.snapshot.get("candidates", []), self.rebuilt.candidates))


SCORE_TOLERANCE = 2e-6  # a rounded score's last place, and a little for the rounding itself


def same_candidates(recorded: list[dict[str, Any]], rebuilt: list[dict[str, Any]]) -> bool:
    """The same candidates in the same order, ranks, sources and picks, scores within tolerance."""

    def shape(candidate: dict[str, Any]) -> tuple[Any, ...]:
        sources = candidate.get("sources", {})
        return (candidate.get("ids"), candidate.get("rank"), candidate.get("chosen"),
                sorted((name, hit.get("rank")) for name, hit in sources.items()))

    def scores(candidate: dict[str, Any]) -> list[float]:
        sources = candidate.get("sources", {})
        return [float(candidate.get("score", 0.0))] + [
            float(sources[name].get("score", 0.0)) for name in sorted(sources)]

    if len(recorded) != len(rebuilt) or [shape(c) for c in recorded] != [shape(c) for c in rebuilt]:
        return False
    return all(abs(a - b) <= SCORE_TOLERANCE
               for old, new in zip(recorded, rebuilt, strict=True)
               for a, b in zip(scores(old), scores(new), strict=True))


async def replay(config: Config, store: ReplayStore, brain: Brain, session: str, turn: int) -> ReplayResult:
    """Build turn `turn` of `session` again and pair it with what was recorded."""
    key = parse(session)
    config = config.for_session(str(key))  # the agent's own limits and models built the turn
    record, _ = await read_chosen_turn(store, str(key), turn)
    snap = record.snapshot
    request = await store.message_by_id(record.request_message_id)
    if request is None:
        raise BotError(f"turn {record.turn}: request message #{record.request_message_id} is gone "
                       "or unreadable")
    chat_data = snap.get("chat")
    chat = ChatRef(chat_data["provider"], chat_data["chat_id"], chat_data.get("thread_id")) \
        if chat_data else None
    pin = Pin(
        as_of=int(snap.get("as_of") or record.request_message_id),
        now=float(snap.get("built_at") or record.created_at),
        compaction_id=snap.get("compaction"),
    )
    # Semantic candidates come from the stored vectors (the request's too): the model is loaded
    # only to know its id and to embed a request the turn did not, as the turn would have.
    embedder = await asyncio.to_thread(load_embedder, config)
    semantic = SemanticRecall(store, embedder) if embedder is not None else None
    builder = ContextBuilder(config, store, brain, triager=RecordedTriage(snap), semantic=semantic)
    rebuilt = await builder.build(key, request, chat, pin=pin)
    changed = bool(changed_settings(record.snapshot.get("settings"), config))
    return ReplayResult(record, rebuilt, settings_changed=changed)
