"""Make the static encoder's table (bot/ranking/static_model) from all-MiniLM-L6-v2 and text on this machine.

Usage: .venv/bin/python -m bench.static_training corpus|teach|fit|all [--work DIR] [--real N]
       [--wordnet N] [--jobs 2] [--onnx DIR] [--lam 0.003] [--dim 256] [--texts 0]

Not a benchmark: it makes the file that `encoder = "static"` reads, from the MiniLM weights
package (`make semantic`) and local text, seeded. The table is shipped rather than made at install:
the teacher stage takes about an hour of one core per 100 000 texts (~10 minutes with the int8
ONNX teacher), and the text is whatever documentation the machine has, so another machine makes a
table like it, not the same bytes. The shipped one (issue 38, 2026-11-29): `corpus --real 100000
--wordnet 100000` (100 000 sentences, all 98 689 WordNet texts, 18 591 coverage texts), the int8
ONNX teacher, fitted on all 217 280 but 2 000 held out (before it: 60 000 WordNet texts; before
that, no WordNet and the first 76 000 of 118 626).
Three stages, each writing into `--work` (default /tmp/static-training):

- corpus: English sentences from the machine's own documentation (man pages, /usr/share/doc, vim's
  help, the Python standard library's docstrings and comments), filtered to 4-40 word prose,
  deduplicated and shuffled; `--real` of them, plus "coverage" texts of 3-10 random whole words
  of MiniLM's vocabulary (every such word in three) so that words the documentation never uses
  are fitted too; with `--wordnet N`, N texts from WordNet 3.0's glosses and example sentences
  (apt wordnet-base: "bake: cook and make edible by putting in a hot oven", "bake the potatoes"),
  general English where the documentation has no everyday words. Neither the benchmarks'
  generated chats (bench/labelled_set.py, bench/long_conversation.py) nor any test text is read.
- teach: MiniLM's sentence vector of every text (`--jobs` processes at nice +10; with `--onnx DIR`
  onnxruntime on the int8 export there, ~2x faster, as bench/embedding_speed.py loads it).
- fit: each word piece's vector, fitted by ridge regression so that the plain mean of a text's
  piece vectors is MiniLM's vector of the text (pieces seen fewer than twice keep MiniLM's vector
  of the piece alone, [CLS] piece [SEP], which is also the ridge's prior); then the table rotated
  onto the principal axes of the fitted sentence vectors, cut to `--dim` columns, and stored as
  int8 rows with one float32 scale each (safetensors), beside MiniLM's tokenizer.json.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import os
import random
import re
import struct
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from glob import glob
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

OUT = ROOT / "bot" / "ranking" / "static_model"
MINILM = {"semantic": {"encoder": "minilm"}}
SEED = 7
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
_NOISE = re.compile(r"[<>@_\\{}=|#$/]|^\*|^-|[0-9]{3}")
_ROFF = re.compile(r"\\f[BIRP]|\\f\(..|\\\(..|\\[&|^-]|\\-|\\e|\\s[-+]?\d")


# -- corpus -------------------------------------------------------------------------------------


def _prose(text: str) -> Iterator[str]:
    for paragraph in re.split(r"\n\s*\n", text):
        for sentence in _SENTENCE.split(" ".join(paragraph.split())):
            words = sentence.split()
            if not 4 <= len(words) <= 40 or len(sentence) >= 220 or _NOISE.search(sentence):
                continue
            letters = sum(c.isalpha() for c in sentence)
            wordy = len(_WORD.findall(sentence)) >= 0.7 * len(words)
            if wordy and letters >= 0.7 * len(sentence.replace(" ", "")):
                yield sentence


def _man_text(path: str) -> str:
    lines = []
    with gzip.open(path, "rt", errors="ignore") as file:
        raw = file.read()
    for line in raw.splitlines():
        if line.startswith((".", "'")):
            if line[:3] in (".PP", ".LP", ".SH", ".TP", ".IP", ".P", ".sp"):
                lines.append("")
            elif line.startswith((".B ", ".I ", ".BR ", ".IR ", ".BI ", ".RB ")):
                lines.append(line.split(" ", 1)[1].replace('"', ""))
            continue
        lines.append(_ROFF.sub("", line))
    return "\n".join(lines)


def _python_text(path: str) -> Iterator[str]:
    source = Path(path).read_text(errors="ignore")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module):
            doc = ast.get_docstring(node)
            if doc:
                yield doc
    yield "\n\n".join(line.strip()[2:] for line in source.splitlines() if line.strip().startswith("# "))


def _sources() -> Iterator[str]:
    for path in sorted(glob("/usr/share/man/man[1-8]/*.gz")):
        try:
            yield _man_text(path)
        except (OSError, EOFError):
            continue
    for path in sorted(glob("/usr/share/doc/**/*", recursive=True)):
        try:
            if path.endswith(".gz"):
                with gzip.open(path, "rt", errors="ignore") as file:
                    yield file.read()
            elif path.endswith((".txt", ".md", ".rst", "README", "NEWS")):
                yield Path(path).read_text(errors="ignore")
        except (OSError, EOFError, IsADirectoryError):
            continue
    for path in sorted(glob("/usr/share/vim/vim*/doc/*.txt")):
        yield Path(path).read_text(errors="ignore")
    library = Path(os.__file__).parent
    for path in sorted(glob(f"{library}/**/*.py", recursive=True)):
        if "/test" not in path:
            yield from _python_text(path)


_WORDNET = Path("/usr/share/wordnet")


def _wordnet(limit: int, vocabulary: dict[str, int], rng: random.Random) -> list[str]:
    """Up to `limit` texts from WordNet 3.0's glosses (apt wordnet-base): per synset "its words:
    gloss" and each example sentence alone; general English, so that everyday words (sourdough,
    tonsillitis) are fitted from prose rather than only from random-word bags. Synsets of
    single-word lemmas, commonest first: the first sense of lemmas tagged in SemCor, the first sense
    of the others whose word is one MiniLM piece, the second sense of the tagged, the rest's first."""
    if not _WORDNET.is_dir():
        raise SystemExit(f"{_WORDNET} is missing: install Debian's wordnet-base, or pass --wordnet 0")
    tiers: list[list[tuple[str, str]]] = [[], [], [], []]
    for pos in ("noun", "verb", "adj", "adv"):
        for line in (_WORDNET / f"index.{pos}").read_text().splitlines():
            if line.startswith(" "):
                continue
            fields = line.split()
            lemma, rest = fields[0], fields[4 + int(fields[3]):]
            if not lemma.isalpha():
                continue
            offsets = rest[2:]
            if int(rest[1]):  # tagged in SemCor
                tiers[0].append((pos, offsets[0]))
                tiers[2] += [(pos, offset) for offset in offsets[1:2]]
            else:
                tiers[1 if lemma in vocabulary else 3].append((pos, offsets[0]))
    glosses: dict[str, dict[str, str]] = {}
    texts: dict[str, None] = {}
    for tier in tiers:
        rng.shuffle(tier)
        for pos, offset in tier:
            if pos not in glosses:
                glosses[pos] = {line[:8]: line for line in (_WORDNET / f"data.{pos}").read_text().splitlines()
                                if not line.startswith(" ")}
            head, _, gloss = glosses[pos][offset].partition(" | ")
            parts = head.split()
            words = [re.sub(r"\(.*\)$", "", w) for w in parts[4:4 + 2 * int(parts[3], 16):2] if "_" not in w]
            words = list(dict.fromkeys(words))[:3]
            definition, *examples = [p.strip(' "') for p in re.split(r';\s*"', gloss.strip())]
            for text in [f"{', '.join(words)}: {definition}", *examples]:
                if len(text.split()) >= 3 and len(texts) < limit:
                    texts[text] = None
        print(f"WordNet: {len(texts)} texts after {len(tier)} more synsets", flush=True)
    return list(texts)


