"""Streamed replies on Slack: the real slack-bolt and slack_sdk against the stand-in, with a model
stand-in held after its first words. In a thread the reply streams (chat.startStream, appendStream,
stopStream); at the top level, or where the workspace has no streams, one message grows by
chat.update; either way that message becomes the reply's first chunk through the outbox."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import Config
from bot.core.messages import ChatRef
from bot.daemon.assembly import Daemon
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, Text
from bot.testing.slack_api import SlackStandIn, shown
from channels.slack.preview import THINKING, Streams, edit_into
from channels.slack.rate_limits import retry_after
from tests import test_slack
from tests.harness import echo
from tests.test_slack import ALICE, BOB, DM_ALICE, GENERAL, settled, slack_daemon

slack, slack_config = test_slack.slack, test_slack.slack_config  # the fixtures, shared
ANSWER = ("Tides follow the moon. The moon pulls the sea toward it, and the earth turning under "
          "that bulge gives two high tides a day. The sun adds a smaller pull of its own.")


def held_answer(api: AnthropicStandIn) -> asyncio.Event:
    """The reply's model call writes its first words, then waits for the event (the fast model's
    calls are answered at once)."""
    hold = asyncio.Event()
    api.default = lambda rec: Text(ANSWER, parts=4, hold=hold) if rec.model != "test-fast" else echo(rec)
    return hold


async def reply_of(config: Config, chat: ChatRef, ts: str) -> str | None:
    async with Store.open(config.database_path()) as store:
        assert await store.pending_deliveries() == []
        found = await store.message_by_provider_id(chat, ts)
    return found.text if found is not None else None


async def shown_then_finished(slack: SlackStandIn, daemon: Daemon, hold: asyncio.Event,
                              seen: Callable[[], object]) -> None:
    """Wait until the preview shows text while the model is held, then let the model finish."""
    await slack.wait_for(seen)
    hold.set()
    await settled(slack, daemon)


async def test_a_reply_in_a_thread_streams_and_ends_as_one_message_with_the_whole_text(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """A mention in a channel's thread is answered by a stream to the person who asked: its first
    words show while the model is still writing, later text is appended, and the stream, stopped,
    is edited into the reply's first chunk: one message in the thread, with the whole reply."""
    config = slack_config()
    hold = held_answer(api)
    async with slack_daemon(config) as daemon:
        top = slack.message(GENERAL, BOB, "plans for the offsite")
        slack.message(GENERAL, ALICE, f"<@{slack.bot_user_id}> why are there tides?", thread_ts=top["ts"])
        await shown_then_finished(slack, daemon, hold, lambda: slack.streamed)
        first = slack.streamed[0].text

    assert first and ANSWER.startswith(first) and first != ANSWER  # shown before the model finished
    (start,) = slack.calls_of("chat.startStream")
    assert (start.args["thread_ts"], start.args["recipient_user_id"]) == (top["ts"], ALICE)
    assert start.args["recipient_team_id"] == slack.team_id
    assert len(slack.calls_of("chat.stopStream")) == 1 and not slack.sent
    (reply,) = slack.bot_messages(GENERAL)
    assert (shown(reply), reply["thread_ts"]) == (ANSWER, top["ts"])
    assert await reply_of(config, ChatRef("slack", GENERAL, top["ts"]), reply["ts"]) == ANSWER


