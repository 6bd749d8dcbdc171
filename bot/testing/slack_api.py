"""Local stand-in of Slack's Web API (over HTTP) and Socket Mode (over a WebSocket) for the real
slack_sdk and slack-bolt clients: `AsyncWebClient(base_url=standin.base_url)`.

Strict as Slack is: every answer is HTTP 200 with `{"ok": false, "error": ...}` for a refusal
(`unknown_method`, `not_authed`, `invalid_auth`, `not_allowed_token_type`, `missing_scope` with
`needed` and `provided`, `channel_not_found`, `no_text`, `msg_too_long`, `message_not_found`,
`cant_update_message`, `not_in_channel` where the bot is no member), except a rate limit: HTTP 429
with `Retry-After` and `error: ratelimited`. Message ids are `ts` strings ("1700000000.000100"),
unique and increasing per channel.

Streams (`chat.startStream` in a thread, naming the recipient and their team; `appendStream`,
`stopStream`) grow one message; an open stream cannot be edited, a stopped or ended one answers
`message_not_in_streaming_state`; with `streams_offered=False` the three are `unknown_method`.
History is paged with cursors; `message(..., live=False)` is written while no app listens.

Like slack.com, one server answers every app by its token: `slack.add_app(...)` is another app (in
a workspace of its own) at the same `base_url`, with its own tokens, socket tickets and connections,
envelopes, users, history and messages posted.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import TypeVar

from aiohttp import web

from bot.testing.slack_files import SlackFiles
from bot.testing.slack_socket import SocketMode
from bot.testing.slack_streams import SlackStreams
from bot.testing.slack_values import (
    BOT_SCOPES,
    MAX_TEXT,
    MEMBERS_ONLY,
    METHOD_SCOPES,
    TIER_PER_MINUTE,
    TIERS,
    Envelope,
    Json,
    PostedMessage,
    RecordedCall,
    Timestamps,
    UpdatedMessage,
    channel_type,
    history_scope,
    page,
    shown,
    token_of,
    user,
)

__all__ = ["Envelope", "PostedMessage", "RecordedCall", "SlackStandIn", "UpdatedMessage", "shown", "user"]

T = TypeVar("T")


class SlackStandIn(SocketMode, SlackFiles, SlackStreams):
    """`async with SlackStandIn() as slack:` serves the Web API at `slack.base_url` and Socket Mode."""

    def __init__(
        self, *, bot_token: str = "xoxb-test-token", app_token: str = "xapp-test-token",
        team_id: str = "T0TEST", bot_user_id: str = "U0BOT", bot_id: str = "B0BOT", app_id: str = "A0APP",
        scopes: frozenset[str] = BOT_SCOPES, ack_timeout: float = 3.0, max_retries: int = 3,
        enforce_tiers: bool = False, streams_offered: bool = True,
    ) -> None:
        SocketMode.__init__(self, ack_timeout=ack_timeout, max_retries=max_retries)
        SlackFiles.__init__(self)
        self.bot_token, self.app_token = bot_token, app_token
        self.team_id, self.bot_user_id, self.bot_id, self.app_id = team_id, bot_user_id, bot_id, app_id
        self.scopes = scopes
        # Each method held to its tier's calls a minute (chat.postMessage: one a second per channel).
        self.enforce_tiers = enforce_tiers
        self.calls: list[RecordedCall] = []
        self.sent: list[PostedMessage] = []
        self.updated: list[UpdatedMessage] = []
        # chat.startStream and its kin answer (else unknown_method, as where a workspace has none).
        self.streams_offered = streams_offered
        SlackStreams.__init__(self)
        self.users: dict[str, Json] = {bot_user_id: user(bot_user_id, "switchboard", is_bot=True)}
        self.history: dict[str, list[Json]] = {}  # channel -> messages, oldest first
        self.outside: set[str] = set()  # channels the bot is no member of (see remove_bot)
        self._ts = Timestamps()
        self._throttled: dict[str, list[float]] = {}  # method -> Retry-After of the next refusals
        self._delays: dict[str, list[float]] = {}  # method -> seconds the next answers wait
        self._gates: dict[str, asyncio.Event] = {}  # method -> what its calls wait for
        self._made: dict[str, list[float]] = {}  # method (and channel) -> times of recent calls
        self._runner: web.AppRunner | None = None
        self._apps: list[SlackStandIn] = [self]  # every app this server answers; its own first

    def add_app(self, *, bot_token: str, app_token: str, team_id: str, bot_user_id: str = "U0BOT",
                bot_id: str = "B0BOT2", app_id: str = "A0APP2", scopes: frozenset[str] = BOT_SCOPES,
                streams_offered: bool = True) -> SlackStandIn:
        """Another app, installed in workspace `team_id`, served at this server's `base_url` and
        sharing nothing with the others but the server: script it and read it through the object
        returned (its tokens, ack timeout and retries as this one's)."""
        taken = {t for a in self._apps for t in (a.bot_token, a.app_token)}
        if {bot_token, app_token} & taken or team_id in {a.team_id for a in self._apps}:
            raise ValueError("each app has tokens and a workspace of its own")
        app = SlackStandIn(bot_token=bot_token, app_token=app_token, team_id=team_id,
                           bot_user_id=bot_user_id, bot_id=bot_id, app_id=app_id, scopes=scopes,
                           ack_timeout=self.ack_timeout, max_retries=self.max_retries,
                           enforce_tiers=self.enforce_tiers, streams_offered=streams_offered)
        app._port = self._port
        self._apps.append(app)
        if self._runner is not None:
            app._start_socket_mode()
        return app

    async def __aenter__(self) -> SlackStandIn:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link/", self._link_of_app)
        app.router.add_get("/files-pri/{ref}/{name}", self._file_of_app)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self._port = int(self._runner.addresses[0][1])
        for each in self._apps:
            each._port = self._port
            each._start_socket_mode()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for each in self._apps:
            await each._stop_socket_mode()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/api/"

    # -- scripting ------------------------------------------------------------------------------

    def add_user(self, user_id: str, name: str, real_name: str | None = None, *,
                 is_bot: bool = False) -> None:
        self.users[user_id] = user(user_id, name, real_name, is_bot=is_bot)

    def message(self, channel: str, user_id: str, text: str, *, thread_ts: str | None = None,
                live: bool = True) -> Json:
        """Someone writes: the message is kept in history and sent as a `message` event, and as an
        `app_mention` too when it mentions the bot outside a DM (as Slack does with both subscribed).
        `live=False`: written while no app was connected, so it is in history only."""
        ts = self._ts.next(channel)
        event: Json = {"type": "message", "channel": channel, "user": user_id, "text": text, "ts": ts,
                       "event_ts": ts, "channel_type": channel_type(channel), "team": self.team_id,
                       "client_msg_id": f"{ts}-{user_id}".replace(".", "-")}
        if thread_ts is not None:
            event["thread_ts"] = thread_ts
            parent = self._find(channel, thread_ts)
            if parent is not None:
                event["parent_user_id"] = parent.get("user")
                parent.setdefault("reply_count", 0)
                parent["reply_count"] += 1
                parent["latest_reply"] = ts
                parent["thread_ts"] = thread_ts
        self.history.setdefault(channel, []).append({k: v for k, v in event.items()
                                                     if k not in ("channel", "event_ts", "channel_type")})
        if not live or channel in self.outside:
            return event
        self.dispatch(event)
        if f"<@{self.bot_user_id}>" in text and not channel.startswith("D"):
            mention = {k: v for k, v in event.items() if k != "channel_type"}
            self.dispatch({**mention, "type": "app_mention"})
        return event

    def remove_bot(self, channel: str) -> None:
        """The bot is removed from a channel: as on Slack, none of its messages is sent to the app,
        and posting or reading history there is refused `not_in_channel`."""
        self.outside.add(channel)

    def dm_of(self, user_id: str) -> str:
        """The id of the app's DM with a member: "D" and the rest of theirs (U0ALICE → D0ALICE)."""
        return "D" + user_id[1:]

    def delay(self, method: str, *seconds: float) -> None:
        """The next calls of `method` are answered after these many seconds, one for each."""
        self._delays.setdefault(method, []).extend(seconds)

    def hold(self, method: str) -> asyncio.Event:
        """Calls of `method` wait (before they are answered) until the returned event is set."""
        return self._gates.setdefault(method, asyncio.Event())

    def throttle(self, method: str, retry_after: float = 1.0, times: int = 1) -> None:
        """The next `times` calls of `method` get HTTP 429 with this Retry-After (whole seconds)."""
        self._throttled.setdefault(method, []).extend([retry_after] * times)

    # -- reading --------------------------------------------------------------------------------

    def calls_of(self, method: str) -> list[RecordedCall]:
        return [c for c in self.calls if c.method == method]

    def texts_to(self, channel: str) -> list[str]:
        return [m.text for m in self.sent if m.channel == channel]

    async def wait_for(self, predicate: Callable[[], T], timeout: float = 30) -> T:
        """Poll `predicate` until it returns something truthy, and return that."""
        deadline = time.monotonic() + timeout
        while not (result := predicate()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout} s")
            await asyncio.sleep(0.01)
        return result

    # -- the Web API ----------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        args: Json = dict(request.query)
        if request.content_type == "application/json":
            body = await request.json()
            args.update(body if isinstance(body, dict) else {})
        elif request.can_read_body:
            args.update(await request.post())
        token = token_of(request.headers, args)
        # The app whose token it is; a token no app has is refused by the server's own (invalid_auth).
        app = next((a for a in self._apps if token in (a.bot_token, a.app_token)), self)
        return await app._serve(request.match_info["method"], args, token)

    async def _link_of_app(self, request: web.Request) -> web.StreamResponse:
        """A socket opened with a ticket: the app that handed the ticket out takes it."""
        ticket = request.query.get("ticket", "")
        return await next((a for a in self._apps if ticket in a._tickets), self)._link(request)

    async def _file_of_app(self, request: web.Request) -> web.Response:
        """A file's URL names its workspace: that workspace's app serves it."""
        team = request.match_info["ref"].partition("-")[0]
        return await next((a for a in self._apps if a.team_id == team), self)._file_download(request)

    async def _serve(self, method: str, args: Json, token: str | None) -> web.Response:
        kind = self._token_kind(token)
        offered = self.streams_offered or "Stream" not in method
        if (method not in METHOD_SCOPES and method != "apps.connections.open") or not offered:
            return self._answer(method, args, kind, {"ok": False, "error": "unknown_method"})
        refused = self._refusal(method, args, kind)
        if refused is not None:
            return self._answer(method, args, kind, refused)
        retry_after = self._rate_limited(method, args)
        if retry_after is not None:
            self.calls.append(RecordedCall(method, args, kind, 429, "ratelimited"))
            return web.json_response({"ok": False, "error": "ratelimited"}, status=429,
                                     headers={"Retry-After": str(int(retry_after))})
        if method in self._gates:
            await self._gates[method].wait()
        if self._delays.get(method):
            await asyncio.sleep(self._delays[method].pop(0))
        handler = getattr(self, "_" + method.replace(".", "_"))
        return self._answer(method, args, kind, handler(args))

    def _answer(self, method: str, args: Json, kind: str | None, body: Json) -> web.Response:
        error = None if body.get("ok") else body.get("error")
        self.calls.append(RecordedCall(method, args, kind, 200, error))
        # As Slack does on every answer to a valid bot token: the scopes it carries.
        scopes = {"x-oauth-scopes": ",".join(sorted(self.scopes))} if kind == "bot" else {}
        return web.json_response(body, headers=scopes)

    def _token_kind(self, token: str | None) -> str | None:
        if not token:
            return None
        return {self.bot_token: "bot", self.app_token: "app"}.get(token, "invalid")

    def _refusal(self, method: str, args: Json, kind: str | None) -> Json | None:
        if kind is None:
            return {"ok": False, "error": "not_authed"}
        if kind == "invalid":
            return {"ok": False, "error": "invalid_auth"}
        if (method == "apps.connections.open") != (kind == "app"):
            return {"ok": False, "error": "not_allowed_token_type"}
        needed = METHOD_SCOPES.get(method)
        if needed == "history":
            needed = history_scope(str(args.get("channel", "")))
        if needed is not None and needed not in self.scopes:
            return {"ok": False, "error": "missing_scope", "needed": needed,
                    "provided": ",".join(sorted(self.scopes))}
        if method in MEMBERS_ONLY and str(args.get("channel", "")) in self.outside:
            return {"ok": False, "error": "not_in_channel"}
        return None

    def _rate_limited(self, method: str, args: Json) -> float | None:
        queued = self._throttled.get(method)
        if queued:
            return queued.pop(0)
        if not self.enforce_tiers:
            return None
        now = time.monotonic()
        if method == "chat.postMessage":
            key, window, allowed = f"{method} {args.get('channel')}", 1.0, 1
        else:
            key, window, allowed = method, 60.0, TIER_PER_MINUTE[TIERS.get(method, 2)]
        recent = [t for t in self._made.get(key, []) if now - t < window]
        if len(recent) >= allowed:
            return max(1.0, window - (now - recent[0]))
        self._made[key] = [*recent, now]
        return None

    # -- methods ----------------------------------------------------------------------------------

    def _auth_test(self, args: Json) -> Json:
        return {"ok": True, "url": "https://standin.slack.com/", "team": "Stand-in", "user": "switchboard",
                "team_id": self.team_id, "user_id": self.bot_user_id, "bot_id": self.bot_id,
                "is_enterprise_install": False}

    def _apps_connections_open(self, args: Json) -> Json:
        return {"ok": True, "url": self._new_ticket()}

    def _chat_postMessage(self, args: Json) -> Json:
        channel, text = str(args.get("channel", "")), args.get("text")
        if channel[:1] in ("U", "W"):  # a member's id: the app's DM with them
            if channel not in self.users:
                return {"ok": False, "error": "channel_not_found"}
            channel = self.dm_of(channel)
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if not isinstance(text, str) or not text.strip():
            return {"ok": False, "error": "no_text"}
        if len(text) > MAX_TEXT:
            return {"ok": False, "error": "msg_too_long"}
        ts = self._ts.next(channel)
        thread_ts = args.get("thread_ts") or None
        message: Json = {"type": "message", "user": self.bot_user_id, "bot_id": self.bot_id,
                         "app_id": self.app_id, "text": text, "ts": ts, "team": self.team_id}
        if thread_ts is not None:
            message["thread_ts"] = str(thread_ts)
        self.history.setdefault(channel, []).append(message)
        self.sent.append(PostedMessage(channel, ts, text, message.get("thread_ts"), args))
        # Slack sends the bot its own messages too (message.im, message.channels): Bolt drops them.
        self.dispatch({**message, "channel": channel, "event_ts": ts, "channel_type": channel_type(channel)})
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def bot_messages(self, channel: str) -> list[Json]:
        """The bot's messages in a conversation as they read now (threads included), oldest first."""
        return [m for m in self.history.get(channel, []) if m.get("user") == self.bot_user_id]

    def _chat_update(self, args: Json) -> Json:
        channel, ts, text = str(args.get("channel", "")), str(args.get("ts", "")), args.get("text")
        found = self._find(channel, ts)
        if found is None:
            return {"ok": False, "error": "message_not_found"}
        if found.get("user") != self.bot_user_id or (channel, ts) in self._open_streams:
            return {"ok": False, "error": "cant_update_message"}
        if not isinstance(text, str) or not text.strip():
            return {"ok": False, "error": "no_text"}
        found["text"] = text
        if "blocks" in args:  # else the message's blocks stay, and they are what Slack shows
            blocks = args["blocks"]
            found["blocks"] = json.loads(blocks) if isinstance(blocks, str) else blocks
        self.updated.append(UpdatedMessage(channel, ts, text))
        return {"ok": True, "channel": channel, "ts": ts, "text": text, "message": found}

    def _chat_delete(self, args: Json) -> Json:
        channel, ts = str(args.get("channel", "")), str(args.get("ts", ""))
        found = self._find(channel, ts)
        if found is None:
            return {"ok": False, "error": "message_not_found"}
        if found.get("user") != self.bot_user_id:
            return {"ok": False, "error": "cant_delete_message"}
        self.history[channel].remove(found)
        return {"ok": True, "channel": channel, "ts": ts}

    def _conversations_history(self, args: Json) -> Json:
        channel = str(args.get("channel", ""))
        if channel not in self.history:
            return {"ok": False, "error": "channel_not_found"}
        top = [m for m in self.history[channel] if m.get("thread_ts") in (None, m["ts"])]
        return page(top, args, newest_first=True)

    def _conversations_replies(self, args: Json) -> Json:
        channel, ts = str(args.get("channel", "")), str(args.get("ts", ""))
        if channel not in self.history:
            return {"ok": False, "error": "channel_not_found"}
        thread = [m for m in self.history[channel] if m["ts"] == ts or m.get("thread_ts") == ts]
        if not thread:
            return {"ok": False, "error": "thread_not_found"}
        return page(thread, args, newest_first=False)

    def _users_info(self, args: Json) -> Json:
        found = self.users.get(str(args.get("user", "")))
        return {"ok": True, "user": found} if found else {"ok": False, "error": "user_not_found"}

    def _find(self, channel: str, ts: str) -> Json | None:
        return next((m for m in self.history.get(channel, []) if m["ts"] == ts), None)