def corpus(work: Path, real: int, wordnet: int = 0) -> None:
    from bot.config import parse_config
    from bot.ranking.embedding import model_files

    seen: dict[str, None] = {}
    for text in _sources():
        seen.update(dict.fromkeys(_prose(text)))
    sentences = list(seen)
    rng = random.Random(SEED)
    rng.shuffle(sentences)
    sentences = sentences[:real]
    files = model_files(parse_config(MINILM, "<training>"))
    assert files is not None, "the MiniLM weights package is needed: make semantic"
    vocabulary = json.loads(files.read("tokenizer.json"))["model"]["vocab"]
    words = sorted(w for w, i in vocabulary.items() if i >= 1996 and w.isalpha() and w.isascii())
    counts = Counter(w.lower() for s in sentences for w in re.findall(r"[A-Za-z]+", s))
    common = [w for w, _ in counts.most_common(3000) if w in vocabulary]
    coverage = []
    for _ in range(3):
        pool = words[:]
        rng.shuffle(pool)
        at = 0
        while at < len(pool):
            take = rng.randint(2, 5)
            chosen = pool[at:at + take] + rng.sample(common, rng.randint(1, 5))
            at += take
            rng.shuffle(chosen)
            coverage.append(" ".join(chosen))
    definitions = _wordnet(wordnet, vocabulary, rng) if wordnet else []
    texts = sentences + definitions + coverage
    rng.shuffle(texts)
    work.mkdir(parents=True, exist_ok=True)
    (work / "train.txt").write_text("\n".join(texts) + "\n")
    print(f"corpus: {len(sentences)} sentences of {len(seen)} found, {len(definitions)} WordNet texts, "
          f"{len(coverage)} coverage texts")


