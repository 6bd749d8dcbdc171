"""The web chat's pages: the chat (its history read from the store), the form that posts to it,
and the stream of server-sent events that brings replies, as they are written, to the open page.

The channel itself is `channels.web` (intake, access, sending); this module is only its HTTP face,
behind the console's door: a session, and its CSRF token on the POST.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bot.core.messages import StoredMessage
from bot.intake.channel import Channel
from bot.store.records import delivery_key
from bot.web.chat_feed import ChatFeed
from bot.web.guard import SESSION_KEY, see_other
from bot.web.pages import PageStore, message_row
from bot.web.rendering import Renderer
from channels.web.channel import MAX_CHARS, Posted, WebChatChannel, WebChatClosed
from channels.web.hub import ChatEvent, Subscription
from channels.web.upload import Upload, largest_cap

SHOWN = 50  # messages of the history a chat page shows
# A comment line this often keeps proxies from closing an idle stream (and finds a closed one).
KEEPALIVE = 15.0
# How long a browser waits before it reconnects a stream that ended (EventSource's `retry`).
RETRY_MS = 2000


def chat_row(message: StoredMessage) -> dict[str, Any]:
    """A stored message as the chat shows it, with what the live events name it by: a reply by
    its delivery key, the account's own message by the page's id for it."""
    row = message_row(message)
    row["key"] = delivery_key(message.id) if message.role == "assistant" else ""
    row["nonce"] = (message.provider_message_id or "") if message.role == "user" else ""
    return row


async def uploaded(field: object) -> Upload | None:
    """The form's file, None when none was picked (a browser sends an empty, unnamed part)."""
    if not isinstance(field, web.FileField):
        return None
    data = await asyncio.to_thread(field.file.read)
    if not data and not field.filename:
        return None
    return Upload(bytes(data), name=field.filename or None, mime=field.content_type or None)


def sse(kind: str, data: Mapping[str, Any]) -> bytes:
    """One server-sent event (JSON data on one line)."""
    return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


@dataclass(frozen=True, slots=True)
class Chat:
    """The chat routes; the channel is looked up at each request (it is the daemon's `web`)."""

    base: str
    store: PageStore
    channels: Mapping[str, Channel]
    renderer: Renderer
    feed: ChatFeed = field(init=False)  # what another instance stored, to the streams open here

    def __post_init__(self) -> None:
        object.__setattr__(self, "feed", ChatFeed(self.store, chat_row))

    def routes(self, app: web.Application) -> None:
        app.router.add_get(f"{self.base}/chat", self.page)
        app.router.add_post(f"{self.base}/chat", self.post)
        app.router.add_get(f"{self.base}/chat/events", self.events)
        app.on_shutdown.append(self._close_streams)

    def body_limit(self, request: web.Request) -> int | None:
        """The chat's POST takes a file under the `[media]` caps; every other form the default."""
        channel = self.channels.get("web")
        if request.path != f"{self.base}/chat" or not isinstance(channel, WebChatChannel):
            return None
        return channel.body_limit()

    def _channel(self) -> WebChatChannel:
        channel = self.channels.get("web")
        if not isinstance(channel, WebChatChannel):
            raise web.HTTPNotFound(text="the web chat is off ([channels.web] enabled = false)")
        return channel

    async def page(self, request: web.Request, *, refusal: str | None = None,
                   status: int = 200) -> web.Response:
        channel = self._channel()
        session = request[SESSION_KEY]
        key = str(channel.session_key(session.account))
        messages = await self.store.history(key, SHOWN)
        newest = messages[-1].id if messages else 0
        return self.renderer.page(
            "chat.html", session, status=status, rows=[chat_row(m) for m in messages], newest=newest,
            session_key=key, nonce=secrets.token_urlsafe(16), refusal=refusal,
            notices=channel.notices(session.account), max_chars=MAX_CHARS,
            max_bytes=largest_cap(channel.media_limits()),
        )

    async def post(self, request: web.Request) -> web.StreamResponse:
        """A message from the form: answered once it is stored (303 back to the chat, or JSON to
        the page's script); refused (403) for an account that may not chat, 503 while stopping. A
        file sent with it goes to the media intake (the door has read the body, under its limit)."""
        channel = self._channel()
        session = request[SESSION_KEY]
        form = await request.post()
        text, nonce = form.get("text"), form.get("nonce")
        wants_json = "application/json" in request.headers.get("Accept", "")
        upload = await uploaded(form.get("file"))
        try:
            posted = await channel.post(session.account, session.role, text if isinstance(text, str) else "",
                                        nonce if isinstance(nonce, str) else None, upload)
        except WebChatClosed as exc:
            posted, status = Posted(stored=False, refusal=str(exc)), 503
        else:
            status = 200 if posted.stored else 403
        if wants_json:
            return web.json_response({"stored": posted.stored, "refusal": posted.refusal,
                                      "shown": posted.shown, "notice": posted.notice}, status=status)
        if posted.stored:
            return see_other(f"{self.base}/chat")
        return await self.page(request, refusal=posted.refusal, status=status)

    async def events(self, request: web.Request) -> web.StreamResponse:
        """The account's live events: first what was stored after the page's newest message (a
        page that reconnects catches up), then previews, replies and notices as they happen here,
        and what any instance stores in the chat (the feed's looks at the store)."""
        channel = self._channel()
        session = request[SESSION_KEY]
        after_text = request.query.get("after", "")
        after = int(after_text) if after_text.isdigit() else None
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "X-Accel-Buffering": "no"})
        await response.prepare(request)
        with channel.hub.subscribe(session.account) as subscription:
            await response.write(f"retry: {RETRY_MS}\n\n".encode())
            key = str(channel.session_key(session.account))
            history = await self.store.history(key, SHOWN)
            if after is not None:
                for message in history:
                    if message.id > after:
                        await response.write(sse("stored", chat_row(message)))
            newest = max(history[-1].id if history else 0, after or 0)
            with self.feed.watching(key, newest, subscription):
                await self._relay(response, subscription)
        return response

    async def _relay(self, response: web.StreamResponse, subscription: Subscription) -> None:
        try:
            while not subscription.ended:
                event: ChatEvent | None = await subscription.next(KEEPALIVE)
                if event is not None:
                    await response.write(sse(event.kind, event.data))
                elif subscription.lagged:
                    await response.write(sse("reload", {}))
                elif not subscription.closed:
                    await response.write(b": keepalive\n\n")
        except (ConnectionResetError, ConnectionError):
            return  # the page went away

    async def _close_streams(self, app: web.Application) -> None:
        channel = self.channels.get("web")
        if isinstance(channel, WebChatChannel):
            channel.hub.close()
