"""A person on the test homeserver: the client-server API spoken directly with httpx, independent of
the library the channel uses, so a test sees what any Matrix client would.

`async with MatrixUser(server.base_url, server.register("alice")) as alice:` then create rooms,
invite, send (threads, mentions, a chosen transaction id), upload and send files, and wait for
what arrives: `wait_for` long-polls `/sync` and returns as soon as the condition holds, never
sleeping on a clock.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from bot.testing.synapse import MatrixAccount

T = TypeVar("T")
POLL_MS = 5_000


class MatrixUser:
    """One account's client: `send`, `create_room`, `invite`, `events`, `wait_for`."""

    def __init__(self, base_url: str, account: MatrixAccount) -> None:
        self.account = account
        self.user_id = account.user_id
        self._http = httpx.AsyncClient(base_url=f"{base_url}/_matrix/client/v3",
                                       headers={"Authorization": f"Bearer {account.access_token}"},
                                       timeout=httpx.Timeout(POLL_MS / 1000 + 30))
        self._since: str | None = None
        self._fresh = 0
        self._media = f"{base_url}/_matrix/media/v3"

    async def __aenter__(self) -> MatrixUser:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._http.aclose()

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None,
                   params: dict[str, str] | None = None) -> Any:
        answer = await self._http.request(method, path, json=body, params=params)
        if answer.status_code >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {answer.status_code} {answer.text[:300]}")
        return answer.json()

    async def create_room(self, *, invite: tuple[str, ...] = (), direct: bool = False,
                          name: str | None = None) -> str:
        body: dict[str, Any] = {"invite": list(invite), "is_direct": direct,
                                "preset": "trusted_private_chat" if direct else "private_chat"}
        if name is not None:
            body["name"] = name
        return str((await self.call("POST", "/createRoom", body))["room_id"])

    async def invite(self, room_id: str, user_id: str) -> None:
        await self.call("POST", f"/rooms/{quote(room_id)}/invite", {"user_id": user_id})

    async def join(self, room_id: str) -> None:
        await self.call("POST", f"/rooms/{quote(room_id)}/join", {})

    async def send(self, room_id: str, body: str, *, thread_root: str | None = None,
                   mentions: tuple[str, ...] | None = None, txn_id: str | None = None) -> str:
        """A text message (in `thread_root`'s thread; with intentional `mentions`); its event id."""
        content: dict[str, Any] = {"msgtype": "m.text", "body": body}
        if thread_root is not None:
            content["m.relates_to"] = {"rel_type": "m.thread", "event_id": thread_root,
                                       "is_falling_back": True,
                                       "m.in_reply_to": {"event_id": thread_root}}
        if mentions is not None:
            content["m.mentions"] = {"user_ids": list(mentions)}
        return await self.send_content(room_id, content, txn_id=txn_id)

    async def send_content(self, room_id: str, content: dict[str, Any], *, txn_id: str | None = None,
                           kind: str = "m.room.message") -> str:
        txn = quote(txn_id or uuid.uuid4().hex, safe="")
        sent = await self.call("PUT", f"/rooms/{quote(room_id)}/send/{kind}/{txn}", content)
        return str(sent["event_id"])

    async def upload(self, data: bytes, mime: str, name: str) -> str:
        """A file put in the media repository (`/_matrix/media/v3/upload`); its `mxc://` URI."""
        answer = await self._http.post(f"{self._media}/upload", content=data, params={"filename": name},
                                       headers={"Content-Type": mime})
        if answer.status_code >= 300:
            raise RuntimeError(f"upload: HTTP {answer.status_code} {answer.text[:300]}")
        return str(answer.json()["content_uri"])

    async def send_file(self, room_id: str, data: bytes, mime: str, name: str, *, msgtype: str = "m.image",
                        caption: str | None = None, info: dict[str, Any] | None = None) -> str:
        """Upload a file and post it (`m.image`, `m.file`, …) with its size and type, a `caption`
        as its body beside its `filename` (Matrix 1.10); its event id."""
        content: dict[str, Any] = {
            "msgtype": msgtype, "url": await self.upload(data, mime, name), "body": caption or name,
            "info": {"mimetype": mime, "size": len(data), **(info or {})},
        }
        if caption is not None:
            content["filename"] = name
        return await self.send_content(room_id, content)

    async def events(self, room_id: str, limit: int = 100) -> list[dict[str, Any]]:
        """The room's latest events, oldest first (`/messages` backwards)."""
        found = await self.call("GET", f"/rooms/{quote(room_id)}/messages",
                                params={"dir": "b", "limit": str(limit)})
        return list(reversed(found.get("chunk") or []))

    async def messages(self, room_id: str, sender: str | None = None) -> list[dict[str, Any]]:
        """The room's `m.room.message` events (by `sender` when given), oldest first."""
        return [e for e in await self.events(room_id) if e.get("type") == "m.room.message"
                and (sender is None or e.get("sender") == sender)]

    async def membership(self, room_id: str, user_id: str) -> str | None:
        """join, invite, leave, ban, or None when the user never was in the room."""
        try:
            state = await self.call("GET", f"/rooms/{quote(room_id)}/state/m.room.member/{quote(user_id)}")
        except RuntimeError:
            return None
        value = state.get("membership")
        return str(value) if value is not None else None

    async def typing(self, room_id: str) -> list[str]:
        """Who is typing in the room now, as a fresh `/sync` of it says (its `m.typing` event)."""
        only_room = {"rooms": [room_id], "timeline": {"limit": 0}, "state": {"types": []},
                     "ephemeral": {"types": ["m.typing"]}}
        # Synapse answers a sync the same as one before it from a cache for two minutes: the
        # timeout is part of its key (an initial sync never waits for it), so each asks anew.
        self._fresh += 1
        found = await self.call("GET", "/sync", params={
            "timeout": str(self._fresh), "filter": json.dumps({"room": only_room, "presence": {"types": []},
                                                               "account_data": {"types": []}})})
        room = ((found.get("rooms") or {}).get("join") or {}).get(room_id) or {}
        for event in (room.get("ephemeral") or {}).get("events") or []:
            if event.get("type") == "m.typing":
                return [str(u) for u in (event.get("content") or {}).get("user_ids") or []]
        return []

    async def wait_for(self, check: Callable[[], Awaitable[T | None]], timeout: float = 60.0) -> T:
        """`check()`'s first answer that is not None (or False), asked again whenever this user's
        `/sync` reports anything new."""
        deadline = time.monotonic() + timeout
        while True:
            found = await check()
            if found is not None and found is not False:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.user_id}: still waiting after {timeout:.0f} s")
            params = {"timeout": str(POLL_MS)}
            if self._since is not None:
                params["since"] = self._since
            else:
                params["timeout"] = "0"
            self._since = str((await self.call("GET", "/sync", params=params))["next_batch"])
