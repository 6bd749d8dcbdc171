"""Local stand-in of the Discord gateway (websocket) and REST API v10 for the real discord.py client."""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import math
import time
import uuid
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any, TypeVar

import pytest
import yarl
from aiohttp import WSMsgType, web

with warnings.catch_warnings():
    # discord.py imports the stdlib audioop (deprecated since 3.11) for voice, which we never use.
    warnings.simplefilter("ignore", DeprecationWarning)
    import discord

__all__ = ["DiscordStandIn", "EditedMessage", "RecordedRequest", "SentMessage", "TypingCall", "user"]

Json = dict[str, Any]
T = TypeVar("T")
API = "/api/v10"
BODY: web.RequestKey[Any] = web.RequestKey("body", object)  # parsed once by the middleware
DISCORD_EPOCH_MS = 1_420_070_400_000
GUILD_MEMBERS, GUILD_PRESENCES, MESSAGE_CONTENT = 1 << 1, 1 << 8, 1 << 15
# Discord refuses a create with an already used nonce for "a few minutes" (enforce_nonce).
NONCE_WINDOW = 300.0
# Message edits: 5 per 5 s per channel (Discord's documented per-route limit for PATCH messages).
EDIT_LIMIT, EDIT_WINDOW = 5, 5.0


def _invalid(name: str, code: str, message: str) -> Json:
    """Discord's 50035 body naming the offending field."""
    return {"code": 50035, "errors": {name: {"_errors": [{"code": code, "message": message}]}},
            "message": "Invalid Form Body"}


_TOO_LONG = _invalid("content", "BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length.")


def file(filename: str, data: bytes, content_type: str | None = None, **fields: Any) -> Json:
    """An attachment to post with `message_create(attachments=[...])`: width, height for images;
    duration_secs and waveform (with flags 8192) for a voice message."""
    return {"filename": filename, "data": data, "content_type": content_type, **fields}


def user(id: int, username: str, bot: bool = False, global_name: str | None = None) -> Json:
    """A user object shaped as Discord sends it."""
    return {
        "id": str(id), "username": username, "discriminator": "0", "global_name": global_name,
        "avatar": None, "bot": bot, "public_flags": 0,
    }


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # Exactly "application/json": discord.py treats "application/json; charset=utf-8" as text.
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    return web.Response(body=json.dumps(body).encode(), status=status, headers=all_headers)


def _error(status: int, code: int = 0, message: str | None = None) -> web.Response:
    default = "Missing Permissions" if status == 403 else f"{status}: {HTTPStatus(status).phrase}"
    return _json({"message": message or default, "code": code}, status)


@dataclass(frozen=True)
class SentMessage:
    """A message the bot created through POST /channels/{id}/messages."""

    id: int
    channel_id: int
    content: str | None
    message_reference: Json | None
    allowed_mentions: Json | None
    embeds: list[Json]
    time: float  # time.monotonic()
    nonce: str | None = None


@dataclass(frozen=True)
class EditedMessage:
    """An edit the bot made through PATCH /channels/{id}/messages/{id}, as accepted."""

    id: int
    channel_id: int
    content: str | None
    time: float  # time.monotonic()


@dataclass(frozen=True)
class TypingCall:
    channel_id: int
    time: float


@dataclass(frozen=True)
class RecordedRequest:
    """One REST call as answered, failures included."""

    method: str
    path: str  # without the /api/v10 prefix
    body: Any
    status: int  # 0: carried out, but the connection was dropped unanswered (lose_next_response)
    time: float
    query: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status >= 400


@dataclass
class _Fault:
    route: str
    status: int
    retry_after: float | None
    is_global: bool
    code: int | None
    message: str | None
    times: int


@dataclass
class _Loss:
    route: str
    times: int


@dataclass
class _Guild:
    id: int
    name: str
    channels: list[Json]
    threads: list[Json]
    roles: list[Json]
    members: dict[int, tuple[Json, list[int]]]  # user id -> (user, role ids)


