"""Another process writing to the database beside a running Matrix daemon (as `switchboard pairing
approve` does), against the real Synapse: the daemon never keeps SQLite's write lock long enough
for that writer to meet "database is locked"."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from bot.config import Config
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.matrix_user import MatrixUser
from bot.testing.synapse import MatrixAccount
from tests.harness import router_of
from tests.test_matrix import alice, bot_account, joined, matrix_config, matrix_daemon, replies  # noqa: F401


def write_until(path: Path, done: threading.Event) -> tuple[int, list[str]]:
    """Write transactions back to back until `done`, each on a connection of its own with the
    CLI's busy timeout (5 s): how many, and the errors met."""
    count, errors = 0, []
    while not done.is_set() or count == 0:
        try:
            with closing(sqlite3.connect(path, timeout=5.0, isolation_level=None)) as db:
                db.execute("BEGIN IMMEDIATE")
                db.execute("CREATE TABLE IF NOT EXISTS outside_writes (n INTEGER)")
                db.execute("INSERT INTO outside_writes VALUES (?)", (count,))
                db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            errors.append(str(exc))
        count += 1
    return count, errors


async def test_writes_from_another_process_go_through_while_the_daemon_joins_and_answers(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser,  # noqa: F811
    api: AnthropicStandIn,
) -> None:
    """The writer runs on a thread of its own, as another process would: it never stops the
    daemon's event loop, so each daemon write reaches its COMMIT. (A test that writes with a
    blocking call on the event loop itself, while the daemon is between the statements of a
    transaction, stops the one thing that would end that transaction: the writer then waits out
    its whole busy timeout. That, not the daemon, was the 'database is locked' of the Matrix
    quarantine test.)"""
    config = matrix_config()
    done = threading.Event()
    async with matrix_daemon(config, bot_account.access_token) as daemon:
        writer = asyncio.create_task(asyncio.to_thread(write_until, config.database_path(), done))
        try:
            room = await alice.create_room(invite=(bot_account.user_id,), direct=True)
            await joined(alice, room, bot_account)
            for n in range(3):
                await alice.send(room, f"hello {n}")
            await replies(alice, room, bot_account, count=3)
            await router_of(daemon).idle()
        finally:
            done.set()
            count, errors = await writer

    assert count > 0
    assert errors == []
