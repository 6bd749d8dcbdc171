"""What `/sync` is asked for, and the events a cut timeline left out.

A sync after a long absence returns at most `timeline_limit` events of a room, marked `limited`,
with a `prev_batch` token before them: the events between the previous sync (our kept token) and
that token are fetched with `/messages`, backwards, so the room's messages are handed over in full
and in order. At most `MAX_GAP` are fetched (a warning says when more were skipped): a room that
busy while the daemon was away is answered from its latest messages only.
"""

from __future__ import annotations

import json
from typing import Any

import structlog
from mautrix.api import Method, Path
from mautrix.client import ClientAPI

from channels.matrix.encryption import ENCRYPTED, ENCRYPTION

log = structlog.get_logger("switchboard.matrix")

TIMELINE_LIMIT = 100
MAX_GAP = 1000
_PAGE = 100
_TIMELINE_TYPES = ("m.room.message", ENCRYPTION, ENCRYPTED)


def sync_filter(timeline_limit: int = TIMELINE_LIMIT) -> str:
    """Room messages, memberships and encryption (which the bot refuses, `channels.matrix.encryption`),
    invites; no presence, account data or others' typing."""
    return json.dumps({
        "presence": {"types": []}, "account_data": {"types": []},
        "room": {"timeline": {"limit": timeline_limit, "types": [*_TIMELINE_TYPES, "m.room.member"]},
                 "state": {"types": ["m.room.member", ENCRYPTION], "lazy_load_members": True},
                 "ephemeral": {"types": []}, "account_data": {"types": []}},
    }, separators=(",", ":"))


async def missed_events(client: ClientAPI, room_id: str, prev_batch: str, since: str) -> list[dict[str, Any]]:
    """The room's messages (and encryption turned on or used) between `since` (the previous
    sync's token) and `prev_batch` (where a limited timeline starts), oldest first; at most
    MAX_GAP, the newest of them."""
    found: list[dict[str, Any]] = []
    token: str | None = prev_batch
    types = json.dumps({"types": list(_TIMELINE_TYPES)})
    while token is not None and len(found) < MAX_GAP:
        page = await client.api.request(Method.GET, Path.v3.rooms[room_id].messages, query_params={
            "from": token, "to": since, "dir": "b", "limit": str(_PAGE), "filter": types})
        chunk = page.get("chunk") or []
        found.extend(e for e in chunk if isinstance(e, dict))
        end = page.get("end")
        token = end if chunk and isinstance(end, str) and end != token else None
    if len(found) >= MAX_GAP and token is not None:
        log.warning("matrix gap too long; older messages skipped", room_id=room_id, taken=len(found))
    return list(reversed(found[:MAX_GAP]))
