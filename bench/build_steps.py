"""The parts of one context build, timed where they run: for `bench.context_build --semantic`.

A build runs its parts at once (the request's encoding in its thread, the store's reads on
SQLite's thread, the pool and the triage prompt on the event loop), so each part's time is the
wall time from its call to its answer, and the parts overlap: they do not add up to the build.
The store is wrapped (every coroutine method timed by name), the encoder too, and the builder's
fusion and the triage prompt are replaced by timed copies of themselves while `timed_parts` is
entered. Nothing here changes what a build does.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import bot.context.builder
import bot.context.triage
import bot.ranking.encode_threads

# Store methods by the part of the build they are.
PARTS = {
    "context_reads": "history read",
    # Timed from when its planner is given (it waits for the pool's plan first: on SQLite the search
    # starts then), so with the planned turns' read.
    "lexical_then_turns": "lexical search (+ turn starts, planned turns)",
    "turns_of": "recalled turns read",
    "turns_at": "recalled turns read",
    "semantic_matches_counted": "vector search",
    "semantic_matches_of": "vector search",
    "semantic_matches": "vector search",
    "save_embeddings": "request's vector stored",
}


class Parts:
    """Milliseconds per part of the current build, and every build's so far."""

    def __init__(self) -> None:
        self.current: dict[str, float] = defaultdict(float)
        self.builds: list[dict[str, float]] = []

    def add(self, part: str, seconds: float) -> None:
        self.current[part] += seconds * 1000

    def next_build(self, keep: bool) -> None:
        if keep:
            self.builds.append(dict(self.current))
        self.current.clear()

    def timed(self, part: str, call: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(call)
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.add(part, time.perf_counter() - started)

        return run

    def summary(self) -> list[tuple[str, float, float, float]]:
        """(part, median ms, p99 ms, share of builds it ran in), the median over the builds it ran in."""
        names = sorted({name for build in self.builds for name in build})
        rows = []
        for name in names:
            values = [build[name] for build in self.builds if name in build]
            rows.append((name, statistics.median(values), _p99(values), len(values) / len(self.builds)))
        return sorted(rows, key=lambda row: -row[1])


def _p99(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


class TimedStore:
    """The store, each coroutine method's wall time counted under its part (or its own name)."""

    def __init__(self, store: Any, parts: Parts) -> None:
        self._store = store
        self._parts = parts

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if not callable(found) or name.startswith("_"):
            return found
        parts = self._parts

        @functools.wraps(found)
        async def run(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            if inspect.isawaitable(kwargs.get("plan")):  # timed from when it is given
                given = kwargs["plan"]

                async def plan() -> Any:
                    nonlocal started
                    planner = await given
                    started = max(started, time.perf_counter())
                    return planner

                kwargs["plan"] = plan()
            try:
                return await found(*args, **kwargs)
            finally:
                parts.add(PARTS.get(name, f"store.{name}"), time.perf_counter() - started)

        return run


class TimedEncoder:
    """The sentence encoder, its time counted as "question encoded" (in its thread; the static
    table's on the event loop, the request and its content words: `SemanticRecall.content_matches`)."""

    def __init__(self, encoder: Any, parts: Parts) -> None:
        self.model_id = encoder.model_id
        self.mean_of_words = getattr(encoder, "mean_of_words", False)
        self.encode = parts.timed("question encoded", encoder.encode)


@contextlib.contextmanager
def timed_parts(parts: Parts) -> Iterator[None]:
    """The builder's rank fusion, the triage prompt's rendering and the encoding thread's memory
    trim after each encoding timed while inside."""
    fuse, prompt = bot.context.builder.fuse, bot.context.triage.triage_prompt
    trim = bot.ranking.encode_threads._trim
    bot.context.builder.fuse = parts.timed("rank fusion", fuse)
    bot.context.triage.triage_prompt = parts.timed("triage prompt rendered", prompt)
    bot.ranking.encode_threads._trim = parts.timed("malloc_trim after encoding (its thread)", trim)
    try:
        yield
    finally:
        bot.context.builder.fuse, bot.context.triage.triage_prompt = fuse, prompt
        bot.ranking.encode_threads._trim = trim
