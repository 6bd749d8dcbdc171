"""The web chat channel: a message posted from the browser goes through the same intake as any
platform's (stored before the POST is answered), and replies and their previews go out to the
account's open pages through the hub.

Every web chat is one account's direct chat, `agent:<id>:web:direct:<account>`; the page reads
its history from the store, so a reply delivered while no page was open is there on the next
load, and a reload or a restart loses nothing.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal

from bot.config import MediaConfig, WebChatConfig
from bot.core.errors import BotError
from bot.core.media import with_labels
from bot.core.messages import ChatRef, InboundMessage, OutboundMessage
from bot.core.session_key import SessionKey, build
from bot.delivery.preview import PreviewStream
from bot.intake.access import allows
from bot.intake.channel import ChunkSent, Intake, PreviewPosted, ReplyPreview
from bot.intake.commands import is_known, parse_command
from channels.web.hub import ChatHub
from channels.web.upload import Upload, body_limit, with_upload

PROVIDER = "web"
# One message at most this long (the form's own limit too): a pasted book belongs in a file.
MAX_CHARS = 16_000
# What a page's message id may be: it names the message for the store's idempotency, so a form
# sent twice (a reload of the POST, a retry) is stored once.
NONCE = re.compile(r"^[A-Za-z0-9_-]{8,64}$")
NOTICES_KEPT = 5  # lines not stored (command answers, pairing codes) a page shows when opened
# Previews: a page takes updates as fast as the model writes; a tenth of a second is smooth
# enough and keeps a fast stream to a few events a second.
PREVIEW_INTERVAL = 0.1

Access = Literal["yes", "no", "ask"]


class WebChatClosed(BotError):
    """The channel takes no message now (not started yet, or stopping): try again shortly."""


def access(section: WebChatConfig, account: str, role: str) -> Access:
    """Whether an account may chat: admins always; chat-only accounts as `dm_policy` says ("ask":
    the pairing ledger decides)."""
    if role == "admin":
        return "yes"
    if allows(section.dm_policy, section.allow_from, account):
        return "yes"
    return "ask" if section.dm_policy == "pairing" else "no"


@dataclass(frozen=True, slots=True)
class Posted:
    """What became of a posted message: stored (and queued), or refused and why; `shown` is the
    stored text as the page shows it (a file's label first), `notice` what the account is told
    about a file that was not opened."""

    stored: bool
    refusal: str | None = None
    shown: str | None = None
    notice: str | None = None


class WebSurface:
    """A reply's preview on the account's pages: each update is the text so far."""

    interval = PREVIEW_INTERVAL

    def __init__(self, hub: ChatHub, account: str) -> None:
        self._hub = hub
        self._account = account

    def ready(self, text: str, elapsed: float) -> bool:
        return True  # nothing is posted to show it: no first sentence to wait for

    async def show(self, text: str) -> str | None:
        self._hub.publish(self._account, "preview", text=text)
        return None

    async def close(self, final: str) -> str | None:
        return None  # the reply event takes the preview's place on the page

    async def withdraw(self) -> None:
        self._hub.publish(self._account, "withdraw")


class WebChatChannel:
    """The browser's way in and out; the console's chat routes call `post` and read `hub`."""

    provider = PROVIDER

    def __init__(self, section: WebChatConfig, agent_for: Callable[[str], str], *,
                 hub: ChatHub | None = None) -> None:
        self._section = section
        self._agent_for = agent_for
        self.hub = hub or ChatHub()
        self._intake: Intake | None = None
        self._stopped = asyncio.Event()
        self._in_hand = 0  # posts being stored now: `stop` waits for them
        self._idle = asyncio.Event()
        self._idle.set()
        self._notices: dict[str, deque[str]] = {}

    def session_key(self, account: str) -> SessionKey:
        """The account's chat, in the session of the agent the routing gives it."""
        return build(self._agent_for(account), PROVIDER, "direct", account)

    @property
    def signup_open(self) -> bool:
        """Whether visitors may make their own chat-only accounts: under `dm_policy = "pairing"`,
        each then waits for an admin to approve its pairing code."""
        return self._section.dm_policy == "pairing"

    def listed(self, account: str) -> bool:
        """Whether `allow_from` names the account (it may chat without a code)."""
        return account in self._section.allow_from

    async def ask_pairing(self, account: str) -> None:
        """A new account's pairing code issued now and shown on its pages, as a stranger's first
        message gets it; nothing while the channel is not running (its first message does it)."""
        intake = self._intake
        if intake is not None and not self._stopped.is_set():
            await intake.pair(PROVIDER, account, account, account)

    def notices(self, account: str) -> list[str]:
        """The latest lines sent to an account that are not stored (newest last)."""
        return list(self._notices.get(account, ()))

    def media_limits(self) -> MediaConfig:
        """The `[media]` caps in force (the defaults before the channel runs)."""
        intake = self._intake
        return intake.media_limits() if intake is not None else MediaConfig()

    def body_limit(self) -> int:
        """How big a chat POST may be, by the `[media]` caps in force."""
        return body_limit(self.media_limits())

    async def run(self, intake: Intake) -> None:
        self._intake = intake
        self._stopped.clear()
        await self._stopped.wait()

    async def stop(self) -> None:
        """No more posts; returns once those in hand are stored (or failed)."""
        self._stopped.set()
        self._intake = None
        await self._idle.wait()

    async def post(self, account: str, role: str, text: str, nonce: str | None,
                   upload: Upload | None = None) -> Posted:
        """Store a message an account wrote (and the file it sent: taken in under the `[media]`
        caps, or noted when refused) and queue its turn; returns once it is committed.

        Raises WebChatClosed when the channel is not taking messages, and the store's error when
        it could not be stored (the page is then told it was not received).
        """
        intake = self._intake
        if intake is None or self._stopped.is_set():
            raise WebChatClosed("the web chat is not taking messages now; try again in a moment")
        text = text.strip()
        if not text and upload is None:
            return Posted(stored=False, refusal="Write something or pick a file first.")
        if len(text) > MAX_CHARS:
            return Posted(stored=False, refusal=f"A message of at most {MAX_CHARS} characters, please.")
        self._in_hand += 1
        self._idle.clear()
        try:
            allowed = access(self._section, account, role)
            if allowed == "ask":
                allowed = "yes" if await intake.pair(PROVIDER, account, account, account) else "no"
            if allowed == "no":
                return Posted(stored=False, refusal=(
                    "This account may not chat with the agent yet: an admin has to approve it "
                    "(the pairing code, if one was given, is shown below)."
                    if self._section.dm_policy == "pairing" else
                    "This account may not chat with the agent; ask an admin."))
            inbound, told = self._inbound(account, text, nonce), None
            if upload is not None:
                inbound, told = await with_upload(upload, inbound, intake)
            await intake.submit(inbound)
        finally:
            self._in_hand -= 1
            if not self._in_hand:
                self._idle.set()
        shown = with_labels(inbound.text, inbound.media)
        self.hub.publish(account, "inbound", text=shown, nonce=nonce)
        if told is not None:
            self._notify(account, told)
        return Posted(stored=True, shown=shown, notice=told)

    def _notify(self, account: str, text: str) -> None:
        """A line that is not stored: kept for a page opened later, and sent to the open ones."""
        kept = self._notices.setdefault(account, deque(maxlen=NOTICES_KEPT))
        kept.append(text)
        self.hub.publish(account, "notice", text=text)

    def _inbound(self, account: str, text: str, nonce: str | None) -> InboundMessage:
        name = parse_command(text)
        return InboundMessage(
            session_key=self.session_key(account), chat=ChatRef(PROVIDER, account),
            sender_id=account, sender_name=account, text=text,
            provider_message_id=nonce if nonce is not None and NONCE.fullmatch(nonce) else None,
            sent_at=time.time(), command=name if name is not None and is_known(name) else None,
        )

    async def send(self, message: OutboundMessage, on_chunk: ChunkSent | None = None) -> list[str]:
        if message.skip_chunks:
            return []  # a web reply is one chunk, already delivered
        account = message.chat.chat_id
        # The page has no message ids of its own: a local one says the reply went out (to the pages
        # open now; the others read it from the store when they open).
        sent = f"web-{time.time_ns()}"
        if message.delivery_key is None:  # a notice: not stored, so kept here for a page opened later
            self._notify(account, message.text)
        else:
            self.hub.publish(account, "reply", text=message.text, key=message.delivery_key, id=sent)
        if on_chunk is not None:
            await on_chunk(0, sent)
        return [sent]

    @asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        self.hub.publish(chat.chat_id, "typing", on=True)
        try:
            yield
        finally:
            self.hub.publish(chat.chat_id, "typing", on=False)

    def preview(
        self, chat: ChatRef, reply_to_id: str | None, *, resume_id: str | None = None,
        on_posted: PreviewPosted | None = None,
    ) -> ReplyPreview | None:
        return PreviewStream(WebSurface(self.hub, chat.chat_id), name=f"web preview {chat.chat_id}")
