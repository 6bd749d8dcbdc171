"""Context quality: does the real ContextBuilder find the turns a question needs, and at what cost?

Usage: .venv/bin/python -m bench.context_quality [--conversations 20] [--seed 13] [--mix 10:6:4]
       [--configs triage,triage-lexical,ranked,lexical,everything] [--keep DIR]
       [--encoder minilm|static|distilled|onnx] [--onnx DIR] [--extended]

The labelled set of bench/labelled_set.py (generated, no network) goes turn by turn into a real
`Store` (one SQLite file, one session per conversation, `insert_message` with each turn's own time,
so the lexical index is the real one). At each question the embed backlog is filled
(`embed_backlog`, as a worker that keeps up would), the question is stored as the newest user
message, and every configuration builds its context for it with `ContextBuilder.build`; then the
agent's answer is stored and the conversation goes on. Per configuration: evidence recall (share
of the evidence turns' messages in `context.entries`, averaged over questions), questions with all
their evidence, context tokens (entries, summary and scheduled block) as a share of sending every
earlier message of the conversation, and build time (median and p99). The configurations take
turns in going first, so none always pays for what the others find cached. `--encoder` picks the
semantic configurations' encoder: `minilm` (the default, all-MiniLM-L6-v2 in numpy), `static`
(the shipped static table, `encoder = "static"`, bot/ranking/static_embedding.py), or a candidate of
bench/embedding_speed.py (`distilled`: model2vec's untrained recipe on MiniLM's weights; `onnx`:
onnxruntime on the int8 ONNX export in `--onnx DIR`), to
put each one's recall beside its speed. `--extended`: issue 38's set, with multi-hop and
inference questions too (bench/labelled_misses.py), in conversations of 300-700 turns over
2-4 months; the header then
calibrates it by plain bm25 and a plain cosine per kind of question, and recall is reported per
kind (single-hop, temporal, multi-turn story, multi-hop, inference) beside the triage prompt's
size. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent

from bench.instant_brain import InstantBrain  # noqa: E402
from bench.labelled_set import (  # noqa: E402
    MIX,
    WORDINGS,
    Conversation,
    Question,
    Turn,
    describe,
    fts5_by_kind,
    fts5_top,
    generate,
    semantic_top,
    word_reachable,
)
from bot.config import Config, parse_config  # noqa: E402
from bot.context.builder import ContextBuilder  # noqa: E402
from bot.context.triage import reply_head, said, triage_prompt  # noqa: E402
from bot.core.log import configure_logging  # noqa: E402
from bot.core.messages import ChatRef, StoredMessage  # noqa: E402
from bot.core.session_key import SessionKey  # noqa: E402
from bot.core.session_key import build as session_key  # noqa: E402
from bot.ranking.budget import estimate_tokens  # noqa: E402
from bot.ranking.stages import Context, TriageReport, group_turns  # noqa: E402
from bot.store import Store  # noqa: E402
from bot.store.messages import insert_message  # noqa: E402

if TYPE_CHECKING:
    from bot.ranking.embedding import Embedder

PROVIDER = "bench"
MEDIAN_TARGET_MS = 2.0
P99_TARGET_MS = 5.0
TOKEN_TARGET = 0.10


class PerfectTriage:
    """A fast model that picks exactly the evidence among the messages it is shown.

    It picks by message id, so a cut in what triage is shown cannot hurt it here, though it
    could hurt a real model: `shown_cut` counts the evidence messages it picked whose text the
    prompt showed cut short, by role (the person's words, the assistant's replies).
    """

    available = True

    def __init__(self) -> None:
        self.evidence: set[int] = set()
        self.calls = 0  # calls in the current build: 2 when triage's second round ran
        self.shown_cut: dict[str, list[int]] = {"user": [0, 0], "assistant": [0, 0]}

    async def __call__(
        self, older: Sequence[StoredMessage], request_text: str
    ) -> tuple[list[StoredMessage] | None, TriageReport]:
        self.calls += 1
        picked = [message for message in older if message.id in self.evidence]
        units = group_turns(older)
        for unit in units:
            for position, message in enumerate(unit):
                if message.id in self.evidence:
                    flat = " ".join(message.text.split())
                    opening = unit[0].text.split()
                    shown = reply_head(message.text, len(opening)) if position else said(opening)
                    tally = self.shown_cut["assistant" if position else "user"]
                    tally[0] += shown != flat
                    tally[1] += 1
        prompt = estimate_tokens(triage_prompt(units, request_text))  # what a real fast model reads
        return picked, TriageReport("selected", candidates=len(units), selected=len(picked),
                                    input_tokens=prompt)


class NoFastModel:
    """No fast model configured: the builder falls back to its own ranking."""

    available = False

    async def __call__(
        self, older: Sequence[StoredMessage], request_text: str
    ) -> tuple[list[StoredMessage] | None, TriageReport]:
        raise AssertionError("never called when unavailable")


@dataclass(frozen=True)
class Setup:
    """One configuration: its config sections, whether it has a fast model, and its targets."""

    name: str
    label: str
    conversation: dict[str, Any]
    semantic: bool
    triage: bool
    min_recall: float | None = None
    max_tokens: float | None = None
    timed: bool = True


SETUPS: dict[str, Setup] = {s.name: s for s in (
    Setup("triage", "shipped defaults, perfect triage", {}, semantic=True, triage=True,
          min_recall=0.92, max_tokens=TOKEN_TARGET),
    Setup("triage-lexical", "defaults without semantic, perfect triage", {}, semantic=False,
          triage=True),
    Setup("ranked", "local ranking alone (no fast model)", {}, semantic=True, triage=False,
          min_recall=0.85, max_tokens=TOKEN_TARGET),
    Setup("lexical", "lexical only (no fast model, no semantic)", {}, semantic=False, triage=False,
          min_recall=0.65),
    Setup("everything", "send-everything (every earlier message)",
          {"use_selection": False, "lookback_count": 1_000_000, "recall_count": 0,
           "semantic_count": 0}, semantic=False, triage=False, timed=False),
)}


@dataclass
class Tally:
    """What one configuration got, question by question."""

    recall: list[float] = field(default_factory=list)
    complete: list[bool] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    everything: list[int] = field(default_factory=list)
    build_ms: list[float] = field(default_factory=list)
    by_kind: dict[str, list[float]] = field(default_factory=dict)
    by_wording: dict[str, list[float]] = field(default_factory=dict)
    candidates: list[int] = field(default_factory=list)  # evidence messages among the candidates
    evidence: list[int] = field(default_factory=list)  # evidence messages per question
    misses: list[str] = field(default_factory=list)
    triage_tokens: list[int] = field(default_factory=list)  # the triage prompt's input tokens
    triage_units: list[int] = field(default_factory=list)  # turns shown to triage
    second_calls: list[bool] = field(default_factory=list)  # triage called twice (second round)
    # Per evidence turn in the pool: its question's kind, fused rank and each source's rank.
    ranks: list[tuple[str, int, dict[str, int]]] = field(default_factory=list)
    kept_ranks: list[int] = field(default_factory=list)  # fused ranks of the evidence turns kept

    def add(self, question: Question, found: float, tokens: int, everything: int, ms: float) -> None:
        self.recall.append(found)
        self.complete.append(found == 1.0)
        self.tokens.append(tokens)
        self.everything.append(everything)
        self.build_ms.append(ms)
        self.by_kind.setdefault(question.kind, []).append(found)
        self.by_wording.setdefault(question.wording, []).append(found)


# The kinds of question, as the report names them (the extended set's last two: issue 38).
KIND_NAMES = {"fact": "single-hop", "temporal": "temporal", "multi": "multi-turn story",
              "multihop": "multi-hop", "inference": "inference"}


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


def context_tokens(context: Context) -> int:
    total = sum(entry.message.token_estimate for entry in context.entries)
    total += sum(message.token_estimate for message in context.scheduled)
    if context.summary:
        total += estimate_tokens(context.summary)
    return total


def make_config(
    db: Path, setup: Setup, overrides: dict[str, Any] | None = None, encoder: str = "minilm"
) -> Config:
    """The setup's config; `overrides` ([conversation] keys from --set) apply to all but the
    send-everything reference."""
    conversation = {**(overrides or {}), **setup.conversation} if setup.timed else setup.conversation
    return parse_config(
        {"database": {"path": str(db)}, "conversation": conversation,
         "semantic": {"enabled": "auto" if setup.semantic else "off", "encoder": encoder}},
        "<bench>",
    )


# -- the run ------------------------------------------------------------------------------------


@dataclass
class Builder:
    setup: Setup
    builder: ContextBuilder
    triage: PerfectTriage | None


@dataclass
class Session:
    """One conversation as stored so far: message ids per turn and send-everything's tokens."""

    key: SessionKey
    chat: ChatRef
    ids: list[tuple[int, int]] = field(default_factory=list)  # per turn: (user message, reply)
    tokens: int = 0

    def add(self, user: StoredMessage, reply: StoredMessage) -> None:
        self.ids.append((user.id, reply.id))
        self.tokens += user.token_estimate + reply.token_estimate


