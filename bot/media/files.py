"""Downloaded pictures and files, kept by content hash: a message refers to them by hash.

`KeptFiles` is what a store offers (`Store.kept_files()`). Beside an SQLite file they are files on
disk (`MediaFiles`): `<state dir>/files/ab/abcdef…` (sha256 of the bytes), directories 0700 and
files 0600 like the database itself, the same picture sent twice kept once. Writes go to a
temporary name first and are renamed into place, so a crash never leaves half a file under a
hash. Blocking file work runs in a thread, off the event loop. On PostgreSQL they are rows of the
database (`bot.store.postgres.files`), so every instance sharing it reads what any one received.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Protocol

DIRECTORY = "files"
_HASH = re.compile(r"^[0-9a-f]{64}$")


def files_dir(database: Path) -> Path:
    """Where the files of the daemon using this database live: next to it, in its state directory."""
    return database.parent / DIRECTORY


class KeptFiles(Protocol):
    """Bytes kept under their sha256, whichever store keeps them."""

    async def keep(self, data: bytes) -> str:
        """Store the bytes (once per content) and return their sha256."""
        ...

    async def read(self, sha256: str) -> bytes | None:
        """The bytes kept under a hash; None when they are gone."""
        ...

    async def prune(self, referenced: Collection[str], *, dry_run: bool = False) -> tuple[int, int]:
        """Delete everything kept that no message refers to; (files, bytes) removed (or that would be)."""
        ...


class MediaFiles:
    """The content-addressed file store under one directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path_of(self, sha256: str) -> Path:
        if not _HASH.match(sha256):
            raise ValueError(f"not a sha256 hex digest: {sha256!r}")
        return self.root / sha256[:2] / sha256

    async def keep(self, data: bytes) -> str:
        """Store the bytes (once per content) and return their sha256."""
        return await asyncio.to_thread(self._keep, data)

    def _keep(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        target = self.path_of(digest)
        if target.exists():
            return digest
        for directory in (self.root, target.parent):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(directory, 0o700)
        fd, partial = tempfile.mkstemp(dir=target.parent, prefix=".partial-")  # mode 0600
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, target)
        except BaseException:
            Path(partial).unlink(missing_ok=True)
            raise
        return digest

    async def read(self, sha256: str) -> bytes | None:
        """The bytes kept under a hash; None when the file is gone."""
        return await asyncio.to_thread(self._read, sha256)

    def _read(self, sha256: str) -> bytes | None:
        try:
            return self.path_of(sha256).read_bytes()
        except (OSError, ValueError):
            return None

    async def prune(self, referenced: Collection[str], *, dry_run: bool = False) -> tuple[int, int]:
        """Delete every kept file no message refers to; (files, bytes) removed (or that would be).
        Leftover partial writes go too."""
        return await asyncio.to_thread(self._prune, referenced, dry_run)

    def _prune(self, referenced: Collection[str], dry_run: bool) -> tuple[int, int]:
        if not self.root.is_dir():
            return 0, 0
        keep = set(referenced)
        files = removed = 0
        for path in sorted(self.root.glob("*/*")):
            if not path.is_file() or path.name in keep:
                continue
            size = path.stat().st_size
            if not dry_run:
                path.unlink(missing_ok=True)
            files += 1
            removed += size
        return files, removed
