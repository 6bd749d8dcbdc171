"""Recall: turning a user's request into a safe full-text query for older messages of the session."""

from __future__ import annotations

import re

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


def fts_query(text: str) -> str:
    """An FTS5 MATCH expression for any user text: its terms quoted and OR-ed; "" for none.

    Every term is a quoted string, so no user text can be read as FTS5 syntax (column filters,
    NEAR, AND/NOT, a stray quote or parenthesis).
    """
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in query_terms(text))
