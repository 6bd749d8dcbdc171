"""The Discord stand-in's state and its gateway half: the websocket sessions per shard (IDENTIFY,
RESUME, heartbeats), the events dispatched to them, and the payloads both halves build."""

from __future__ import annotations

import asyncio
import collections
import json
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from aiohttp import WSMsgType, web

from bot.testing.discord_values import (
    DISCORD_EPOCH_MS,
    GUILD_MEMBERS,
    GUILD_PRESENCES,
    MESSAGE_CONTENT,
    NONCE_WINDOW,
    EditedMessage,
    Json,
    RecordedRequest,
    SentMessage,
    TypingCall,
    _Connection,
    _Fault,
    _Guild,
    _Loss,
    _Session,
    _valid_shard,
    _without_gateway_fields,
    file,
    user,
)


class DiscordGateway:
    """The state of a Discord stand-in and its gateway (see `DiscordStandIn`)."""

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

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self._port}/gateway"

    def channel_messages(self, channel_id: int) -> list[Json]:
        """Every message in a channel's history, oldest first, as stored (users' and the bot's)."""
        return [m for _, m in sorted(self._messages.items()) if int(m["channel_id"]) == channel_id]

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
