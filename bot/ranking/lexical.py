"""Lexical recall's words: a message's content words as per-session index terms, and their ranking.

Text becomes content words: case folded, diacritics removed, stopwords out, English Snowball stems
(so "adopting" finds "adoption"), numbers of two or more digits and short names kept. The index
holds each word prefixed with its session's tag, so the postings of a term hold one session's
messages: a search walks only its own session's matches, whatever the other sessions hold.
Everything here is pure; the store writes and searches the terms.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import snowballstemmer  # type: ignore[import-untyped]

from bot.ranking.thesaurus import expansions

MAX_TERMS = 12  # a request searches for at most this many of its words
MIN_WORD_CHARS = 3  # shorter words are noise unless they are numbers or names
MAX_WORD_CHARS = 40  # a longer run (a URL, a hash, a paste) is cut: it still matches itself
PREFIX_MIN = 5  # a stem this long also finds longer stems it begins ("garden" finds "gardener")
TAG_CHARS = 10  # hex digits of the session tag (40 bits)
# Words that match nearly every message: they would rank recall by noise.
STOPWORDS = frozenset(str.split(
    "the and for are but not you your yours with this that these those from have has had was were "
    "will would could should can what when where which who whom why how all any each some about "
    "into onto over under again then than there here they them their our ours out just also very "
    "much more most such only own same too did does doing done been being its "
    "please thanks thank okay yes yeah no hey hello remember remind tell know think said say "
    "get got make made want need like one two ok hi"
))
# Stopwords that say what kind of answer a question wants (a place, a person, an amount):
# `content_text` keeps them beside the content words.
ASKING = frozenset(str.split("what when where which who whom whose why how much many"))
# BM25 with every term counted once per message (the index holds distinct terms), and a fixed
# average length: a message's score depends on nothing but itself and the searched messages.
K1 = 1.2
B = 0.75
AVERAGE_TOKENS = 30
# score = weight * LENGTH[0] / (LENGTH[1] + LENGTH[2] * tokens): BM25's length factor, in the
# form the store's SQL computes too (the same operations in the same order, so the same doubles).
LENGTH = (K1 + 1, 1 + K1 * (1 - B), K1 * B / AVERAGE_TOKENS)

_PIECE = re.compile(r"[^\W_]+|[.!?\n]")
_BREAKS = frozenset(".!?\n")
_local = threading.local()  # a Snowball stemmer keeps state while it works: one per thread


@dataclass(frozen=True, slots=True)
class SearchTerm:
    """One tagged term of a request, searched exactly or (a longer stem) as a prefix; `factor`
    scales its idf (below 1 for a thesaurus neighbour of the request's words)."""

    token: str
    prefix: bool
    factor: float = 1.0

    def match(self) -> str:
        """The term as an FTS5 query: a quoted string (never syntax), `*` for a prefix."""
        return f'"{self.token}"' + ("*" if self.prefix else "")


def content_words(text: str) -> list[str]:
    """The distinct content words of `text` as index words (stems), in order of first use.

    A word counts when it has at least MIN_WORD_CHARS letters and is not a stopword, or has two or
    more characters with a digit in them (4711, v2), or is written with a capital inside a
    sentence or in capitals (a name or an acronym: Jo, AI), stopwords still excepted.
    """
    if not text.isascii():
        text = _fold(text)
    words: dict[str, None] = {}
    sentence_start = True
    for piece in _PIECE.findall(text):
        if piece in _BREAKS:
            sentence_start = True
            continue
        lower = piece.casefold()
        word = _word(lower[:MAX_WORD_CHARS])
        if word is None and len(piece) >= 2 and piece[0].isupper() \
                and (not sentence_start or piece.isupper()):
            word = _name(lower[:MAX_WORD_CHARS])
        sentence_start = False
        if word is not None:
            words[word] = None
    return list(words)


def content_text(text: str) -> str:
    """`text`'s content words as written (not stemmed), in order, space-separated: the words
    `content_words` keeps and the words that say what is asked (`ASKING`), without the other
    stopwords and short function words around them ("What health troubles have I had?" ->
    "What health troubles"). Empty when it has no content word."""
    kept: list[str] = []
    content = False
    sentence_start = True
    for piece in _PIECE.findall(text):
        if piece in _BREAKS:
            sentence_start = True
            continue
        lower = piece.casefold()
        if _word(_fold(lower)[:MAX_WORD_CHARS]) is not None or (
                len(piece) >= 2 and piece[0].isupper() and (not sentence_start or piece.isupper())
                and lower not in STOPWORDS):
            kept.append(piece)
            content = True
        elif lower in ASKING:
            kept.append(piece)
        sentence_start = False
    return " ".join(kept) if content else ""


def query_terms(text: str) -> list[str]:
    """The content words a request searches for: the first MAX_TERMS of `content_words`."""
    return content_words(text)[:MAX_TERMS]


@lru_cache(maxsize=4096)
def session_tag(session_key: str) -> str:
    """TAG_CHARS hex digits of the key's BLAKE2b hash: the prefix of every term of its session.

    Tags of two sessions may collide (one in a million million pairs): searches still filter by
    the session key, a collision only adds the other session's matches to the counts.
    """
    return hashlib.blake2b(session_key.encode(), digest_size=TAG_CHARS // 2).hexdigest()


def index_terms(session_key: str, text: str) -> str:
    """What the index stores for a message: its distinct content words, tagged, space-separated."""
    tag = session_tag(session_key)
    return " ".join(tag + _token(word) for word in content_words(text))


def search_terms(session_key: str, text: str, *, expand: int = 0) -> list[SearchTerm]:
    """The tagged terms a request searches for in its session's postings: its words, then up to
    `expand` of their thesaurus neighbours (`bot.ranking.thesaurus.expansions`), each term's idf
    then scaled by its similarity to the request's word."""
    tag = session_tag(session_key)
    words = query_terms(text)
    terms = [SearchTerm(tag + _token(word), _prefixed(word)) for word in words]
    if expand > 0:
        terms += [SearchTerm(tag + _token(word), _prefixed(word), factor)
                  for word, factor in expansions(words, expand, prefix_min=PREFIX_MIN)]
    return terms


def _prefixed(word: str) -> bool:
    """Whether `word` is searched as a prefix too (a stem of PREFIX_MIN letters or more)."""
    return len(word) >= PREFIX_MIN and word.isascii() and word.isalpha()


def term_weight(matches: int, searched: int) -> float:
    """BM25's idf of a term found in `matches` of the `searched` messages (never negative)."""
    return math.log(1 + (searched - matches + 0.5) / (matches + 0.5))


def score(weight: float, tokens: int) -> float:
    """A message's score: the summed weights of the terms it has, by its length in tokens."""
    return weight * LENGTH[0] / (LENGTH[1] + LENGTH[2] * tokens)


def _token(word: str) -> str:
    """A word as one FTS5 token after the tag: 'x' + an ASCII word, 'y' + the hex of any other.

    The tag is hex, so neither letter can be part of it; hex keeps a word of any script one token
    to the index's tokenizer (whose idea of a letter is older Unicode's).
    """
    return "x" + word if word.isascii() else "y" + word.encode().hex()


def _fold(text: str) -> str:
    """`text` without diacritics (é → e) and with compatibility forms (ﬁ → fi) decomposed."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(char for char in decomposed if not unicodedata.combining(char))


@lru_cache(maxsize=1 << 16)
def _word(lower: str) -> str | None:
    """The index word for a lower-cased word, or None when it is not a content word.

    Memoised: chat reuses its words, so indexing a million messages stems each word once.
    """
    if lower.isdigit():
        return lower if len(lower) >= 2 else None
    if not lower.isalpha():  # letters with digits: an identifier (v2, 3d, b12), kept as written
        return lower if len(lower) >= 2 else None
    if len(lower) < MIN_WORD_CHARS or lower in STOPWORDS:
        return None
    return _stem(lower)


@lru_cache(maxsize=1 << 14)
def _name(lower: str) -> str | None:
    """The index word for a capitalised word `_word` leaves out: a short name, never a stopword."""
    return None if lower in STOPWORDS else _stem(lower)


def _stem(lower: str) -> str:
    if not lower.isascii():
        return lower  # the English stemmer has nothing to say about other scripts
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = snowballstemmer.stemmer("english")
    return str(stemmer.stemWord(lower))
