"""A static sentence encoder: a text's vector is the mean of its word pieces' rows in one table.

The table (bot/ranking/static_model/model.safetensors, made by bench/static_training.py) was fitted so that
this mean regresses onto all-MiniLM-L6-v2's sentence vector of the same text, over sentences that
are not the benchmarks' (the script says which), then rotated to its principal axes, cut to
`dim` columns and stored as int8 rows with one float32 scale each. Encoding is a table lookup: no
forward pass, no BLAS, well under a millisecond a message, against ~0.5 ms a token for MiniLM.
The tokenizer is MiniLM's (bert-base-uncased's word pieces).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.ranking.embedding import Embedder
from bot.ranking.encode_threads import single_threaded_blas
from bot.ranking.safetensors_reader import read_safetensors

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from bot.ranking.embedding import ModelFiles, Vectors

MODEL_NAME = "minilm-static"
PACKAGED = Path(__file__).resolve().parent / "static_model"


class StaticEncoder(Embedder):
    """`encode(texts)`: per text, the mean of its word pieces' rows, L2-normalised (float32, `dim`).

    `model_id` names the table and a hash of it and the tokenizer, stored with every vector, so
    its vectors are never compared with MiniLM's (or another table's).
    """

    def __init__(self, rows: Any, scales: Any, tokenizer: Tokenizer, *, model_id: str) -> None:
        import numpy as np

        self.model_id = model_id
        self._rows = np.ascontiguousarray(rows, dtype=np.int8)
        self._scales = np.asarray(scales, dtype=np.float32)
        self.dim = int(self._rows.shape[1])
        self._tokenizer = tokenizer
        tokenizer.no_padding()
        tokenizer.no_truncation()

    @classmethod
    def load(cls, files: ModelFiles) -> StaticEncoder:
        """Read the table and the tokenizer; raises (OSError, KeyError, ValueError, the tokenizer's
        errors) when they are not usable."""
        single_threaded_blas()
        from tokenizers import Tokenizer

        digest = hashlib.sha256()
        with files.open("model.safetensors") as stream:
            tensors = read_safetensors(stream, digest)
        raw_tokenizer = files.read("tokenizer.json")
        digest.update(raw_tokenizer)
        tokenizer = Tokenizer.from_str(raw_tokenizer.decode("utf-8"))
        rows, scales = tensors["embeddings"], tensors["scales"]
        if rows.ndim != 2 or scales.shape != (rows.shape[0],):
            raise ValueError(f"a static table of shape {rows.shape} with {scales.shape} scales")
        return cls(rows, scales, tokenizer, model_id=f"{files.label}@{digest.hexdigest()[:12]}")

    def encode(self, texts: Sequence[str]) -> Vectors:
        """Unit vectors, one row per text, in order (a text without word pieces gets zeros)."""
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        vocabulary = self._rows.shape[0]
        for row, text in enumerate(texts):
            ids = np.fromiter(self._tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.int64)
            ids = ids[ids < vocabulary]
            if ids.size:
                vector = (self._rows[ids] * self._scales[ids, None]).sum(axis=0)
                out[row] = vector / max(float(np.linalg.norm(vector)), 1e-12)
        return out
