"""Pointing discord.py at a Discord stand-in: the class attributes to set, and a patcher that sets
them without pytest.

discord.py has no base-URL option, so its REST base and default gateway are class attributes set
for the time of a test. `DiscordStandIn.patch` takes anything with pytest's `monkeypatch.setattr`
shape; outside pytest (a bench, a script) `Patches` does the same and `undo` puts them back.
"""

from __future__ import annotations

import warnings
from typing import Protocol

import yarl

with warnings.catch_warnings():
    # discord.py imports the stdlib audioop (deprecated since 3.11) for voice, which we never use.
    warnings.simplefilter("ignore", DeprecationWarning)
    import discord

API = "/api/v10"


class Patcher(Protocol):
    """What pointing discord.py somewhere needs: pytest's `monkeypatch` fixture, or `Patches`."""

    def setattr(self, target: object, name: str, value: object) -> None: ...


class Patches:
    """Attributes set for a while: `setattr` remembers what was there, `undo` restores it."""

    def __init__(self) -> None:
        self._saved: list[tuple[object, str, object]] = []

    def setattr(self, target: object, name: str, value: object) -> None:
        self._saved.append((target, name, getattr(target, name)))
        setattr(target, name, value)

    def undo(self) -> None:
        while self._saved:
            target, name, value = self._saved.pop()
            setattr(target, name, value)


async def _no_identify_delay(self: discord.Client, shard_id: int | None, *, initial: bool = False) -> None:
    return None


def point_discord_at(
    patcher: Patcher, base_url: str, gateway_url: str, *, skip_identify_delay: bool = True
) -> None:
    """Point discord.py's REST base (`base_url` + /api/v10) and default gateway at a stand-in.

    discord.py sleeps 5 s before every IDENTIFY but the first (Client.before_identify_hook);
    `skip_identify_delay` makes re-identifying after INVALID_SESSION immediate.
    """
    patcher.setattr(discord.http.Route, "BASE", f"{base_url}{API}")
    patcher.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(gateway_url))
    if skip_identify_delay:
        patcher.setattr(discord.Client, "before_identify_hook", _no_identify_delay)
