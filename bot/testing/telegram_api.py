"""Local aiohttp stand-in of the Telegram Bot API that the real python-telegram-bot talks to."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web

from bot.testing.telegram_bot_api import TelegramBotApi
from bot.testing.telegram_html import (
    EntityParseError,
    parse_html,
)
from bot.testing.telegram_values import (
    JSON,
    Call,
    Draft,
    SentMessage,
    _ApiError,
    _decode_value,
    _error,
    _Fault,
    _raw,
    _sequence,
    command_entities,
    group_chat,
    mention_entities,
    message,
    private_chat,
    user,
)
from bot.testing.telegram_webhook import Webhook, WebhookAttempt

__all__ = [
    "Call",
    "Draft",
    "EntityParseError",
    "SentMessage",
    "TelegramStandIn",
    "Webhook",
    "WebhookAttempt",
    "command_entities",
    "group_chat",
    "mention_entities",
    "message",
    "parse_html",
    "private_chat",
    "user",
]


class TelegramStandIn(TelegramBotApi):
    """`async with TelegramStandIn() as tg:` serves the Bot API at `tg.base_url` on 127.0.0.1.

    Like api.telegram.org, one server answers every bot by the token in the URL: `tg.add_bot(...)`
    gives another bot on the same server, with its own identity, updates, offset and sent messages.

    While a webhook is set (setWebhook), getUpdates answers 409 and every pending or pushed update
    is POSTed to it as Telegram does (`bot.testing.telegram_webhook`), until deleteWebhook.
    """
    def __init__(self, *, token: str = "123456:TEST", bot_id: int = 1000,
                 bot_username: str = "switchboard_bot", bot_first_name: str = "Switchboard") -> None:
        super().__init__(token=token, bot_id=bot_id, bot_username=bot_username, bot_first_name=bot_first_name)
        self._bots: dict[str, TelegramStandIn] = {token: self}  # by token; the server's own first

    def add_bot(self, *, token: str, bot_id: int, bot_username: str,
                bot_first_name: str = "Switchboard") -> TelegramStandIn:
        """Another bot served by this server (same `base_url`), sharing nothing with the others
        but the server: script it and read what it sent through the object returned."""
        if token in self._bots:
            raise ValueError(f"a bot with token {token!r} is already served")
        bot = TelegramStandIn(token=token, bot_id=bot_id, bot_username=bot_username,
                              bot_first_name=bot_first_name)
        bot._port = self._port
        self._bots[token] = bot
        return bot

    async def __aenter__(self) -> TelegramStandIn:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download_for)
        # handler_cancellation: a long poll whose client went away must not linger until its timeout.
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self._port = int(self._runner.addresses[0][1])
        for bot in self._bots.values():
            bot._port = self._port
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Cancel in-flight requests (long polls) and stop the server; safe to call twice."""
        for bot in self._bots.values():
            await bot.webhook_sender.close()
        await self._inflight.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/bot"

    # -- scripting and inspection

    def calls_of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method.lower() == method.lower()]

    def fail_next(self, method: str, *, status: int | None = None, description: str | None = None,
                  retry_after: int | None = None, migrate_to_chat_id: int | None = None, times: int = 1,
                  chat_id: int | str | None = None) -> None:
        """Answer the next `times` calls of `method` (to `chat_id`, if given) with an error envelope."""
        status = status or (429 if retry_after is not None else 400)
        if description is None and migrate_to_chat_id is not None:
            description = "Bad Request: group chat was upgraded to a supergroup chat"
        elif description is None:
            description = HTTPStatus(status).phrase + (f": retry after {retry_after}" if retry_after else "")
        parameters = {k: v for k, v in (("retry_after", retry_after),
                                        ("migrate_to_chat_id", migrate_to_chat_id)) if v is not None}
        self._faults.append(_Fault(method.lower(), status, description, parameters, chat_id, times))

    def answer_next(self, method: str, body: JSON | str, *, status: int = 200, times: int = 1) -> None:
        """Answer the next `times` calls of `method` (or "file", a download) with `body` as it is, e.g.
        `{"ok": True}` without a result, a getMe user without `is_bot`, or a text that is no JSON:
        what a broken proxy, a newer API or a web server's error page might send."""
        self._faults.append(_Fault(method.lower(), status, "", {}, None, times, body=body))

    def delay_next(self, method: str, seconds: float, *, times: int = 1) -> None:
        """Answer the next `times` calls of `method` normally, but only after `seconds`."""
        self._faults.append(_Fault(method.lower(), 200, "", {}, None, times, delay=seconds))

    def hold_next(self, method: str) -> asyncio.Event:
        """Serve the next call of `method` (sendMessage creates its message) but hold the answer
        until the event returned is set."""
        release = asyncio.Event()
        self._faults.append(_Fault(method.lower(), 200, "", {}, None, 1, hold=release))
        return release

    def drop_next(self, method: str, times: int = 1) -> None:
        """Abort the connection of the next `times` calls of `method` without answering."""
        self._faults.append(_Fault(method.lower(), 0, "", {}, None, times, drop=True))

    def heal(self, method: str) -> None:
        """Forget the faults scripted for `method` and not used up yet (e.g. `fail_next(...,
        times=10**6)`: Telegram away): its next calls are answered normally again."""
        self._faults[:] = [fault for fault in self._faults if fault.method != method.lower()]

    def block(self, chat_id: int) -> None:
        """The user of `chat_id` blocked the bot: sends and chat actions there get 403."""
        self.blocked.add(chat_id)

    def refuse_drafts(self, chat_id: int, description: str = "Bad Request: TEXTDRAFT_PEER_INVALID") -> None:
        """Answer every sendMessageDraft to `chat_id` with a 400, as where drafts are unavailable."""
        self.draft_refusals[chat_id] = description

    def push(self, update_kind: str, msg: JSON) -> JSON:
        """Queue an update carrying `msg` under `update_kind` and wake long polls; returns the update."""
        chat_id = msg["chat"]["id"]
        self._chats[chat_id] = msg["chat"]
        self._messages[(chat_id, msg["message_id"])] = msg
        sequence = _sequence(chat_id)
        self._last_ids[sequence] = max(self._last_ids[sequence], msg["message_id"])
        return self.push_raw({update_kind: msg})

    def push_raw(self, update: JSON) -> JSON:
        """Queue an update as it is, possibly malformed, and wake long polls; returns it.

        It gets the next update id unless it carries an integer one (later pushes then count on
        from the highest). As on Telegram, an id below the confirmed offset is never handed out.
        """
        update = dict(update)
        given = update.get("update_id")
        if given is None:
            update = {"update_id": self._last_update_id + 1} | update
        elif not isinstance(given, int) or isinstance(given, bool):
            raise ValueError(f"update_id must be an integer, not {given!r}")
        self._last_update_id = max(self._last_update_id, update["update_id"])
        if update["update_id"] >= self.confirmed_offset:
            self._pending.append(update)
            self._pending.sort(key=lambda u: u["update_id"])
        self._pushed.set()
        self._pushed = asyncio.Event()  # waiters hold the old, now set, event
        if self.webhook is not None and update in self._pending:
            self._deliver_soon(update)
        return update

    # -- the webhook side

    async def delivered(self, update: JSON) -> int | None:
        """Wait until the webhook delivery of a pushed update has ended: its last status (2xx: taken;
        anything else after every try: still pending, as on Telegram)."""
        await self.wait_for(lambda: self.webhook_sender.sending(update))
        return await self.webhook_sender.outcome(update)

    async def post_to_webhook(self, update: JSON, *, secret: str | None, tries: int = 1) -> int | None:
        """POST an update to the registered webhook URL with another secret token, or none (a forged
        request, or a stale secret); the last status. Telegram itself never does this."""
        assert self.webhook is not None, "no webhook is set"
        forged = dataclasses.replace(self.webhook, secret_token=secret)
        return await self.webhook_sender.post(forged, update, tries=tries)

    def add_file(self, data: bytes, folder: str = "documents", extension: str = "") -> JSON:
        """Keep bytes the bot can fetch (getFile, then the file URL); the fields every file object has."""
        n = next(self._file_ids)
        file_id, unique = f"AgACAgIAAxk-{n:06d}", f"AQAD{n:06d}"
        self.files[file_id] = (unique, f"{folder}/file_{n}{extension}", data)
        return {"file_id": file_id, "file_unique_id": unique, "file_size": len(data)}

    def photo_sizes(self, *sizes: tuple[int, int, bytes]) -> list[JSON]:
        """A message's `photo`: one PhotoSize per (width, height, JPEG bytes), smallest first."""
        return [self.add_file(data, "photos", ".jpg") | {"width": w, "height": h} for w, h, data in sizes]

    def document(self, data: bytes, file_name: str, mime_type: str | None = None) -> JSON:
        """A message's `document` (the file_size Telegram states is the real one)."""
        doc = self.add_file(data, "documents", "") | {"file_name": file_name}
        return doc | ({"mime_type": mime_type} if mime_type else {})

    def push_message(self, chat: JSON, sender: JSON, text: str | None = None, **fields: Any) -> JSON:
        """Build a message (see `message()`) with the chat's next message id and push it."""
        if fields.get("message_id") is None:
            fields["message_id"] = self.next_message_id(chat["id"])
        return self.push("message", message(chat, sender, text, **fields))

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
        """Poll `predicate` until it is truthy and return its value; TimeoutError after `timeout` s."""
        async with asyncio.timeout(timeout):
            # Polling, not an event: predicates often read client-side state the server never sees.
            while not (result := predicate()):  # noqa: ASYNC110
                await asyncio.sleep(0.005)
        return result

    # -- HTTP

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        with self._inflight.serving():
            # Each bot keeps its own state; an unknown token is answered by this one (401).
            return await self._bots.get(request.match_info["token"], self)._serve(request)

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        form = dict(request.query) | dict(await request.post())
        params = {k: _decode_value(k, v) for k, v in form.items()}
        call = Call(method, params, time.monotonic())
        self.calls.append(call)
        handler = self._methods.get(method.lower())
        if request.match_info["token"] != self.token:
            return _error(call, 401, "Unauthorized")
        if handler is None:
            return _error(call, 404, "Not Found")
        fault = self._take_fault(method.lower(), params.get("chat_id"))
        if fault is not None and fault.delay:
            await asyncio.sleep(fault.delay)
            fault = None
        held = fault.hold if fault is not None else None
        if held is not None:
            fault = None
        if fault is not None and fault.drop:
            call.failed = True
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)  # never written: the client sees a dropped connection
        if fault is not None and fault.body is not None:
            if isinstance(fault.body, str):
                return _raw(call, fault.status, fault.body)
            call.failed = fault.status >= 300 or fault.body.get("ok") is not True
            call.result = fault.body.get("result")
            return web.json_response(fault.body, status=fault.status)
        if fault is not None:
            return _error(call, fault.status, fault.description, fault.parameters)
        try:
            result = await handler(params)
        except _ApiError as exc:
            return _error(call, exc.status, exc.description)
        if held is not None:
            await held.wait()
        call.result = result
        return web.json_response({"ok": True, "result": result})

    async def _download_for(self, request: web.Request) -> web.StreamResponse:
        return await self._bots.get(request.match_info["token"], self)._download(request)
