"""The static encoder as shipped: its word pieces are the `tokenizers` package's ids without it,
its vectors are those of the table held in memory, and the table stays out of the process."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from bench.labelled_set import generate
from bot.ranking.embedding import ModelFiles
from bot.ranking.safetensors_reader import read_safetensors
from bot.ranking.static_embedding import MODEL_NAME, PACKAGED, StaticEncoder
from bot.ranking.wordpiece import WordPiece

if TYPE_CHECKING:
    from tokenizers import Tokenizer

tokenizers = pytest.importorskip("tokenizers")

AWKWARD = [
    "", "   ", "Café naïve résumé İstanbul STRAẞE", "ΣΊΣΥΦΟΣ ends in sigma", "我爱北京天安门 and 東京 too",
    "emoji 😀👍🏽 and ❤️", "zero\u200bwidth\x00nul\ufffdrepl\x1cfs\x85nel\x7fdel",
    "[CLS] hello [SEP][MASK]x[UNK]y [PAD]", "a" * 101, "b" * 100, "tab\tnew\nline\r\u3000ideographic",
    "don't 'quote' — dash … «guillemets» ¿qué? ¡sí!", "$100 + 5% <tag> ^~|` a_b", "x\u0378y unassigned",
    "ＦＵＬＬＷＩＤＴＨ ｶﾀｶﾅ", "Ωmega ǅ ﬁ ligature", "m17-3 could you remind me about Lisbon?",
]


@pytest.fixture(scope="module")
def reference() -> Tokenizer:
    found: Tokenizer = tokenizers.Tokenizer.from_file(str(PACKAGED / "tokenizer.json"))
    found.no_padding()
    found.no_truncation()
    return found


@pytest.fixture(scope="module")
def wordpiece() -> WordPiece:
    return WordPiece.from_json((PACKAGED / "tokenizer.json").read_bytes())


def labelled_texts() -> list[str]:
    texts = []
    for conversation in generate(6):
        texts += [text for turn in conversation.turns for text in (turn.user, turn.reply)]
        texts += [question.text for question in conversation.questions]
    return texts


def test_the_word_pieces_are_the_tokenizers_packages(reference: Tokenizer,
                                                      wordpiece: WordPiece) -> None:
    texts = labelled_texts() + AWKWARD
    assert len(texts) > 500
    for text in texts:
        assert wordpiece.ids(text) == reference.encode(text, add_special_tokens=False).ids, text


def test_every_character_of_the_first_planes_splits_as_the_tokenizers_package(
        reference: Tokenizer, wordpiece: WordPiece) -> None:
    """Each character between two letters, except those Unicode assigned or recategorised after the
    tables `tokenizers` was built with (a few hundred of some 200 000, newer than Unicode 13)."""
    differ = []
    for code in [*range(0xD800), *range(0xE000, 0x30000)]:
        text = f"a{chr(code)}b"
        if wordpiece.ids(text) != reference.encode(text, add_special_tokens=False).ids:
            differ.append(code)
    assert len(differ) < 600
    assert not [c for c in differ if c < 0x0600 or 0x3000 <= c < 0xA000], [hex(c) for c in differ[:10]]
    assert all(unicodedata.category(chr(c))[0] in "CMPS" for c in differ)


def test_the_vectors_and_id_are_those_of_the_table_in_memory(reference: Tokenizer) -> None:
    """The table read from its file row by row gives the vectors and model id the whole table in
    memory with the Rust tokenizer gave (stored vectors stay valid)."""
    shipped = StaticEncoder.load(ModelFiles(MODEL_NAME, directory=PACKAGED, encoder="static"))
    with (PACKAGED / "model.safetensors").open("rb") as stream:
        digest = hashlib.sha256()
        tensors = read_safetensors(stream, digest)
    digest.update((PACKAGED / "tokenizer.json").read_bytes())
    assert shipped.model_id == f"{MODEL_NAME}@{digest.hexdigest()[:12]}"
    rows, scales = tensors["embeddings"], tensors["scales"]
    texts = labelled_texts()[:200] + AWKWARD
    for text, vector in zip(texts, shipped.encode(texts), strict=True):
        ids = np.array(reference.encode(text, add_special_tokens=False).ids, dtype=np.int64)
        if not ids.size:
            assert not any(vector)
            continue
        expected = (rows[ids] * scales[ids, None]).sum(axis=0)
        np.testing.assert_allclose(vector, expected / np.linalg.norm(expected), rtol=0, atol=1e-6)


def test_encoding_needs_neither_tokenizers_nor_the_table_in_memory(tmp_path: Path) -> None:
    """In a fresh interpreter: neither `tokenizers` nor numpy is imported (issue 32: numpy alone is
    ~14 MiB of the daemon) and the table file is not mapped."""
    script = (
        "import sys\n"
        "from bot.ranking.embedding import ModelFiles\n"
        "from bot.ranking.static_embedding import MODEL_NAME, PACKAGED, StaticEncoder\n"
        "encoder = StaticEncoder.load(ModelFiles(MODEL_NAME, directory=PACKAGED, encoder='static'))\n"
        "encoder.encode(['what did we decide about Lisbon?'] * 3 + [str(n) for n in range(500)])\n"
        "maps = open('/proc/self/maps').read() if sys.platform == 'linux' else ''\n"
        "print('tokenizers' in sys.modules, 'numpy' in sys.modules, 'model.safetensors' in maps)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.stdout.split() == ["False", "False", "False"]
