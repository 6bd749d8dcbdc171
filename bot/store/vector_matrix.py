"""A session's vectors in memory: the matrix a semantic search multiplies, built from a read (of its
vector file or of the `embeddings` table) and extended by newer vectors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.store.vector_files import Vectors

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


@dataclass(slots=True)
class Matrix:
    """One session's vectors of one model: ids ascending, int8 rows, 1/norm per row."""

    ids: npt.NDArray[np.int64]
    rows: npt.NDArray[np.int8]
    scales: npt.NDArray[np.float32]
    signature: tuple[int, int, int]  # (count, largest id, sum of ids) when loaded
    # The rows as float32, as a fresh read computed them for the norms, until the search that
    # follows the read takes them (not kept beyond it: four times the bytes).
    floats: npt.NDArray[np.float32] | None = None
    # Whether the session's vector file held exactly these when they were read or written here:
    # newer vectors are then appended to it, else it is written whole.
    filed: bool = False

    @property
    def nbytes(self) -> int:
        return int(self.ids.nbytes + self.rows.nbytes + self.scales.nbytes)


def holds(vectors: Vectors, signature: tuple[int, int, int]) -> bool:
    """Whether `vectors` are exactly the ones the table counts (their number and sum of ids)."""
    ids = vectors[0]
    return len(ids) == signature[0] and int(ids.sum()) == signature[2]


def vectors_of(listed: Any, data: Any, dim: Any) -> Vectors | None:
    """A vectors read's row as (ids ascending, size, rows); None when they are not all of the
    first one's size."""
    import numpy as np

    if listed is None:
        return np.zeros(0, dtype=np.int64), 0, np.zeros((0, 0), dtype=np.int8)
    ids = np.fromstring(str(listed), dtype=np.int64, sep=",")  # 5x np.array(split)
    data = bytes(data)
    if len(data) != len(ids) * int(dim):
        return None
    rows = np.frombuffer(data, dtype=np.int8).reshape(len(ids), int(dim))
    if len(ids) > 1 and not bool(np.all(ids[1:] > ids[:-1])):  # the aggregate's order: keep pairs
        order = np.argsort(ids, kind="stable")
        ids, rows = ids[order], rows[order]
    return ids, int(dim), rows


def build_matrix(
    ids: Any, dim: int, rows: Any, *, signature: tuple[int, int, int], floats: bool = False
) -> Matrix:
    """The matrix of a read; `floats`: with its float32 rows for the search about to follow."""
    import numpy as np

    # einsum, not linalg.norm(axis=1): the same sums (squares of int8 add up exactly in float32)
    # at a twentieth of the cost, which is most of reading a session's vectors for the first time.
    converted = rows.astype(np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", converted, converted))
    scales = (1.0 / np.maximum(norms, 1e-12)).astype(np.float32)
    return Matrix(ids, rows, scales, signature, converted if floats else None)


def appended(
    cached: Matrix, ids: Any, dim: int, rows: Any, *, signature: tuple[int, int, int]
) -> Matrix | None:
    import numpy as np

    if not len(ids) or dim != cached.rows.shape[1]:
        return None
    extra = build_matrix(ids, dim, rows, signature=signature)
    return Matrix(
        np.concatenate([cached.ids, extra.ids]), np.concatenate([cached.rows, extra.rows]),
        np.concatenate([cached.scales, extra.scales]), signature,
    )
