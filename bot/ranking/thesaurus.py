"""Lexical recall's thesaurus: each index word's nearest other index words, made from the static table.

bot/ranking/static_model/thesaurus.tsv (made by bench/thesaurus.py from the shipped static
encoder's table alone, itself fitted on text that is not the benchmarks') holds, per stem of the
table's whole words, its nearest few other stems by the cosine of their word vectors ("bake":
dough, pastri, cake, cook, recip). A request's words also search for their neighbours, each
weighing its similarity times its idf (`expansions`), so "cats" finds a message saying "kitten"
without a model running: a thesaurus lookup, still a lexical method. The file (~0.8 MB) is read
when first needed (~7 ms, ~2.8 MiB resident), not at start; each stem's line stays one string
until it is asked for.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from pathlib import Path

PATH = Path(__file__).resolve().parent / "static_model" / "thesaurus.tsv"

_lock = threading.Lock()
_lines: dict[str, str] | None = None


@lru_cache(maxsize=4096)
def neighbours(stem: str) -> tuple[tuple[str, float], ...]:
    """The stem's neighbours in the thesaurus, nearest first, with their cosine (memoised: chat
    asks about the same few words again and again)."""
    line = _table().get(stem)
    if not line:
        return ()
    found = []
    for entry in line.split(" "):
        word, _, hundredths = entry.rpartition(":")
        found.append((word, int(hundredths) / 100))
    return tuple(found)


def expansions(stems: list[str], limit: int, *, prefix_min: int) -> list[tuple[str, float]]:
    """Up to `limit` (neighbour, similarity) pairs for a request's stems, most similar first.

    A neighbour's similarity is its best to any of the stems. A stem of the request itself is
    not added, nor one that a stem of `prefix_min` letters or more begins (its prefix search
    finds it already).
    """
    if limit <= 0:
        return []
    asked = set(stems)
    prefixes = tuple(stem for stem in asked if len(stem) >= prefix_min)
    best: dict[str, float] = {}
    for stem in stems:
        for word, similarity in neighbours(stem):
            if word in asked or word.startswith(prefixes):
                continue
            if similarity > best.get(word, 0.0):
                best[word] = similarity
    return sorted(best.items(), key=lambda item: (-item[1], item[0]))[:limit]


def _table() -> dict[str, str]:
    global _lines
    if _lines is None:
        with _lock:
            if _lines is None:
                table = {}
                with PATH.open(encoding="ascii") as lines:  # a line at a time: ~2.8 MiB kept, not ~4.6
                    for line in lines:
                        stem, _, rest = line.rstrip("\n").partition("\t")
                        table[stem] = rest
                _lines = table
    return _lines
