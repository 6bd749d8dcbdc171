"""Embeddings: each interactive message's sentence vector, written in the background, searched per session.

A search reads no vectors from the database when nothing changed: each session's vectors of a model
are kept in memory (as stored, int8, with their norms) and in a file beside the database
(`bot.store.vector_files`: one read where the table is a page per few vectors), both checked
against the table by one row of `embedding_counts` (count, largest id, sum of ids and how many were
ever removed in the session, kept by triggers), read with the context floor: a copy read before a
vector was removed never passes for the table again, even when a message stored under a deleted
one's id (SQLite reuses the newest id) brings count, largest id and sum back (issue 38). Vectors
this store saves for a session kept in memory join it at once (and its file), so the next turn's
search reads none; newer ones found by a search are appended; anything else (a deleted message, a
rebuild by another process) reloads the session from the table. The search is
bot.store.vector_matrix's (simsimd, imported only when vectors are read or searched: the `semantic`
extra; no numpy).
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from bot.core.messages import StoredMessage
from bot.store.database import Database
from bot.store.messages import MESSAGE_COLUMNS, rows_to_messages
from bot.store.vector_files import VectorFiles, Vectors, vectors_dir
from bot.store.vector_matrix import Matrix, Signature, appended, build_matrix, filed_matrix, holds, vectors_of

# A vector to keep: (message id, session key, vector bytes, the message text it was encoded from).
VectorRow = tuple[int, str, bytes, str]
# The pending scan walks ids in windows of this size, so one query never holds the connection long.
SCAN_WINDOW = 20_000
# Bytes of vectors kept in memory across sessions; the least recently searched go first.
CACHE_BYTES = 64 * 1024 * 1024

# The session's context floor, (count, largest id, sum of ids, removed) of its vectors of a model
# and the vector of one message, in one row (?1 session, ?2 model, ?3 the message).
_SIGNATURE = (
    "SELECT COALESCE((SELECT context_floor FROM sessions WHERE key = ?1), 0), "
    "COALESCE(c.count, 0), COALESCE(c.largest, 0), COALESCE(c.total, 0), COALESCE(c.removed, 0), "
    "(SELECT vector FROM embeddings WHERE message_id = ?3 AND model = ?2 "
    "AND session_key = ?1) FROM (SELECT 1) AS one "
    "LEFT JOIN embedding_counts c ON c.session_key = ?1 AND c.model = ?2"
)
_PENDING = (
    "m.origin = 'interactive' AND m.fallback = 0 AND NOT EXISTS "
    "(SELECT 1 FROM embeddings e WHERE e.message_id = m.id AND e.model = ?)"
)


class Embeddings(Database):
    """The `embeddings` table: pending work for the embed worker, vectors, and search within a session."""

    _matrices: OrderedDict[tuple[str, str], Matrix] | None = None
    _cached_bytes = 0  # of the matrices in `_matrices`, kept as they come and go
    _files: VectorFiles | None = None

    def vector_files(self) -> VectorFiles:
        """The files each session's vectors are also kept in, beside the database."""
        if self._files is None:
            self._files = VectorFiles(vectors_dir(self.path))
        return self._files

    async def pending_embeddings(
        self, model: str, *, after_id: int = 0, limit: int = 256
    ) -> list[StoredMessage]:
        """Up to `limit` messages with id > `after_id` that need a vector of `model`, oldest first.

        Interactive messages only, and never the fallback reply (it is not something the agent said).
        """
        found: list[StoredMessage] = []
        top = await self._count("SELECT COALESCE(MAX(id), 0) FROM messages")
        start = after_id
        while len(found) < limit and start < top:
            rows = await self._conn.execute_fetchall(
                f"SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.id > ? AND m.id <= ? AND {_PENDING} "
                "ORDER BY m.id LIMIT ?",
                (start, start + SCAN_WINDOW, model, limit - len(found)),
            )
            found.extend(rows_to_messages(rows))
            start += SCAN_WINDOW
        return found

    async def count_pending_embeddings(self, model: str) -> int:
        """How many messages still need a vector of `model` (a scan of the log: for the CLI)."""
        found = await self._conn.execute_fetchall(
            f"SELECT COUNT(*) FROM messages m WHERE {_PENDING}", (model,)
        )
        return int(next(iter(found))[0])

    async def save_embeddings(self, model: str, rows: Sequence[VectorRow]) -> int:
        """Store (message id, session key, vector bytes, text encoded) rows in one transaction;
        returns how many.

        A message's vector of another model is replaced; one of the same model stays as it is (the
        turn and the worker may both embed a request: the first vector is the one searched and
        replayed). A message deleted meanwhile gets none, and so does a row whose text is no longer
        the one encoded: SQLite gives the newest id again to the next message stored after the
        newest was deleted, so a vector encoded before that swap would answer for another row.
        """
        cached = sorted({session_key for _, session_key, _, _ in rows
                         if self._matrices is not None and (session_key, model) in self._matrices})

        async def written(conn: Any) -> tuple[int, dict[str, Signature]]:
            stored = 0
            for message_id, session_key, vector, text in rows:
                cursor = await conn.execute(
                    "INSERT INTO embeddings (message_id, session_key, model, vector) "
                    "SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM messages WHERE id = ?1 "
                    "AND session_key = ?2 AND text = ?5) ON CONFLICT (message_id) DO UPDATE SET "
                    "session_key = excluded.session_key, model = excluded.model, vector = excluded.vector "
                    "WHERE embeddings.model <> excluded.model",
                    (message_id, session_key, model, vector, text),
                )
                stored += max(cursor.rowcount, 0)
            # The signatures as this transaction left them, for the sessions kept in memory.
            signatures = {}
            for key in cached:
                found = await conn.execute_fetchall(_SIGNATURE, (key, model, 0))
                signatures[key] = _signature_of(next(iter(found)))[1]
            return stored, signatures

        # One item of SQLite's thread (a turn's request stored between its two searches waited
        # for a hand-off per statement behind the words' search).
        stored, signatures = await self._batch(written)
        for key, signature in signatures.items():
            await self._extend_cached(key, model, signature, [(i, v) for i, k, v, _ in rows if k == key])
        return stored

    async def _extend_cached(
        self, session_key: str, model: str, signature: Signature, added: list[tuple[int, bytes]],
    ) -> None:
        """Add the vectors just stored to the session's vectors in memory (and its file), when
        they are exactly what the table gained: the session's next search then reads none (the
        worker embeds the turn's messages before the next turn's search, which would read them)."""
        cached = self._matrices.get((session_key, model)) if self._matrices is not None else None
        added.sort()
        if cached is None or not added or not len(cached.ids) or added[0][0] <= int(cached.ids[-1]):
            return
        ids = [message_id for message_id, _ in added]
        if signature != (cached.signature[0] + len(ids), ids[-1], cached.signature[2] + sum(ids),
                         cached.signature[3]):
            return  # not only these (another writer), or not all of them stored: the search reads
        dim = cached.dim
        if any(len(vector) != dim for _, vector in added):
            return
        newer = (array("q", ids), dim, b"".join(vector for _, vector in added))
        matrix = appended(cached, *newer, signature=signature)
        if matrix is None:
            return
        matrix.filed = cached.filed and await self.vector_files().append(
            session_key, model, matrix.part(len(cached.ids)))
        self._keep((session_key, model), matrix)

    async def embedding_of(self, message_id: int, model: str) -> array[float] | None:
        """A message's stored vector of `model` as a unit float32 vector, or None."""
        from bot.ranking.embedding import vectors_from_bytes

        found = await self._conn.execute_fetchall(
            "SELECT vector FROM embeddings WHERE message_id = ? AND model = ?", (message_id, model)
        )
        row = next(iter(found), None)
        if row is None:
            return None
        blob = bytes(row[0])
        return vectors_from_bytes([blob], len(blob))[0]

    async def clear_embeddings(self, model: str | None = None) -> int:
        """Delete every stored vector (or those of one model), for a rebuild; returns how many."""
        async with self._transaction():
            if model is None:
                cursor = await self._conn.execute("DELETE FROM embeddings")
            else:
                cursor = await self._conn.execute("DELETE FROM embeddings WHERE model = ?", (model,))
        self.drop_cached_vectors()
        self.vector_files().clear(model)
        return max(cursor.rowcount, 0)

    def drop_cached_vectors(self) -> None:
        """Forget every session's vectors kept in memory: the next search reads them again."""
        self._matrices = None
        self._cached_bytes = 0

    async def warm_embeddings(self, model: str, *, sessions: int) -> int:
        """Read the vectors of the `sessions` most recently active sessions into memory (as far as the
        cache holds them), so their first search after a start is not the slow one; returns how many."""
        keys = [str(row[0]) for row in await self._conn.execute_fetchall(
            "SELECT key FROM sessions ORDER BY updated_at DESC LIMIT ?", (sessions,))]
        warmed = 0
        for key in reversed(keys):  # the most recent last: the cache drops the least recent first
            _, signature, _ = await self._signature(key, model)
            warmed += await self._session_matrix(key, model, signature) is not None
        return warmed

    async def semantic_matches(
        self, session_key: str, query: Sequence[float], *, model: str, before_id: int, limit: int
    ) -> list[tuple[int, float]]:
        """(message id, cosine) of the session's `limit` vectors of `model` nearest `query`, best first.

        Only messages above the session's context floor and below `before_id`; equal scores put the
        newer message first. `query` is a unit vector (as `Embedder.encode` gives).
        """
        if limit <= 0:
            return []
        floor, signature, _ = await self._signature(session_key, model)
        return await self._nearest(session_key, model, floor, signature, query, before_id, limit)

    async def semantic_matches_of(
        self, session_key: str, message_id: int, *, model: str, limit: int
    ) -> list[tuple[int, float]] | None:
        """`semantic_matches` for a stored message's own vector, before it; None when it has none
        (yet). Its vector comes in the read that checks the session's cache, and is searched as
        stored (int8)."""
        return (await self.semantic_matches_counted(session_key, message_id, model=model, limit=limit))[0]

    async def semantic_matches_counted(
        self, session_key: str, message_id: int, *, model: str, limit: int
    ) -> tuple[list[tuple[int, float]] | None, int]:
        """`semantic_matches_of`, and how many vectors of `model` the session has (from the same
        read): whether encoding a message without one now would find anything."""
        if ((self._matrices is not None and (session_key, model) in self._matrices)
                or self.vector_files().exists(session_key, model)):
            floor, signature, blob = await self._signature(session_key, model, message_id)
        else:
            # Nothing of the session in memory or in a file: its vectors come in the same
            # statement, and are kept even when the request has no vector yet: the search after
            # it is embedded then reads only that one.
            found = await self._conn.execute_fetchall(
                f"SELECT * FROM ({_SIGNATURE}) AS s "
                f"CROSS JOIN ({self.dialect.all_vectors.replace('?3', '?4')}) AS v",
                (session_key, model, message_id, 0),
            )
            row = next(iter(found))
            floor, signature, blob = _signature_of(row[:6])
            await self._session_matrix(session_key, model, signature, read=vectors_of(*row[6:]))
        if blob is None:
            # The request is encoded next (or none of the session is searched): its vectors are
            # read now, so storing its vector adds it to them and the search after reads none.
            if signature[0] and (self._matrices is None or (session_key, model) not in self._matrices):
                await self._session_matrix(session_key, model, signature)
            return None, signature[0]
        if limit <= 0:
            return [], signature[0]
        nearest = await self._nearest(session_key, model, floor, signature, blob, message_id, limit)
        return nearest, signature[0]

    async def semantic_neighbours(
        self, session_key: str, message_ids: Sequence[int], *, model: str, before_id: int, limit: int
    ) -> list[list[tuple[int, float]]]:
        """For each of `message_ids`, `semantic_matches` by its stored vector (as stored, int8):
        the session's older and newer messages alike, below `before_id`, itself left out; [] for
        one without a vector. One read, whatever their number (the session's vectors are kept)."""
        if limit <= 0 or not message_ids:
            return [[] for _ in message_ids]
        floor, signature, _ = await self._signature(session_key, model)
        matrix = await self._session_matrix(session_key, model, signature)
        if matrix is None:
            return [[] for _ in message_ids]
        found: list[list[tuple[int, float]]] = []
        for message_id in message_ids:
            row = matrix.row(message_id)
            near = ([] if row is None else
                    matrix.nearest(row, floor=floor, before_id=before_id, limit=limit + 1))
            found.append([match for match in near if match[0] != message_id][:limit])
        return found

    async def _nearest(
        self, session_key: str, model: str, floor: int, signature: Signature,
        query: bytes | Sequence[float], before_id: int, limit: int,
    ) -> list[tuple[int, float]]:
        matrix = await self._session_matrix(session_key, model, signature)
        if matrix is None:
            return []
        return matrix.nearest(query, floor=floor, before_id=before_id, limit=limit)

    async def _signature(
        self, session_key: str, model: str, message_id: int = 0
    ) -> tuple[int, Signature, bytes | None]:
        """The session's context floor, (count, largest id, sum of ids, removed) of its vectors of `model`,
        and the vector of `message_id` (of this session and model), in one read."""
        found = await self._conn.execute_fetchall(_SIGNATURE, (session_key, model, message_id))
        return _signature_of(next(iter(found)))

    async def _session_matrix(
        self, session_key: str, model: str, signature: Signature,
        *, read: Vectors | None = None,
    ) -> Matrix | None:
        """The session's vectors, from memory when the table still matches, else from its file or
        (partly) the table; `read`: every vector of the session as `_vectors` read it just after
        `signature`, used when it holds exactly the counted vectors."""
        if signature[0] == 0:  # none (yet, or none left after a prune): nor is a file kept
            self._forget(session_key, model)
            self.vector_files().remove(session_key, model)
            return None
        if self._matrices is None:
            self._matrices = OrderedDict()
            self._cached_bytes = 0
        key = (session_key, model)
        cached = self._matrices.get(key)
        if cached is not None and cached.signature == signature:
            self._matrices.move_to_end(key)
            return cached
        files = self.vector_files()
        matrix: Matrix | None = None
        older: Matrix | None = None  # vectors known here that the table has newer ones after
        if read is not None and holds(read[0], signature):
            matrix = build_matrix(*read, signature=signature)
            matrix.filed = await files.write(session_key, model, matrix.part(), removed=signature[3])
        elif (cached is not None and signature[0] > cached.signature[0] and signature[1] > cached.signature[1]
              and signature[3] == cached.signature[3]):
            older = cached
        else:
            stored = await files.read(session_key, model, removed=signature[3])
            if stored is not None and holds(stored[0], signature):
                matrix = filed_matrix(stored, signature=signature)
            elif stored is not None and 0 < len(stored[0]) < signature[0]:
                older = filed_matrix(stored, signature=signature)
        if older is not None and len(older.ids):
            newer = await self._vectors(session_key, model, after_id=int(older.ids[-1]))
            if (len(older.ids) + len(newer[0]) == signature[0]
                    and sum(older.ids) + sum(newer[0]) == signature[2]):
                matrix = appended(older, *newer, signature=signature)
            if matrix is not None:
                matrix.filed = await (files.append(session_key, model, matrix.part(len(older.ids)))
                                      if older.filed else
                                      files.write(session_key, model, matrix.part(), removed=signature[3]))
        if matrix is None:
            read = await self._vectors(session_key, model, after_id=0)
            matrix = build_matrix(*read, signature=signature)
            matrix.filed = await files.write(session_key, model, matrix.part(), removed=signature[3])
        self._keep(key, matrix)
        return matrix

    def _keep(self, key: tuple[str, str], matrix: Matrix) -> None:
        """Keep `matrix` as the session's vectors in memory, the least recently searched dropped
        past CACHE_BYTES."""
        if self._matrices is None:
            self._matrices = OrderedDict()
            self._cached_bytes = 0
        # What is there now (another build may have read it, or dropped it, while this one read).
        previous = self._matrices.pop(key, None)
        if previous is not None:
            self._cached_bytes -= previous.nbytes
        self._matrices[key] = matrix
        self._cached_bytes += matrix.nbytes
        while self._cached_bytes > CACHE_BYTES and len(self._matrices) > 1:
            _, dropped = self._matrices.popitem(last=False)
            self._cached_bytes -= dropped.nbytes

    def _forget(self, session_key: str, model: str) -> None:
        if self._matrices is not None:
            dropped = self._matrices.pop((session_key, model), None)
            if dropped is not None:
                self._cached_bytes -= dropped.nbytes

    async def _vectors(self, session_key: str, model: str, *, after_id: int) -> Vectors:
        """The session's vectors of `model` after `after_id`: ids ascending, their size, and the
        vectors one after another. One row, not one per vector (building a Python row per
        vector was most of a cold read); a vector of another size than the first is left out
        (written by something else, it would break the matrix)."""
        found = await self._conn.execute_fetchall(self.dialect.all_vectors, (session_key, model, after_id))
        read = vectors_of(*next(iter(found)))
        if read is None:
            found = await self._conn.execute_fetchall(self.dialect.vectors, (session_key, model, after_id))
            read = vectors_of(*next(iter(found)))
        assert read is not None  # every vector read has the first one's size
        return read


def _signature_of(row: Any) -> tuple[int, Signature, bytes | None]:
    floor, count, largest, total, removed, blob = row
    signature = (int(count), int(largest), int(total), int(removed))
    return int(floor), signature, None if blob is None else bytes(blob)
