"""Slack reply previews: the reply shown while the model writes it, then taken over by the outbox.

Two surfaces, one shape (`bot.delivery.preview.PreviewSurface`):

- **A stream** (`chat.startStream` / `chat.appendStream` / `chat.stopStream`) where the reply goes
  into a thread (a stream is a reply to someone: it takes the thread, the member it answers and
  their team) and the workspace offers it. Each update appends what was written since the last; a
  reply that starts over (a retried attempt), or a stream Slack ended (about 5 minutes on, or
  stopped by the person), goes on as below. A workspace that refuses `chat.startStream` gets the
  other surface for the rest of the run.
- **One message edited in place**: posted with `chat.postMessage` at the first sentence and edited
  with `chat.update` (rate tier 3, about 50 calls a minute for the workspace: one edit in 1.5 s each).

Either way the message is the reply's first chunk: `close` hands its ts to the outbox, which edits it
into chunk 0 (`edit_into`) and posts the rest. slack_sdk's `AsyncChatStream` wraps the same three
methods but buffers appends and cannot take back text, so the methods are called directly.

A preview is not worth a wait: its updates go through a client that does not wait out a 429. A
method Slack answered 429 (chat.postMessage: in that conversation) is held for its Retry-After,
and the previews of the app skip their updates until then (`PreviewSkipped`); the reply itself
(the outbox) waits its 429s out, so it is never held back by a preview waiting.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.core.chunking import split_message
from bot.core.errors import describe
from bot.delivery.preview import PreviewSkipped, has_first_sentence
from channels.slack.mrkdwn import CHUNK_LIMIT, slack_chunks
from channels.slack.rate_limits import retry_after

log = structlog.get_logger("switchboard.slack")

# chat.update is tier 3 (about 50 a minute per workspace): an edit every 1.5 s leaves room for
# replies and for other previews.
EDIT_INTERVAL = 1.5
# A reply complete within this gains nothing from a message posted early.
EDIT_START_AFTER = 1.0
THINKING = "is thinking…"
# A stream Slack ended: about 5 minutes after it started, or the person stopped it.
STREAM_OVER = frozenset({"message_not_in_streaming_state", "stopped_by_user"})
# Refusals of chat.startStream (or assistant.threads.setStatus) that say the workspace or the app
# has none: not tried again.
NOT_OFFERED = frozenset({"unknown_method", "missing_scope", "not_allowed_token_type",
                         "feature_not_enabled", "not_allowed", "invalid_arguments"})


@dataclass(slots=True)
class Streams:
    """What this app may use while a reply is written (one per channel: a refusal holds for the
    rest of the run): streams, and an assistant thread's status."""

    offered: bool = True
    status: bool = True
    # Method (chat.postMessage: and conversation) -> when Slack's 429 Retry-After is over.
    held: dict[str, float] = field(default_factory=dict)

    def hold(self, exc: SlackApiError, channel: str) -> None:
        """Hold the method a 429 refused for its Retry-After (1 s when Slack names none)."""
        method = str(getattr(exc.response, "api_url", "")).rstrip("/").rsplit("/", 1)[-1]
        if method == "chat.postMessage":
            method = f"{method} {channel}"
        self.held[method] = time.monotonic() + retry_after(exc.response.headers)

    def holding(self, channel: str) -> bool:
        """Whether a method a preview in `channel` may call is held now."""
        now, mine = time.monotonic(), f"chat.postMessage {channel}"
        return any(until > now and (key == mine or not key.startswith("chat.postMessage "))
                   for key, until in self.held.items())


class Askers(OrderedDict[tuple[str, str], str]):
    """Who wrote the messages lately taken, by (conversation, ts): a stream outside a DM names them."""

    LIMIT = 2000

    def __setitem__(self, key: tuple[str, str], value: str) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        if len(self) > self.LIMIT:
            self.popitem(last=False)


async def set_status(client: AsyncWebClient, channel: str, thread_ts: str, streams: Streams) -> None:
    """Say in an assistant thread that the app is thinking (Slack clears it when the app answers);
    where Slack refuses (no `assistant:write`, not an assistant thread) nothing is shown."""
    try:
        await client.assistant_threads_setStatus(channel_id=channel, thread_ts=thread_ts, status=THINKING)
    except SlackApiError as exc:
        error = str(exc.response.get("error", ""))
        if error in NOT_OFFERED:
            streams.status = False
        log.debug("thread status not set", channel_id=channel, error=error)
    except (OSError, aiohttp.ClientError, TimeoutError) as exc:
        log.debug("thread status not set", channel_id=channel, error=describe(exc))


@dataclass(frozen=True, slots=True)
class Target:
    """Where a preview goes: the conversation, the thread (None: the top level), and for a stream the
    member it answers and their team (None when not known, after a restart)."""

    channel: str
    thread_ts: str | None
    recipient: str | None = None
    team: str | None = None

    @property
    def streamable(self) -> bool:
        return self.thread_ts is not None and self.recipient is not None and self.team is not None


def quiet(markdown: str) -> str:
    """Streamed Markdown that pings nobody: a zero-width space after every `<`, so `<!channel>`,
    `<!here>` and `<@U…>` the model writes stay text (the same text, cut anywhere, gives the same
    prefix, so appends still line up)."""
    return markdown.replace("<", "<\u200b")


def first_markdown(text: str) -> str:
    """The part of the reply (Markdown) its first message holds."""
    pieces = split_message(text, CHUNK_LIMIT)
    return pieces[0] if pieces else text


