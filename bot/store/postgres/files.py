"""Kept pictures and files on PostgreSQL: a row per content hash in `kept_files`, in the database
every instance shares, so a daemon answering a request another instance received (on another
host) reads its pictures too. The same `KeptFiles` as the files beside an SQLite database."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.store.postgres.connection import PgConnection

# Rows deleted per statement when pruning.
BATCH = 500


class PgKeptFiles:
    """`bot.media.files.KeptFiles` over the `kept_files` table."""

    def __init__(self, conn: PgConnection) -> None:
        self._conn = conn

    async def keep(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        await self._conn.execute(
            "INSERT INTO kept_files (sha256, data, created_at) VALUES (?, ?, ?) "
            "ON CONFLICT (sha256) DO NOTHING",
            (digest, data, time.time()),
        )
        return digest

    async def read(self, sha256: str) -> bytes | None:
        rows = await self._conn.execute_fetchall("SELECT data FROM kept_files WHERE sha256 = ?", (sha256,))
        return next((bytes(row[0]) for row in rows), None)

    async def prune(self, referenced: Collection[str], *, dry_run: bool = False) -> tuple[int, int]:
        keep = set(referenced)
        rows = await self._conn.execute_fetchall("SELECT sha256, octet_length(data) FROM kept_files")
        unreferenced = [(str(sha256), int(size)) for sha256, size in rows if sha256 not in keep]
        if not dry_run:
            for start in range(0, len(unreferenced), BATCH):
                hashes = [sha256 for sha256, _ in unreferenced[start:start + BATCH]]
                await self._conn.execute("DELETE FROM kept_files WHERE sha256 = ANY(?)", (hashes,))
        return len(unreferenced), sum(size for _, size in unreferenced)
