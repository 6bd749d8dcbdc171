"""A static sentence encoder: a text's vector is the mean of its word pieces' rows in one table.

The table (bot/ranking/static_model/model.safetensors, made by bench/static_training.py) was fitted so that
this mean regresses onto all-MiniLM-L6-v2's sentence vector of the same text, over sentences that
are not the benchmarks' (the script says which), then rotated to its principal axes, cut to
`dim` columns and stored as int8 rows with one float32 scale each. Encoding is a table lookup: no
forward pass, no BLAS, well under a millisecond a message, against ~0.5 ms a token for MiniLM.
The tokenizer is MiniLM's (bert-base-uncased's word pieces), read by bot/ranking/wordpiece.py (the
same ids as the `tokenizers` package, without its ~15 MiB). No numpy either (~14 MiB): a piece's
row times its scale is made a float32 row once and kept for the most recent `CACHED_ROWS` pieces
(~1 MiB), and the rows are summed by simsimd's float32 `wsum`.
The table is not held in the process: each text's rows are read from the file with pread (~1 µs a
word piece), so its 7.8 MB stay in the kernel's page cache (shared by every process reading it,
dropped under pressure) instead of the daemon's resident memory. A memory map would not do: on
ext4's large folios, touching one row maps 2 MiB, and the whole table is resident after a few
messages (measured).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
import sys
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from itertools import repeat
from operator import mul, truediv
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.ranking.embedding import Embedder
from bot.ranking.encode_threads import single_threaded_blas
from bot.ranking.safetensors_reader import read_safetensors
from bot.ranking.wordpiece import WordPiece

if TYPE_CHECKING:
    from bot.ranking.embedding import ModelFiles, Vectors

MODEL_NAME = "minilm-static"
# Word pieces whose float rows are kept (a KiB each): chat repeats its common pieces.
CACHED_ROWS = 1024
PACKAGED = Path(__file__).resolve().parent / "static_model"


class StaticEncoder(Embedder):
    """`encode(texts)`: per text, the mean of its word pieces' rows, L2-normalised (float32, `dim`).

    `model_id` names the table and a hash of it and the tokenizer, stored with every vector, so
    its vectors are never compared with MiniLM's (or another table's). `rows` is an int8 array, or
    `TableFile` (rows read when needed).
    """

    mean_of_words = True

    def __init__(self, rows: Any, scales: Any, tokenizer: WordPiece, *, model_id: str) -> None:
        self.model_id = model_id
        # Rows in a file, or in memory (an int8 array of the whole table, as read from a zip).
        self._rows = rows if isinstance(rows, TableFile) else TableBytes(bytes(rows.tobytes()), rows.shape)
        self._scales = array("f", scales.tolist() if hasattr(scales, "tolist") else scales)
        self._vocabulary, self.dim = (int(n) for n in self._rows.shape)
        self._tokenizer = tokenizer
        self._floats: OrderedDict[int, array[float]] = OrderedDict()
        self._lock = threading.Lock()

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
        if len(scales) != rows.shape[0]:
            raise ValueError(f"a static table of shape {tuple(rows.shape)} with {len(scales)} scales")
        return cls(rows, scales, tokenizer, model_id=f"{files.label}@{digest.hexdigest()[:12]}")

    def encode(self, texts: Sequence[str]) -> Vectors:
        """Unit vectors, one float32 row per text, in order (a text without word pieces gets zeros)."""
        import simsimd

        kernels: Any = simsimd  # its stubs take numpy arrays only; these are float32 arrays
        out = []
        for text in texts:
            total: Any = array("f", bytes(4 * self.dim))
            for piece in self._tokenizer.ids(text):
                if piece < self._vocabulary:
                    # simsimd's float32 answer summed into as it is, copied to an array once after
                    # the last piece (a copy per piece was a third of encoding a request's ~150
                    # pieces). (Not `out=total`: simsimd 6.5 then drops a reference to None it
                    # never took.)
                    total = kernels.wsum(total, self._float_row(piece))
            total = array("f", memoryview(total).tobytes())
            norm = math.sqrt(kernels.dot(total, total)) if any(total) else 0.0
            out.append(array("f", list(map(truediv, total, repeat(norm)))) if norm > 0 else total)
        return out

    def _float_row(self, piece: int) -> array[float]:
        """The piece's row times its scale, in float32 (as numpy multiplied them)."""
        with self._lock:  # the turns' and the background's encoding threads share the rows
            row = self._floats.get(piece)
            if row is not None:
                self._floats.move_to_end(piece)
                return row
        scale = self._scales[piece]
        row = array("f", list(map(mul, array("b", self._rows.row(piece)), repeat(scale))))
        with self._lock:
            self._floats[piece] = row
            if len(self._floats) > CACHED_ROWS:
                self._floats.popitem(last=False)
        return row


class TableBytes:
    """A whole table's int8 rows in memory (one bytes object)."""

    def __init__(self, data: bytes, shape: tuple[int, int]) -> None:
        self._data = data
        self.shape = (int(shape[0]), int(shape[1]))

    def row(self, index: int) -> bytes:
        dim = self.shape[1]
        return self._data[index * dim:(index + 1) * dim]


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
            read_scales = array("f", file.read(end - start))
            if sys.byteorder == "big":
                read_scales.byteswap()
        count, dim = (int(n) for n in rows["shape"])
        if rows["data_offsets"][1] - rows["data_offsets"][0] != count * dim:
            raise ValueError("the static table's rows do not fill their place in the file")
        return cls(path, 8 + length + int(rows["data_offsets"][0]), (count, dim)), read_scales

    def row(self, index: int) -> bytes:
        """Row `index` (below shape[0]) as `dim` int8 bytes."""
        dim = self.shape[1]
        data = os.pread(self._fd, dim, self._offset + index * dim)
        if len(data) != dim:
            raise OSError("the static table file was cut short")
        return data

    def __del__(self, close: Any = os.close) -> None:
        close(self._fd)  # bound now: at the interpreter's exit the module's `os` may be gone