class SlackPreview:
    """The preview surface of one reply (see `bot.delivery.preview.PreviewStream`)."""

    def __init__(
        self, client_of: Callable[[], AsyncWebClient], target: Target, streams: Streams,
        resume_id: str | None, quick_of: Callable[[], AsyncWebClient] | None = None,
    ) -> None:
        self._client_of = client_of  # raises DeliveryError while Slack is not connected
        # Updates: a client that does not wait out a 429 (the closing calls use the one that does).
        self._quick_of = quick_of or client_of
        self._target = target
        self._streams = streams
        # A message an interrupted turn left half-written is edited, never left behind.
        self._ts = resume_id
        self._streaming = False  # the message is a stream still open
        self._streamed = ""  # the Markdown appended to it so far
        self._shown: str | None = None

    @property
    def interval(self) -> float:
        return EDIT_INTERVAL

    def ready(self, text: str, elapsed: float) -> bool:
        return elapsed >= EDIT_START_AFTER and has_first_sentence(text)

    async def show(self, text: str) -> str | None:
        piece = first_markdown(text)
        if piece == self._shown:
            return None  # the reply grew past its first message: the preview is complete
        if self._streams.holding(self._target.channel):
            raise PreviewSkipped("Slack's rate limit: a preview waits for no Retry-After")
        client = self._quick_of()
        posted = None
        try:
            if self._ts is None and self._target.streamable and self._streams.offered:
                posted = await self._start(client, piece)
            if posted is None:
                posted = await self._grow(client, piece)
        except SlackApiError as exc:
            if exc.response.status_code != 429:
                raise
            self._streams.hold(exc, self._target.channel)
            raise PreviewSkipped("Slack answered a preview update 429") from exc
        self._shown = piece
        return posted

    async def _grow(self, client: AsyncWebClient, piece: str) -> str | None:
        """Append to the open stream what was written since; text that starts over ends the stream
        and is shown by editing instead."""
        if self._streaming and piece.startswith(self._streamed):
            if len(piece) == len(self._streamed):
                return None
            try:
                await client.chat_appendStream(channel=self._target.channel, ts=str(self._ts),
                                               markdown_text=quiet(piece[len(self._streamed):]))
                self._streamed = piece
                return None
            except SlackApiError as exc:
                if exc.response.get("error") not in STREAM_OVER:
                    raise
                self._streaming = False  # Slack ended it (about 5 minutes on, or the person did)
        if self._streaming:
            await self._stop(client)
        return await self._edit_or_post(client, piece)

    async def _start(self, client: AsyncWebClient, piece: str) -> str | None:
        """Open a stream with the text so far; None (and no stream) where Slack refuses one."""
        target = self._target
        try:
            started = await client.chat_startStream(
                channel=target.channel, thread_ts=str(target.thread_ts), markdown_text=quiet(piece),
                recipient_user_id=target.recipient, recipient_team_id=target.team)
        except SlackApiError as exc:
            error = str(exc.response.get("error", ""))
            if error not in NOT_OFFERED:
                raise
            log.info("slack streams not offered; replies are previewed by editing", error=error)
            self._streams.offered = False
            return None
        self._ts, self._streaming, self._streamed = str(started["ts"]), True, piece
        return self._ts

    async def _stop(self, client: AsyncWebClient) -> None:
        """End the open stream; the text shown stays, and the message can be edited from now on."""
        try:
            await client.chat_stopStream(channel=self._target.channel, ts=str(self._ts))
        except SlackApiError as exc:
            if exc.response.get("error") not in STREAM_OVER:
                raise
        self._streaming = False

    async def _edit_or_post(self, client: AsyncWebClient, piece: str) -> str | None:
        chunks = slack_chunks(piece)
        chunk = chunks[0] if chunks else piece
        if self._ts is not None and await edit_into(client, self._target.channel, self._ts, chunk):
            return None
        posted = await client.chat_postMessage(channel=self._target.channel, text=chunk,
                                               thread_ts=self._target.thread_ts, unfurl_links=False,
                                               unfurl_media=False)
        self._ts = str(posted["ts"])
        return self._ts

    async def close(self, final: str) -> str | None:
        if self._streaming:
            await self._stop(self._client_of())
        return self._ts

    async def withdraw(self) -> None:
        if self._ts is None:
            return
        client = self._client_of()
        if self._streaming:
            await self._stop(client)
        await client.chat_delete(channel=self._target.channel, ts=self._ts)
        self._ts = None


async def edit_into(client: AsyncWebClient, channel: str, ts: str, chunk: str) -> bool:
    """Edit a preview message into its final text; False when it is gone (deleted meanwhile) or
    cannot be edited, and the chunk must be posted instead. A stream left open (by a turn cut short,
    a crash) is stopped first: Slack edits no open stream. Other refusals raise as a send's would."""
    refused = await _update(client, channel, ts, chunk)
    if refused == "cant_update_message" and await _stopped(client, channel, ts):
        refused = await _update(client, channel, ts, chunk)
    return refused is None


async def _update(client: AsyncWebClient, channel: str, ts: str, chunk: str) -> str | None:
    """chat.update; None when done, else the refusal that means posting anew. `blocks=[]`: a
    streamed message is shown as blocks, which chat.update keeps unless told (they would go on
    showing the preview, the new text only a fallback)."""
    try:
        await client.chat_update(channel=channel, ts=ts, text=chunk, blocks=[])
    except SlackApiError as exc:
        error = str(exc.response.get("error", ""))
        if error in ("message_not_found", "cant_update_message"):
            return error
        raise
    return None


async def _stopped(client: AsyncWebClient, channel: str, ts: str) -> bool:
    """Whether stopping `ts` as a stream made it editable (False: it was no open stream)."""
    try:
        await client.chat_stopStream(channel=channel, ts=ts)
    except SlackApiError:
        return False
    return True