class Run:
    """Every conversation into one store; every configuration's context at every question."""

    def __init__(self, store: Store, builders: list[Builder], embedder: Embedder | None) -> None:
        self.store = store
        self.builders = builders
        self.embedder = embedder
        self.tallies = {entry.setup.name: Tally() for entry in builders}
        self.asked = 0
        self.info: dict[str, Any] = {"embedded": 0, "embed_s": 0.0, "insert_s": 0.0,
                                     "encode_ms": [], "turns": 0}

    async def conversation(self, conversation: Conversation) -> None:
        peer = f"user{conversation.index}"
        session = Session(session_key("main", PROVIDER, "direct", peer), ChatRef(PROVIDER, peer))
        questions = {q.turn: q for q in conversation.questions}
        pending: list[Turn] = []
        for turn in conversation.turns:
            if turn.index not in questions:
                pending.append(turn)
                continue
            await self._store_turns(session, pending)
            pending = []
            await self._embed_backlog()
            request = await _store_request(self.store, str(session.key), turn, session.chat)
            if self.embedder is not None:
                # A worker that keeps up has embedded the request too; what embedding it inside the
                # build would cost is timed apart (below the table).
                started = time.perf_counter()
                await asyncio.to_thread(self.embedder.encode, [request.text])
                self.info["encode_ms"].append((time.perf_counter() - started) * 1000)
                await self._embed_backlog()
            await self._ask(session, questions[turn.index], request)
            session.add(request, await _store_reply(self.store, str(session.key), turn))
        await self._store_turns(session, pending)
        self.info["turns"] += len(conversation.turns)

    async def _ask(self, session: Session, question: Question, request: StoredMessage) -> None:
        evidence = {i for t in question.evidence for i in session.ids[t]}
        self.asked += 1
        shift = self.asked % len(self.builders)
        for entry in self.builders[shift:] + self.builders[:shift]:
            if entry.triage is not None:
                entry.triage.evidence = evidence
                entry.triage.calls = 0
            started = time.perf_counter()
            context = await entry.builder.build(session.key, request, session.chat)
            elapsed = (time.perf_counter() - started) * 1000
            present = {e.message.id for e in context.entries}
            found = len(evidence & present) / len(evidence)
            tally = self.tallies[entry.setup.name]
            tally.add(question, found, context_tokens(context), session.tokens, elapsed)
            if context.triage.outcome == "selected":
                tally.triage_tokens.append(context.triage.input_tokens)
                tally.triage_units.append(context.triage.candidates)
                tally.second_calls.append(entry.triage is not None and entry.triage.calls > 1)
            pool = {i for candidate in context.candidates for i in candidate["ids"]}
            tally.candidates.append(len(evidence & pool))
            for candidate in context.candidates:
                if evidence & set(candidate["ids"]):
                    tally.ranks.append((question.kind, candidate["rank"],
                                        {k: v["rank"] for k, v in candidate["sources"].items()}))
                    if candidate["chosen"]:
                        tally.kept_ranks.append(candidate["rank"])
            tally.evidence.append(len(evidence))
            if found < 1.0:
                tally.misses.append(f"{session.chat.chat_id} turn {question.turn} {question.kind} "
                                    f"{question.family}: {question.text!r}")

    async def _store_turns(self, session: Session, turns: Sequence[Turn]) -> None:
        started = time.perf_counter()
        for user, reply in await _insert(self.store, str(session.key), turns):
            session.add(user, reply)
        self.info["insert_s"] += time.perf_counter() - started

    async def _embed_backlog(self) -> None:
        from bot.context.embed_worker import embed_backlog

        if self.embedder is not None:
            started = time.perf_counter()
            self.info["embedded"] += await embed_backlog(self.store, self.embedder, batch_size=32)
            self.info["embed_s"] += time.perf_counter() - started