async def test_a_top_level_reply_grows_in_one_message_edited_in_place(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """A DM answered at the top level (no thread, so no stream): the reply is posted at its first
    sentence while the model writes and edited with chat.update into the whole reply; one message."""
    config = slack_config()
    hold = held_answer(api)
    async with slack_daemon(config) as daemon:
        slack.message(DM_ALICE, ALICE, "why are there tides?")
        await shown_then_finished(slack, daemon, hold, lambda: slack.sent)

    (posted,) = slack.sent
    assert ANSWER.startswith(posted.text) and posted.text != ANSWER and posted.thread_ts is None
    assert slack.updated[-1].text == ANSWER and {u.ts for u in slack.updated} == {posted.ts}
    assert [shown(m) for m in slack.bot_messages(DM_ALICE)] == [ANSWER]
    assert not slack.calls_of("chat.startStream")
    assert await reply_of(config, ChatRef("slack", DM_ALICE), posted.ts) == ANSWER


async def test_an_assistant_thread_shows_thinking_until_the_stream_starts(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """In a DM's thread, with `assistant:write`, the thread's status says the app is thinking before
    any text; the reply then streams into the thread."""
    slack.scopes = slack.scopes | {"assistant:write"}
    config = slack_config()
    async with slack_daemon(config) as daemon:
        top = slack.message(DM_ALICE, ALICE, "hello")
        await slack.wait_for(lambda: slack.sent)
        await settled(slack, daemon)
        hold = held_answer(api)
        slack.message(DM_ALICE, ALICE, "why are there tides?", thread_ts=top["ts"])
        await shown_then_finished(slack, daemon, hold, lambda: slack.streamed)

    methods = [c.method for c in slack.calls if c.method.startswith(("assistant.", "chat.startStream"))]
    assert methods == ["assistant.threads.setStatus", "chat.startStream"]
    (status,) = slack.calls_of("assistant.threads.setStatus")
    assert (status.args["thread_ts"], status.args["status"], status.error) == (top["ts"], THINKING, None)
    assert [shown(m) for m in slack.bot_messages(DM_ALICE)] == ["re: hello", ANSWER]


async def test_where_the_workspace_has_no_streams_a_thread_reply_is_edited_in_place(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """chat.startStream refused (a workspace without streams): the thread's reply is posted and
    edited instead, one message with the whole text, and streams are not tried again; without
    `assistant:write` the status is tried once and nothing shown."""
    slack.streams_offered = False
    config = slack_config()
    async with slack_daemon(config) as daemon:
        top = slack.message(DM_ALICE, ALICE, "hello")
        await slack.wait_for(lambda: slack.sent)
        await settled(slack, daemon)
        for question in ("why are there tides?", "and waves?"):
            hold = held_answer(api)
            sent = len(slack.sent)
            slack.message(DM_ALICE, ALICE, question, thread_ts=top["ts"])
            await shown_then_finished(slack, daemon, hold, lambda: len(slack.sent) > sent)  # noqa: B023

    assert [(shown(m), m.get("thread_ts")) for m in slack.bot_messages(DM_ALICE)] == [
        ("re: hello", None), (ANSWER, top["ts"]), (ANSWER, top["ts"])]
    assert [c.error for c in slack.calls_of("chat.startStream")] == ["unknown_method"]
    assert [c.error for c in slack.calls_of("assistant.threads.setStatus")] == ["missing_scope"]


async def test_a_stream_slack_ended_early_is_finished_by_editing_it(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """Slack ends a stream before the reply is done (about 5 minutes on, or the person stopped it):
    the rest is shown by editing the same message, still one message with the whole reply."""
    config = slack_config()
    hold = held_answer(api)
    async with slack_daemon(config) as daemon:
        top = slack.message(GENERAL, BOB, "plans for the offsite")
        slack.message(GENERAL, ALICE, f"<@{slack.bot_user_id}> why are there tides?", thread_ts=top["ts"])
        await slack.wait_for(lambda: slack.streamed)
        slack.end_streams()
        await shown_then_finished(slack, daemon, hold, lambda: True)

    (reply,) = slack.bot_messages(GENERAL)
    assert shown(reply) == ANSWER and not slack.sent
    assert slack.updated and {u.ts for u in slack.updated} == {reply["ts"]}


async def test_a_stream_left_open_by_a_crash_is_stopped_and_taken_over(slack: SlackStandIn) -> None:
    """The preview of a reply resumed after a crash is a stream Slack still holds open: it is stopped
    and edited into the reply (Slack edits no open stream), not left half-written beside a new one."""
    slack.message(GENERAL, ALICE, "top")
    async with aiohttp.ClientSession() as session:
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.base_url, session=session)
        top = slack.history[GENERAL][0]["ts"]
        started = await client.chat_startStream(channel=GENERAL, thread_ts=top, markdown_text="Tides follow",
                                                recipient_user_id=ALICE, recipient_team_id=slack.team_id)
        assert await edit_into(client, GENERAL, started["ts"], ANSWER)
        assert not await edit_into(client, GENERAL, top, ANSWER)  # someone else's: posted anew

    (reply,) = slack.bot_messages(GENERAL)
    assert shown(reply) == ANSWER
    assert [c.error for c in slack.calls_of("chat.update")] == ["cant_update_message", None,
                                                                "cant_update_message"]


async def test_a_429_on_a_preview_skips_it_and_holds_no_reply_back(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """The preview's message answered 429 (Retry-After a minute): the preview is skipped, not waited
    out, so the finished reply is posted at once (the outbox waits out a 429 of its own), one
    message with the whole text; the held method is not tried again by a preview meanwhile."""
    config = slack_config()
    hold = held_answer(api)
    async with slack_daemon(config) as daemon:
        slack.throttle("chat.postMessage", retry_after=60)
        slack.message(DM_ALICE, ALICE, "why are there tides?")
        await slack.wait_for(lambda: slack.calls_of("chat.postMessage"))
        hold.set()
        await slack.wait_for(lambda: slack.sent, timeout=30)
        await settled(slack, daemon)

    assert [c.status for c in slack.calls_of("chat.postMessage")] == [429, 200]
    assert [shown(m) for m in slack.bot_messages(DM_ALICE)] == [ANSWER]


async def test_a_429_holds_its_method_for_its_retry_after(slack: SlackStandIn) -> None:
    """A 429's Retry-After holds the method for the previews: chat.postMessage in its conversation
    only (Slack's limit is per conversation), chat.update in all."""
    async with aiohttp.ClientSession() as session:
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.base_url, session=session)
        posts, edits = Streams(), Streams()
        for method, streams in (("chat.postMessage", posts), ("chat.update", edits)):
            slack.throttle(method, retry_after=30)
            with pytest.raises(SlackApiError) as limited:
                await client.api_call(method, json={"channel": GENERAL, "ts": "1.0", "text": "x"})
            streams.hold(limited.value, GENERAL)
    assert (posts.holding(GENERAL), posts.holding(DM_ALICE)) == (True, False)
    assert (edits.holding(GENERAL), edits.holding(DM_ALICE)) == (True, True)
    assert retry_after({"retry-after": ["30"]}) == 30 and retry_after({}) == 1
