"""The Bot API methods the Telegram stand-in answers (getMe, getUpdates, sendMessage, edits,
drafts, files, webhooks, commands) over one bot's state."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from collections import defaultdict
from typing import Any

from aiohttp import web

from bot.testing.inflight import InFlight
from bot.testing.telegram_html import (
    EntityParseError,
    parse_html,
)
from bot.testing.telegram_values import (
    _CHAT_ACTIONS,
    _OPT_IN_UPDATES,
    JSON,
    MAX_DOWNLOAD,
    MAX_TEXT,
    Call,
    Draft,
    SentMessage,
    _ApiError,
    _error,
    _Fault,
    _Handler,
    _phrase,
    _raw,
    _sequence,
)
from bot.testing.telegram_webhook import Webhook, WebhookAttempt, WebhookSender, webhook_refusal


class TelegramBotApi:
    """One bot's state and its Bot API methods (see `TelegramStandIn`)."""

    def __init__(self, *, token: str = "123456:TEST", bot_id: int = 1000,
                 bot_username: str = "switchboard_bot", bot_first_name: str = "Switchboard") -> None:
        self.token = token
        self.bot_user: JSON = {"id": bot_id, "is_bot": True, "first_name": bot_first_name,
                               "username": bot_username}
        self.calls: list[Call] = []
        self.sent: list[SentMessage] = []
        self.edits: list[SentMessage] = []
        self.deleted: list[tuple[int, int]] = []  # (chat id, message id) the bot deleted
        self.drafts: list[Draft] = []
        # Chats where drafts are refused (an error description per chat), see `refuse_drafts`.
        self.draft_refusals: dict[int, str] = {}
        self.blocked: set[int] = set()
        self.confirmed_offset = 0
        self.commands: dict[tuple[str, str], list[JSON]] = {}  # (scope JSON, language) -> commands
        self._faults: list[_Fault] = []
        self._pending: list[JSON] = []
        self._allowed: set[str] | None = None
        self._last_update_id = 0
        self._last_ids: defaultdict[int, int] = defaultdict(int)
        self._messages: dict[tuple[int, int], JSON] = {}
        self._chats: dict[int, JSON] = {}
        self._pushed = asyncio.Event()
        self._inflight = InFlight()
        self._runner: web.AppRunner | None = None
        self._port = 0
        # Files the bot may download: file_id -> (file_unique_id, file_path, bytes).
        self.files: dict[str, tuple[str, str, bytes]] = {}
        self.downloads: list[str] = []  # file paths fetched from /file/bot<token>/<path>
        self._file_ids = itertools.count(1)
        self.webhook: Webhook | None = None
        self.webhook_sender = WebhookSender()
        self._methods: dict[str, _Handler] = {
            "getme": self._get_me, "deletewebhook": self._delete_webhook, "getupdates": self._get_updates,
            "sendmessage": self._send_message, "editmessagetext": self._edit_message_text,
            "deletemessage": self._delete_message, "editmessagereplymarkup": self._edit_reply_markup,
            "sendmessagedraft": self._send_message_draft,
            "sendchataction": self._send_chat_action, "setmycommands": self._set_my_commands,
            "getmycommands": self._get_my_commands, "close": self._true, "logout": self._true,
            "getfile": self._get_file, "setwebhook": self._set_webhook,
            "getwebhookinfo": self._get_webhook_info,
        }

    # -- methods

    @property
    def webhook_attempts(self) -> list[WebhookAttempt]:
        """Every POST of an update to a webhook so far, with the answer's status."""
        return self.webhook_sender.attempts

    def next_message_id(self, chat_id: int) -> int:
        """Message ids are shared by inbound and outbound messages, like Telegram's: one sequence
        across the bot's private chats and basic groups, one per supergroup or channel."""
        sequence = _sequence(chat_id)
        self._last_ids[sequence] += 1
        return self._last_ids[sequence]

    def _deliver_soon(self, update: JSON) -> None:
        webhook = self.webhook
        assert webhook is not None
        kinds = update.keys() - {"update_id"}
        if webhook.allowed_updates is not None and kinds and not kinds & webhook.allowed_updates:
            return  # Telegram never sends an update kind the webhook did not ask for
        self.webhook_sender.post_soon(webhook, update, still_wanted=lambda: self.webhook == webhook,
                                      on_delivered=self._taken)

    def _taken(self, update: JSON) -> None:
        self._pending = [u for u in self._pending if u["update_id"] != update["update_id"]]

    def _take_fault(self, method: str, chat_id: Any) -> _Fault | None:
        for fault in self._faults:
            if fault.method == method and (fault.chat_id is None or str(fault.chat_id) == str(chat_id)):
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    async def _true(self, p: JSON) -> bool:
        return True

    async def _get_me(self, p: JSON) -> JSON:
        return self.bot_user | {"can_join_groups": True, "can_read_all_group_messages": False,
                                "supports_inline_queries": False, "can_connect_to_business": False,
                                "has_main_web_app": False}

    async def _delete_webhook(self, p: JSON) -> bool:
        self.webhook = None
        if p.get("drop_pending_updates"):
            self._pending.clear()
        return True

    async def _set_webhook(self, p: JSON) -> bool:
        url = str(p.get("url") or "")
        if not url:  # an empty URL removes the webhook, as deleteWebhook does
            return await self._delete_webhook(p)
        refusal = webhook_refusal(url, p.get("secret_token"))
        if refusal is not None:
            raise _ApiError(400, refusal)
        if p.get("drop_pending_updates"):
            self._pending.clear()
        if "allowed_updates" in p:
            self._allowed = set(p["allowed_updates"] or ()) or None
        allowed = frozenset(self._allowed) if self._allowed is not None else None
        self.webhook = Webhook(url, p.get("secret_token"), allowed, int(p.get("max_connections") or 40))
        for update in list(self._pending):  # what waited for a poll now comes by webhook
            self._deliver_soon(update)
        return True

    async def _get_webhook_info(self, p: JSON) -> JSON:
        info: JSON = {"url": "", "has_custom_certificate": False, "pending_update_count": len(self._pending)}
        if self.webhook is not None:
            info |= {"url": self.webhook.url, "max_connections": self.webhook.max_connections}
            if self.webhook.allowed_updates is not None:
                info["allowed_updates"] = sorted(self.webhook.allowed_updates)
            info |= self._last_webhook_error(self.webhook.url)
        return info

    def _last_webhook_error(self, url: str) -> JSON:
        """Telegram's `last_error_date` (unix time) and `last_error_message` of the newest failed
        delivery to `url`, kept after later successes as Telegram keeps them; {} when none failed.
        An attempt without an answer reads "Connection refused" (the sender cannot tell a refused
        connection from a dropped one)."""
        failed = [a for a in self.webhook_attempts if a.url == url and not a.ok]
        if not failed:
            return {}
        last = failed[-1]
        message = ("Connection refused" if last.status is None
                   else f"Wrong response from the webhook: {last.status} {_phrase(last.status)}")
        return {"last_error_date": int(time.time() - (time.monotonic() - last.time)),
                "last_error_message": message}

    async def _get_updates(self, p: JSON) -> list[JSON]:
        if self.webhook is not None:
            raise _ApiError(409, "Conflict: can't use getUpdates method while webhook is active; "
                                 "use deleteWebhook to delete the webhook first")
        offset = int(p.get("offset") or 0)
        if offset > 0:
            self.confirmed_offset = max(self.confirmed_offset, offset)
        elif offset < 0 and self._pending[offset:]:
            # The last -offset updates are kept; everything before them is forgotten.
            self.confirmed_offset = max(self.confirmed_offset, self._pending[offset:][0]["update_id"])
        # Below the confirmed offset an update is gone for good, whatever later calls ask for.
        self._pending = [u for u in self._pending if u["update_id"] >= self.confirmed_offset]
        if "allowed_updates" in p:
            self._allowed = set(p["allowed_updates"] or ()) or None  # Telegram remembers the last list
        limit = min(max(int(p.get("limit") or 100), 1), 100)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(p.get("timeout") or 0)
        while True:
            pushed = self._pushed
            ready = [u for u in self._pending if self._is_allowed(u)][:limit]
            if ready or loop.time() >= deadline:
                return ready
            try:
                async with asyncio.timeout_at(deadline):
                    await pushed.wait()
            except TimeoutError:
                pass

    def _is_allowed(self, update: JSON) -> bool:
        kind = next((k for k in update if k != "update_id"), None)
        if kind is None:  # a malformed update pushed with push_raw: nothing to filter it by
            return True
        return kind in self._allowed if self._allowed is not None else kind not in _OPT_IN_UPDATES

    def _chat(self, p: JSON, *, sending: bool = True) -> JSON:
        """A pushed chat, or one made up from the id's sign; "@channel" names are not supported."""
        chat_id = p.get("chat_id")
        if not isinstance(chat_id, int):
            raise _ApiError(400, "Bad Request: chat not found")
        chat = self._chats.get(chat_id) or (
            {"id": chat_id, "type": "private", "first_name": "User"} if chat_id > 0
            else {"id": chat_id, "type": "supergroup", "title": "Group"})
        if sending and chat["id"] in self.blocked:
            raise _ApiError(403, "Forbidden: bot was blocked by the user")
        return chat

    def _render(self, p: JSON) -> tuple[str, list[JSON]]:
        text, mode = str(p.get("text") or ""), p.get("parse_mode")
        visible, entities = text, list[JSON]()
        if isinstance(mode, str) and mode.lower() == "html":
            try:
                visible, entities = parse_html(text)
            except EntityParseError as exc:
                raise _ApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        elif mode not in (None, "", "Markdown", "MarkdownV2"):  # Markdown is passed through unparsed
            raise _ApiError(400, "Bad Request: unsupported parse_mode")
        if not visible.strip():
            raise _ApiError(400, "Bad Request: message text is empty")
        if len(visible) > MAX_TEXT:
            raise _ApiError(400, "Bad Request: message is too long")
        return visible, entities

    def _record(self, msg: JSON, p: JSON, reply_to: int | None) -> SentMessage:
        return SentMessage(msg["chat"]["id"], str(p.get("text")), msg["text"], p.get("parse_mode"),
                           msg.get("message_thread_id"), reply_to, msg["message_id"], time.monotonic())

    async def _send_message(self, p: JSON) -> JSON:
        chat = self._chat(p)
        visible, entities = self._render(p)
        reply = p.get("reply_parameters")
        reply = reply if isinstance(reply, dict) else {"message_id": p.get("reply_to_message_id"),
                                                       "allow_sending_without_reply":
                                                       p.get("allow_sending_without_reply")}
        reply_to, target = reply.get("message_id"), None
        if reply_to is not None:
            target = self._messages.get((chat["id"], int(reply_to)))
            if target is None and not reply.get("allow_sending_without_reply"):
                raise _ApiError(400, "Bad Request: message to be replied not found")
        msg: JSON = {"message_id": self.next_message_id(chat["id"]), "date": int(time.time()), "chat": chat,
                     "from": self.bot_user, "text": visible}
        if entities:
            msg["entities"] = entities
        if p.get("message_thread_id") is not None:
            msg["message_thread_id"] = p["message_thread_id"]
            if chat.get("is_forum"):
                msg["is_topic_message"] = True
        if target is not None:
            msg["reply_to_message"] = {k: v for k, v in target.items() if k != "reply_to_message"}
        self._messages[(chat["id"], msg["message_id"])] = msg
        self.sent.append(self._record(msg, p, reply_to))
        return msg

    def _own_message(self, p: JSON, doing: str, done: str) -> tuple[JSON, JSON]:
        """The chat and the bot's own message `p` names, as editMessageText and deleteMessage
        find it (`doing`, `done`: "edit", "edited" or "delete", "deleted", as Telegram words its
        refusals)."""
        chat = self._chat(p, sending=False)
        old = self._messages.get((chat["id"], int(p.get("message_id") or 0)))
        if old is None:
            raise _ApiError(400, f"Bad Request: message to {doing} not found")
        if old["from"]["id"] != self.bot_user["id"]:
            raise _ApiError(400, f"Bad Request: message can't be {done}")
        return chat, old

    async def _edit_message_text(self, p: JSON) -> JSON:
        chat, old = self._own_message(p, "edit", "edited")
        visible, entities = self._render(p)
        if (visible, entities) == (old.get("text"), old.get("entities", [])):
            raise _ApiError(400, "Bad Request: message is not modified: specified new message content and "
                                 "reply markup are exactly the same as a current content and reply markup "
                                 "of the message")
        msg = {k: v for k, v in old.items() if k != "entities"}
        msg |= {"text": visible, "edit_date": int(time.time())}
        if entities:
            msg["entities"] = entities
        self._messages[(chat["id"], msg["message_id"])] = msg
        self.edits.append(self._record(msg, p, None))
        return msg

    async def _edit_reply_markup(self, p: JSON) -> JSON:
        """editMessageReplyMarkup: the bot's own message only; the same markup again (none on a
        message without one) is refused as not modified, as Telegram does."""
        chat, old = self._own_message(p, "edit", "edited")
        markup = p.get("reply_markup") or None
        if markup == old.get("reply_markup"):
            raise _ApiError(400, "Bad Request: message is not modified: specified new message content and "
                                 "reply markup are exactly the same as a current content and reply markup "
                                 "of the message")
        msg = {k: v for k, v in old.items() if k != "reply_markup"} | {"edit_date": int(time.time())}
        if markup is not None:
            msg["reply_markup"] = markup
        self._messages[(chat["id"], msg["message_id"])] = msg
        self.edits.append(self._record(msg, p, None))
        return msg

    async def _delete_message(self, p: JSON) -> bool:
        """deleteMessage: a bot deletes its own messages in any chat (others' only as an admin,
        which this bot never is); a second delete finds nothing."""
        chat, old = self._own_message(p, "delete", "deleted")
        del self._messages[(chat["id"], old["message_id"])]
        self.deleted.append((chat["id"], old["message_id"]))
        return True

    async def _send_message_draft(self, p: JSON) -> bool:
        """Bot API 10.0: a private chat's draft; empty text shows "Thinking…"; nothing is stored."""
        chat = self._chat(p)
        draft_id = p.get("draft_id")
        if not isinstance(draft_id, int) or isinstance(draft_id, bool) or draft_id == 0:
            raise _ApiError(400, "Bad Request: invalid draft_id specified")
        if chat["type"] != "private":
            raise _ApiError(400, "Bad Request: TEXTDRAFT_PEER_INVALID")
        if chat["id"] in self.draft_refusals:
            raise _ApiError(400, self.draft_refusals[chat["id"]])
        visible = ""
        if p.get("text"):
            visible, _ = self._render(p)
        self.drafts.append(Draft(chat["id"], draft_id, visible, p.get("message_thread_id"), time.monotonic()))
        return True

    async def _send_chat_action(self, p: JSON) -> bool:
        self._chat(p)
        if p.get("action") not in _CHAT_ACTIONS:
            raise _ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    async def _get_file(self, p: JSON) -> JSON:
        found = self.files.get(str(p.get("file_id") or ""))
        if found is None:
            raise _ApiError(400, "Bad Request: invalid file_id")
        unique, path, data = found
        if len(data) > MAX_DOWNLOAD:
            raise _ApiError(400, "Bad Request: file is too big")
        return {"file_id": p["file_id"], "file_unique_id": unique, "file_size": len(data), "file_path": path}

    async def _download(self, request: web.Request) -> web.StreamResponse:
        """GET /file/bot<token>/<file_path>: the file's bytes, as api.telegram.org serves them."""
        path = request.match_info["path"]
        call = Call("file", {"path": path}, time.monotonic())
        self.calls.append(call)
        if request.match_info["token"] != self.token:
            return _error(call, 401, "Unauthorized")
        fault = self._take_fault("file", None)
        if fault is not None and isinstance(fault.body, str):
            return _raw(call, fault.status, fault.body)
        if fault is not None:
            return _error(call, fault.status, fault.description)
        data = next((d for _, p, d in self.files.values() if p == path), None)
        if data is None:
            return _error(call, 404, "Not Found")
        self.downloads.append(path)
        return web.Response(body=data, content_type="application/octet-stream")

    @staticmethod
    def _commands_key(p: JSON) -> tuple[str, str]:
        scope = p.get("scope") or {"type": "default"}
        return json.dumps(scope, sort_keys=True), str(p.get("language_code") or "")

    async def _set_my_commands(self, p: JSON) -> bool:
        commands = p.get("commands")
        if not isinstance(commands, list) or not all(
            re.fullmatch(r"[a-z0-9_]{1,32}", str(c.get("command"))) for c in commands
        ):
            raise _ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
        self.commands[self._commands_key(p)] = commands
        return True

    async def _get_my_commands(self, p: JSON) -> list[JSON]:
        return self.commands.get(self._commands_key(p), [])
