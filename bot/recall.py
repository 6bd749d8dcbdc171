"""Recall: a user's request as safe full-text search terms, and a replayable ranking of the matches."""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence

MAX_TERMS = 12
MIN_TERM_CHARS = 3
# Words that match nearly every message: they would rank recall by noise.
STOPWORDS = frozenset(str.split(
    "the and for are but not you your yours with this that these those from have has had was were "
    "will would could should can what when where which who whom why how all any each some about "
    "into onto over under again then than there here they them their our ours out just also very "
    "much more most such only own same too did does doing done been being its "
    "please thanks thank okay yes yeah no hey hello remember remind tell know think said say "
    "get got make made want need like one two"
))
_WORD = re.compile(r"\w+", re.UNICODE)


def query_terms(text: str) -> list[str]:
    """The distinct content words of `text`, in order, lower-cased, at most MAX_TERMS."""
    terms: list[str] = []
    for word in _WORD.findall(text.lower()):
        word = word.strip("_")
        if len(word) < MIN_TERM_CHARS or word in STOPWORDS or word in terms:
            continue
        terms.append(word)
        if len(terms) == MAX_TERMS:
            break
    return terms


def fts_phrase(term: str) -> str:
    """One term as an FTS5 string: quoted, so it is never read as syntax (NEAR, AND, col:, *, ^)."""
    return '"' + term.replace('"', '""') + '"'


def rank_matches(hits: Sequence[Collection[int]], total: int, limit: int) -> list[int]:
    """The ids matching any term, best first, at most `limit`.

    `hits[i]` holds the ids of the messages matching term i among the `total` messages searched.
    A message scores the rarity (idf) of each term it matches; ties go to the newer message.
    Unlike FTS5's bm25 the score depends on nothing outside the searched messages, so messages
    stored later (or in other sessions) never change what an earlier turn recalled.
    """
    scores: dict[int, float] = {}
    for ids in hits:
        if not ids:
            continue
        weight = math.log(1 + (total - len(ids) + 0.5) / (len(ids) + 0.5))
        for message_id in ids:
            scores[message_id] = scores.get(message_id, 0.0) + weight
    return sorted(scores, key=lambda message_id: (-scores[message_id], -message_id))[:limit]
