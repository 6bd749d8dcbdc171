"""The Discord stand-in's REST half (API v10): users, DMs, channels, messages with nonces and
edit rate limits, typing, application commands, and the faults a test scripts on them."""

from __future__ import annotations

import collections
import hashlib
import json
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from bot.testing.discord_gateway import DiscordGateway
from bot.testing.discord_values import (
    _TOO_LONG,
    API,
    BODY,
    EDIT_LIMIT,
    EDIT_WINDOW,
    EditedMessage,
    Json,
    RecordedRequest,
    SentMessage,
    TypingCall,
    _error,
    _Fault,
    _invalid,
    _json,
    _ratelimit_headers,
    user,
)


class DiscordRest(DiscordGateway):
    """The REST API of a Discord stand-in (see `DiscordStandIn`)."""

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