@dataclass(frozen=True)
class BenchEncoder:
    """A candidate encoder of bench/embedding_speed.py, as semantic recall calls an encoder."""

    model_id: str
    encode: Callable[[Sequence[str]], Any]


def candidate_encoder(name: str, onnx_dir: str | None) -> BenchEncoder:
    from bench import embedding_speed

    if name == "distilled":
        encode, _ = embedding_speed.static_runtime()
    else:
        if onnx_dir is None:
            raise SystemExit("--encoder onnx needs --onnx DIR")
        encode, _ = embedding_speed.onnx_runtime(Path(onnx_dir))
    return BenchEncoder(f"bench-{name}@1", encode)


async def run(
    conversations: Sequence[Conversation], setups: Sequence[Setup], db: Path,
    progress: Callable[[str], None], overrides: dict[str, Any] | None = None,
    encoder: str = "minilm", onnx_dir: str | None = None,
) -> tuple[dict[str, Tally], dict[str, Any]]:
    """Build the configurations over one store and run every conversation through them."""
    from bot.context.semantic_recall import SemanticRecall
    from bot.ranking.embedding import load_embedder

    brain = InstantBrain()
    calibration: dict[str, float] = {}
    async with Store.open(db) as store:
        embedder: Any = None
        if any(setup.semantic for setup in setups) and encoder in ("distilled", "onnx"):
            embedder = await asyncio.to_thread(candidate_encoder, encoder, onnx_dir)
        elif any(setup.semantic for setup in setups):
            probe = make_config(db, next(s for s in setups if s.semantic), encoder=encoder)
            embedder = await asyncio.to_thread(load_embedder, probe)
        if embedder is not None:
            calibration = await asyncio.to_thread(semantic_top, conversations, embedder.encode)
        builders: list[Builder] = []
        for setup in setups:
            triage: PerfectTriage | NoFastModel = PerfectTriage() if setup.triage else NoFastModel()
            semantic = SemanticRecall(store, embedder) if setup.semantic and embedder else None
            builder = ContextBuilder(make_config(db, setup, overrides), store, brain, triager=triage,
                                     semantic=semantic)
            builders.append(Builder(setup, builder, triage if isinstance(triage, PerfectTriage) else None))
        bench = Run(store, builders, embedder)
        bench.info["shown_cut"] = {entry.setup.name: entry.triage.shown_cut for entry in builders
                                   if entry.triage is not None}
        for conversation in conversations:
            await bench.conversation(conversation)
            progress(f"conversation {conversation.index + 1}/{len(conversations)} "
                     f"({len(conversation.turns)} turns, {len(conversation.questions)} questions)")
    bench.info["embedder"] = embedder.model_id if embedder is not None else None
    bench.info["semantic_top"] = calibration
    return bench.tallies, bench.info


