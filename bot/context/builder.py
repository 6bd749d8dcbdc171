"""Builds one turn's context: the store fetches, the pure stages decide, the fast model triages."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from bot.config import Config, resolve_history_limit
from bot.config.provider_check import main_model
from bot.context.reads import Pin as Pin
from bot.context.reads import Seen, read_history, read_with_recall
from bot.context.recall_searches import NOTHING, Found, meaning, start_searches
from bot.context.recalled_turns import plan_reads, pool_of_recalled
from bot.context.second_round import second_round
from bot.context.semantic_recall import SemanticRecall
from bot.context.triage import LiveTriage, Triager
from bot.core.messages import ChatRef, StoredMessage
from bot.core.session_key import SessionKey
from bot.models.brain import Brain
from bot.ranking.budget import Budget, context_window, cost, fit_budget, message_cost
from bot.ranking.candidates import (
    SOURCES,
    Candidate,
    Source,
    chronological,
    fuse,
    lookback_turns,
    matched_turns,
)
from bot.ranking.stages import (
    Context,
    ContextEntry,
    Explanation,
    Reason,
    TriageReport,
    apply_recency,
    input_hash,
    limit_history_turns,
    merge_entries,
    split_recent,
    tag,
)
from bot.store.seams import ContextReads


async def _given(found: Found) -> Found:
    return found


class ContextBuilder:
    """Selects the slice of a session's history that one reply is built from."""

    def __init__(
        self, config: Config, store: ContextReads, brain: Brain, *, triager: Triager | None = None,
        semantic: SemanticRecall | None = None,
    ) -> None:
        self._config = config
        self._conv = conv = config.conversation
        self._store = store
        self._triager = triager if triager is not None else LiveTriage(brain, conv)
        # Semantic recall, when the embedder is installed and on; lexical recall works without it.
        self._semantic = semantic
        model, known = main_model(config, brain.model_for("main"))
        window = context_window(model, conv.context_window or known)
        self.budget = Budget(window, conv.reserve_tokens, conv.history_share)
        self._config_fingerprint = {**conv.model_dump(), "window": window}
        # Beside semantic recall the thesaurus' neighbours find nothing more (the static table's
        # content-words query reaches what they do) or crowd out better matches (MiniLM's), and
        # cost the build a term per neighbour (issue 38: measured): words alone use them.
        self._expansions = 0 if semantic is not None else conv.recall_expansions

    async def build(
        self, key: SessionKey, request: StoredMessage, chat: ChatRef | None = None,
        *, pin: Pin | None = None,
    ) -> Context:
        conv = self._conv
        session = str(key)
        now = pin.now if pin is not None else time.time()
        limit = resolve_history_limit(self._config, key)
        if not conv.enabled:
            reply_to = await self._reply_target(request, chat)
            entries = tag([reply_to], "reply_to") if reply_to else []
            return Context(entries, [], reply_to, TriageReport("disabled"), limit,
                           {"fetched": 0, "included": len(entries)},
                           as_of=pin.as_of if pin else request.id, built_at=now, chat=chat)

        # A history limit caps what the model may see: no summary of older turns, no recall.
        # Reads that do not depend on each other go to SQLite together: its thread runs them back
        # to back instead of waiting for this loop between them. The history is read without the
        # compaction's bound and cut to it after (the same messages: the newest after a point are
        # the newest overall, cut at that point).
        recall = limit is None and conv.use_selection
        semantic = self._semantic if conv.semantic_count > 0 else None
        reads: Awaitable[tuple[Seen, Found]]
        found = NOTHING
        if recall and semantic is None:
            reads = self._read_with_recall(session, request, pin)  # one hand-off for both
        else:
            history: Awaitable[Seen] = read_history(self._store, conv, session, request, pin,
                                                    compaction=limit is None)
            if recall and semantic is not None:
                history = asyncio.ensure_future(history)  # SQLite reads it first
                found = start_searches(self._store, semantic, conv, session, request,
                                       expand=self._expansions)
            reads = asyncio.gather(history, _given(found))
        try:
            return await self._built(request, chat, pin, reads, limit=limit, now=now)
        finally:
            found.abandon()

    async def _built(
        self, request: StoredMessage, chat: ChatRef | None, pin: Pin | None,
        reads: Awaitable[tuple[Seen, Found]], *, limit: int | None, now: float,
    ) -> Context:
        """The build once its reads are under way: what goes in, within the budget."""
        conv = self._conv
        if request.reply_to_id is None or chat is None:  # no reply target to read beside them
            ((compaction, scheduled, fetched, as_of), found), reply_to = await reads, None
        else:
            ((compaction, scheduled, fetched, as_of), found), reply_to = await asyncio.gather(
                reads, self._reply_target(request, chat))
        if reply_to is not None:
            scheduled = [m for m in scheduled if m.id != reply_to.id]
        read = len(fetched)
        if compaction is not None:
            fetched = [m for m in fetched if m.id >= compaction.first_kept_message_id]

        within_limit = limit_history_turns(fetched, limit)
        recent_enough = apply_recency(
            within_limit, now=now, hours=conv.context_recency_hours,
            min_messages=conv.context_min_messages,
        )
        # Fewer messages read than the window holds and none of them cut: the session has nothing
        # older than what selection sees (the window reads back to the /reset floor).
        whole = read < conv.lookback_count and len(recent_enough) == read
        summary = compaction.summary if compaction else None
        fixed = message_cost(request, full_media=True) + sum(message_cost(m) for m in scheduled)
        if summary:
            fixed += cost(summary)
        room = self.budget.history_tokens - fixed - (
            message_cost(reply_to, full_media=True) if reply_to else 0)
        chosen, report, pool, picked = await self._select(recent_enough, request, found, room=room,
                                                          whole=whole)
        triaged = [entry.message.id for entry in chosen if entry.reason == "triaged"]
        if reply_to is not None:
            chosen = [ContextEntry(reply_to, "reply_to"), *chosen]
        merged = merge_entries(chosen, truncation=conv.context_truncation)
        fitted = fit_budget(
            merged, limit=self.budget.history_tokens, fixed=fixed,
            protected={reply_to.id} if reply_to else (),
        )
        recalled = [m.id for c in pool if "lookback" not in c.hits for m in c.messages]
        counts = {
            "fetched": len(fetched),
            "within_history_limit": len(within_limit),
            "within_recency": len(recent_enough),
            "candidates": len(pool),
            **{f"found_{name}": sum(1 for c in pool if name in c.hits) for name in SOURCES},
            "recalled": len(recalled),
            "trimmed": len(fitted.trimmed),
            "included": len(fitted.kept),
            "scheduled_block": len(scheduled),
        }
        compaction_id = compaction.id if compaction else None
        explanation = self._explanation(pool, picked, limit, fetched, scheduled, reply_to, compaction_id)
        return Context(
            fitted.kept, scheduled, reply_to, report, limit, counts, explanation,
            summary=summary, compaction_id=compaction_id,
            trimmed=fitted.trimmed, recalled=recalled, triaged=triaged,
            token_estimate=fitted.used, token_budget=self.budget.history_tokens,
            as_of=as_of, built_at=now, chat=chat,
        )

    def _explanation(
        self, pool: Sequence[Candidate], picked: set[int], limit: int | None,
        fetched: Sequence[StoredMessage], scheduled: Sequence[StoredMessage],
        reply_to: StoredMessage | None, compaction_id: int | None,
    ) -> Explanation:
        """The pool's records and the hash of what selection depended on, worked out when the
        snapshot is stored: nothing here changes what the model is sent."""
        config, scheduled = self._config_fingerprint, tuple(scheduled)

        def explain() -> tuple[str, list[dict[str, Any]]]:
            records = [candidate.record(candidate.id in picked) for candidate in pool]
            digest = input_hash(config, limit, fetched, scheduled, reply_to, candidates=records,
                                compaction_id=compaction_id)
            return digest, records

        return Explanation(later=explain)

    async def _read_with_recall(
        self, session: str, request: StoredMessage, pin: Pin | None
    ) -> tuple[Seen, Found]:
        """The history's reads and lexical recall (the only recall here) together."""
        seen, (lexical, turns) = await read_with_recall(self._store, self._conv, session, request, pin)
        return seen, Found(lexical, [], turns)

    def _order_matters(
        self, older_window: Sequence[StoredMessage], kept: Sequence[ContextEntry], room: int
    ) -> bool:
        """Whether the rank of the window's own turns can change what goes in: when the pool or
        the ranked fallback cannot hold them all (else triage reads them in log order, and the
        fallback keeps them all)."""
        conv = self._conv
        turns = len(lookback_turns(older_window))
        if turns > conv.triage_max_candidates:
            return True
        if conv.selection_fallback != "ranked":
            return False
        room = self._fallback_room(room - sum(message_cost(entry.message) for entry in kept))
        return turns > conv.ranked_fallback_turns or sum(message_cost(m) for m in older_window) > room

    def _fallback_room(self, room: int) -> int:
        """What the ranked fallback may spend: the budget left, at most `ranked_fallback_tokens`."""
        cap = self._conv.ranked_fallback_tokens
        return min(room, cap) if cap > 0 else room

    async def _pool(
        self, window: Sequence[StoredMessage], exclude: Sequence[StoredMessage], found: Found,
        semantic: list[tuple[int, float]],
    ) -> list[Candidate]:
        """The best `triage_max_candidates` older turns: the window's, and those the request's
        words and meaning found anywhere in the session (none under a history limit)."""
        looked_back = lookback_turns(window)
        # Replies at the window's start whose question is older: whole when a match found them.
        lead = looked_back[-1][0].id if looked_back and looked_back[-1][0].role == "assistant" else None
        excluded = [message.id for message in exclude]
        limit = self._conv.triage_max_candidates
        matches: dict[Source, list[tuple[int, float]]] = {"lexical": found.lexical, "semantic": semantic}

        def rank(turns: Mapping[int, Sequence[StoredMessage]]) -> list[Candidate]:
            lookback = looked_back
            if lead is not None:
                whole = next((turn for turn in turns.values() if turn and turn[0].id <= lead <= turn[-1].id
                              and any(m.id == lead for m in turn)), None)
                if whole is not None:
                    lookback = [*looked_back[:-1], tuple(whole)]
            return fuse(
                {"lookback": [(turn, 0.0) for turn in lookback],
                 "lexical": matched_turns(matches["lexical"], turns),
                 "semantic": matched_turns(matches["semantic"], turns)},
                exclude=excluded, limit=limit,
            )

        if found.words is None or found.planner is None:
            return rank(found.turns)
        kept = set(excluded)
        edge = min(excluded, default=None)
        lookback = [turn[0].id for turn in looked_back if any(m.id not in kept for m in turn)]
        found.planner.set_result(lambda lexical, starts: plan_reads(
            {"lexical": lexical, "semantic": semantic}, starts, limit=limit, lookback=lookback,
            edge=edge, lead=lead))
        matches["lexical"], starts, plan, read = await found.words
        return await pool_of_recalled(
            self._store, found.session, matches, starts, rank, limit=limit, lookback=lookback, edge=edge,
            lead=lead, ahead=(plan, read))

    async def _select(
        self, messages: list[StoredMessage], request: StoredMessage, found: Found, *, room: int,
        whole: bool,
    ) -> tuple[list[ContextEntry], TriageReport, list[Candidate], set[int]]:
        """What goes in beside the request, why, the candidate pool and which candidates went in.

        `room` is the history budget left once the request and fixed blocks are counted: the
        ranked fallback keeps the best candidates that fit in it. `whole`: `messages` are all the
        session holds (above its floor, before the request).
        """
        conv = self._conv
        if not conv.use_selection:  # the lookback as it is: nothing to vet recalled turns
            return tag(messages, "all"), TriageReport("disabled"), [], set()
        older_window: list[StoredMessage] = []
        if len(messages) <= conv.skip_selection_threshold:
            kept = tag(messages, "all")
        else:
            older_window, recent = split_recent(messages, conv.always_include_recent)
            kept = tag(recent, "recent")
        in_context = [entry.message for entry in kept]
        # With nothing older than the window, meaning could only rank the window's own turns,
        # which all go to triage anyway: the request is not encoded for that (a chat's first
        # messages, and every turn while it is shorter than the window).
        wanted = not whole or self._order_matters(older_window, kept, room)
        semantic = await meaning(found, self._semantic, request, wanted=wanted,
                                 limit=self._conv.semantic_count)
        pool = await self._pool(older_window, in_context, found, semantic)
        if not pool:
            return kept, TriageReport("skipped"), pool, set()
        if not self._triager.available:
            report = TriageReport("fail_open", candidates=len(pool),
                                  error="no fast completer (no API key)")
        else:
            selected, report = await self._triager(chronological(pool), request.text)
            if selected is not None:
                picked = {message.id for message in selected}
                chosen = {c.id for c in pool if any(m.id in picked for m in c.messages)}
                # Semantic recall ran (none under a history limit): the picks' vectors are searched.
                if conv.triage_second_round and found.meaning is not None and self._semantic:
                    selected, report, second = await second_round(
                        self._triager, self._semantic, self._store, request, session=found.session,
                        pool=pool, chosen=chosen, selected=selected, report=report,
                        exclude=(m.id for m in in_context), size=conv.triage_second_round)
                    picked = {message.id for message in selected}
                    chosen |= {c.id for c in second if any(m.id in picked for m in c.messages)}
                    pool = [*pool, *second]
                return tag(selected, "triaged") + kept, report, pool, chosen
        room -= sum(message_cost(entry.message) for entry in kept)
        fallback, reason = self._fallback(pool, room)
        return tag(chronological(fallback), reason) + kept, report, pool, {c.id for c in fallback}

    def _fallback(self, pool: Sequence[Candidate], room: int) -> tuple[list[Candidate], Reason]:
        """The candidates kept when triage cannot choose, per `selection_fallback`."""
        mode = self._conv.selection_fallback
        if mode == "all":
            return list(pool), "fallback_all"
        if mode == "recent":
            return [], "ranked"
        # Best first, each that fits the tokens left (a long turn is passed over for shorter ones
        # ranked after it), up to the count.
        kept: list[Candidate] = []
        room = self._fallback_room(room)
        for candidate in pool:
            if len(kept) == self._conv.ranked_fallback_turns:
                break
            cost = sum(message_cost(message) for message in candidate.messages)
            if cost <= room:
                kept.append(candidate)
                room -= cost
        return kept, "ranked"

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