# -- teacher ------------------------------------------------------------------------------------


def teach(work: Path, jobs: int, onnx: str | None) -> None:
    extra = ["--onnx", onnx] if onnx else []
    command = ["nice", "-n", "10", sys.executable, "-m", "bench.static_training", "teach-shard", "--work",
               str(work)]
    children = [subprocess.Popen([*command, "--shard", str(shard), "--jobs", str(jobs), *extra])
                for shard in range(jobs)]
    if any(child.wait() for child in children):
        raise SystemExit("a teacher process failed")


def teach_shard(work: Path, shard: int, jobs: int, onnx: str | None) -> None:
    import numpy as np

    from bot.config import parse_config
    from bot.ranking.embedding import load_embedder

    if onnx:
        from bench.embedding_speed import onnx_runtime

        encode, _ = onnx_runtime(Path(onnx))
    else:
        embedder = load_embedder(parse_config(MINILM, "<training>"))
        assert embedder is not None, "the MiniLM weights package is needed: make semantic"
        encode = embedder.encode
    lines = (work / "train.txt").read_text().splitlines()[shard::jobs]
    out = np.zeros((len(lines), 384), np.float16)
    started = time.time()
    for at in range(0, len(lines), 1000):
        chunk = lines[at:at + 1000]
        order = sorted(range(len(chunk)), key=lambda i: len(chunk[i]))  # similar lengths, less padding
        for batch in range(0, len(order), 32):
            picked = order[batch:batch + 32]
            out[at + np.array(picked)] = encode([chunk[i] for i in picked])
        np.save(work / f"teacher{shard}.npy", out[:at + len(chunk)])  # a stopped run keeps its part
        print(f"teacher {shard}: {at + len(chunk)}/{len(lines)} in {time.time() - started:.0f} s", flush=True)


# -- fit ----------------------------------------------------------------------------------------


def _teacher_vectors(work: Path, count: int) -> tuple[Any, Any]:
    """(row numbers of train.txt that have a teacher vector, their vectors), shards interleaved."""
    import numpy as np

    shards = sorted(glob(str(work / "teacher*.npy")))
    rows, vectors = [], []
    for shard, path in enumerate(shards):
        part = np.load(path).astype(np.float32)
        rows.append(np.arange(shard, count, len(shards))[:len(part)])
        vectors.append(part)
    return np.concatenate(rows), np.concatenate(vectors)


