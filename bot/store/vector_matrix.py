"""A session's vectors in memory: the matrix a semantic search multiplies, built from a read (of its
vector file or of the `embeddings` table) and extended by newer vectors.

Without numpy (issue 32: the static encoder's daemon then never imports it, ~14 MiB): the rows
stay int8 bytes and the products are simsimd's int8 dot products, exact integers, scaled by the
rows' and the query's norms. A stored query (a turn's request) is int8 itself; a float query (the
history tool's) is split into two int8 parts, its int8 rounding and that rounding's remainder
at 254 steps, so its scores are within ~1e-5 of float arithmetic's.
"""

from __future__ import annotations

import math
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import add, le, mul, truediv
from typing import Any

from bot.store.vector_files import Filed, Vectors

# 1.5 × 2 ** 52: a float of at most 2 ** 51 added to it is rounded to an integer, half to even.
_ROUNDING = 6755399441055744.0

# A session's vectors of a model as `embedding_counts` counts them: how many, the largest id, the
# sum of ids, and how many were ever removed (a copy read before a removal is never the table's).
Signature = tuple[int, int, int, int]


@dataclass(slots=True)
class Matrix:
    """One session's vectors of one model: ids ascending, int8 rows (`dim` bytes each, one after
    another), 1/norm per row."""

    ids: array[int]
    dim: int
    rows: bytes
    scales: array[float]
    signature: Signature  # as the table counted the session's vectors when loaded
    # Whether the session's vector file held exactly these when they were read or written here:
    # newer vectors are then appended to it, else it is written whole.
    filed: bool = False

    @property
    def nbytes(self) -> int:
        return len(self.ids) * 8 + len(self.rows) + len(self.scales) * 8

    def part(self, start: int = 0) -> Filed:
        """The rows from the `start`-th on, with their 1/norms, as a vector file keeps them."""
        if not start:
            return self.ids, self.dim, self.rows, self.scales
        return self.ids[start:], self.dim, self.rows[start * self.dim:], self.scales[start:]

    def nearest(self, query: bytes | Sequence[float], *, floor: int, before_id: int,
                limit: int) -> list[tuple[int, float]]:
        """(id, cosine rounded to six decimals) of the `limit` rows nearest `query` with floor < id <
        before_id, best first, equal scores newer first. `query`: a stored int8 vector (bytes) or
        floats."""
        low, high = bisect_right(self.ids, floor), bisect_left(self.ids, before_id)
        if high <= low or limit <= 0 or not self.dim:
            return []
        block = memoryview(self.rows)[low * self.dim:high * self.dim].cast("b", (high - low, self.dim))
        parts = [query] if isinstance(query, bytes | bytearray) else float_parts(query)
        if any(len(part) != self.dim for part in parts):
            raise ValueError(f"a query of {len(parts[0])} values against vectors of {self.dim}")
        # Per row: dot / |query| / |row|, each step over every row in simsimd's loops, in C (with
        # the float query's parts: dot with the first + dot with the second × 1/254), each step
        # one rounding of the same operation as a Python float's, so the same bits (fused or not:
        # every product is with 1 or added to 0); sorting and comparing are Python's, in C.
        kernels, rows = _simsimd(), high - low
        zeros = array("d", bytes(8 * rows))
        dots = _dots(block, parts[0])
        if len(parts) > 1:
            dots = kernels.wsum(dots, kernels.wsum(_dots(block, parts[1]), zeros, alpha=1 / 254, beta=0.0),
                                alpha=1.0, beta=1.0)
        values = _query_values(parts)
        norm = math.sqrt(sum(map(mul, values, values)))
        scaled = kernels.wsum(dots, zeros, alpha=1.0 / max(norm, 1e-12), beta=0.0)
        scores = _floats(kernels.fma(scaled, self.scales[low:high], zeros, alpha=1.0, beta=0.0)).tolist()
        # Six decimals, as snapshots record them: ties go to the newer message and replay finds
        # the same order. Only a score within 1e-6 of the limit-th can round level with it.
        cut = sorted(scores)[-min(limit, len(scores))] - 1e-6
        near = list(map(le, repeat(cut), scores))
        ranked = zip(map(round, compress(scores, near), repeat(6)), compress(self.ids[low:high], near),
                     strict=True)
        return [(int(i), float(s)) for s, i in sorted(ranked, reverse=True)[:limit]]

    def row(self, message_id: int) -> bytes | None:
        """The stored (int8) vector of `message_id`, or None when the matrix has none for it."""
        at = bisect_left(self.ids, message_id)
        if at == len(self.ids) or self.ids[at] != message_id:
            return None
        return bytes(self.rows[at * self.dim:(at + 1) * self.dim])


