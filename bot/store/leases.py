"""Several daemons on one store: which instance runs a session's work now (a lease), and which
instances are alive (a heartbeat each).

A lease is a row that names its owner until a time: taken when free or expired, renewed while the
work runs, dropped after it. A daemon killed with its lease held loses it when the time passes,
and another takes the session over; sooner where the store can tell that its owner is gone
(`Dialect.gone`: on PostgreSQL, a lock each instance holds on its own connection while it lives).
The statements are plain SQL both SQLite and PostgreSQL run.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Collection, Iterable
from dataclasses import dataclass

from bot.store.database import Database
from bot.store.records import ScheduleRun

# Instances beat this often; one that has not beaten for three beats is taken for stopped.
HEARTBEAT = 5.0
LIVE_WINDOW = 3 * HEARTBEAT


@dataclass(frozen=True, slots=True)
class Instance:
    """A daemon sharing the store, as its last heartbeat left it."""

    id: str
    host: str
    pid: int
    started_at: float
    seen_at: float


class Leases(Database):
    # This daemon's name among those sharing the store (set by the daemon when the store is shared).
    instance: str | None = None

    async def claimants(self) -> tuple[str | None, frozenset[str]]:
        """This instance and the instances alive now, for claiming runs; (None, none) when the store
        is this daemon's alone (runs are then claimed as before)."""
        if not self.shared or self.instance is None:
            return None, frozenset()
        alive = await self.instances(time.time() - LIVE_WINDOW)
        return self.instance, frozenset(i.id for i in alive) | {self.instance}

    @staticmethod
    def at_work_elsewhere(run: ScheduleRun, me: str | None, live: frozenset[str]) -> bool:
        """Whether another live instance claimed `run` (it is that instance's to finish)."""
        return run.owner is not None and run.owner != me and run.owner in live

    async def take_lease(self, session_key: str, owner: str, ttl: float, *, now: float | None = None) -> bool:
        """Whether `owner` holds the session's lease now (taken, or already its own, until now + ttl);
        `now` is the caller's clock (`bot.intake.session_lease.LeaseClock`), wall time by default."""
        now = time.time() if now is None else now
        async with self._one_write():
            rows = await self._conn.execute_fetchall(
                "INSERT INTO session_leases (session_key, owner, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT (session_key) DO UPDATE SET owner = excluded.owner, "
                "expires_at = excluded.expires_at "
                "WHERE session_leases.owner = excluded.owner OR session_leases.expires_at < ? OR "
                f"{self.dialect.gone.format(instance='session_leases.owner')} RETURNING owner",
                (session_key, owner, now + ttl, now),
            )
        return bool(list(rows))

    async def renew_leases(
        self, session_keys: Collection[str], owner: str, ttl: float, *, now: float | None = None
    ) -> set[str]:
        """Extend `owner`'s leases of these sessions until now + ttl, one statement for up to 500:
        the sessions whose lease it still has (another may have taken an expired one over). Only
        extended, never taken afresh: a renewal that crosses its lease being dropped cannot bring
        the lease back. `now` as for `take_lease`."""
        keys = list(session_keys)
        now = time.time() if now is None else now
        kept: set[str] = set()
        for start in range(0, len(keys), 500):
            part = keys[start:start + 500]
            async with self._one_write():
                rows = await self._conn.execute_fetchall(
                    "UPDATE session_leases SET expires_at = ? WHERE owner = ? AND session_key IN "
                    f"({', '.join('?' * len(part))}) RETURNING session_key",
                    (now + ttl, owner, *part),
                )
            kept.update(str(row[0]) for row in rows)
        return kept

    async def drop_lease(self, session_key: str, owner: str) -> None:
        async with self._one_write():
            await self._conn.execute(
                "DELETE FROM session_leases WHERE session_key = ? AND owner = ?", (session_key, owner)
            )

    async def held_sessions(self, session_keys: Collection[str], *, now: float | None = None) -> set[str]:
        """Of these sessions, those whose lease someone holds now (unexpired, its owner not known
        to be gone): one look for every session an instance waits on (`now` as for `take_lease`)."""
        keys = list(session_keys)
        now = time.time() if now is None else now
        held: set[str] = set()
        for start in range(0, len(keys), 500):
            part = keys[start:start + 500]
            rows = await self._conn.execute_fetchall(
                f"SELECT session_key FROM session_leases WHERE session_key IN ({', '.join('?' * len(part))}) "
                f"AND expires_at >= ? AND NOT {self.dialect.gone.format(instance='session_leases.owner')}",
                (*part, now),
            )
            held.update(str(row[0]) for row in rows)
        return held

    def lease_releases(self) -> AsyncIterator[str | None] | None:
        """The keys of the sessions whose lease any instance drops, as they are dropped, and None
        whenever some may have gone untold (at the start, after a lost connection): then every
        waiter looks. None where the store cannot tell (SQLite: a store of one daemon's, whose
        leases are looked at by polling)."""
        return None

    async def still_awaiting(self, message_id: int) -> bool:
        """Whether a request still waits for its reply (another instance may have answered it)."""
        rows = await self._conn.execute_fetchall(
            "SELECT 1 FROM messages WHERE id = ? AND awaiting_reply = 1", (message_id,)
        )
        return bool(list(rows))

    async def forget_leases(self, *, expired_before: float) -> None:
        """Delete leases that expired before then (their owners died holding them; nobody took
        the session since)."""
        async with self._one_write():
            await self._conn.execute("DELETE FROM session_leases WHERE expires_at < ?", (expired_before,))

    async def waiting_ids(self, session_key: str) -> list[int]:
        """The ids of a session's requests still waiting for a reply, oldest first (a cheap look
        before `awaiting_requests` reads them whole)."""
        rows = await self._conn.execute_fetchall(
            "SELECT id FROM messages WHERE awaiting_reply = 1 AND session_key = ? ORDER BY id", (session_key,)
        )
        return [int(row[0]) for row in rows]

    async def left_requests(
        self, message_ids: Iterable[int], *, now: float | None = None
    ) -> tuple[set[int], set[int]]:
        """Of requests left to the instance holding their session's lease: (those still waiting for
        a reply, those of them whose session nobody holds now, free to be taken up); `now` as for
        `take_lease`."""
        ids = list(message_ids)
        waiting: set[int] = set()
        free: set[int] = set()
        now, held = time.time() if now is None else now, self._held("messages.session_key")
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            rows = await self._conn.execute_fetchall(
                f"SELECT id, NOT {held} FROM messages WHERE awaiting_reply = 1 "
                f"AND id IN ({', '.join('?' * len(part))})",
                (now, *part),
            )
            for message_id, unheld in rows:
                waiting.add(int(message_id))
                if unheld:
                    free.add(int(message_id))
        return waiting, free

    async def heartbeat(self, instance: Instance) -> None:
        """Record that `instance` is alive now (its row is created on the first beat)."""
        async with self._one_write():
            await self._conn.execute(
                "INSERT INTO instances (id, host, pid, started_at, seen_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at",
                (instance.id, instance.host, instance.pid, instance.started_at, instance.seen_at),
            )

    async def gone_instances(self, seen_since: float) -> list[str]:
        """The instances that beat since `seen_since` and are known to be gone now (see `Dialect.gone`):
        they died within that time."""
        rows = await self._conn.execute_fetchall(
            "SELECT id FROM instances WHERE seen_at >= ? AND "
            f"{self.dialect.gone.format(instance='instances.id')} ORDER BY id", (seen_since,),
        )
        return [str(row[0]) for row in rows]

    async def instances(self, seen_since: float) -> list[Instance]:
        """The instances that beat since `seen_since`, oldest start first."""
        rows = await self._conn.execute_fetchall(
            "SELECT id, host, pid, started_at, seen_at FROM instances WHERE seen_at >= ? "
            "ORDER BY started_at, id",
            (seen_since,),
        )
        return [Instance(str(r[0]), str(r[1]), int(r[2]), float(r[3]), float(r[4])) for r in rows]
