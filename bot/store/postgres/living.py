"""An instance's sign of life on PostgreSQL: a session-level advisory lock, kept while it lives.

The server drops the lock the moment the connection holding it ends, so a daemon killed (or its
host gone with its connections closed) is seen as gone at once (`bot.store.dialect.POSTGRES.gone`): its
leases are taken over without waiting for them to expire. The lock's connection is checked every
CHECK seconds; if it broke while the daemon lives on (a network blip), the lock is taken again on
a new one, so a live daemon is not taken for gone for longer than that.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING

import structlog

from bot.store.dialect import LIVING_LOCKS

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

log = structlog.get_logger("switchboard.store")

# Hash collisions of the instances' names (the locks' other key) only delay a takeover: a dead
# instance sharing a hash with a live one looks alive until its leases expire.
CHECK = 1.0


@asynccontextmanager
async def living_lock(pool: AsyncConnectionPool, instance: str) -> AsyncIterator[None]:
    """Hold `instance`'s lock while the block runs: taken before the block starts (a failure to
    take it then is raised), taken again whenever its connection breaks."""
    first: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    keeper = asyncio.create_task(_keep(pool, instance, first), name="instance lock")
    try:
        await asyncio.shield(first)
        yield
    finally:
        keeper.cancel()
        with suppress(asyncio.CancelledError):
            await keeper


async def _keep(pool: AsyncConnectionPool, instance: str, first: asyncio.Future[None]) -> None:
    key = (LIVING_LOCKS, instance)
    while True:
        try:
            async with pool.connection() as conn:
                await conn.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", key)
                if not first.done():
                    first.set_result(None)
                else:
                    log.info("instance lock taken again", instance=instance)
                try:
                    while True:
                        await asyncio.sleep(CHECK)
                        await conn.execute("SELECT 1")
                finally:
                    with suppress(Exception):  # a broken connection has dropped it already
                        await conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", key)
        except Exception as exc:
            if not first.done():
                first.set_exception(exc)
                return
            log.warning("instance lock lost; taking it again", instance=instance,
                        error=f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(CHECK)