async def _insert(
    store: Store, session: str, turns: Sequence[Turn]
) -> list[tuple[StoredMessage, StoredMessage]]:
    """Store turns as the daemon would (user message, then the agent's reply), in one transaction."""
    stored = []
    async with store._transaction():  # the store's own write path: one transaction per batch
        for turn in turns:
            user = await insert_message(store._conn, session_key=session, role="user",
                                        origin="interactive", text=turn.user, created_at=turn.at)
            reply = await insert_message(store._conn, session_key=session, role="assistant",
                                         origin="interactive", text=turn.reply,
                                         created_at=turn.reply_at)
            stored.append((user, reply))
    return stored


async def _store_request(store: Store, session: str, turn: Turn, chat: ChatRef) -> StoredMessage:
    async with store._transaction():
        return await insert_message(store._conn, session_key=session, role="user",
                                    origin="interactive", text=turn.user, created_at=turn.at,
                                    awaiting_reply=True, chat=chat)


async def _store_reply(store: Store, session: str, turn: Turn) -> StoredMessage:
    async with store._transaction():
        await store._conn.execute(
            "UPDATE messages SET awaiting_reply = 0 WHERE session_key = ? AND awaiting_reply = 1",
            (session,))
        return await insert_message(store._conn, session_key=session, role="assistant",
                                    origin="interactive", text=turn.reply, created_at=turn.reply_at)


