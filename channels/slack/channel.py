"""Slack: slack-bolt's AsyncApp in Socket Mode (or, mode = "http", behind the Events API server of
`channels.slack.events_http`), run by hand inside the daemon's event loop;
normalising and gating what arrives is `channels.slack.normalise`, rendering replies
`channels.slack.mrkdwn`.

Nothing lost: the app runs with `process_before_response`, so an envelope is acknowledged only once
its listener returned, that is once the message is stored (or deliberately ignored); a listener that
raises leaves it unacknowledged and Slack sends it again (3 s later, up to three times); in HTTP
mode the same holds of the 200 and a 500 (a store refusing for `HTTP_STORE_BUDGET`). Nothing
twice: the store drops a message it holds already (by conversation and `ts`), so a redelivered
envelope, or the `app_mention` beside a channel's `message`, starts no second turn. Replies go
through the outbox, each chunk's `ts` recorded as it is posted; chat.postMessage has no idempotency
key, so a chunk posted just before a crash, its ts not yet recorded, is posted again on restart.

In order: Bolt handles each envelope in a task of its own; the messages of one conversation are
taken one at a time in the order their envelopes arrived, so nothing newer is stored first.

Catch-up: at each start the conversations active lately are read back from history
(`channels.slack.catch_up`) before their live messages are taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import structlog
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import SlackConfig
from bot.core.errors import ChannelNotStartedError, DeliveryError, describe
from bot.core.messages import ChatRef, InboundMessage, OutboundMessage
from bot.core.misconfiguration import report, token_refused
from bot.delivery.preview import PreviewStream
from bot.intake.access import RefusalNotices, refused_dm_reply
from bot.intake.channel import ChunkSent, Intake, PreviewPosted, ReplyPreview
from channels.slack.bolt_setup import SignedIn, StoppingHandler, ignore, quiet_bolt, tell_errors
from channels.slack.catch_up import CatchUp
from channels.slack.events_http import SlackEventsServer
from channels.slack.media import fetcher, with_media
from channels.slack.mrkdwn import slack_chunks
from channels.slack.normalise import (
    PLATFORM,
    SlackMessage,
    admit,
    mentioned_users,
    read_event,
    to_inbound,
)
from channels.slack.preview import Askers, SlackPreview, Streams, Target, edit_into, set_status

log = structlog.get_logger("switchboard.slack")

DRAIN_TIMEOUT = 2.0  # envelopes already received are handed to the core this long at most after stop()
# HTTP mode: a store refusing this long is answered 500 before Slack's 3 s are up, and Slack tries
# again (maybe at another daemon) rather than counting a timeout.
HTTP_STORE_BUDGET = 2.0
SUBMIT_RETRY_DELAY = 0.5
MAX_SUBMIT_RETRY_DELAY = 30.0
# A 429 is waited out (its Retry-After) this many times per call before the send fails.
RATE_LIMIT_RETRIES = 3
# Refusals that no retry can change: the reply fails for good.
_PERMANENT = frozenset({
    "channel_not_found", "not_in_channel", "is_archived", "msg_too_long", "no_text", "invalid_auth",
    "account_inactive", "token_revoked", "missing_scope", "restricted_action", "invalid_blocks",
})
_NETWORK_ERRORS = (OSError, aiohttp.ClientError, TimeoutError)
_TOKEN_HELP = "api.slack.com/apps → the app → OAuth & Permissions (bot) or Basic Information (app-level)"


class SlackChannel:
    """Receives over Socket Mode (or HTTP) and sends with the Web API; one instance per Slack app, its
    `name` ("slack", "slack.<account>") the provider of its session keys, chats and stored rows."""

    def __init__(
        self, config: SlackConfig, *, agent_id: str, bot_token: str, app_token: str = "",
        signing_secret: str = "", name: str = PLATFORM,
    ) -> None:
        self.provider = name
        self._config = config
        self._agent_id = agent_id
        self._bot_token = bot_token
        self._app_token = app_token
        self._signing_secret = signing_secret
        self._server: SlackEventsServer | None = None
        self._core: Intake | None = None
        self._client: AsyncWebClient | None = None
        self._quick: AsyncWebClient | None = None  # previews, the thread status: no 429 waited out
        self._session: aiohttp.ClientSession | None = None
        self._handler: StoppingHandler | None = None
        self._bot_user_id = ""
        self._bot_name = "switchboard"
        self._auth: AuthorizeResult | None = None
        # One message at a time per conversation, in arrival order: nothing newer is stored first.
        self._order: dict[str, asyncio.Lock] = {}
        self._names: dict[str, str] = {}
        self._askers = Askers()  # who wrote the messages being answered: a stream outside a DM needs it
        self._streams = Streams()
        self._notices = RefusalNotices()
        self._stopped = asyncio.Event()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.ready = asyncio.Event()
        self._catch_up = CatchUp(self.provider, self._order, self._caught_up_event, self._stopped)
        self.caught_up = self._catch_up.done  # the start's catch-up is done (or had nothing to read)

    def reconfigure(self, config: SlackConfig) -> None:
        """Apply a reloaded section (access lists, mentions, reply age) to messages from now on."""
        self._config = config

    # -- lifecycle --------------------------------------------------------------------------------

    async def run(self, intake: Intake) -> None:
        self._core = intake
        catching: asyncio.Task[None] | None = None
        # One pool for every Web API call and file download (the SDK's default: a session each).
        session = self._session = aiohttp.ClientSession()
        client = self._client = AsyncWebClient(
            token=self._bot_token, base_url=self._config.base_url, session=session,
            retry_handlers=[AsyncConnectionErrorRetryHandler(),
                            AsyncRateLimitErrorRetryHandler(max_retry_count=RATE_LIMIT_RETRIES)])
        quick = self._quick = AsyncWebClient(token=self._bot_token, base_url=self._config.base_url,
                                             session=session)
        try:
            url = await self._sign_in(client)
            if url is None:
                return
            points = await self._catch_up.hold(intake, self._config.max_reply_age)
            catching = asyncio.create_task(self._catch_up.run(quick, points, self._config.max_reply_age),
                                           name=f"{self.provider} catch-up")
            quiet_bolt()
            app = AsyncApp(client=client, process_before_response=True, name=self.provider,
                           signing_secret=self._signing_secret or None,
                           authorize=SignedIn(self._auth) if self._auth is not None else None)
            app.event("message")(self._on_event)
            app.event("app_mention")(self._on_event)
            # Anything else the app is subscribed to is acknowledged and dropped: an event no
            # listener matches would be left unacknowledged, and Slack would send it three more times.
            app.event(re.compile(".*"))(ignore)
            tell_errors(app, self.provider, self._stopped.is_set)
            if not self._stopped.is_set():
                await self._listen(app, client, url)
                self.ready.set()
            await asyncio.Event().wait()  # sending goes on after stop(), until cancelled
        finally:
            if catching is not None:
                catching.cancel()
                await asyncio.gather(catching, return_exceptions=True)
            if self._handler is not None:
                await self._handler.close_async()  # type: ignore[no-untyped-call]
            if self._server is not None:
                await self._server.stop()
            self._client = self._quick = self._session = None
            await session.close()

    async def _listen(self, app: AsyncApp, client: AsyncWebClient, url: str) -> None:
        """Connect to Socket Mode at the URL just opened, or serve the Request URL (HTTP mode)."""
        if self._config.mode == "http":
            self._server = SlackEventsServer(app, listen=self._config.webhook_listen,
                                             path=self._config.webhook_path, channel=self.provider)
            await self._server.start()
            return
        handler = self._handler = StoppingHandler(app, self._app_token, web_client=client,
                                                  channel=self.provider, stopping=self._stopped.is_set)
        handler.client.wss_uri = url  # the URL just opened: no second apps.connections.open
        await handler.connect_async()  # type: ignore[no-untyped-call]  # unannotated in bolt
        log.info("slack connected", channel=self.provider, bot=self._bot_name)

    async def _sign_in(self, client: AsyncWebClient) -> str | None:
        """Check the bot token (auth.test) and open a socket URL with the app token (HTTP mode:
        none, ""); None when a token was refused (reported; the channel stays off)."""
        try:
            auth = await client.auth_test()
            self._bot_user_id, self._bot_name = str(auth["user_id"]), str(auth.get("user") or self._bot_name)
            self._auth = AuthorizeResult.from_auth_test_response(bot_token=self._bot_token,
                                                                 auth_test_response=auth)
        except SlackApiError as exc:
            await self._refused(self._config.bot_token_env, "bot", exc)
            return None
        if self._config.mode == "http":
            return ""
        try:
            opened = await client.apps_connections_open(app_token=self._app_token)
        except SlackApiError as exc:
            await self._refused(self._config.app_token_env, "app-level", exc)
            return None
        return str(opened["url"])

    async def _refused(self, env: str, kind: str, exc: SlackApiError) -> None:
        error = str(exc.response.get("error", ""))
        if error in ("invalid_auth", "not_authed", "account_inactive", "token_revoked",
                     "not_allowed_token_type", "missing_scope"):
            await report(self._core, token_refused("Slack", self.provider, env, f"{kind} token: {error}",
                                                   _TOKEN_HELP))
            return
        raise ChannelNotStartedError(f"{self.provider}: Slack refused the sign-in: {error}") from exc

    async def stop(self) -> None:
        """Stop taking input (the socket closes, or the server answers 503; what is unacknowledged
        waits at Slack); the Web API client stays open so turns in flight still deliver."""
        self._stopped.set()
        if self._server is not None:
            await self._server.stop()
        if self._handler is not None:
            # The socket only: the Web API client stays open.
            await self._handler.close_async()  # type: ignore[no-untyped-call]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.handled(), DRAIN_TIMEOUT)

    async def handled(self) -> None:
        """Return once every envelope received so far has been handed to the core or refused."""
        await self._idle.wait()

    # -- receiving --------------------------------------------------------------------------------

    async def _on_event(self, event: dict[str, Any]) -> None:
        """One message or app_mention; returning acknowledges the envelope, raising does not."""
        msg = read_event(event)
        if msg is not None and self._core is not None:
            core = self._core
            async with self._order.setdefault(msg.channel, asyncio.Lock()):
                await self._counted(self._take(msg, core))

    async def _counted(self, step: Awaitable[None]) -> None:
        """Run a message's hand-over, counted as received and not yet handled (see `handled`)."""
        self._in_flight += 1
        self._idle.clear()
        try:
            await step
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()

    async def _caught_up_event(self, event: dict[str, Any]) -> None:
        """One message read back from history, taken as a live one (its conversation already held)."""
        msg = read_event(event)
        if msg is not None and self._core is not None:
            await self._counted(self._take(msg, self._core))

    async def _take(self, msg: SlackMessage, core: Intake) -> None:
        verdict = admit(msg, self._config, bot_user_id=self._bot_user_id)
        if verdict == "pair":
            paired = await core.pair(self.provider, msg.channel, msg.user, await self._name_of(msg.user))
            verdict = "accept" if paired else "ignore"
        if verdict == "refuse":
            log.info("message refused", channel_id=msg.channel, sender_id=msg.user)
            if self._notices.first_time(self.provider, msg.user):
                await self._notify(msg, refused_dm_reply(msg.user))
            return
        if verdict == "ignore":
            return
        names = {user: await self._name_of(user) for user in mentioned_users(msg.text)}
        names[self._bot_user_id] = self._bot_name
        self._askers[(msg.channel, msg.ts)] = msg.user
        if msg.direct:
            self._askers[(msg.channel, "")] = msg.user  # a DM's replies name no message they answer
        inbound = to_inbound(msg, agent_id=self._agent_id, bot_user_id=self._bot_user_id,
                             config=self._config, sender_name=await self._name_of(msg.user),
                             names=names, provider=self.provider)
        if inbound is None:
            return
        told = None
        client, session = self._client, self._session
        if msg.files and client is not None and session is not None:
            fetch = fetcher(session, self._bot_token, self._config.base_url)
            inbound, told = await with_media(msg, inbound, core, client, fetch)
        await self._submit_until_stored(core, inbound)
        if told is not None:
            await self._notify(msg, told)

    async def _submit_until_stored(self, core: Intake, inbound: InboundMessage) -> None:
        """Hand a message over, trying again (0.5 s doubling to 30 s) while the core cannot store it;
        once the channel stops (HTTP mode: once HTTP_STORE_BUDGET is spent), the error goes up and
        the event stays unacknowledged."""
        delay, clock = SUBMIT_RETRY_DELAY, asyncio.get_running_loop().time
        budget = clock() + (HTTP_STORE_BUDGET if self._config.mode == "http" else float("inf"))
        while True:
            try:
                await core.submit(inbound)
                return
            except Exception as exc:
                if self._stopped.is_set() or clock() >= budget:
                    raise
                delay = min(delay, budget - clock())
                log.warning("slack message not stored; trying again", message_id=inbound.provider_message_id,
                            error=describe(exc), retry_in=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), delay)
            delay = min(delay * 2, MAX_SUBMIT_RETRY_DELAY)

    async def _name_of(self, user_id: str) -> str:
        """A user's display name (users.info, kept for the run); the id when Slack does not say."""
        known = self._names.get(user_id)
        if known is not None:
            return known
        name = user_id
        if self._client is not None:
            try:
                found = (await self._client.users_info(user=user_id)).get("user") or {}
                profile = found.get("profile") or {}
                name = profile.get("display_name") or profile.get("real_name") or found.get("name") or user_id
            except (SlackApiError, *_NETWORK_ERRORS) as exc:
                log.debug("user name not found", user_id=user_id, error=describe(exc))
                return name
        self._names[user_id] = name
        return name

    async def _notify(self, msg: SlackMessage, text: str) -> None:
        try:
            await self.send(OutboundMessage(ChatRef(self.provider, msg.channel, msg.thread_ts), text))
        except DeliveryError as exc:
            log.warning("notice not delivered", channel_id=msg.channel, error=str(exc))

    # -- sending ----------------------------------------------------------------------------------

    def _connected(self, quick: bool = False) -> AsyncWebClient:
        client = self._quick if quick else self._client
        if client is None or not self._bot_user_id:
            raise DeliveryError("Slack is not connected")
        return client

    async def send(self, message: OutboundMessage, on_chunk: ChunkSent | None = None) -> list[str]:
        client = self._connected()
        channel = message.chat.chat_id
        sent: list[str] = []
        for index, chunk in enumerate(slack_chunks(message.text)):
            if index < message.skip_chunks:
                continue
            try:
                preview_id = message.preview_id if index == 0 else None
                if preview_id is not None and await edit_into(client, channel, preview_id, chunk):
                    ts = preview_id  # the preview message is the first chunk
                else:
                    ts = str((await client.chat_postMessage(
                        channel=channel, text=chunk, thread_ts=message.chat.thread_id,
                        unfurl_links=False, unfurl_media=False))["ts"])
            except SlackApiError as exc:
                error = str(exc.response.get("error", "")) or f"HTTP {exc.response.status_code}"
                raise DeliveryError(f"Slack refused the message: {error}", sent_ids=sent,
                                    permanent=error in _PERMANENT) from exc
            except _NETWORK_ERRORS as exc:
                # Not retried here: the message may have been posted; the outbox decides.
                raise DeliveryError(f"Slack send failed: {describe(exc)}", sent_ids=sent) from exc
            sent.append(ts)
            if on_chunk is not None:
                await on_chunk(index, ts)
        return sent

    def preview(self, chat: ChatRef, reply_to_id: str | None, *, resume_id: str | None = None,
                on_posted: PreviewPosted | None = None) -> ReplyPreview | None:
        """A stream in a thread where Slack offers one, else one message edited in place; None with
        streaming off."""
        if self._config.streaming == "off":
            return None
        asker = self._askers.get((chat.chat_id, reply_to_id or "")) or self._askers.get((chat.chat_id, ""))
        target = Target(chat.chat_id, chat.thread_id, recipient=asker, team=self._auth_team())
        surface = SlackPreview(self._connected, target, self._streams, resume_id,
                               quick_of=lambda: self._connected(quick=True))
        return PreviewStream(surface, name=f"preview {chat.chat_id}", on_posted=on_posted)

    def _auth_team(self) -> str | None:
        return self._auth.team_id if self._auth is not None else None

    @asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        """A bot has no typing indicator on Slack; in a DM's thread (an assistant thread, where the
        app has `assistant:write`) the thread's status says the app is thinking until it answers."""
        if chat.thread_id is not None and chat.chat_id.startswith("D") and self._streams.status:
            await set_status(self._connected(quick=True), chat.chat_id, chat.thread_id, self._streams)
        yield