class _Connection:
    """One gateway socket; every frame goes through `outbox` so sends keep their order."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.outbox: asyncio.Queue[Json | tuple[int, str]] = asyncio.Queue()
        self.closing = False
        self.done = asyncio.Event()
        self.heard = 0  # the highest sequence a heartbeat of the client carried
        self.beat = asyncio.Event()  # set at each heartbeat

    def send(self, payload: Json) -> None:
        self.outbox.put_nowait(payload)

    def close(self, code: int, reason: str = "") -> None:
        self.outbox.put_nowait((code, reason))


@dataclass
class _Session:
    """One gateway session: the events of one shard (shard 0 of 1 when unsharded), logged so that a
    RESUME replays what its socket missed."""

    id: str
    shard: tuple[int, int]  # (shard id, shard count)
    intents: int
    live: _Connection | None
    resumable: bool = True
    seq: int = 0
    log: list[Json] = field(default_factory=list)

    def carries(self, guild_id: int | None) -> bool:
        """Discord's rule: a guild's events go to shard (guild_id >> 22) % count, DMs to shard 0."""
        shard_id, count = self.shard
        return shard_id == (0 if guild_id is None else (guild_id >> 22) % count)

    def dispatch(self, event: str, data: Json) -> None:
        """Log an event of the session; deliver it now if its socket is live, else on RESUME."""
        self.seq += 1
        payload = {"op": 0, "t": event, "s": self.seq, "d": data}
        self.log.append(payload)
        if self.live is not None:
            self.live.send(payload)


def _valid_shard(shard: Any) -> tuple[int, int] | None:
    """IDENTIFY's `shard` as (id, count) when Discord would accept it."""
    if not (isinstance(shard, list) and len(shard) == 2 and all(type(n) is int for n in shard)):
        return None
    shard_id, count = shard
    return (shard_id, count) if 0 <= shard_id < count else None