def float_parts(query: Sequence[float]) -> list[bytes]:
    """A float vector as two int8 vectors `a` and `b` with query ∝ a + b / 254 (to 1/508 of the
    largest component's 127 steps)."""
    values = query.tolist() if hasattr(query, "tolist") else list(query)
    peak = max(map(abs, values), default=0.0)
    scale = 127.0 / peak if peak > 0 else 0.0
    if not values:
        return [b"", b""]
    if not math.isfinite(sum(values)):
        raise ValueError("a query of values that are not all finite numbers")
    # Each value scaled, rounded half to even as Python's round() does (adding 1.5 × 2 ** 52
    # leaves the integer in the float's low bits: its low byte is the int8), the rounding's
    # remainder scaled by 254 and rounded so: in simsimd's loops, the same bits as map(round, ...).
    kernels, zeros = _simsimd(), array("d", bytes(8 * len(values)))
    magic = array("d", [_ROUNDING]) * len(values)
    scaled = kernels.wsum(array("d", values), zeros, alpha=scale, beta=0.0)
    first = kernels.wsum(scaled, magic, alpha=1.0, beta=1.0)
    rest = kernels.wsum(scaled, kernels.wsum(first, magic, alpha=1.0, beta=-1.0), alpha=1.0, beta=-1.0)
    second = kernels.wsum(kernels.wsum(rest, zeros, alpha=254.0, beta=0.0), magic, alpha=1.0, beta=1.0)
    return [_low_bytes(first), _low_bytes(second)]


def _floats(found: Any) -> memoryview[float]:
    """simsimd's float64 answer as one flat run of floats."""
    return memoryview(found).cast("B").cast("d")


def _low_bytes(rounded: Any) -> bytes:
    # Little-endian: a float's lowest byte first (a big-endian machine's is its last).
    return bytes(memoryview(rounded).cast("B")[0 if sys.byteorder == "little" else 7::8])


def _query_values(parts: list[bytes]) -> list[float]:
    if len(parts) == 1:
        return list(map(float, array("b", parts[0])))
    return list(map(add, array("b", parts[0]), map(truediv, array("b", parts[1]), repeat(254.0))))


def _dots(block: memoryview, part: bytes) -> memoryview[float]:
    """Each row of `block` (n × dim int8) dotted with `part` (dim int8), exact integers (float64)."""
    return _floats(_simsimd().cdist(block, memoryview(part).cast("b", (1, len(part))), metric="dot"))


def _simsimd() -> Any:
    # Typed loosely: its stubs take numpy arrays only, and int8 memoryviews are what it gets here.
    import simsimd

    return simsimd


def holds(ids: array[int], signature: Signature) -> bool:
    """Whether vectors of `ids` are exactly the ones the table counts (their number and sum)."""
    return len(ids) == signature[0] and sum(ids) == signature[2]


def vectors_of(listed: Any, data: Any, dim: Any) -> Vectors | None:
    """A vectors read's row as (ids ascending, size, rows); None when they are not all of the
    first one's size."""
    if listed is None:
        return array("q"), 0, b""
    ids = array("q", map(int, str(listed).split(",")))
    data, size = bytes(data), int(dim)
    if len(data) != len(ids) * size:
        return None
    if any(ids[i] >= ids[i + 1] for i in range(len(ids) - 1)):  # the aggregate's order: keep pairs
        order = sorted(range(len(ids)), key=ids.__getitem__)
        data = b"".join(data[i * size:(i + 1) * size] for i in order)
        ids = array("q", (ids[i] for i in order))
    return ids, size, data


def build_matrix(ids: array[int], dim: int, rows: bytes, *, signature: Signature) -> Matrix:
    """The matrix of a read: its rows' norms (int8 squares summed exactly) worked out."""
    scales = array("d")
    if len(ids) and dim:
        block = memoryview(rows).cast("b", (len(ids), dim))
        found = memoryview(_simsimd().dot(block, block)).cast("B").cast("d")
        # 1 / max(norm, 1e-12) per row, in map's loops (an int8 row's squares are 0 or ≥ 1: the
        # floor matters only where a row is all zeros).
        squares: Iterable[float] = map(max, found, repeat(1e-24)) if 0.0 in found else found
        scales = array("d", map(truediv, repeat(1.0), map(math.sqrt, squares)))
    return Matrix(ids, dim, rows, scales, signature)


def filed_matrix(filed: Filed, *, signature: Signature) -> Matrix:
    """The matrix of a vector file's read (its rows' norms as the file keeps them)."""
    ids, dim, rows, scales = filed
    return Matrix(ids, dim, rows, scales, signature, filed=True)


def appended(
    cached: Matrix, ids: array[int], dim: int, rows: bytes, *, signature: Signature
) -> Matrix | None:
    if not len(ids) or dim != cached.dim:
        return None
    extra = build_matrix(ids, dim, rows, signature=signature)
    return Matrix(cached.ids + extra.ids, dim, cached.rows + extra.rows, cached.scales + extra.scales,
                  signature)
