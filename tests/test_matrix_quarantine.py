"""A Matrix event that can never be stored, against the real Synapse: as a Telegram update, it is
taken again once (the failure may be passing), then quarantined, and the events after it flow."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import closing

from bot.config import Config
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.matrix_user import MatrixUser
from bot.testing.synapse import MatrixAccount
from tests.harness import reply_requests, router_of
from tests.test_matrix import alice, bot_account, joined, matrix_config, matrix_daemon, replies  # noqa: F401


async def test_an_event_the_store_refuses_twice_is_quarantined_and_the_next_one_answered(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser,  # noqa: F811
    api: AnthropicStandIn,
) -> None:
    """The database refuses one message (as a full disk would, but only that one, every time):
    the sync token stays on it for one more try, then it is kept raw in the quarantine with its
    error, and Alice's next message is stored and answered."""
    config = matrix_config()
    # The refusal is made before the daemon starts (it refuses only 'poison'). Made while the
    # daemon ran, with sqlite3's blocking call on the event loop the daemon shares, it met
    # "database is locked" (after its whole busy timeout) in about one run of eight: it came while
    # the daemon's sync loop was between the BEGIN and the COMMIT of its cursor write, which needed
    # this event loop to reach its COMMIT (one statement since; a write of several statements still
    # does). Another process is never in that position (tests/test_matrix_outside_writes.py).
    async with Store.open(config.database_path()):
        pass
    with closing(sqlite3.connect(config.database_path(), isolation_level=None)) as db:
        db.execute("CREATE TRIGGER refuse_poison BEFORE INSERT ON messages WHEN NEW.text = 'poison' "
                   "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
    async with matrix_daemon(config, bot_account.access_token) as daemon:
        room = await alice.create_room(invite=(bot_account.user_id,), direct=True)
        await joined(alice, room, bot_account)
        poison = await alice.send(room, "poison")
        await alice.send(room, "after the poison")
        (answer,) = await replies(alice, room, bot_account)
        await router_of(daemon).idle()

    assert answer["content"]["body"] == "re: after the poison"
    async with Store.open(config.database_path()) as store:
        history = await store.history(f"agent:main:matrix:direct:{alice.user_id}", 10)
        (kept,) = await store.quarantined("matrix")
    assert [m.text for m in history] == ["after the poison", "re: after the poison"]
    provider, ref, raw, error = kept
    assert (provider, ref) == ("matrix", poison)
    assert json.loads(raw)["content"]["body"] == "poison"
    assert "database or disk is full" in error
    assert len(reply_requests(api)) == 1
