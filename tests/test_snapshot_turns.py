"""One recorded turn read alone: the turn `switchboard context`, `replay` and the console's turn page
show is the one `pick_turn` picks from all of a session's snapshots, with the same refusals, but
only its own snapshot is read and parsed (a session of thousands of turns costs one)."""

from __future__ import annotations

import pytest

from bot.context.turn_choice import pick_turn, read_chosen_turn
from bot.core.errors import BotError
from bot.core.messages import ChatRef, InboundMessage
from bot.core.session_key import parse
from bot.store import SnapshotRecord, Store
from tests import sql

KEY = "agent:main:telegram:direct:42"


async def record_turns(store: Store, key: str, count: int) -> None:
    """`count` turns of `key`, each a stored message and its snapshot (numbered in it as `n`)."""
    chat = ChatRef("telegram", key.rsplit(":", 1)[1])
    for n in range(1, count + 1):
        request = await store.append_inbound(InboundMessage(
            session_key=parse(key), chat=chat, sender_id=chat.chat_id, sender_name="Ada", text=f"turn {n}",
            provider_message_id=str(n)))
        assert request is not None
        await store.record_snapshot(key, request.id, None, {"entries": [], "status": "ok", "n": n}, f"h{n}")


async def chosen_from_all(store: Store, turn: int) -> SnapshotRecord | str:
    try:
        return pick_turn(await store.snapshots(KEY), KEY, turn, await store.snapshot_count(KEY))
    except BotError as exc:
        return str(exc)


async def chosen_alone(store: Store, turn: int) -> SnapshotRecord | str:
    try:
        record, total = await read_chosen_turn(store, KEY, turn)
    except BotError as exc:
        return str(exc)
    assert total == await store.snapshot_count(KEY)
    return record


@pytest.mark.parametrize("newest_readable", [True, False])
async def test_a_turn_read_alone_is_the_turn_picked_from_all(store: Store, newest_readable: bool) -> None:
    """Every turn number, from before the first to past the newest, negative and 0 (the newest
    readable): the same record or the same refusal as picking from every snapshot, an unreadable
    turn (the 3rd, and the newest in one run) named as such; another session's turns never counted."""
    assert await chosen_alone(store, 0) == await chosen_from_all(store, 0)  # none recorded yet
    await record_turns(store, KEY, 5)
    await record_turns(store, "agent:main:telegram:direct:7", 5)
    ids = [row[0] for row in await sql.rows(store, "SELECT id FROM context_snapshots WHERE session_key = ? "
                                                   "ORDER BY id", (KEY,))]
    unreadable = [ids[2]] + ([] if newest_readable else [ids[4]])
    for at in unreadable:
        await sql.execute(store, "UPDATE context_snapshots SET snapshot = '{not json' WHERE id = ?", (at,))

    for turn in range(-7, 8):
        alone, from_all = await chosen_alone(store, turn), await chosen_from_all(store, turn)
        assert alone == from_all, turn
    assert "turn 3 of session" in str(await chosen_alone(store, 3))
    newest = await chosen_alone(store, 0)
    assert isinstance(newest, SnapshotRecord) and newest.turn == (5 if newest_readable else 4)


async def test_only_the_chosen_turns_snapshot_is_read(store: Store) -> None:
    """Turn 2 of a session of 40: every statement that reads snapshots reads one row (a page of one
    turn once parsed all of the session's, the slow path of the turn page in a long session)."""
    await record_turns(store, KEY, 40)
    async with sql.traced(store) as statements:
        record, total = await read_chosen_turn(store, KEY, 2)
    assert (record.turn, record.snapshot["n"], total) == (2, 2, 40)
    reads = [s for s in statements if "snapshot" in s.lower() and "count(" not in s.lower()]
    assert reads and all("LIMIT 1" in s.upper() for s in reads), statements
