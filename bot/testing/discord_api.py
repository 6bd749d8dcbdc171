"""Local stand-in of the Discord gateway (websocket) and REST API v10 for the real discord.py client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web

from bot.testing.discord_rest import DiscordRest
from bot.testing.discord_values import (
    API,
    EditedMessage,
    Json,
    RecordedRequest,
    SentMessage,
    T,
    TypingCall,
    _Fault,
    _Guild,
    _Loss,
    file,
    user,
)
from bot.testing.patching import Patcher, Patches, point_discord_at

__all__ = [
    "DiscordStandIn",
    "EditedMessage",
    "Patches",
    "RecordedRequest",
    "SentMessage",
    "TypingCall",
    "file",
    "user",
]


class DiscordStandIn(DiscordRest):
    """`async with DiscordStandIn() as dc:` serves the gateway and REST API on 127.0.0.1:<free port>.

    Gateway sessions are per shard: an IDENTIFY with `"shard": [id, count]` gets READY and
    GUILD_CREATE for the guilds of that shard only, and later events go to the session of the shard
    that carries them (DMs to shard 0), as on Discord. An invalid shard is closed with 4010.
    """

    async def __aenter__(self) -> DiscordStandIn:
        app = web.Application(middlewares=[self._rest])
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/resume", self._gateway)
        app.router.add_get("/attachments/{path:.+}", self._cdn)
        app.router.add_get("/media/attachments/{path:.+}", self._cdn)
        routes: list[tuple[str, str, Callable[[web.Request], Any]]] = [
            ("GET", "/users/@me", self._get_me),
            ("POST", "/users/@me/channels", self._create_dm),
            ("GET", "/oauth2/applications/@me", self._get_application),
            ("GET", "/gateway", self._get_gateway),
            ("GET", "/gateway/bot", self._get_gateway),
            ("GET", r"/channels/{channel_id:\d+}", self._get_channel),
            ("GET", r"/channels/{channel_id:\d+}/messages", self._get_messages),
            ("POST", r"/channels/{channel_id:\d+}/messages", self._post_message),
            ("GET", r"/guilds/{guild_id:\d+}/members/{user_id:\d+}", self._get_member),
            ("PATCH", r"/channels/{channel_id:\d+}/messages/{message_id:\d+}", self._edit_message),
            ("DELETE", r"/channels/{channel_id:\d+}/messages/{message_id:\d+}", self._delete_message),
            ("POST", r"/channels/{channel_id:\d+}/typing", self._typing),
        ]
        for prefix in (r"/applications/{app_id:\d+}", r"/applications/{app_id:\d+}/guilds/{guild_id:\d+}"):
            routes += [("GET", f"{prefix}/commands", self._get_commands)]
            routes += [("PUT", f"{prefix}/commands", self._put_commands)]
        for method, path, handler in routes:
            app.router.add_route(method, API + path, handler)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self._port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def patch(self, monkeypatch: Patcher, *, skip_identify_delay: bool = True) -> None:
        """Point discord.py's REST base and default gateway at this stand-in, through pytest's
        `monkeypatch` or a `bot.testing.patching.Patches` (see `point_discord_at`)."""
        point_discord_at(monkeypatch, self.base_url, self.gateway_url,
                         skip_identify_delay=skip_identify_delay)

    # ----- scripting -------------------------------------------------------------------------

    def add_guild(
        self,
        guild_id: int,
        name: str,
        channels: Iterable[tuple[int, str]] = (),
        threads: Iterable[tuple[int, int, str]] = (),
        members: Iterable[Json] = (),
        roles: Iterable[tuple[int, str]] = (),
    ) -> None:
        """Add a guild (the bot is always a member); members are user dicts with an optional "roles" list.

        Added while a session is live, it is announced with GUILD_CREATE like a guild the bot joins.
        """
        gid = str(guild_id)
        texts: list[Json] = [
            {"id": str(cid), "type": 0, "guild_id": gid, "name": cname, "position": i, "parent_id": None,
             "permission_overwrites": [], "nsfw": False, "topic": None, "last_message_id": None,
             "rate_limit_per_user": 0, "flags": 0}
            for i, (cid, cname) in enumerate(channels)
        ]
        metadata = {"archived": False, "auto_archive_duration": 1440, "locked": False,
                    "archive_timestamp": self._joined_at}
        thread_list = [
            {"id": str(tid), "type": 11, "guild_id": gid, "parent_id": str(pid), "owner_id": str(self.bot_id),
             "name": tname, "last_message_id": None, "message_count": 0, "member_count": 1,
             "rate_limit_per_user": 0, "flags": 0, "thread_metadata": metadata}
            for tid, pid, tname in threads
        ]
        role_list = [(guild_id, "@everyone"), *roles]
        role_objects = [
            {"id": str(rid), "name": rname, "color": 0, "hoist": False, "icon": None, "unicode_emoji": None,
             "position": i, "permissions": "1071698660929", "managed": False, "mentionable": True, "flags": 0}
            for i, (rid, rname) in enumerate(role_list)
        ]
        member_map: dict[int, tuple[Json, list[int]]] = {self.bot_id: (self.bot_user, [])}
        for member in members:
            role_ids = [int(r) for r in member.get("roles", ())]
            plain = {k: v for k, v in member.items() if k != "roles"}
            member_map[int(plain["id"])] = (plain, role_ids)
            self._users[int(plain["id"])] = plain
        guild = _Guild(guild_id, name, texts, thread_list, role_objects, member_map)
        self._guilds[guild_id] = guild
        for channel in texts + thread_list:
            self._channels[int(channel["id"])] = channel
            self._guild_of[int(channel["id"])] = guild_id
        self._publish("GUILD_CREATE", guild_id, lambda session: self._guild_create(guild, session))

    def fail_next(
        self,
        route: str,
        *,
        status: int,
        retry_after: float | None = None,
        is_global: bool = False,
        code: int | None = None,
        message: str | None = None,
        times: int = 1,
    ) -> None:
        """Fail the next `times` REST calls whose "METHOD /path" (no /api/v10) contains `route`."""
        self._faults.append(_Fault(route, status, retry_after, is_global, code, message, times))

    def lose_next_response(self, route: str, *, times: int = 1) -> None:
        """Carry out the next `times` successful REST calls matching `route`, then drop the connection
        unanswered: the call took effect (a message is created) but the client sees a disconnect."""
        self._losses.append(_Loss(route, times))

    def message_create(
        self,
        channel_id: int,
        author: Json,
        content: str,
        *,
        guild_id: int | None = None,
        mentions: Iterable[Json | int] = (),
        mention_roles: Iterable[int] = (),
        mention_everyone: bool = False,
        reference_id: int | None = None,
        reply_ping: bool = True,
        attachments: int | list[Json] = 0,
        member_roles: Iterable[int] | None = None,
    ) -> Json:
        """Post a message from a user and return its MESSAGE_CREATE payload (after content blanking).

        The message joins the channel's history. With a live socket the event is delivered now; with a
        session but no socket it waits for a RESUME of that session (a new IDENTIFY never gets it, as
        on Discord); with no session at all (the bot never connected) no event is ever sent. Only the
        session of the shard that carries the guild (a DM: shard 0) gets it.
        The guild comes from the channel when not given; a channel of no guild is a DM with `author`.
        A reply (`reference_id`) mentions the replied-to author when `reply_ping`, as Discord clients do.
        """
        self._users[int(author["id"])] = author
        guild_id = guild_id if guild_id is not None else self._guild_of.get(channel_id)
        if guild_id is None and channel_id not in self._channels:
            self._add_dm(channel_id, author)
        # A count of one-byte text files, or files made with `file()` (their bytes served on the CDN).
        files = [f"file{i}.txt" for i in range(attachments)] if isinstance(attachments, int) else attachments
        msg = self._new_message(channel_id, author, content, guild_id, reference_id=reference_id, files=files)
        mentioned = [m if isinstance(m, dict) else self._users[int(m)] for m in mentions]
        replied = msg.get("referenced_message")
        if reply_ping and replied and all(m["id"] != replied["author"]["id"] for m in mentioned):
            mentioned.append(replied["author"])
        if guild_id is not None:  # mentioned members carry their member object, as on Discord
            members = self._guilds[guild_id].members if guild_id in self._guilds else {}
            mentioned = [
                {**m, "member": self._member(guild_id, int(m["id"]))} if int(m["id"]) in members else m
                for m in mentioned
            ]
            if member_roles is not None:
                msg["member"]["roles"] = [str(r) for r in member_roles]
        msg["mentions"] = mentioned
        msg.update(mention_everyone=mention_everyone, mention_roles=[str(r) for r in mention_roles])
        sent = self._publish("MESSAGE_CREATE", guild_id, lambda session: self._visible(msg, session))
        return sent[0] if sent else self._visible(msg, None)

    async def disconnect(self, code: int = 4000, *, resumable: bool = True, shard: int | None = None) -> None:
        """Close a live gateway socket (of `shard`, needed when several are live); with
        resumable=False a later RESUME gets INVALID_SESSION."""
        live = [s for s in self._sessions.values() if s.live is not None and shard in (None, s.shard[0])]
        if len(live) != 1:
            raise RuntimeError(f"{len(live)} live gateway connections match; name one shard")
        session = live[0]
        conn = session.live
        assert conn is not None
        session.live, session.resumable = None, resumable
        self._note_connected()
        conn.close(code, "stand-in disconnect")
        await asyncio.wait_for(conn.done.wait(), 5)

    @property
    def live_shards(self) -> list[tuple[int, int]]:
        """(shard id, shard count) of every session with a live socket, in order."""
        return sorted(key for key, session in self._sessions.items() if session.live is not None)

    @property
    def dispatched(self) -> int:
        """How many events the gateway has dispatched, over all sessions."""
        return sum(session.seq for session in self._sessions.values())

    async def heard(self, timeout: float = 10) -> None:
        """Return once the client has read every event dispatched so far on each live socket: ask it
        for a heartbeat (op 1, as Discord may) and wait for the one carrying the last sequence.
        discord.py reads frames in order and schedules an event's handlers before it reads the next
        frame, so by then every message sent before this call is in the bot's hands."""
        async with asyncio.timeout(timeout):
            for session in list(self._sessions.values()):
                last = session.seq
                while (conn := session.live) is not None and conn.heard < last:
                    conn.beat.clear()
                    conn.send({"op": 1, "d": None})
                    waits = [asyncio.ensure_future(conn.beat.wait()), asyncio.ensure_future(conn.done.wait())]
                    try:
                        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        for waiting in waits:
                            waiting.cancel()

    async def wait_for(self, predicate: Callable[[], T], timeout: float = 30) -> T:
        """Poll `predicate` until it returns something truthy, and return that."""
        deadline = time.monotonic() + timeout
        while not (result := predicate()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout} s")
            await asyncio.sleep(0.01)
        return result
