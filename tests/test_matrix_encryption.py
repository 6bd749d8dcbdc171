"""Where a Matrix room's new events turn encrypted (channels/matrix/encryption.py), on the JSON a
sync returns."""

from __future__ import annotations

from typing import Any

from channels.matrix.encryption import encryption_start


def event(kind: str, event_id: str, **content: Any) -> dict[str, Any]:
    return {"type": kind, "event_id": event_id, "sender": "@alice:hs", "content": content}


PLAIN = event("m.room.message", "$1", msgtype="m.text", body="hi")
TURNED_ON = event("m.room.encryption", "$2", algorithm="m.megolm.v1.aes-sha2")
SEALED = event("m.room.encrypted", "$3", algorithm="m.megolm.v1.aes-sha2", ciphertext="AwgA")
LATER = event("m.room.message", "$4", msgtype="m.text", body="after")


def test_a_room_in_plain_text_is_not_encrypted() -> None:
    """Messages and memberships alone: nothing to refuse."""
    assert encryption_start([PLAIN, event("m.room.member", "$5", membership="join")], []) is None


def test_encryption_starts_at_the_state_event_that_turns_it_on() -> None:
    """What came before the `m.room.encryption` event is readable; it and all after are not."""
    assert encryption_start([PLAIN, TURNED_ON, SEALED, LATER], []) == (1, TURNED_ON)


def test_the_first_encrypted_event_is_enough() -> None:
    """A timeline that holds an encrypted event but not the state event (cut off) is refused there."""
    assert encryption_start([PLAIN, SEALED, LATER], []) == (1, SEALED)


def test_encryption_in_the_state_before_the_timeline_covers_all_of_it() -> None:
    """Turned on in a gap, or before the bot's first sync: even a plain message after it is not read."""
    assert encryption_start([LATER, SEALED], [TURNED_ON]) == (0, TURNED_ON)
    assert encryption_start([], [TURNED_ON]) == (0, TURNED_ON)


def test_the_state_event_in_the_timeline_is_where_it_starts() -> None:
    """When the timeline holds the state event too, the messages before it are still read."""
    assert encryption_start([PLAIN, TURNED_ON], [TURNED_ON]) == (1, TURNED_ON)
