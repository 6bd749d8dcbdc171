"""Vector files: each session's sentence vectors also kept in one file beside the database.

Reading a session's vectors through the store walks a page per few vectors (0.36 ms for a session
of 1 000 messages in a database of 1 M); its file is one read (0.03 ms), off the store's thread.
The `embeddings` table stays the truth: a file is used only when it holds exactly the vectors the
table counts for the session (count and sum of ids, as the table's triggers keep them) and was
written after the session's last removed vector, one holding older vectors only is appended to, and
anything else is written again from the table. A stored vector of a model never changes, and an id
comes back (SQLite hands the newest message's id out again once it is deleted) only after a
removal, so equal counts with no removal since mean equal vectors (issue 38). A file that cannot be
read or written only means reading the table: a search never fails for it, and deleting the folder
is always safe.

A file is a header (magic, vector size, the session's count of removed vectors when it was written)
and then blocks in id order, each as memory holds it, so reading one costs a copy, not a pass per
vector: how many vectors (int64), their message ids (int64), their rows' 1/norm (float64, as
`vector_matrix.build_matrix` works them out) and their vectors (int8, one after another). A file
is written as one block; an append adds one; a file read with more than `_MAX_BLOCKS` is written
again as one. Files of the earlier layouts (one record per vector, SBV2; SBV1) are never parsed
as this one: their magic marks them, and they are written again from the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import os
import secrets
import shutil
import struct
import sys
from array import array
from pathlib import Path

import structlog

log = structlog.get_logger("switchboard.store")

_HEADER = struct.Struct("<4sIq")
_MAGIC = b"SBV3"
_FORMER = (b"SBV1", b"SBV2")  # files of an earlier format: written again, not warned about
_COUNT = struct.Struct("<q")
_MAX_BLOCKS = 8  # a file read with more blocks (appends) is written again as one
# A file larger than this is read and written in a thread, not on the event loop (a 1 MiB read
# from the page cache is ~0.1 ms; a session with tens of thousands of messages would be several).
_ON_LOOP_BYTES = 1 << 20

Vectors = tuple["array[int]", int, bytes]  # ids ascending, size, rows (int8, one after another)
# Vectors and each row's 1/norm, as a file keeps them.
Filed = tuple["array[int]", int, bytes, "array[float]"]


def vectors_dir(database: Path) -> Path:
    """The folder of a database's vector files: beside it, named after it (two databases in one
    folder have the same session keys)."""
    return database.with_name(database.name + ".vectors")


@functools.lru_cache(maxsize=4096)
def _file_path(directory: Path, session_key: str, model: str) -> Path:
    """A session's file (named by hashes: any key is a safe name); memoised, as every search of a
    session asks for it twice."""
    model_part = hashlib.sha256(model.encode()).hexdigest()[:16]
    session_part = hashlib.sha256(session_key.encode()).hexdigest()[:32]
    return directory / model_part / session_part


class VectorFiles:
    """The vector files of one database: read, written whole, appended to, cleared."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._warned = False

    def path(self, session_key: str, model: str) -> Path:
        return _file_path(self.directory, session_key, model)

    def exists(self, session_key: str, model: str) -> bool:
        return self.path(session_key, model).is_file()

    async def read(self, session_key: str, model: str, *, removed: int) -> Filed | None:
        """The session's vectors and their rows' 1/norm as its file holds them; None when there is
        no usable file, or it was written before the session's `removed`-th vector was removed.
        A file of many appended blocks is written again as one."""
        path = self.path(session_key, model)
        try:
            if path.stat().st_size > _ON_LOOP_BYTES:
                parsed = await asyncio.to_thread(_load, path, removed)
            else:
                parsed = _load(path, removed)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self._warn("read", exc)
            return None
        if parsed is None:
            return None
        filed, blocks = parsed
        if blocks > _MAX_BLOCKS:
            await self.write(session_key, model, filed, removed=removed)
        return filed

    async def write(self, session_key: str, model: str, filed: Filed, *, removed: int) -> bool:
        """Replace the session's file with exactly `filed`, read when the table had removed
        `removed` of the session's (written aside, then renamed); False when it could not be written."""
        data = _HEADER.pack(_MAGIC, filed[1], removed) + _block(filed)
        path = self.path(session_key, model)
        aside = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            if len(data) > _ON_LOOP_BYTES:
                await asyncio.to_thread(_replace, aside, path, data)
            else:
                _replace(aside, path, data)
        except OSError as exc:
            self._warn("write", exc)
            return False
        return True

    async def append(self, session_key: str, model: str, filed: Filed) -> bool:
        """Add newer vectors at the end of the session's file (one that holds every older one);
        False when it could not be appended to."""
        try:
            fd = os.open(self.path(session_key, model), os.O_WRONLY | os.O_APPEND)
            with os.fdopen(fd, "ab") as file:
                file.write(_block(filed))
        except FileNotFoundError:  # cleared meanwhile: the next search writes it whole
            return False
        except OSError as exc:
            self._warn("append to", exc)
            return False
        return True

    def remove(self, session_key: str, model: str) -> None:
        """Delete the session's file, if there is one (the session has no vectors left)."""
        with contextlib.suppress(OSError):
            self.path(session_key, model).unlink()

    def clear(self, model: str | None = None) -> None:
        """Delete every file (or those of one model)."""
        target = self.directory if model is None else self.path("", model).parent
        shutil.rmtree(target, ignore_errors=True)

    def _warn(self, doing: str, exc: Exception) -> None:
        # Once per process: a full disk or a read-only folder would otherwise log on every turn.
        if not self._warned:
            self._warned = True
            log.warning(f"cannot {doing} a vector file; reading the vectors from the database",
                        folder=str(self.directory), error=f"{type(exc).__name__}: {exc}")


