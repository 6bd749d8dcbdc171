"""Make lexical recall's thesaurus (bot/ranking/static_model/thesaurus.tsv) from the shipped static table.

Usage: .venv/bin/python -m bench.thesaurus [--neighbours 5] [--floor 0.25] [--out PATH]

Not a benchmark: it makes the file `bot.ranking.thesaurus` reads, from the static encoder's table
alone (bot/ranking/static_model/model.safetensors, fitted by bench/static_training.py on text that
is not the benchmarks'), deterministically. Every whole word of the table's vocabulary (letters
only, three or more) becomes its lexical index word (`bot.ranking.lexical.content_words`: stopwords
out, Snowball stems); the words of one stem share a vector, the mean of their rows (scaled, the
table's mean row and its first principal components taken out, which otherwise make a few words
everyone's neighbour), unit length. Per stem, its nearest other stems by cosine, at least
`--floor`, at most `--neighbours`, are written as "stem<TAB>other:similarity ..." (similarity in
hundredths), stems in sorted order.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np

from bot.ranking.lexical import content_words
from bot.ranking.safetensors_reader import read_safetensors

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "bot" / "ranking" / "static_model"
FIRST_PIECE = 1996  # bert-base-uncased's ids below this are specials, unused slots and characters
COMPONENTS = 3  # principal components taken out of the word vectors
BLOCK = 2048


def stem_vectors() -> tuple[list[str], np.ndarray]:
    """The stems of the vocabulary's whole words and each one's unit vector."""
    with (MODEL / "model.safetensors").open("rb") as stream:
        tensors = read_safetensors(stream, hashlib.sha256())
    rows = tensors["embeddings"].astype(np.float32) * np.asarray(tensors["scales"], np.float32)[:, None]
    vocabulary = json.loads((MODEL / "tokenizer.json").read_text())["model"]["vocab"]
    by_stem: dict[str, list[int]] = {}
    for word, piece in sorted(vocabulary.items()):
        if piece < FIRST_PIECE or piece >= rows.shape[0] or not (word.isascii() and word.isalpha()):
            continue
        stems = content_words(word)
        if len(word) >= 3 and len(stems) == 1 and stems[0].isalpha():
            by_stem.setdefault(stems[0], []).append(piece)
    pieces = sorted({piece for group in by_stem.values() for piece in group})
    words = rows[pieces] - rows[pieces].mean(axis=0)
    _, _, axes = np.linalg.svd(words, full_matrices=False)
    words -= (words @ axes[:COMPONENTS].T) @ axes[:COMPONENTS]
    words /= np.linalg.norm(words, axis=1, keepdims=True)
    at = {piece: index for index, piece in enumerate(pieces)}
    stems = sorted(by_stem)
    vectors = np.stack([words[[at[p] for p in by_stem[stem]]].mean(axis=0) for stem in stems])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return stems, vectors


def neighbours(stems: list[str], vectors: np.ndarray, count: int, floor: float) -> list[str]:
    """One line per stem with neighbours: the stem, a tab, "other:hundredths" nearest first."""
    lines = []
    for start in range(0, len(stems), BLOCK):
        similarity = vectors[start:start + BLOCK] @ vectors.T
        for offset, row in enumerate(similarity):
            index = start + offset
            row[index] = -1.0
            best = np.argpartition(-row, count)[:count]
            best = best[np.argsort(-row[best], kind="stable")]
            kept = [f"{stems[j]}:{round(float(row[j]) * 100)}" for j in best if row[j] >= floor]
            if kept:
                lines.append(f"{stems[index]}\t{' '.join(kept)}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--neighbours", type=int, default=5)
    parser.add_argument("--floor", type=float, default=0.25)
    parser.add_argument("--out", type=Path, default=MODEL / "thesaurus.tsv")
    args = parser.parse_args()
    stems, vectors = stem_vectors()
    lines = neighbours(stems, vectors, args.neighbours, args.floor)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"{len(stems)} stems, {len(lines)} with neighbours -> {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
