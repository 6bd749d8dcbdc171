"""Encrypted rooms, which the bot cannot read: where in a room's new events encryption begins.

The bot holds no olm keys, so an `m.room.encrypted` event is opaque to it. A room is refused once
it is encrypted: at the invite (its `invite_state` carries `m.room.encryption`), or when encryption
is turned on after the bot joined (the `m.room.encryption` state event in the timeline, or in the
room's `state` when the timeline was cut or the room is new to the sync), or at its first
encrypted event. The channel then says so in one line, logs one warning and leaves; the plain
messages before that point are taken as usual, and no encrypted event is ever stored.
"""

from __future__ import annotations

from typing import Any

ENCRYPTION = "m.room.encryption"  # the state event that turns encryption on, for good
ENCRYPTED = "m.room.encrypted"  # an encrypted event, whatever it holds
ENCRYPTED_NOTICE = ("I can't read end-to-end encrypted rooms yet, so I'm leaving this one. "
                    "Invite me to a room without encryption.")


def encryption_start(events: list[Any], state: list[Any]) -> tuple[int, dict[str, Any]] | None:
    """Where a room's new timeline (`events`, oldest first) turns encrypted, and the event that
    says so: its first `m.room.encryption` or `m.room.encrypted` event; index 0 and the state event
    when only `state` (the room's state before the timeline) holds encryption; None for a room still
    in plain text."""
    kinds = [event.get("type") if isinstance(event, dict) else None for event in events]
    if ENCRYPTION not in kinds:
        # Encrypted before this timeline began: in a gap, or before the bot's first sync.
        for event in state:
            if isinstance(event, dict) and event.get("type") == ENCRYPTION:
                return 0, event
    for index, kind in enumerate(kinds):
        if kind in (ENCRYPTION, ENCRYPTED):
            return index, events[index]
    return None
