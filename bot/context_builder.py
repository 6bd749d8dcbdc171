"""Builds one turn's context: the store fetches, the pure stages decide, the fast model triages."""

from __future__ import annotations

import time

from bot.brain import Brain
from bot.config import Config, resolve_history_limit
from bot.context import (
    Context,
    ContextEntry,
    TriageReport,
    apply_recency,
    input_hash,
    limit_history_turns,
    merge_entries,
    split_recent,
    tag,
)
from bot.messages import ChatRef, StoredMessage
from bot.session_key import SessionKey
from bot.store import Store
from bot.triage import triage

_NO_UPPER_BOUND = 2**63 - 1  # SQLite's largest rowid


class ContextBuilder:
    """Selects the slice of a session's history that one reply is built from."""

    def __init__(self, config: Config, store: Store, brain: Brain) -> None:
        self._config = config
        self._conv = config.conversation
        self._store = store
        self._brain = brain
        self._config_fingerprint = self._conv.model_dump()

    async def build(
        self, key: SessionKey, request: StoredMessage, chat: ChatRef | None = None
    ) -> Context:
        conv = self._conv
        session = str(key)
        limit = resolve_history_limit(self._config, key)
        reply_to = await self._reply_target(request, chat)
        if not conv.enabled:
            entries = tag([reply_to], "reply_to") if reply_to else []
            return Context(entries, [], reply_to, TriageReport("disabled"), limit,
                           {"fetched": 0, "included": len(entries)})

        fetched = await self._history(session, request)
        scheduled = await self._scheduled_block(session, request.id, reply_to)

        within_limit = limit_history_turns(fetched, limit)
        recent_enough = apply_recency(
            within_limit, now=time.time(), hours=conv.context_recency_hours,
            min_messages=conv.context_min_messages,
        )
        chosen, report = await self._select(recent_enough, request.text)
        if reply_to is not None:
            chosen = [ContextEntry(reply_to, "reply_to"), *chosen]
        entries = merge_entries(chosen, truncation=conv.context_truncation)
        counts = {
            "fetched": len(fetched),
            "within_history_limit": len(within_limit),
            "within_recency": len(recent_enough),
            "included": len(entries),
            "scheduled_block": len(scheduled),
        }
        digest = input_hash(self._config_fingerprint, limit, fetched, scheduled, reply_to)
        return Context(entries, scheduled, reply_to, report, limit, counts, digest)

    async def _history(self, session: str, request: StoredMessage) -> list[StoredMessage]:
        """The last `lookback_count` interactive messages as this turn sees them.

        A message queued behind earlier ones of its session was stored before the replies to
        them: those replies (not the user messages queued after it) belong to its history.
        """
        limit = self._conv.lookback_count
        # One read covers the usual case: nothing was stored after the request yet.
        newest = await self._store.recent_messages(
            session, before_id=_NO_UPPER_BOUND, limit=limit + 1
        )
        later = [m for m in newest if m.id > request.id]
        if not later:
            return [m for m in newest if m.id < request.id][-limit:]
        before = await self._store.recent_messages(session, before_id=request.id, limit=limit)
        answered = [m for m in later if m.role == "assistant"]
        return (before + answered)[-limit:]

    async def _select(
        self, messages: list[StoredMessage], request_text: str
    ) -> tuple[list[ContextEntry], TriageReport]:
        conv = self._conv
        if not conv.use_selection:
            return tag(messages, "all"), TriageReport("disabled")
        if len(messages) <= conv.skip_selection_threshold:
            return tag(messages, "all"), TriageReport("skipped")
        older, recent = split_recent(messages, conv.always_include_recent)
        if not older:
            return tag(recent, "recent"), TriageReport("skipped")
        completer = self._brain.fast_completer()
        if completer is None:
            return tag(older, "fail_open") + tag(recent, "recent"), TriageReport(
                "fail_open", candidates=len(older), error="no fast completer (no API key)"
            )
        selected, report = await triage(
            completer, older, request_text,
            model=self._brain.model_for(conv.selection_model), timeout=conv.selection_timeout,
        )
        if selected is None:
            kept = tag(older, "fallback_all") if conv.selection_fallback == "all" else []
            return kept + tag(recent, "recent"), report
        return tag(selected, "triaged") + tag(recent, "recent"), report

    async def _reply_target(
        self, request: StoredMessage, chat: ChatRef | None
    ) -> StoredMessage | None:
        if request.reply_to_id is None or chat is None:
            return None
        target = await self._store.message_by_provider_id(chat, request.reply_to_id)
        # Only messages of this session, and never the request itself.
        if target is None or target.session_key != request.session_key or target.id >= request.id:
            return None
        return target

    async def _scheduled_block(
        self, session: str, request_id: int, reply_to: StoredMessage | None
    ) -> list[StoredMessage]:
        count = self._conv.previous_tasks_count
        if count <= 0:
            return []
        previous = await self._store.previous_user_message_id(session, request_id)
        block = await self._store.scheduled_between(
            session, after_id=previous, before_id=request_id, limit=count
        )
        return [m for m in block if reply_to is None or m.id != reply_to.id]
