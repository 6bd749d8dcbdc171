"""Leases that wake on PostgreSQL: a dropped lease is told to every instance by NOTIFY.

Dropping a lease notifies channel CHANNEL with the session's key, in the dropping statement's own
transaction, so the notice goes out when the row is gone, never before. Each instance listens on
one connection of its own (`lease_releases`), not from the pool: a chat waiting on another
instance's lease wakes when it is let go instead of asking again and again. What no notice tells (a
holder killed, whose lease ends by its instance's lock or by time; a notice lost with a broken
connection) the waiting instance finds by its one periodic look (`bot.intake.session_lease`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import structlog

from bot.core.errors import describe
from bot.store.leases import Leases

if TYPE_CHECKING:
    from bot.store.postgres.connection import PgConnection

log = structlog.get_logger("switchboard.store")

CHANNEL = "switchboard_leases"
# After the listening connection broke, the next try this much later.
RECONNECT = 1.0


class PgLeaseSignals(Leases):
    """`drop_lease` with its notice, and the listening end."""

    _pg: PgConnection

    async def drop_lease(self, session_key: str, owner: str) -> None:
        # One statement: its own transaction (autocommit), whose commit sends the notice.
        await self._conn.execute(
            "WITH dropped AS (DELETE FROM session_leases WHERE session_key = ? AND owner = ? "
            f"RETURNING session_key) SELECT pg_notify('{CHANNEL}', session_key) FROM dropped",
            (session_key, owner),
        )

    async def lease_releases(self) -> AsyncIterator[str | None]:
        """See `Leases.lease_releases`: None first once listening, and again after every reconnection."""
        import psycopg

        pool = self._pg.pool
        # The pool's own settings (`PostgresStore.connect` gives it a url and a dict).
        url, kwargs = pool.conninfo, pool.kwargs
        assert isinstance(url, str) and isinstance(kwargs, dict)
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(url, connect_timeout=10, **kwargs)
                async with conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    yield None
                    async for notice in conn.notifies():
                        yield notice.payload
            except psycopg.Error as exc:
                log.warning("lease notices not received; looking instead until listening again",
                            error=describe(exc))
            yield None
            await asyncio.sleep(RECONNECT)
