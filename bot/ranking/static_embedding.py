"""A static sentence encoder: a text's vector is the mean of its word pieces' rows in one table.

The table (bot/ranking/static_model/model.safetensors, made by bench/static_training.py) was fitted so that
this mean regresses onto all-MiniLM-L6-v2's sentence vector of the same text, over sentences that
are not the benchmarks' (the script says which), then rotated to its principal axes, cut to
`dim` columns and stored as int8 rows with one float32 scale each. Encoding is a table lookup: no
forward pass, no BLAS, well under a millisecond a message, against ~0.5 ms a token for MiniLM.
The tokenizer is MiniLM's (bert-base-uncased's word pieces), read by bot/ranking/wordpiece.py (the
same ids as the `tokenizers` package, without its ~15 MiB), so this encoder needs only numpy.
The table is not held in the process: each text's rows are read from the file with pread (~1 µs a
word piece), so its 7.8 MB stay in the kernel's page cache (shared by every process reading it,
dropped under pressure) instead of the daemon's resident memory. A memory map would not do: on
ext4's large folios, touching one row maps 2 MiB, and the whole table is resident after a few
messages (measured).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.ranking.embedding import Embedder
from bot.ranking.encode_threads import single_threaded_blas
from bot.ranking.safetensors_reader import read_safetensors
from bot.ranking.wordpiece import WordPiece

if TYPE_CHECKING:
    from bot.ranking.embedding import ModelFiles, Vectors

MODEL_NAME = "minilm-static"
PACKAGED = Path(__file__).resolve().parent / "static_model"


class StaticEncoder(Embedder):
    """`encode(texts)`: per text, the mean of its word pieces' rows, L2-normalised (float32, `dim`).

    `model_id` names the table and a hash of it and the tokenizer, stored with every vector, so
    its vectors are never compared with MiniLM's (or another table's). `rows` is an int8 array, or
    `TableFile` (rows read when needed).
    """

    def __init__(self, rows: Any, scales: Any, tokenizer: WordPiece, *, model_id: str) -> None:
        import numpy as np

        self.model_id = model_id
        self._rows = rows if isinstance(rows, TableFile) else np.ascontiguousarray(rows, dtype=np.int8)
        self._scales = np.asarray(scales, dtype=np.float32)
        self._vocabulary, self.dim = (int(n) for n in self._rows.shape)
        self._tokenizer = tokenizer

    @classmethod
    def load(cls, files: ModelFiles) -> StaticEncoder:
        """Read the scales and the tokenizer (the rows stay in the file, when it is one); raises
        (OSError, KeyError, ValueError) when they are not usable."""
        single_threaded_blas()
        digest = hashlib.sha256()
        rows: Any
        if files.directory is not None:
            rows, scales = TableFile.open(files.directory / "model.safetensors", digest)
        else:
            with files.open("model.safetensors") as stream:
                tensors = read_safetensors(stream, digest)
            rows, scales = tensors["embeddings"], tensors["scales"]
            if rows.ndim != 2 or rows.dtype.itemsize != 1:
                raise ValueError(f"a static table of shape {rows.shape} ({rows.dtype})")
        raw_tokenizer = files.read("tokenizer.json")
        digest.update(raw_tokenizer)
        tokenizer = WordPiece.from_json(raw_tokenizer)
        if scales.shape != (rows.shape[0],):
            raise ValueError(f"a static table of shape {rows.shape} with {scales.shape} scales")
        return cls(rows, scales, tokenizer, model_id=f"{files.label}@{digest.hexdigest()[:12]}")

    def encode(self, texts: Sequence[str]) -> Vectors:
        """Unit vectors, one row per text, in order (a text without word pieces gets zeros)."""
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            ids = np.fromiter(self._tokenizer.ids(text), dtype=np.int64)
            ids = ids[ids < self._vocabulary]
            if ids.size:
                rows = self._rows.take(ids) if isinstance(self._rows, TableFile) else self._rows[ids]
                vector = (rows * self._scales[ids, None]).sum(axis=0)
                out[row] = vector / max(float(np.linalg.norm(vector)), 1e-12)
        return out


class TableFile:
    """A safetensors file's int8 `embeddings`, read a row at a time (pread: safe from any thread)."""

    def __init__(self, path: Path, offset: int, shape: tuple[int, int]) -> None:
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self._offset = offset
        self.shape = shape

    @classmethod
    def open(cls, path: Path, digest: Any) -> tuple[TableFile, Any]:
        """The rows of `path` (left in the file) and its scales (read); every byte of the file fed
        to `digest`, as read_safetensors does, so the model id is the same either way."""
        import numpy as np

        with path.open("rb") as file:
            while chunk := file.read(1 << 20):
                digest.update(chunk)
            file.seek(0)
            (length,) = struct.unpack("<Q", file.read(8))
            header = json.loads(file.read(length))
            rows, scales = header["embeddings"], header["scales"]
            if rows["dtype"] != "I8" or scales["dtype"] != "F32" or len(rows["shape"]) != 2:
                raise ValueError(f"a static table of {rows['dtype']} rows and {scales['dtype']} scales")
            start, end = scales["data_offsets"]
            file.seek(8 + length + start)
            read_scales = np.frombuffer(file.read(end - start), dtype="<f4").copy()
        count, dim = (int(n) for n in rows["shape"])
        if rows["data_offsets"][1] - rows["data_offsets"][0] != count * dim:
            raise ValueError("the static table's rows do not fill their place in the file")
        return cls(path, 8 + length + int(rows["data_offsets"][0]), (count, dim)), read_scales

    def take(self, ids: Any) -> Any:
        """The rows of `ids` (each below shape[0]), in order, as an int8 array."""
        import numpy as np

        dim = self.shape[1]
        data = b"".join(os.pread(self._fd, dim, self._offset + int(i) * dim) for i in ids)
        if len(data) != len(ids) * dim:
            raise OSError("the static table file was cut short")
        return np.frombuffer(data, dtype=np.int8).reshape(len(ids), dim)

    def __del__(self) -> None:
        os.close(self._fd)
