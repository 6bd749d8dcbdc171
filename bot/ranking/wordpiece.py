"""bert-base-uncased's word pieces in plain Python: the ids the `tokenizers` package gives for a
BERT `tokenizer.json` (BertNormalizer with lowercasing, BertPreTokenizer, WordPiece), without it.

The static encoder needs only the ids of a text's word pieces. The Rust tokenizer costs ~15 MiB
resident (its library and a 30 522-entry vocabulary held twice) and a dependency; this is a dict
of the vocabulary (~3 MiB) and a few loops, ~20 µs for a chat message. tests/test_wordpiece.py
checks it gives the same ids as `tokenizers` over the labelled set and awkward texts (accents,
CJK, control characters, emoji, special tokens, words over 100 characters).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator

# Rust's char::is_whitespace (Unicode White_Space), which the normalizer and pre-tokenizer use.
_WHITESPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
                        "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
        (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
_ASCII_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
# An ASCII text, the common case, by translate and one regex: controls but tab/newline/return
# dropped, lowercased, split into runs of letters and digits and single punctuation characters.
_ASCII_DROPPED = {code: None for code in [*range(32), 127] if chr(code) not in "\t\n\r"}
_ASCII_WORDS = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")
_CACHED_WORDS = 8192  # a word's pieces are kept (the cache emptied when full): chat repeats its words


def _is_cjk(code: int) -> bool:
    return any(low <= code <= high for low, high in _CJK)


def _dropped(char: str) -> bool:
    """What BertNormalizer's clean_text removes: NUL, U+FFFD and control, format, private-use and
    surrogate characters (Cc, Cf, Co, Cs; not unassigned ones) except tab, newline and return."""
    if char in "\t\n\r":
        return False
    return char in "\x00\ufffd" or unicodedata.category(char) in ("Cc", "Cf", "Co", "Cs")


def _is_punctuation(char: str) -> bool:
    return char in _ASCII_PUNCTUATION or unicodedata.category(char)[0] == "P"


class WordPiece:
    """`ids(text)`: the vocabulary ids of `text`'s word pieces, no [CLS]/[SEP] added."""

    def __init__(self, vocab: dict[str, int], *, unk: str = "[UNK]", prefix: str = "##",
                 max_chars: int = 100, specials: dict[str, int] | None = None) -> None:
        self._vocab = vocab
        self._unk = vocab[unk]
        self._prefix = prefix
        self._max_chars = max_chars
        self._specials = specials or {}
        names = sorted(self._specials, key=len, reverse=True)
        self._split = re.compile("(" + "|".join(map(re.escape, names)) + ")") if names else None
        self._cache: dict[str, tuple[int, ...]] = {}

    @classmethod
    def from_json(cls, raw: bytes | str) -> WordPiece:
        """From a `tokenizer.json` of the kind all-MiniLM-L6-v2 ships; ValueError for any other
        (a different model, normalizer or pre-tokenizer would give other ids)."""
        spec = json.loads(raw)
        model, normalizer = spec.get("model") or {}, spec.get("normalizer") or {}
        if (model.get("type") != "WordPiece" or normalizer.get("type") != "BertNormalizer"
                or (spec.get("pre_tokenizer") or {}).get("type") != "BertPreTokenizer"
                or not normalizer.get("lowercase") or normalizer.get("strip_accents") is False
                or not normalizer.get("clean_text") or not normalizer.get("handle_chinese_chars")):
            raise ValueError("not an uncased BERT WordPiece tokenizer.json")
        vocab = {str(piece): int(index) for piece, index in model["vocab"].items()}
        specials = {str(t["content"]): int(t["id"]) for t in spec.get("added_tokens") or ()
                    if not t.get("normalized", True)}
        return cls(vocab, unk=model.get("unk_token", "[UNK]"),
                   prefix=model.get("continuing_subword_prefix", "##"),
                   max_chars=int(model.get("max_input_chars_per_word", 100)), specials=specials)

    def ids(self, text: str) -> list[int]:
        found: list[int] = []
        parts = self._split.split(text) if self._split else [text]
        for index, part in enumerate(parts):
            if index % 2:  # a special token, matched in the raw text as `tokenizers` does
                found.append(self._specials[part])
            else:
                words = (_ASCII_WORDS.findall(part.translate(_ASCII_DROPPED).lower()) if part.isascii()
                         else _words(_normalized(part)))
                for word in words:
                    pieces = self._cache.get(word)
                    if pieces is None:
                        if len(self._cache) >= _CACHED_WORDS:
                            self._cache.clear()
                        pieces = self._cache[word] = self._pieces(word)
                    found += pieces
        return found

    def _pieces(self, word: str) -> tuple[int, ...]:
        """Greedy longest match from the left; the whole word is [UNK] when some part matches nothing."""
        if len(word) > self._max_chars:
            return (self._unk,)
        pieces: list[int] = []
        start, vocab = 0, self._vocab
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else self._prefix + word[start:end]
                index = vocab.get(piece)
                if index is not None:
                    pieces.append(index)
                    break
                end -= 1
            else:
                return (self._unk,)
            start = end
        return tuple(pieces)


def _normalized(text: str) -> str:
    """BertNormalizer: clean_text, spaces around CJK characters, accents stripped (NFD, then the
    non-spacing marks dropped), lowercased, in that order."""
    cleaned = []
    for char in text:
        if _dropped(char):
            continue
        if char in _WHITESPACE:
            cleaned.append(" ")
        elif _is_cjk(ord(char)):
            cleaned.append(f" {char} ")
        else:
            cleaned.append(char)
    decomposed = unicodedata.normalize("NFD", "".join(cleaned))
    # Character by character, as `tokenizers` does: "Σ" is "σ" even at a word's end (str.lower: "ς").
    return "".join(c.lower() for c in decomposed if unicodedata.category(c) != "Mn")


def _words(text: str) -> Iterator[str]:
    """BertPreTokenizer: split on whitespace (dropped) and punctuation (each character its own word)."""
    word: list[str] = []
    for char in text:
        if char in _WHITESPACE:
            if word:
                yield "".join(word)
                word = []
        elif _is_punctuation(char):
            if word:
                yield "".join(word)
                word = []
            yield char
        else:
            word.append(char)
    if word:
        yield "".join(word)
