"""Access policy: who may talk to the bot, decided before anything is stored or answered."""

from __future__ import annotations

from collections.abc import Collection

from bot.config import DmPolicy, Policy

TEXT_ONLY_REPLY = "I can only read text, pictures and files for now."


def refused_dm_reply(user_id: str) -> str:
    """The notice a refused DM gets: it names the sender's id so the admin can allow it."""
    return f"Sorry, I'm not set up to talk with you here. Your user id is {user_id}; ask the admin to add it."


APPROVED_REPLY = "You're in: the admin approved your pairing request. Write to me again and I'll answer."


def pairing_reply(code: str, user_id: str, valid_minutes: int) -> str:
    """The notice a stranger gets under `dm_policy = "pairing"`: the code to pass on, and their id."""
    return (
        f"Hi! I don't know you yet. Your pairing code is {code} (valid for {valid_minutes} minutes) "
        f"and your user id is {user_id}. Send the code to the admin; once they approve it, write "
        "to me again."
    )


def allows(policy: Policy | DmPolicy, allowlist: Collection[str], who: str) -> bool:
    """`open` lets anyone in, `disabled` no one, `allowlist` (and `pairing`, before the store is
    asked) only listed ids (fails closed)."""
    if policy == "open":
        return True
    if policy == "disabled":
        return False
    return who in allowlist


class RefusalNotices:
    """Refused DMs get one polite line per user per run, never a stream of them."""

    def __init__(self) -> None:
        self._told: set[tuple[str, str]] = set()

    def first_time(self, provider: str, user_id: str) -> bool:
        key = (provider, user_id)
        if key in self._told:
            return False
        self._told.add(key)
        return True