def _single_pieces(embedder: Any) -> Any:
    """MiniLM's vector of each word piece alone ([CLS] piece [SEP]): model2vec's distillation."""
    import numpy as np

    vocabulary = embedder._word.shape[0]
    table = np.zeros((vocabulary, embedder.dim), np.float32)
    for start in range(0, vocabulary, 300):
        ids = [[101, piece, 102] for piece in range(start, min(vocabulary, start + 300))]
        table[start:start + len(ids)] = embedder._forward(ids)
    return table


def fit(work: Path, lam: float, dim: int, out: Path = OUT, center: bool = False, limit: int = 0) -> None:
    import numpy as np

    from bot.config import parse_config
    from bot.ranking.embedding import load_embedder, model_files

    config = parse_config(MINILM, "<training>")
    embedder = load_embedder(config)
    files = model_files(config)
    assert embedder is not None and files is not None, "the MiniLM weights package is needed: make semantic"
    prior_path = work / "single_pieces.npy"
    if not prior_path.exists():
        np.save(prior_path, _single_pieces(embedder))
    prior = np.load(prior_path)
    lines = (work / "train.txt").read_text().splitlines()
    rows, targets = _teacher_vectors(work, len(lines))
    if limit:  # only the corpus's first `limit` texts
        rows, targets = rows[rows < limit], targets[rows < limit]
    tokenizer = embedder._tokenizer  # type: ignore[attr-defined]
    texts = [tokenizer.encode(lines[row], add_special_tokens=False).ids[:256] for row in rows]
    held = np.zeros(len(texts), bool)
    held[np.random.default_rng(SEED).choice(len(texts), min(2000, len(texts) // 10), replace=False)] = True
    train = [i for i in range(len(texts)) if not held[i] and texts[i]]
    vocabulary = prior.shape[0]
    counts = np.bincount(np.concatenate([texts[i] for i in train]), minlength=vocabulary)
    fitted = np.flatnonzero(counts >= 2)
    index = np.full(vocabulary, -1)
    index[fitted] = np.arange(len(fitted))
    size = len(fitted)
    # Normal equations of the ridge: (AᵀA + λI) E = AᵀY + λ·prior, A[text, piece] = count / length.
    print(f"fitting {size} pieces on {len(train)} texts", flush=True)
    gram = np.zeros((size, size), np.float32)
    right = np.zeros((size, prior.shape[1]), np.float32)
    for start in range(0, len(train), 5000):
        keys, values, pieces, weights, wanted = [], [], [], [], []
        for i in train[start:start + 5000]:
            unique, count = np.unique(texts[i], return_counts=True)
            weight = count / len(texts[i])
            fixed = index[unique] < 0
            target = targets[i] - (weight[fixed, None] * prior[unique[fixed]]).sum(axis=0)
            j, w = index[unique[~fixed]], weight[~fixed]
            keys.append((j[:, None] * size + j[None, :]).ravel())
            values.append((w[:, None] * w[None, :]).ravel())
            pieces.append(j)
            weights.append(w)
            wanted.append(np.repeat(target[None], len(j), axis=0))
        np.add.at(gram.ravel(), np.concatenate(keys), np.concatenate(values).astype(np.float32))
        np.add.at(right, np.concatenate(pieces),
                  np.concatenate(weights)[:, None].astype(np.float32) * np.concatenate(wanted))
    gram[np.arange(size), np.arange(size)] += lam
    right += lam * prior[fitted]
    table = prior.copy()
    # numpy's OpenBLAS once crashed (a segfault inside its LU) on the 24 713-piece system of all
    # 118 k texts, in float32 and float64 alike (that table was fitted on the first 76 000); the
    # 26 861-piece system of the shipped table's 217 280 texts solved (2026-11-29; ~15 GB at peak).
    table[fitted] = np.linalg.solve(gram, right)
    del gram
    np.save(work / "fitted.npy", table)
    if center:  # every row less the mean sentence vector: a text's mean less the same
        table -= np.stack([table[texts[i]].mean(axis=0) for i in train[:20000]]).mean(axis=0)
    # Principal axes of the fitted sentence vectors (uncentred, so dot products keep), cut to `dim`.
    sample = np.stack([table[texts[i]].mean(axis=0) for i in train[:20000]])
    sample /= np.linalg.norm(sample, axis=1, keepdims=True)
    axes = np.linalg.svd(sample, full_matrices=False)[2][:dim]
    rotated = table @ axes.T
    peak = np.abs(rotated).max(axis=1)
    scales = (np.where(peak > 0, peak, 1.0) / 127).astype(np.float32)
    quantised = np.rint(rotated / scales[:, None]).astype(np.int8)
    held_rows = np.flatnonzero(held)
    for name, candidate in (("single pieces (untrained)", prior),
                            ("shipped (fitted, rotated, int8)", quantised * scales[:, None])):
        print(f"{name}: held-out top-10 agreement with MiniLM "
              f"{_agreement(candidate, [texts[i] for i in held_rows], targets[held_rows]):.3f}")
    out.mkdir(exist_ok=True)
    _write_safetensors(out / "model.safetensors",
                       {"embeddings": (quantised, "I8"), "scales": (scales, "F32")})
    (out / "tokenizer.json").write_bytes(files.read("tokenizer.json"))
    print(f"fitted {size} of {vocabulary} pieces on {len(train)} texts (λ {lam}); wrote {out}")


def _agreement(table: Any, texts: list[list[int]], targets: Any) -> float:
    """Of each of 200 held-out texts' 10 nearest others by MiniLM, the share the table also ranks
    in its 10 nearest."""
    import numpy as np

    vectors = np.stack([table[t].mean(axis=0) if t else np.zeros(table.shape[1]) for t in texts])
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    teacher, student = targets[:200] @ targets.T, vectors[:200] @ vectors.T
    shared = [len(set(np.argsort(-teacher[r])[1:11]) & set(np.argsort(-student[r])[1:11]))
              for r in range(200)]
    return float(np.mean(shared)) / 10


def _write_safetensors(path: Path, tensors: dict[str, tuple[Any, str]]) -> None:
    header, blobs, offset = {}, [], 0
    for name, (array, dtype) in tensors.items():
        blob = array.tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with path.open("wb") as file:
        file.write(struct.pack("<Q", len(encoded)) + encoded)
        for blob in blobs:
            file.write(blob)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=("corpus", "teach", "fit", "all", "teach-shard"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/static-training"))
    parser.add_argument("--real", type=int, default=100_000,
                        help="documentation sentences (default %(default)s)")
    parser.add_argument("--wordnet", type=int, default=100_000,
                        help="texts from WordNet's glosses and examples (default %(default)s: all of "
                             "them, as shipped; 0: none)")
    parser.add_argument("--jobs", type=int, default=2, help="teacher processes (default %(default)s)")
    parser.add_argument("--shard", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--onnx", metavar="DIR", help="teach with onnxruntime on the int8 export in DIR")
    parser.add_argument("--lam", type=float, default=0.003, help="the ridge (default %(default)s)")
    parser.add_argument("--dim", type=int, default=256, help="columns kept (default %(default)s)")
    parser.add_argument("--center", action="store_true", help="subtract the mean sentence vector")
    parser.add_argument("--texts", type=int, default=0,
                        help="fit on the corpus's first N texts (default %(default)s: all, as shipped)")
    parser.add_argument("--out", type=Path, default=OUT, help="where the table goes (default %(default)s)")
    args = parser.parse_args()
    if args.stage in ("corpus", "all"):
        corpus(args.work, args.real, args.wordnet)
    if args.stage in ("teach", "all"):
        teach(args.work, args.jobs, args.onnx)
    if args.stage == "teach-shard":
        teach_shard(args.work, args.shard, args.jobs, args.onnx)
    if args.stage in ("fit", "all"):
        fit(args.work, args.lam, args.dim, args.out, args.center, args.texts)


if __name__ == "__main__":
    main()
