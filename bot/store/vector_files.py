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
and then one record per vector in id order: the message id (int64) and the vector (int8).
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
from itertools import islice
from operator import lt
from pathlib import Path

import structlog

log = structlog.get_logger("switchboard.store")

_HEADER = struct.Struct("<4sIq")
_MAGIC = b"SBV2"
_FORMER = (b"SBV1",)  # files of an earlier format: written again, not warned about
# A file larger than this is read and written in a thread, not on the event loop (a 1 MiB read
# from the page cache is ~0.1 ms; a session with tens of thousands of messages would be several).
_ON_LOOP_BYTES = 1 << 20

Vectors = tuple["array[int]", int, bytes]  # ids ascending, size, rows (int8, one after another)


def vectors_dir(database: Path) -> Path:
    """The folder of a database's vector files: beside it, named after it (two databases in one
    folder have the same session keys)."""
    return database.with_name(database.name + ".vectors")


def _record(dim: int) -> struct.Struct:
    return struct.Struct(f"<q{dim}s")


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

    async def read(self, session_key: str, model: str, *, removed: int) -> Vectors | None:
        """The session's vectors as its file holds them; None when there is no usable file, or it
        was written before the session's `removed`-th vector was removed."""
        path = self.path(session_key, model)
        try:
            size = path.stat().st_size
            if size > _ON_LOOP_BYTES:
                return await asyncio.to_thread(_parse, path.read_bytes(), removed)
            return _parse(path.read_bytes(), removed)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self._warn("read", exc)
            return None

    async def write(self, session_key: str, model: str, vectors: Vectors, *, removed: int) -> bool:
        """Replace the session's file with exactly `vectors`, read when the table had removed
        `removed` of the session's (written aside, then renamed); False when it could not be written."""
        ids, dim, rows = vectors
        data = _HEADER.pack(_MAGIC, dim, removed) + _records(ids, dim, rows)
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

    async def append(self, session_key: str, model: str, vectors: Vectors) -> bool:
        """Add newer vectors at the end of the session's file (one that holds every older one);
        False when it could not be appended to."""
        ids, dim, rows = vectors
        try:
            fd = os.open(self.path(session_key, model), os.O_WRONLY | os.O_APPEND)
            with os.fdopen(fd, "ab") as file:
                file.write(_records(ids, dim, rows))
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


def _parse(data: bytes, removed: int) -> Vectors | None:
    """A file's (ids, size, rows); None when it was written before the `removed`-th removal (or in
    an earlier format); ValueError when it is not one whole file of ascending ids."""
    if data[:4] in _FORMER:
        return None
    if len(data) < _HEADER.size:
        raise ValueError("shorter than its header")
    magic, dim, written_after = _HEADER.unpack_from(data)
    if magic == _MAGIC and written_after != removed:
        return None
    if magic != _MAGIC or dim <= 0 or (len(data) - _HEADER.size) % (8 + dim):
        raise ValueError("not a whole vector file (written by something else, or cut short)")
    # Sliced apart in C (a tuple per record and loops over them in Python were ~0.27 ms for a
    # session of 1 000 vectors, read in most builds whose session is not in memory): each id byte
    # is every `record`-th byte from its place.
    record, start = 8 + dim, _HEADER.size
    packed = bytearray(8 * ((len(data) - start) // record))
    for place in range(8):
        packed[place::8] = data[start + place::record]
    ids = array("q", packed)
    if sys.byteorder != "little":
        ids.byteswap()
    if not all(map(lt, ids, islice(ids, 1, None))):
        raise ValueError("ids out of order (two writers appended at once)")
    # The vectors: every record's id bytes deleted, a byte of each per pass (each pass in C).
    rows = bytearray(memoryview(data)[start:])
    for place in range(8):
        del rows[0::record - place]
    return ids, int(dim), bytes(rows)


def _records(ids: array[int], dim: int, rows: bytes) -> bytes:
    record = _record(dim)
    return b"".join(record.pack(message_id, rows[i * dim:(i + 1) * dim]) for i, message_id in enumerate(ids))


def _replace(aside: Path, path: Path, data: bytes) -> None:
    # Private as the database is: vectors say something about what was written.
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    os.replace(aside, path)
