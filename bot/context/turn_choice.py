"""Which recorded turn an admin command means: numbered from 1, negative counting back from the newest."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from bot.core.errors import BotError

if TYPE_CHECKING:
    from bot.store import SnapshotRecord
    from bot.store.seams import SnapshotReads


def pick_turn(
    records: Sequence[SnapshotRecord], session: str, turn: int, total: int | None = None
) -> SnapshotRecord:
    """Turn `turn` of `total` (from 1; negative counts back from the newest; 0 the newest readable).

    `records` are the readable snapshots; a turn whose snapshot is unreadable is named as such.
    Kept apart from `bot.context.replay` so that `switchboard context` does not import the model SDK.
    """
    newest = total if total is not None else (records[-1].turn if records else 0)
    if newest == 0:
        raise BotError(f"session {session} has no recorded turns yet")
    if turn == 0 and records:
        return records[-1]
    number = turn if turn > 0 else newest + 1 + min(turn, -1)
    for record in records:
        if record.turn == number:
            return record
    if 1 <= number <= newest:
        raise BotError(f"turn {number} of session {session} has an unreadable snapshot "
                       "(it is skipped; see the warning)")
    raise BotError(f"session {session} has turns 1..{newest}; no turn {turn}")


async def read_chosen_turn(store: SnapshotReads, session: str, turn: int) -> tuple[SnapshotRecord, int]:
    """`pick_turn`'s record read from the store, and how many turns the session has: only that
    turn's snapshot is read (all of them only when the newest, asked for as 0, is unreadable)."""
    total = await store.snapshot_count(session)
    number = turn if turn > 0 else total + 1 + min(turn, -1)
    records = await store.snapshot_of_turn(session, number)
    if turn == 0 and not records and total:  # the newest readable one, wherever it is
        records = await store.snapshots(session)
    return pick_turn(records, session, turn, total), total