# -- the report ---------------------------------------------------------------------------------


def verdict(setup: Setup, tally: Tally) -> str:
    recall = statistics.fmean(tally.recall)
    share = sum(tally.tokens) / sum(tally.everything)
    median, p99 = statistics.median(tally.build_ms), percentile(tally.build_ms, 0.99)
    missed = []
    if setup.min_recall is not None and recall < setup.min_recall:
        missed.append(f"recall < {setup.min_recall:.2f}")
    if setup.max_tokens is not None and share > setup.max_tokens:
        missed.append(f"tokens > {setup.max_tokens:.0%}")
    if setup.timed and (median > MEDIAN_TARGET_MS or p99 > P99_TARGET_MS):
        missed.append("build time")
    if missed:
        return "MISSED: " + ", ".join(missed)
    goals = []
    if setup.min_recall is not None:
        goals.append(f"recall >= {setup.min_recall:.2f}")
    if setup.max_tokens is not None:
        goals.append(f"tokens <= {setup.max_tokens:.0%}")
    if setup.timed:
        goals.append("build time")
    return "met (" + ", ".join(goals) + ")" if goals else "(reference)"


def print_report(setups: Sequence[Setup], tallies: dict[str, Tally], info: dict[str, Any]) -> None:
    rows = [("configuration", "evidence recall", "questions complete", "tokens % of all",
             "build median / p99 ms", "target")]
    for setup in setups:
        t = tallies[setup.name]
        share = sum(t.tokens) / sum(t.everything)
        rows.append((
            f"{setup.name}: {setup.label}", f"{statistics.fmean(t.recall):.3f}",
            f"{sum(t.complete)}/{len(t.complete)} ({sum(t.complete) / len(t.complete):.0%})",
            f"{share:.1%}",
            f"{statistics.median(t.build_ms):.2f} / {percentile(t.build_ms, 0.99):.2f}",
            verdict(setup, t),
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        print(" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            print("-+-".join("-" * width for width in widths))
    print()
    kinds = [kind for kind in KIND_NAMES if any(kind in tallies[s.name].by_kind for s in setups)]
    print("recall by question kind (" + " / ".join(KIND_NAMES[k] for k in kinds)
          + "); evidence messages that reached the candidate pool:")
    for setup in setups:
        t = tallies[setup.name]
        by_kind = " / ".join(f"{statistics.fmean(t.by_kind.get(k, [0.0])):.3f}" for k in kinds)
        pool = f"{sum(t.candidates)} of {sum(t.evidence)}" if setup.timed else ""
        print(f"  {setup.name:<15} {by_kind}   {pool}".rstrip())
    for setup in setups:
        t = tallies[setup.name]
        if t.triage_tokens:
            print(f"triage prompt ({setup.name}): {statistics.fmean(t.triage_units):.1f} turns, input "
                  f"tokens median {statistics.median(t.triage_tokens):.0f}, mean "
                  f"{statistics.fmean(t.triage_tokens):.0f}, p99 {percentile(t.triage_tokens, 0.99):.0f}"
                  + (f"; a second call (triage_second_round) in {statistics.fmean(t.second_calls):.0%} "
                     "of questions" if any(t.second_calls) else ""))
            cut = info.get("shown_cut", {}).get(setup.name)
            if cut:
                print(f"  evidence it was shown cut short (the perfect triage picks by id; a real "
                      f"model reads the cut): person's words {cut['user'][0]} of {cut['user'][1]}, "
                      f"replies {cut['assistant'][0]} of {cut['assistant'][1]}")
    print("recall by question wording (one anchor / one topical word / paraphrase):")
    for setup in setups:
        t = tallies[setup.name]
        wordings = " / ".join(f"{statistics.fmean(t.by_wording.get(w, [0.0])):.3f}"
                              for w in ("anchor", "topical", "paraphrase"))
        print(f"  {setup.name:<15} {wordings}")
    encode = info["encode_ms"]
    if encode:
        print(f"\nembedding one request (the build does it when the embed worker has not reached the "
              f"request yet; not in the build times above): median {statistics.median(encode):.2f} ms, "
              f"p99 {percentile(encode, 0.99):.2f} ms over {len(encode)} questions")


RANK_BUCKETS = (10, 20, 30, 40, 60, 100, 200, 10**9)


def print_ranks(setups: Sequence[Setup], tallies: dict[str, Tally]) -> None:
    """How the evidence turns that reached the pool ranked: fused, and in each source (with
    `--set triage_max_candidates=400` etc. this shows how far a wider pool would have to reach)."""
    def buckets(ranks: Sequence[int]) -> str:
        counts, low = [], 1
        for high in RANK_BUCKETS:
            counts.append(f"{low}-{high if high < 10**9 else ''}: {sum(low <= r <= high for r in ranks)}")
            low = high + 1
        return ", ".join(counts)

    for setup in setups:
        t = tallies[setup.name]
        if not t.ranks:
            continue
        print(f"\nevidence turns in {setup.name}'s pool by rank:")
        print(f"  fused: {buckets([rank for _, rank, _ in t.ranks])}")
        if not setup.triage:
            print(f"  kept by the ranked fallback, fused: {buckets(t.kept_ranks)}")
        for source in ("lookback", "lexical", "semantic"):
            print(f"  {source}: {buckets([s[source] for _, _, s in t.ranks if source in s])}")
        for kind in KIND_NAMES:
            mine = [rank for k, rank, _ in t.ranks if k == kind]
            if mine:
                print(f"  {KIND_NAMES[kind]} fused: {buckets(mine)}")


def commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "bot"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"
    return head + (" with uncommitted changes in bot/" if dirty else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--configs", default=",".join(SETUPS),
                        help=f"comma-separated, from: {', '.join(SETUPS)} (default all)")
    parser.add_argument("--keep", metavar="DIR", help="keep the database in DIR")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a [conversation] key for every configuration but send-everything, "
                             "e.g. --set semantic_count=40 (repeatable)")
    parser.add_argument("--encoder", choices=("minilm", "static", "distilled", "onnx"), default="minilm",
                        help="the sentence encoder of the semantic configurations (default: the "
                             "default all-MiniLM-L6-v2 in numpy; static: the shipped static table)")
    parser.add_argument("--onnx", metavar="DIR", help="with --encoder onnx: DIR holds model.onnx "
                        "and onnxruntime (see bench/embedding_speed.py)")
    parser.add_argument("--misses", action="store_true", help="list the questions each config missed")
    parser.add_argument("--ranks", action="store_true",
                        help="where the evidence that reached the pool ranked (fused and per source), "
                             "and which of it the ranked fallback kept")
    parser.add_argument("--extended", action="store_true",
                        help="issue 38's set: multi-hop and inference questions too, longer chats")
    parser.add_argument("--mix", default=":".join(str(MIX[w]) for w in WORDINGS),
                        help="anchored:topical:paraphrased questions in every block (default "
                             "%(default)s, calibrated; 9:5:6 asks more in other words)")
    args = parser.parse_args()
    try:
        mix = dict(zip(WORDINGS, (int(n) for n in args.mix.split(":")), strict=True))
    except ValueError:
        parser.error(f"--mix {args.mix}: expected three whole numbers, e.g. 10:6:4")
    if min(mix.values()) < 0 or sum(mix.values()) == 0:
        parser.error(f"--mix {args.mix}: expected counts of at least 0, not all 0")
    names = [name for name in args.configs.split(",") if name]
    unknown = [name for name in names if name not in SETUPS]
    if unknown:
        parser.error(f"unknown configuration {', '.join(unknown)}; choose from {', '.join(SETUPS)}")
    setups = [SETUPS[name] for name in names]
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set {item}: expected KEY=VALUE")
        overrides[key] = tomllib.loads(f"v = {value}")["v"] if value[:1] in "-0123456789[tf\"" else value
    configure_logging("WARNING", "console", [], stream=sys.stderr)

    print("$ " + shlex.join([".venv/bin/python", "-m", "bench.context_quality", *sys.argv[1:]]))
    print(f"commit {commit()}; load average {os.getloadavg()[0]:.2f}")
    conversations = generate(args.conversations, args.seed, mix, extended=args.extended)
    d = describe(conversations)
    asked = ", ".join(f"{d['questions_' + k]:.0f} {name}" for k, name in KIND_NAMES.items()
                      if d["questions_" + k])
    print(f"labelled set{' (extended, issue 38)' if args.extended else ''}: "
          f"{d['conversations']:.0f} conversations, {d['turns']:.0f} turns "
          f"({d['turns_min']:.0f}-{d['turns_max']:.0f} each, over {d['weeks_mean']:.1f} weeks on "
          f"average), {d['questions']:.0f} questions ({asked}) with "
          f"{d['evidence_turns']:.0f} evidence and {d['distractor_turns']:.0f} distractor turns")
    print(f"question wording: {d['wording_paraphrase']:.0%} paraphrase, {d['wording_anchor']:.0%} "
          f"one anchor (a name, number, title or distinctive noun), {d['wording_topical']:.0%} one "
          f"ordinary topical word; content words a question shares with its evidence: none "
          f"{d['shares_none']:.0%}, one {d['shares_one']:.0%}, two {d['shares_two']:.0%}")
    print(f"plain FTS5 bm25 over every turn finds {fts5_top(conversations):.1%} of the evidence in its "
          f"top 20 (the issue's judge, real chats: 65%); per kind: "
          + ", ".join(f"{KIND_NAMES[k]} {v:.0%}" for k, v in fts5_by_kind(conversations).items()
                      if k in KIND_NAMES))
    print("evidence holding one of its question's words (the ceiling of recall by the question's "
          "words alone, without a thesaurus): " + ", ".join(
              f"{KIND_NAMES.get(k, k)} {v:.1%}" for k, v in word_reachable(conversations).items()
              if k in KIND_NAMES or k == "all"))
    print(f"question's content words found in an evidence turn {d['overlap_evidence']:.1%} "
          f"(none at all in {d['evidence_zero_overlap']:.0%} of the turns), in a distractor turn "
          f"{d['overlap_distractor']:.1%}; distinct filler messages per conversation "
          f"{d['filler_distinct']:.1%}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sb-quality-") as tmp:
        folder = Path(args.keep) if args.keep else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        db = folder / "context-quality.db"
        for suffix in ("", "-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
        tallies, info = asyncio.run(run(
            conversations, setups, db, lambda line: print(f"  {line}", file=sys.stderr), overrides,
            args.encoder, args.onnx,
        ))
    print(f"stored {info['turns']:,} turns in {info['insert_s']:.1f} s; embedded "
          f"{info['embedded']:,} messages in {info['embed_s']:.1f} s "
          f"({info['embedder'] or 'no embedder: semantic recall off'}); "
          f"total {time.perf_counter() - started:.0f} s\n")
    calibration = info["semantic_top"]
    if calibration:
        print(f"plain cosine ({info['embedder']}) over every turn finds {calibration['all']:.1%} of the "
              "evidence in its top 40; per kind: " + ", ".join(
                  f"{KIND_NAMES[k]} {v:.0%}" for k, v in calibration.items() if k in KIND_NAMES))
    if overrides:
        print("every configuration but send-everything with [conversation] "
              + ", ".join(f"{key} = {value!r}" for key, value in overrides.items())
              + " (so not the shipped defaults)")
    print_report(setups, tallies, info)
    if args.ranks:
        print_ranks(setups, tallies)
    if args.misses:
        for setup in setups:
            print(f"\nmissed by {setup.name}:")
            for line in tallies[setup.name].misses:
                print(f"  {line}")


if __name__ == "__main__":
    main()
