"""Matrix: a bot account on a homeserver through mautrix-python's client API, run inside the
daemon's event loop; normalising and gating is `channels.matrix.normalise`, rendering replies
`channels.matrix.format`, taking in pictures and files `channels.matrix.media`.

Nothing lost: `/sync` is long-polled by hand, and its `next_batch` token is kept (through the
intake's `CursorKeeper`, in the store) only once every event it moved past was stored or
deliberately skipped; an event that fails to store leaves the token where it was, and the same
batch comes again (the store drops events it holds, by event id); one that fails a second time
the same way is the event's own fault and is quarantined, as a Telegram update is. The first
start of an account takes no history: it keeps the token of an initial sync and answers what comes
after. A room's timeline cut short (`limited`, after a long absence) is filled from `/messages` first
(`channels.matrix.sync`).
Nothing twice: each chunk of a reply is sent with `PUT /send/m.room.message/{txnId}`, its txnId
derived from the reply, the room, the chunk's index and text, so a chunk resent after a crash
(the outbox resends what it has not seen confirmed) is answered with the first event's id, not
posted again; a streamed reply's preview message (`channels.matrix.preview`) becomes its first
chunk by an edit sent the same way. A 429 (`M_LIMIT_EXCEEDED`) is waited out for its `retry_after_ms`
(`channels.matrix.rate_limit`).
Invites are accepted or declined as `invite_policy` says (`admit_invite`), one log line each.
An encrypted room is never ignored silently (`channels.matrix.encryption`): an allowed invite to
one, or a room that turns encryption on after the bot joined, gets one line in the room and one
warning in the log, and the bot leaves; the bot has no olm keys, and would read nothing there.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import structlog
from mautrix.api import HTTPAPI, Method, Path
from mautrix.client import ClientAPI
from mautrix.errors import MatrixInvalidToken, MatrixRequestError, MForbidden, MNotFound
from mautrix.types import EventID, EventType, RoomID, UserID

from bot.config import MatrixConfig
from bot.core.errors import ChannelNotStartedError, DeliveryError, describe
from bot.core.messages import ChatRef, OutboundMessage
from bot.core.misconfiguration import report, token_refused
from bot.core.stopping import unless_stopped
from bot.delivery.preview import PreviewStream
from bot.intake.access import RefusalNotices, refused_dm_reply
from bot.intake.channel import ChunkSent, Intake, PreviewPosted, ReplyPreview
from bot.intake.cursor import CursorKeeper
from bot.intake.quarantine import RepeatedFailures, printable, raw_json, reason
from channels.matrix.encryption import ENCRYPTED_NOTICE, encryption_start
from channels.matrix.format import chunk_event, matrix_chunks
from channels.matrix.media import with_media
from channels.matrix.normalise import PLATFORM, MatrixMessage, admit, admit_invite, read_event, to_inbound
from channels.matrix.preview import MatrixPreview
from channels.matrix.rate_limit import honour_rate_limits
from channels.matrix.rooms import RoomDirectory
from channels.matrix.sync import TIMELINE_LIMIT, missed_events, sync_filter

log = structlog.get_logger("switchboard.matrix")

SYNC_TIMEOUT_MS = 30_000
FIRST_DELAY = 0.5
MAX_DELAY = 30.0
TYPING_MS = 30_000
TYPING_REFRESH = 20.0
_NETWORK_ERRORS = (OSError, aiohttp.ClientError, TimeoutError)
_TOKEN_HELP = "your client's Help & About → Access Token, or a login with the bot's password"


class MatrixChannel:
    """Receives with `/sync` and sends with the client-server API; one instance per account, its
    `name` ("matrix", "matrix.<account>") the provider of its session keys, chats and stored rows."""

    def __init__(
        self, config: MatrixConfig, *, agent_id: str, access_token: str, name: str = PLATFORM,
    ) -> None:
        self.provider = name
        self._config = config
        self._agent_id = agent_id
        self._token = access_token
        self._client: ClientAPI | None = None
        self._user_id = config.user_id or ""
        self._display_name = ""
        self._cursor: str | None = None
        self._rooms = RoomDirectory()
        self._names: dict[str, str] = {}
        self._notices = RefusalNotices()
        self._failures = RepeatedFailures()  # events not stored, to quarantine one failing twice alike
        self._stopped = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.ready = asyncio.Event()
        # Why the last sync failed, until one is answered again (the channel's state says so).
        self.trouble: str | None = None
        self.timeline_limit = TIMELINE_LIMIT  # events of a room per sync; a cut timeline is filled

    def reconfigure(self, config: MatrixConfig) -> None:
        """Apply a reloaded section (access lists, mentions, reply age) to events from now on."""
        self._config = config

    # -- lifecycle --------------------------------------------------------------------------------

    async def run(self, intake: Intake) -> None:
        session = aiohttp.ClientSession(middlewares=(honour_rate_limits,))
        api = HTTPAPI(base_url=self._config.homeserver or "", token=self._token, client_session=session)
        client = self._client = ClientAPI(mxid=UserID(self._user_id), api=api)
        try:
            if not await self._sign_in(client, intake):
                return
            keeper = intake if isinstance(intake, CursorKeeper) else None
            if keeper is not None:
                self._cursor = await keeper.channel_cursor(self.provider)
            await self._sync_until_stopped(client, intake, keeper)
            await asyncio.Event().wait()  # sending goes on after stop(), until cancelled
        finally:
            self._client = None
            await session.close()

    async def _sign_in(self, client: ClientAPI, intake: Intake) -> bool:
        """Check the token (`/whoami`) and read the bot's display name; False when the token was
        refused (reported; the channel stays off)."""
        try:
            who = await client.whoami()
        except MatrixInvalidToken as exc:
            await report(intake, token_refused("Matrix", self.provider, self._config.access_token_env,
                                               str(exc), _TOKEN_HELP))
            return False
        if self._user_id and who.user_id != self._user_id:
            raise ChannelNotStartedError(
                f"{self.provider}: the access token is {who.user_id}'s, not {self._user_id}'s")
        self._user_id = str(who.user_id)
        with contextlib.suppress(MatrixRequestError, *_NETWORK_ERRORS):
            self._display_name = await client.get_displayname(UserID(self._user_id)) or ""
        self._display_name = self._display_name or self._user_id[1:].partition(":")[0]
        return True

    async def stop(self) -> None:
        """Stop syncing (a waiting long poll is cancelled, a batch in hand finished and its token
        kept); the client stays open so turns in flight still deliver."""
        self._stopped.set()
        await self._idle.wait()

    # -- receiving --------------------------------------------------------------------------------

    async def _sync_until_stopped(
        self, client: ClientAPI, intake: Intake, keeper: CursorKeeper | None,
    ) -> None:
        delay = FIRST_DELAY
        while not self._stopped.is_set():
            try:
                first = self._cursor is None
                # The first sync does not wait, so `ready` means the homeserver answered.
                waiting = not first and self.ready.is_set()
                batch = await self._fetch_unless_stopped(client, SYNC_TIMEOUT_MS if waiting else 0)
                if batch is None:
                    return
                self._idle.clear()
                try:
                    await self._hand_over(batch, intake, history=not first)
                    token = batch.get("next_batch")
                    if isinstance(token, str) and token != self._cursor:
                        if keeper is not None:
                            await keeper.keep_channel_cursor(self.provider, token)
                        self._cursor = token
                finally:
                    self._idle.set()
            except MatrixInvalidToken as exc:
                await report(intake, token_refused("Matrix", self.provider, self._config.access_token_env,
                                                   str(exc), _TOKEN_HELP))
                return
            except Exception as exc:  # network, the homeserver away, an event the store refused
                if self._stopped.is_set():
                    return
                log.warning("matrix sync failed; retrying", channel=self.provider, error=describe(exc),
                            retry_in=delay)
                log.debug("matrix sync failure", exc_info=True)
                self.trouble = describe(exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), delay)
                delay = min(delay * 2, MAX_DELAY)
                continue
            if not self.ready.is_set():
                log.info("matrix connected", channel=self.provider, user=self._user_id)
                self.ready.set()
            self.trouble, delay = None, FIRST_DELAY

    async def _fetch_unless_stopped(self, client: ClientAPI, timeout_ms: int) -> dict[str, Any] | None:
        params = {"filter": sync_filter(self.timeline_limit), "timeout": str(timeout_ms)}
        if self._cursor is not None:
            params["since"] = self._cursor
        found = await unless_stopped(
            client.api.request(Method.GET, Path.v3.sync, query_params=params), self._stopped)
        if found is None and self._stopped.is_set():
            return None
        return found if isinstance(found, dict) else {}

    async def _hand_over(self, batch: dict[str, Any], intake: Intake, *, history: bool) -> None:
        """Every invite, then every room's new events in order; raises (the token then stays)
        when one could not be stored. `history` False (an account's first sync): invites only."""
        rooms = batch.get("rooms") or {}
        for room_id, invited in (rooms.get("invite") or {}).items():
            await self._on_invite(str(room_id), invited)
        for room_id, joined in (rooms.get("join") or {}).items():
            # A membership change is in the timeline, or in `state` when the timeline was cut;
            # otherwise `state` holds only the members lazy loading sends with their messages.
            timeline = joined.get("timeline") or {}
            state = (joined.get("state") or {}).get("events") or []
            events = (timeline.get("events") or []) + (state if timeline.get("limited") else [])
            if any(e.get("type") == "m.room.member" for e in events if isinstance(e, dict)):
                self._rooms.forget(str(room_id))
            events = timeline.get("events") or []
            prev_batch = timeline.get("prev_batch")
            if history and timeline.get("limited") and isinstance(prev_batch, str) \
                    and self._client is not None and self._cursor is not None:
                events = await missed_events(self._client, str(room_id), prev_batch, self._cursor) + events
            encrypted = encryption_start(events, state)
            readable = events if encrypted is None else events[:encrypted[0]]
            for event in readable if history else ():
                if isinstance(event, dict) and event.get("type") == "m.room.message":
                    await self._take(str(room_id), event, intake)
            if encrypted is not None:  # nothing from there on is read: never stored, never answered
                cause = encrypted[1]
                log.warning("matrix room is encrypted; leaving it", channel=self.provider,
                            room_id=str(room_id), sender=cause.get("sender"), by=cause.get("type"))
                await self._leave_encrypted(str(room_id), key=f"encrypted\x00{cause.get('event_id')}")

    async def _on_invite(self, room_id: str, invited: dict[str, Any]) -> None:
        client = self._client
        if client is None:
            return
        inviter, direct, encrypted = "", False, False
        for event in (invited.get("invite_state") or {}).get("events") or []:
            if event.get("type") == "m.room.member" and event.get("state_key") == self._user_id:
                inviter = str(event.get("sender") or "")
                direct = bool((event.get("content") or {}).get("is_direct"))
            encrypted = encrypted or event.get("type") == "m.room.encryption"
        if admit_invite(inviter, self._config, direct=direct) and encrypted:
            # Never a silent ignore: the inviter is told in the room, once, and the bot leaves.
            log.warning("matrix invite to an encrypted room refused", channel=self.provider,
                        room_id=room_id, inviter=inviter)
            await client.join_room_by_id(RoomID(room_id))
            await self._leave_encrypted(room_id)
        elif admit_invite(inviter, self._config, direct=direct):
            log.info("matrix invite accepted", channel=self.provider, room_id=room_id, inviter=inviter)
            try:
                await client.join_room_by_id(RoomID(room_id))
            except (MForbidden, MNotFound) as exc:  # withdrawn meanwhile: nothing to retry
                log.info("matrix invite gone before the bot joined", room_id=room_id, error=str(exc))
        else:
            log.info("matrix invite declined", channel=self.provider, room_id=room_id, inviter=inviter)
            with contextlib.suppress(MForbidden, MNotFound):
                await client.leave_room(RoomID(room_id), reason="not allowed to invite this bot")

    async def _leave_encrypted(self, room_id: str, key: str | None = None) -> None:
        """Say in the room, in one line, that the bot cannot read encrypted rooms, and leave it.
        With a `key` (the event that encrypted the room) the line is sent with a transaction id of
        its own, so a batch that comes again after a crash does not post it twice."""
        client = self._connected()
        with contextlib.suppress(DeliveryError):
            await self.send(OutboundMessage(ChatRef(self.provider, room_id), ENCRYPTED_NOTICE,
                                            delivery_key=key))
        with contextlib.suppress(MForbidden, MNotFound):  # already gone: nothing to leave
            await client.leave_room(RoomID(room_id), reason="encrypted rooms are not supported")
        self._rooms.left(room_id)

    async def _take(self, room_id: str, event: dict[str, Any], core: Intake) -> None:
        if event.get("sender") == self._user_id:
            return
        client = self._connected()
        msg = read_event(event, room_id, direct=await self._rooms.is_direct(client, room_id))
        if msg is None:
            return
        if msg.direct:
            self._rooms.note_direct(msg.sender, room_id)
        verdict = admit(msg, self._config, bot_user_id=self._user_id)
        if verdict == "pair":
            paired = await core.pair(self.provider, room_id, msg.sender, await self._name_of(msg.sender))
            verdict = "accept" if paired else "ignore"
        if verdict == "refuse":
            log.info("message refused", channel_id=room_id, sender_id=msg.sender)
            if self._notices.first_time(self.provider, msg.sender):
                await self._notify(msg, refused_dm_reply(msg.sender))
            return
        if verdict == "ignore":
            return
        name, told = await self._name_of(msg.sender), None
        try:  # raising keeps the token: the batch comes again; a second same failure is the event's
            inbound = to_inbound(msg, agent_id=self._agent_id, bot_user_id=self._user_id,
                                 display_name=self._display_name, config=self._config,
                                 sender_name=name, provider=self.provider)
            if inbound is not None:
                inbound, told = await with_media(msg, inbound, core, client)
                await core.submit(inbound)
        except Exception as exc:
            if not self._failures.repeated(msg.event_id, exc):
                raise
            await core.quarantine(self.provider, printable(msg.event_id), raw_json(event), reason(exc))
            return
        self._failures.forget(msg.event_id)
        if told is not None:
            await self._notify(msg, told)

    async def _name_of(self, user_id: str) -> str:
        """A user's display name (kept for the run); the localpart when the homeserver does not say."""
        known = self._names.get(user_id)
        if known is not None:
            return known
        name = ""
        if self._client is not None:
            try:
                name = await self._client.get_displayname(UserID(user_id)) or ""
            except (MatrixRequestError, *_NETWORK_ERRORS) as exc:
                log.debug("display name not found", user_id=user_id, error=describe(exc))
                return user_id[1:].partition(":")[0]
        self._names[user_id] = name or user_id[1:].partition(":")[0]
        return self._names[user_id]

    async def _notify(self, msg: MatrixMessage, text: str) -> None:
        try:
            await self.send(OutboundMessage(ChatRef(self.provider, msg.room_id, msg.thread_root), text))
        except DeliveryError as exc:
            log.warning("notice not delivered", channel_id=msg.room_id, error=str(exc))

    # -- sending ----------------------------------------------------------------------------------

    async def send(self, message: OutboundMessage, on_chunk: ChunkSent | None = None) -> list[str]:
        client = self._connected()
        room_id = await self._rooms.room_of(client, message.chat.chat_id)
        sent: list[str] = []
        for index, chunk in enumerate(matrix_chunks(message.text)):
            if index < message.skip_chunks:
                continue
            content, txn = chunk_event(message, room_id, index, chunk)
            try:
                event_id = await client.send_message_event(RoomID(room_id), EventType.ROOM_MESSAGE,
                                                           content, txn_id=txn)  # type: ignore[arg-type]
                if index == 0 and message.preview_id is not None:
                    event_id = EventID(message.preview_id)  # the preview message is the first chunk
            except (MForbidden, MNotFound) as exc:
                raise DeliveryError(f"Matrix refused the message: {exc}", sent_ids=sent,
                                    permanent=True) from exc
            except MatrixRequestError as exc:
                raise DeliveryError(f"Matrix refused the message: {exc}", sent_ids=sent) from exc
            except _NETWORK_ERRORS as exc:
                # Sent again with the same txnId, it cannot be posted twice: the outbox retries.
                raise DeliveryError(f"Matrix send failed: {describe(exc)}", sent_ids=sent) from exc
            sent.append(str(event_id))
            if on_chunk is not None:
                await on_chunk(index, str(event_id))
        return sent

    def preview(self, chat: ChatRef, reply_to_id: str | None, *, resume_id: str | None = None,
                on_posted: PreviewPosted | None = None) -> ReplyPreview | None:
        """One message edited in place (`m.replace`) as the reply grows; None with streaming off."""
        if self._config.streaming == "off":
            return None
        surface = MatrixPreview(self._connected, chat.chat_id, thread_root=chat.thread_id,
                                reply_to_id=reply_to_id, resume_id=resume_id)
        return PreviewStream(surface, name=f"preview {chat.chat_id}", on_posted=on_posted)

    def _connected(self) -> ClientAPI:
        if self._client is None:
            raise DeliveryError("Matrix is not connected")
        return self._client

    @asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        """'Typing…' in the room, renewed until the block exits, then withdrawn."""
        client = self._client
        if client is None:
            yield
            return
        room, shown = RoomID(chat.chat_id), False

        async def keep_typing() -> None:
            nonlocal shown
            while True:
                shown = True  # from the moment it may reach the homeserver
                with contextlib.suppress(MatrixRequestError, *_NETWORK_ERRORS):
                    await client.set_typing(room, TYPING_MS)
                await asyncio.sleep(TYPING_REFRESH)

        task = asyncio.create_task(keep_typing())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if shown:  # a block over before the first request needs no withdrawal
                with contextlib.suppress(MatrixRequestError, *_NETWORK_ERRORS):
                    await client.set_typing(room, 0)