def _load(path: Path, removed: int) -> tuple[Filed, int] | None:
    """A file's (ids, size, rows, 1/norms) and how many blocks it has; None when it was written
    before the `removed`-th removal (or in an earlier format); ValueError when it is not one whole
    file of blocks in id order."""
    # Each block's parts are read into their arrays as they are: no pass per vector in Python (a
    # file of one record per vector took ~0.35 ms to take apart and its norms to work out, per
    # 1 000 vectors; this is ~0.05 ms).
    with path.open("rb") as file:
        head = file.read(_HEADER.size)
        if head[:4] in _FORMER:
            return None
        if len(head) < _HEADER.size:
            raise ValueError("shorter than its header")
        magic, dim, written_after = _HEADER.unpack(head)
        if magic == _MAGIC and written_after != removed:
            return None
        if magic != _MAGIC or dim <= 0:
            raise ValueError("not a vector file (written by something else)")
        ids, scales, rows, starts = array("q"), array("d"), [], []
        while counted := file.read(_COUNT.size):
            (count,) = _COUNT.unpack(counted) if len(counted) == _COUNT.size else (0,)
            starts.append(len(ids))
            try:
                if count <= 0:
                    raise EOFError
                ids.fromfile(file, count)
                scales.fromfile(file, count)
            except EOFError:
                raise ValueError("not whole (written by something else, or cut short)") from None
            rows.append(file.read(count * dim))
            if len(rows[-1]) != count * dim:
                raise ValueError("cut short")
    if sys.byteorder != "little":
        ids.byteswap()
        scales.byteswap()
    # A block's ids ascend as written (a matrix's); two writers appending at once leave blocks out
    # of order, or one twice.
    if any(ids[start - 1] >= ids[start] for start in starts[1:]):
        raise ValueError("blocks out of order (two writers appended at once)")
    return (ids, int(dim), rows[0] if len(rows) == 1 else b"".join(rows), scales), len(rows)


def _block(filed: Filed) -> bytes:
    ids, dim, rows, scales = filed
    if len(rows) != len(ids) * dim or len(scales) != len(ids):
        raise ValueError("vectors, ids and norms of different lengths")
    if not ids:
        return b""
    if sys.byteorder != "little":
        ids, scales = array("q", ids), array("d", scales)
        ids.byteswap()
        scales.byteswap()
    return _COUNT.pack(len(ids)) + ids.tobytes() + scales.tobytes() + bytes(rows)


def _replace(aside: Path, path: Path, data: bytes) -> None:
    # Private as the database is: vectors say something about what was written.
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    os.replace(aside, path)