class DiscordStandIn:
    """`async with DiscordStandIn() as dc:` serves the gateway and REST API on 127.0.0.1:<free port>.

    Gateway sessions are per shard: an IDENTIFY with `"shard": [id, count]` gets READY and
    GUILD_CREATE for the guilds of that shard only, and later events go to the session of the shard
    that carries them (DMs to shard 0), as on Discord. An invalid shard is closed with 4010.
    """

    def __init__(
        self,
        *,
        token: str = "TEST.TOKEN",
        bot_id: int = 9000,
        bot_name: str = "switchboard",
        message_content_intent: bool = True,
        members_intent: bool = False,
        presences_intent: bool = False,
        heartbeat_interval_ms: int = 41_250,
        nonce_window: float = NONCE_WINDOW,
        recommended_shards: int = 1,
    ) -> None:
        self.token, self.bot_id, self.heartbeat_interval_ms = token, bot_id, heartbeat_interval_ms
        self.nonce_window, self.recommended_shards = nonce_window, recommended_shards
        self.bot_user: Json = {**user(bot_id, bot_name, bot=True), "verified": True, "flags": 0}
        self.allowed_privileged = (
            (MESSAGE_CONTENT if message_content_intent else 0)
            | (GUILD_MEMBERS if members_intent else 0)
            | (GUILD_PRESENCES if presences_intent else 0)
        )
        self.sent: list[SentMessage] = []
        self.typing_calls: list[TypingCall] = []
        self.edits: list[EditedMessage] = []
        self.deleted: list[tuple[int, int]] = []  # (channel id, message id) the bot deleted
        self._edit_times: collections.defaultdict[int, collections.deque[float]] = (
            collections.defaultdict(collections.deque))
        self.requests: list[RecordedRequest] = []
        self.commands: dict[int | None, list[Json]] = {}  # guild id (None = global) -> commands
        self.identifies: list[Json] = []
        self.resumes: list[Json] = []
        self.gateway_urls: list[str] = []  # path + query of every gateway connection
        self.cdn: dict[str, bytes] = {}  # attachment path -> bytes
        self.cdn_requests: list[str] = []
        self.cdn_failures = 0  # the next this many CDN downloads answer 500
        self.connected = asyncio.Event()  # set on READY and RESUMED, cleared when no socket is live
        self._faults: list[_Fault] = []
        self._losses: list[_Loss] = []
        # (author id, nonce) -> (message id, time.monotonic()) of creates with enforce_nonce.
        self._nonces: dict[tuple[int, str], tuple[int, float]] = {}
        self._guilds: dict[int, _Guild] = {}
        self._channels: dict[int, Json] = {}
        self._guild_of: dict[int, int] = {}  # channel id -> guild id
        self._dm_of: dict[int, int] = {}  # recipient id -> DM channel id
        self._users: dict[int, Json] = {bot_id: self.bot_user}
        self._messages: dict[int, Json] = {}
        self._last_id = 0
        self._joined_at = datetime.now(UTC).isoformat()
        # The gateway session of each shard, (id, count); an unsharded bot's is (0, 1).
        self._sessions: dict[tuple[int, int], _Session] = {}
        self._runner: web.AppRunner | None = None
        self._port = 0

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

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self._port}/gateway"

    def patch(self, monkeypatch: pytest.MonkeyPatch, *, skip_identify_delay: bool = True) -> None:
        """Point discord.py's REST base and default gateway at this stand-in.

        discord.py sleeps 5 s before every IDENTIFY but the first (Client.before_identify_hook);
        `skip_identify_delay` makes re-identifying after INVALID_SESSION immediate.
        """
        monkeypatch.setattr(discord.http.Route, "BASE", f"{self.base_url}{API}")
        monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(self.gateway_url))
        if skip_identify_delay:
            monkeypatch.setattr(discord.Client, "before_identify_hook", _no_identify_delay)

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

    def channel_messages(self, channel_id: int) -> list[Json]:
        """Every message in a channel's history, oldest first, as stored (users' and the bot's)."""
        return [m for _, m in sorted(self._messages.items()) if int(m["channel_id"]) == channel_id]

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

    # ----- payloads --------------------------------------------------------------------------

    def _snowflake(self) -> int:
        self._last_id = max(self._last_id + 1, (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22)
        return self._last_id

    def _add_dm(self, channel_id: int, recipient: Json) -> Json:
        channel = {"id": str(channel_id), "type": 1, "recipients": [recipient], "last_message_id": None}
        self._channels[channel_id] = channel
        self._dm_of[int(recipient["id"])] = channel_id
        return channel

    def _member(self, guild_id: int, user_id: int, roles: Iterable[int] | None = None) -> Json:
        if roles is None:
            guild = self._guilds.get(guild_id)
            roles = guild.members[user_id][1] if guild and user_id in guild.members else []
        return {
            "roles": [str(r) for r in roles], "joined_at": self._joined_at, "deaf": False, "mute": False,
            "flags": 0, "pending": False, "nick": None, "premium_since": None,
            "communication_disabled_until": None,
        }

    def _new_message(
        self,
        channel_id: int,
        author: Json,
        content: str,
        guild_id: int | None,
        *,
        reference_id: int | None = None,
        files: Iterable[str | Json] = (),
        embeds: Iterable[Json] = (),
    ) -> Json:
        """A message object without mentions; guild messages carry guild_id and the author's member."""
        msg_id = self._snowflake()
        attachments = [self._attachment(channel_id, file(name, b"x", "text/plain") if isinstance(name, str)
                                        else name) for name in files]
        msg: Json = {
            "id": str(msg_id), "channel_id": str(channel_id), "author": author, "content": content,
            "timestamp": datetime.now(UTC).isoformat(), "edited_timestamp": None, "tts": False,
            "mention_everyone": False, "mentions": [], "mention_roles": [], "attachments": attachments,
            "embeds": list(embeds), "pinned": False, "type": 0, "flags": 0, "components": [],
        }
        if reference_id is not None:
            msg["type"] = 19  # REPLY
            ref = {"type": 0, "message_id": str(reference_id), "channel_id": str(channel_id)}
            msg["message_reference"] = ref if guild_id is None else {**ref, "guild_id": str(guild_id)}
            if (replied := self._messages.get(reference_id)) is not None:
                msg["referenced_message"] = {k: v for k, v in replied.items() if k != "referenced_message"}
        if guild_id is not None:
            msg["guild_id"] = str(guild_id)
            msg["member"] = self._member(guild_id, int(author["id"]))
        self._messages[msg_id] = msg
        return msg

    def _attachment(self, channel_id: int, spec: Json) -> Json:
        """An attachment object as Discord sends it; its bytes are served at its CDN-like URL."""
        attachment_id = self._snowflake()
        name, data = str(spec["filename"]), bytes(spec["data"])
        path = f"/attachments/{channel_id}/{attachment_id}/{name}"
        self.cdn[path] = data
        signed = f"{self.base_url}{path}?ex=6a1b2c3d&is=6a19dabd&hm=0f{attachment_id:x}"
        out: Json = {"id": str(attachment_id), "filename": name, "size": len(data), "url": signed,
                     "proxy_url": signed.replace("/attachments/", "/media/attachments/", 1)}
        out |= {k: spec[k] for k in ("content_type", "width", "height", "duration_secs", "waveform", "flags")
                if spec.get(k) is not None}
        return out

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        """The CDN: an attachment's bytes by path (the signature query is not checked)."""
        path = request.path.removeprefix("/media")
        self.cdn_requests.append(path)
        data = self.cdn.get(path)
        if data is None or self.cdn_failures > 0:
            self.cdn_failures = max(0, self.cdn_failures - 1)
            return web.Response(status=404 if data is None else 500, text="Not Found" if data is None else "")
        return web.Response(body=data, content_type="application/octet-stream")

    def _visible(self, msg: Json, session: _Session | None) -> Json:
        """A MESSAGE_CREATE payload, blanked unless the session asked for the MESSAGE_CONTENT intent
        (with no session, as the app's own setting would allow)."""
        intents = session.intents if session is not None else self.allowed_privileged
        return self._blanked(msg, granted=bool(intents & MESSAGE_CONTENT))

    def _rest_view(self, msg: Json) -> Json:
        """A message as REST returns it: blanked unless the app has the MESSAGE_CONTENT intent enabled,
        and without the gateway-only `guild_id` and `member` fields (its author is a plain user)."""
        granted = bool(self.allowed_privileged & MESSAGE_CONTENT)
        return _without_gateway_fields(self._blanked(msg, granted=granted))

    def _blanked(self, msg: Json, *, granted: bool) -> Json:
        """Blank content as Discord does without the MESSAGE_CONTENT intent; DMs, messages mentioning
        the bot and the bot's own messages keep theirs."""
        out = dict(msg)
        if isinstance(out.get("referenced_message"), dict):
            out["referenced_message"] = self._blanked(out["referenced_message"], granted=granted)
        bot = str(self.bot_id)
        exempt = (
            granted
            or "guild_id" not in out
            or out["author"]["id"] == bot
            or any(m["id"] == bot for m in out.get("mentions", ()))
        )
        if not exempt:
            out.update(content="", embeds=[], attachments=[], components=[])
        return out

    def _guild_create(self, g: _Guild, session: _Session) -> Json:
        # Without GUILD_MEMBERS Discord lists only the bot itself; member_count stays the real one.
        shown = g.members if session.intents & GUILD_MEMBERS else {self.bot_id: g.members[self.bot_id]}
        members = [{**self._member(g.id, uid, roles), "user": u} for uid, (u, roles) in shown.items()]
        owner = next((uid for uid in g.members if uid != self.bot_id), self.bot_id)
        return {
            "id": str(g.id), "name": g.name, "icon": None, "splash": None, "discovery_splash": None,
            "banner": None, "description": None, "owner_id": str(owner), "afk_channel_id": None,
            "afk_timeout": 300, "verification_level": 0, "default_message_notifications": 0,
            "explicit_content_filter": 0, "mfa_level": 0, "nsfw_level": 0, "premium_tier": 0,
            "premium_subscription_count": 0, "premium_progress_bar_enabled": False,
            "system_channel_id": None, "system_channel_flags": 0, "rules_channel_id": None,
            "public_updates_channel_id": None, "vanity_url_code": None, "preferred_locale": "en-US",
            "features": [], "emojis": [], "stickers": [], "roles": g.roles, "joined_at": self._joined_at,
            "large": False, "unavailable": False, "member_count": len(g.members), "members": members,
            "channels": g.channels, "threads": g.threads, "voice_states": [], "presences": [],
            "stage_instances": [], "guild_scheduled_events": [], "soundboard_sounds": [],
        }

    # ----- gateway ---------------------------------------------------------------------------

    def _publish(self, event: str, guild_id: int | None, data: Callable[[_Session], Json]) -> list[Json]:
        """Dispatch an event of a guild (None: of a DM) to each session whose shard carries it; the
        payloads sent, each shaped for its session."""
        sent = []
        for session in self._sessions.values():
            if session.carries(guild_id):
                payload = data(session)
                session.dispatch(event, payload)
                sent.append(payload)
        return sent

    def _note_connected(self) -> None:
        if any(session.live is not None for session in self._sessions.values()):
            self.connected.set()
        else:
            self.connected.clear()

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        # discord.py asks for ?compress=zlib-stream but only inflates binary frames: text frames are fine.
        self.gateway_urls.append(str(request.rel_url))
        conn = _Connection(ws)
        writer = asyncio.create_task(self._write(conn))
        conn.send({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}})
        try:
            async for frame in ws:
                if frame.type is WSMsgType.TEXT:
                    self._receive(conn, json.loads(frame.data))
        finally:
            for session in self._sessions.values():
                if session.live is conn:
                    session.live = None
            self._note_connected()
            if not conn.closing:
                writer.cancel()
            await asyncio.wait([writer])
            conn.done.set()
        return ws

    async def _write(self, conn: _Connection) -> None:
        while True:
            item = await conn.outbox.get()
            try:
                if isinstance(item, tuple):
                    conn.closing = True
                    await conn.ws.close(code=item[0], message=item[1].encode())
                    return
                await conn.ws.send_str(json.dumps(item))
            except ConnectionError:  # the client went away first
                return

    def _receive(self, conn: _Connection, payload: Json) -> None:
        op, data = payload.get("op"), payload.get("d") or {}
        if op == 1:  # HEARTBEAT, carrying the last sequence the client read
            conn.heard = max(conn.heard, int(payload.get("d") or 0))
            conn.beat.set()
            conn.send({"op": 11})
        elif op == 2:
            self._identify(conn, data)
        elif op == 6:
            self._resume(conn, data)

    def _identify(self, conn: _Connection, data: Json) -> None:
        self.identifies.append(data)
        intents = int(data.get("intents", 0))
        if data.get("token") != self.token:
            conn.close(4004, "Authentication failed.")
            return
        if intents & (GUILD_MEMBERS | GUILD_PRESENCES | MESSAGE_CONTENT) & ~self.allowed_privileged:
            conn.close(4014, "Disallowed intent(s).")
            return
        shard = _valid_shard(data.get("shard", [0, 1]))
        if shard is None:
            conn.close(4010, "Invalid shard.")
            return
        # A new session of the shard: whatever the old one had not delivered is lost, as on Discord.
        session = self._sessions[shard] = _Session(uuid.uuid4().hex, shard, intents, conn)
        guilds = [guild for guild in self._guilds.values() if session.carries(guild.id)]
        ready: Json = {
            "v": 10, "user": self.bot_user, "session_id": session.id,
            "guilds": [{"id": str(guild.id), "unavailable": True} for guild in guilds],
            "resume_gateway_url": f"ws://127.0.0.1:{self._port}/resume", "session_type": "normal",
            "private_channels": [], "relationships": [], "user_settings": {},
            "application": {"id": str(self.bot_id), "flags": self._application_flags()},
        }
        if "shard" in data:
            ready["shard"] = list(shard)
        session.dispatch("READY", ready)
        for guild in guilds:
            session.dispatch("GUILD_CREATE", self._guild_create(guild, session))
        self.connected.set()

    def _resume(self, conn: _Connection, data: Json) -> None:
        self.resumes.append(data)
        if data.get("token") != self.token:
            conn.close(4004, "Authentication failed.")
            return
        session = next((s for s in self._sessions.values() if s.id == data.get("session_id")), None)
        if session is None or not session.resumable:
            conn.send({"op": 9, "d": False})  # INVALID_SESSION, not resumable: the client re-IDENTIFYs
            return
        seq = int(data.get("seq") or 0)
        for payload in session.log:
            if payload["s"] > seq:
                conn.send(payload)
        session.live = conn
        session.dispatch("RESUMED", {})
        self.connected.set()

    def _application_flags(self) -> int:
        # The *_LIMITED flags an unverified bot gets when the privileged intent is enabled.
        flags = 1 << 19 if self.allowed_privileged & MESSAGE_CONTENT else 0
        flags |= 1 << 15 if self.allowed_privileged & GUILD_MEMBERS else 0
        return flags | (1 << 13 if self.allowed_privileged & GUILD_PRESENCES else 0)

    # ----- REST ------------------------------------------------------------------------------

    @web.middleware
    async def _rest(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        if not request.path.startswith(API + "/"):
            response: web.StreamResponse = await handler(request)
            return response
        path = request.path.removeprefix(API)
        if request.content_type == "multipart/form-data":  # files: discord.py sends payload_json
            request[BODY] = json.loads(str((await request.post()).get("payload_json", "{}")))
        else:
            raw = await request.read()
            request[BODY] = json.loads(raw) if raw else None
        route = f"{request.method} {path}"
        response = await self._answer(request, handler, route)
        status = response.status
        loss = next((lost for lost in self._losses if lost.route in route), None)
        if loss is not None and status < 400 and request.transport is not None:
            loss.times -= 1
            if loss.times <= 0:
                self._losses.remove(loss)
            request.transport.close()  # the answer written below goes nowhere
            status = 0
        now = time.monotonic()
        query = dict(request.query)
        self.requests.append(RecordedRequest(request.method, path, request[BODY], status, now, query))
        return response

    async def _answer(
        self, request: web.Request, handler: Callable[[web.Request], Any], route: str
    ) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bot {self.token}" and route != "GET /gateway":
            return _error(401)
        resource = request.match_info.route.resource
        bucket_of = hashlib.sha1(f"{request.method} {resource.canonical if resource else route}".encode())
        bucket = bucket_of.hexdigest()[:16]
        fault = next((f for f in self._faults if f.route in route), None)
        if fault is not None:
            fault.times -= 1
            if fault.times <= 0:
                self._faults.remove(fault)
            return self._fault_response(fault, bucket)
        editing = request.method == "PATCH" and "message_id" in request.match_info
        window = self._edit_window(int(request.match_info["channel_id"])) if editing else None
        if window is not None and len(window) >= EDIT_LIMIT:
            wait = EDIT_WINDOW - (time.monotonic() - window[0])
            return self._fault_response(_Fault(route, 429, wait, False, None, None, 1), bucket)
        try:
            response: web.StreamResponse = await handler(request)
        except web.HTTPException as exc:  # unknown route or method
            return _error(exc.status)
        remaining, reset_after = 4, 1.0
        if window is not None and response.status < 400:
            window.append(time.monotonic())
            remaining, reset_after = EDIT_LIMIT - len(window), EDIT_WINDOW - (time.monotonic() - window[0])
        if response.status < 400:
            headers = _ratelimit_headers(bucket, remaining=remaining, reset_after=reset_after)
            response.headers.update(headers)
        return response

    def _edit_window(self, channel_id: int) -> collections.deque[float]:
        """The times of this channel's edits within the last EDIT_WINDOW seconds."""
        window = self._edit_times[channel_id]
        while window and time.monotonic() - window[0] >= EDIT_WINDOW:
            window.popleft()
        return window

    def _fault_response(self, fault: _Fault, bucket: str) -> web.Response:
        if fault.status != 429:
            code = fault.code if fault.code is not None else (50013 if fault.status == 403 else 0)
            return _error(fault.status, code, fault.message)
        retry_after = 1.0 if fault.retry_after is None else fault.retry_after
        body: Json = {
            "message": fault.message or "You are being rate limited.",
            "retry_after": retry_after,
            "global": fault.is_global,
        }
        if fault.code:
            body["code"] = fault.code
        scope = "global" if fault.is_global else "user"
        # Without "Via" discord.py takes a 429 for a Cloudflare ban and raises instead of waiting.
        headers = {"Via": "1.1 google", "Retry-After": str(math.ceil(retry_after))}
        headers |= _ratelimit_headers(bucket, remaining=0, reset_after=retry_after, scope=scope)
        if fault.is_global:
            headers["X-RateLimit-Global"] = "true"
        return _json(body, 429, headers)

    async def _get_me(self, request: web.Request) -> web.Response:
        return _json(self.bot_user)

    async def _get_application(self, request: web.Request) -> web.Response:
        return _json({
            "id": str(self.bot_id), "name": self.bot_user["username"], "description": "", "icon": None,
            "bot_public": True, "bot_require_code_grant": False, "owner": user(1, "owner"),
            "verify_key": "0" * 64, "team": None, "flags": self._application_flags(), "summary": "",
        })

    async def _get_gateway(self, request: web.Request) -> web.Response:
        """GET /gateway (no token needed): only the URL. GET /gateway/bot adds the shard count Discord
        recommends and the identify budget (discord.py's AutoShardedClient asks for it when it is
        given no shard_count)."""
        if not request.path.endswith("/bot"):
            return _json({"url": self.gateway_url})
        limit = {"total": 1000, "remaining": 999, "reset_after": 14_400_000, "max_concurrency": 1}
        shards = self.recommended_shards
        return _json({"url": self.gateway_url, "shards": shards, "session_start_limit": limit})

    async def _create_dm(self, request: web.Request) -> web.Response:
        recipient_id = int((request[BODY] or {}).get("recipient_id", 0))
        if recipient_id not in self._users:
            return _error(400, 50033, "Invalid Recipient(s)")
        if recipient_id in self._dm_of:
            return _json(self._channels[self._dm_of[recipient_id]])
        return _json(self._add_dm(self._snowflake(), self._users[recipient_id]))

    async def _get_channel(self, request: web.Request) -> web.Response:
        found = self._channels.get(int(request.match_info["channel_id"]))
        return _json(found) if found else _error(404, 10003, "Unknown Channel")

    async def _get_messages(self, request: web.Request) -> web.Response:
        """Newest first, as Discord answers: the newest `limit`, or the `limit` nearest before, after
        or around an id (around: half each side, plus that message when it exists)."""
        channel_id = int(request.match_info["channel_id"])
        if channel_id not in self._channels:
            return _error(404, 10003, "Unknown Channel")
        query = request.query
        for name in ("limit", "before", "after", "around"):
            if name in query and not query[name].isdigit():
                return _json(_invalid(name, "NUMBER_TYPE_COERCE", f'Value "{query[name]}" is not int.'), 400)
        limit = int(query.get("limit", "50"))
        if not 1 <= limit <= 100:
            return _json(_invalid("limit", "NUMBER_TYPE_MAX", "int value should be between 1 and 100."), 400)
        anchors = [name for name in ("before", "after", "around") if name in query]
        if len(anchors) > 1:  # documented as mutually exclusive; the stand-in refuses a mix
            mixed = _invalid(anchors[1], "BASE_TYPE_BAD_VALUE", "Only one of before, after, around.")
            return _json(mixed, 400)
        ids = [int(m["id"]) for m in self.channel_messages(channel_id)]
        if "before" in query:
            page = [i for i in ids if i < int(query["before"])][-limit:]
        elif "after" in query:
            page = [i for i in ids if i > int(query["after"])][:limit]
        elif "around" in query:
            middle, half = int(query["around"]), limit // 2
            older = [i for i in ids if i < middle][-half:] if half else []
            page = older + [i for i in ids if i == middle] + [i for i in ids if i > middle][:half]
        else:
            page = ids[-limit:]
        return _json([self._rest_view(self._messages[i]) for i in reversed(page)])

    async def _get_member(self, request: web.Request) -> web.Response:
        guild = self._guilds.get(int(request.match_info["guild_id"]))
        if guild is None:
            return _error(404, 10004, "Unknown Guild")
        found = guild.members.get(int(request.match_info["user_id"]))
        if found is None:
            return _error(404, 10007, "Unknown Member")
        member, roles = found
        return _json({**self._member(guild.id, int(member["id"]), roles), "user": member})

    async def _post_message(self, request: web.Request) -> web.Response:
        channel_id = int(request.match_info["channel_id"])
        if channel_id not in self._channels:
            return _error(404, 10003, "Unknown Channel")
        body: Json = request[BODY] or {}
        content = body.get("content")
        if content is not None and len(str(content)) > 2000:
            return _json(_TOO_LONG, 400)
        nonce = str(body["nonce"]) if body.get("nonce") is not None else None
        if nonce is not None and len(nonce) > 25:
            return _json(_invalid("nonce", "BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length."), 400)
        key = (self.bot_id, nonce or "")
        earlier = self._nonces.get(key) if nonce is not None and body.get("enforce_nonce") else None
        if earlier is not None and time.monotonic() - earlier[1] < self.nonce_window:
            # The message this nonce already created, and nothing new posted or dispatched.
            return _json({**self._rest_view(self._messages[earlier[0]]), "nonce": nonce})
        if not content and not any(body.get(k) for k in ("embeds", "attachments", "sticker_ids", "poll")):
            return _error(400, 50006, "Cannot send an empty message")
        ref = body.get("message_reference")
        names = [str(a.get("filename", "file")) for a in body.get("attachments") or []]
        msg = self._new_message(
            channel_id, self.bot_user, str(content or ""), self._guild_of.get(channel_id),
            reference_id=int(ref["message_id"]) if ref else None, files=names, embeds=body.get("embeds", ()),
        )
        allowed, now = body.get("allowed_mentions"), time.monotonic()
        self.sent.append(
            SentMessage(int(msg["id"]), channel_id, content, ref, allowed, msg["embeds"], now, nonce))
        if nonce is not None and body.get("enforce_nonce"):
            self._nonces[key] = (int(msg["id"]), now)
        with_nonce = {"nonce": nonce} if nonce is not None else {}
        # Discord echoes the bot's own messages on the gateway (to the shard carrying the chat).
        self._publish("MESSAGE_CREATE", self._guild_of.get(channel_id),
                      lambda session: {**self._visible(msg, session), **with_nonce})
        return _json({**self._rest_view(msg), **with_nonce})

    async def _edit_message(self, request: web.Request) -> web.Response:
        found = self._messages.get(int(request.match_info["message_id"]))
        if found is None or found["channel_id"] != request.match_info["channel_id"]:
            return _error(404, 10008, "Unknown Message")
        body: Json = request[BODY] or {}
        if len(str(body.get("content") or "")) > 2000:
            return _json(_TOO_LONG, 400)
        found.update({k: body[k] for k in ("content", "embeds") if k in body})
        found["edited_timestamp"] = datetime.now(UTC).isoformat()
        self.edits.append(EditedMessage(int(found["id"]), int(found["channel_id"]), found.get("content"),
                                        time.monotonic()))
        return _json(self._rest_view(found))

    async def _delete_message(self, request: web.Request) -> web.Response:
        """DELETE a message: the bot's own (others' need Manage Messages, which it is not given)."""
        found = self._messages.get(int(request.match_info["message_id"]))
        if found is None or found["channel_id"] != request.match_info["channel_id"]:
            return _error(404, 10008, "Unknown Message")
        if found["author"]["id"] != self.bot_user["id"]:
            return _error(403, 50003, "Cannot execute action on this channel")
        del self._messages[int(found["id"])]
        self.deleted.append((int(found["channel_id"]), int(found["id"])))
        return web.Response(status=204)

    async def _typing(self, request: web.Request) -> web.Response:
        channel_id = int(request.match_info["channel_id"])
        if channel_id not in self._channels:
            return _error(404, 10003, "Unknown Channel")
        self.typing_calls.append(TypingCall(channel_id, time.monotonic()))
        return web.Response(status=204)

    async def _get_commands(self, request: web.Request) -> web.Response:
        guild_id = request.match_info.get("guild_id")
        return _json(self.commands.get(int(guild_id) if guild_id else None, []))

    async def _put_commands(self, request: web.Request) -> web.Response:
        app_id, guild_id = request.match_info["app_id"], request.match_info.get("guild_id")
        defaults = {"type": 1, "description": "", "options": [], "default_member_permissions": None,
                    "dm_permission": True, "nsfw": False}
        commands = [
            {**defaults, **command, "id": str(self._snowflake()), "application_id": app_id,
             "version": str(self._snowflake()), **({"guild_id": guild_id} if guild_id else {})}
            for command in request[BODY] or []
        ]
        self.commands[int(guild_id) if guild_id else None] = commands
        return _json(commands)


def _without_gateway_fields(msg: Json) -> Json:
    # `guild_id`, `member` and the mentions' `member` are extra fields of the gateway's MESSAGE_CREATE.
    out = {k: v for k, v in msg.items() if k not in ("guild_id", "member")}
    out["mentions"] = [{k: v for k, v in m.items() if k != "member"} for m in msg.get("mentions", ())]
    if isinstance(out.get("referenced_message"), dict):
        out["referenced_message"] = _without_gateway_fields(out["referenced_message"])
    return out


async def _no_identify_delay(self: discord.Client, shard_id: int | None, *, initial: bool = False) -> None:
    return None


def _ratelimit_headers(bucket: str, *, remaining: int, reset_after: float, scope: str = "user") -> Json:
    return {
        "X-RateLimit-Bucket": bucket,
        "X-RateLimit-Limit": "5",
        "X-RateLimit-Remaining": str(remaining),
        "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
        "X-RateLimit-Reset-After": f"{reset_after:.3f}",
        "X-RateLimit-Scope": scope,
    }
