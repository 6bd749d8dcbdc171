"""Maintenance: pruning old interactive history, the foreign-key check, and counts for status."""

from __future__ import annotations

from bot.core.errors import StoreError
from bot.core.media import decode
from bot.store.database import Database
from bot.store.records import PruneReport

_NO_ID_ABOVE = 2**63 - 1  # SQLite's largest rowid: "no floor"


class Maintenance(Database):
    """Housekeeping over the whole file, for the admin commands and their checks."""

    async def prune_interactive(
        self, before: float, *, keep_recent: int, keep_turns: dict[str, int], dry_run: bool = False
    ) -> PruneReport:
        """Delete interactive messages older than `before` that no limit can still reach.

        Kept in every session: the newest `keep_recent` interactive messages (what a turn reads),
        everything from the `keep_turns[session]`-th newest user message on, requests still
        waiting for a reply, scheduled outputs, and any message another table refers to (other
        than the platform ids and context snapshots, which go with their message).
        """
        async with self._transaction():
            await self._conn.execute(self.dialect.prune_ids)
            await self._conn.execute("DELETE FROM prune_ids")
            guards = "".join(
                f" AND id NOT IN (SELECT {column} FROM {table} WHERE {column} IS NOT NULL)"
                for table, column in await self._references_to_messages()
            )
            keys = [str(row[0]) for row in await self._conn.execute_fetchall("SELECT key FROM sessions")]
            for key in keys:
                floor = await self._nth_newest_id(key, keep_recent, users_only=False)
                turns = keep_turns.get(key, 0)
                if turns > 0:
                    floor = min(floor, await self._nth_newest_id(key, turns, users_only=True))
                await self._conn.execute(
                    "INSERT INTO prune_ids SELECT id FROM messages WHERE session_key = ? "
                    "AND origin = 'interactive' AND created_at < ? AND id < ? AND awaiting_reply = 0"
                    + guards,
                    (key, before, floor),
                )
            per_session = {
                str(row[0]): int(row[1]) for row in await self._conn.execute_fetchall(
                    "SELECT session_key, COUNT(*) FROM messages WHERE id IN (SELECT id FROM prune_ids) "
                    "GROUP BY session_key ORDER BY session_key"
                )
            }
            snapshot_filter = (
                "FROM context_snapshots WHERE request_message_id IN (SELECT id FROM prune_ids) "
                "OR reply_message_id IN (SELECT id FROM prune_ids)"
            )
            snapshots = await self._count(f"SELECT COUNT(*) {snapshot_filter}")
            if not dry_run:
                await self._conn.execute(f"DELETE {snapshot_filter}")
                await self._conn.execute(
                    "DELETE FROM provider_messages WHERE message_id IN (SELECT id FROM prune_ids)")
                for key in per_session:
                    await self._conn.execute(
                        "UPDATE sessions SET message_count = message_count - (SELECT COUNT(*) "
                        "FROM messages WHERE session_key = ?1 AND id IN (SELECT id FROM prune_ids)), "
                        "user_turns = user_turns - (SELECT COUNT(*) FROM messages WHERE session_key = ?1 "
                        "AND role = 'user' AND id IN (SELECT id FROM prune_ids)) WHERE key = ?1",
                        (key,),
                    )
                await self._conn.execute("DELETE FROM messages WHERE id IN (SELECT id FROM prune_ids)")
            await self._conn.execute("DELETE FROM prune_ids")
        return PruneReport(per_session, snapshots, dry_run)

    async def _nth_newest_id(self, session_key: str, n: int, *, users_only: bool) -> int:
        """Id of the n-th newest interactive (user) message of a session; 0 when it has fewer."""
        if n <= 0:
            return _NO_ID_ABOVE
        found = await self._conn.execute_fetchall(
            "SELECT id FROM messages WHERE session_key = ? AND origin = 'interactive'"
            + (" AND role = 'user'" if users_only else "") + " ORDER BY id DESC LIMIT 1 OFFSET ?",
            (session_key, n - 1),
        )
        row = next(iter(found), None)
        return int(row[0]) if row else 0

    async def referenced_files(self) -> set[str]:
        """The hash of every kept file a stored message refers to (what `db prune` must keep)."""
        rows = await self._conn.execute_fetchall("SELECT id, media FROM messages WHERE media IS NOT NULL")
        found: set[str] = set()
        for message_id, media in rows:
            try:
                found.update(m.sha256 for m in decode(media) if m.sha256)
            except (ValueError, TypeError, KeyError) as exc:
                # Unreadable: its files cannot be known, so none is safe to call unreferenced.
                raise StoreError(f"message #{message_id} has unreadable media records ({exc}); "
                                 "no file was removed") from exc
        return found

    async def message_count(self) -> int:
        return await self._count("SELECT COUNT(*) FROM messages")
