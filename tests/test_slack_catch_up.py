"""Slack catch-up: what was written while the daemon was down is read back from history at the next
start and answered once each; the real slack-bolt against the stand-in, and the store's catch-up
points for Slack's ts on either backend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from bot.config import Config
from bot.core.messages import ChatRef, InboundMessage
from bot.core.session_key import build
from bot.daemon.assembly import Daemon
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.slack_api import SlackStandIn
from channels.slack import catch_up
from tests import test_slack
from tests.harness import API_KEY, reply_requests, running
from tests.test_slack import ALICE, BOB, DM_ALICE, GENERAL, all_messages, make_channel, settled, slack_daemon

slack, slack_config = test_slack.slack, test_slack.slack_config  # the fixtures, shared


@asynccontextmanager
async def caught_up(config: Config) -> AsyncIterator[Daemon]:
    """The daemon with Slack, yielded once the start's catch-up has handed over what it read."""
    channel = make_channel(config)
    async with running(config, [channel], AnthropicBrain(config.anthropic, API_KEY)) as daemon:
        await asyncio.wait_for(channel.caught_up.wait(), 30)
        yield daemon


def history_reads(slack: SlackStandIn, channel: str) -> list[dict[str, object]]:
    return [c.args for c in slack.calls_of("conversations.history") if c.args.get("channel") == channel]


async def test_messages_written_while_the_daemon_was_down_are_answered_once_each_after_it_starts(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """DMs, a channel mention and a mention in a thread written while no daemon ran are read back
    with conversations.history and conversations.replies at the next start, stored in the order they
    were written and answered once each, in their thread; a third start answers nothing again."""
    config = slack_config()
    async with slack_daemon(config) as daemon:
        slack.message(DM_ALICE, ALICE, "first")
        top = slack.message(GENERAL, BOB, f"<@{slack.bot_user_id}> plans for the offsite?")
        await slack.wait_for(lambda: len(slack.sent) == 2)
        await settled(slack, daemon)

    mention = f"<@{slack.bot_user_id}>"
    offline = [
        slack.message(DM_ALICE, ALICE, "sent while you were away", live=False),
        slack.message(GENERAL, ALICE, f"{mention} you missed this", live=False),
        slack.message(GENERAL, BOB, f"{mention} and this, in the thread", thread_ts=top["ts"], live=False),
        slack.message(GENERAL, BOB, "chatter, no mention", live=False),
        slack.message(DM_ALICE, ALICE, "and this too", live=False),
    ]
    envelopes = len(slack.envelopes)
    async with slack_daemon(config) as daemon:
        await slack.wait_for(lambda: len(slack.sent) == 6)
        await settled(slack, daemon)
    async with caught_up(config) as daemon:  # nothing left to catch up
        await settled(slack, daemon)

    assert slack.texts_to(DM_ALICE) == ["re: first", "re: sent while you were away", "re: and this too"]
    in_general = [(m.text, m.thread_ts) for m in slack.sent if m.channel == GENERAL]
    assert in_general == [("re: [bob]: @switchboard plans for the offsite?", None),
                          ("re: [alice]: @switchboard you missed this", None),
                          ("re: [bob]: @switchboard and this, in the thread", top["ts"])]
    assert len(reply_requests(api)) == 6
    stored = [m for m in await all_messages(config) if m.role == "user"]
    by_ts = {m.provider_message_id: m.id for m in stored}
    assert all(e["ts"] in by_ts for e in offline) and len(by_ts) == len(stored) == 7
    assert by_ts[offline[0]["ts"]] < by_ts[offline[4]["ts"]]
    assert by_ts[offline[1]["ts"]] < by_ts[offline[3]["ts"]]
    # The thread's reply came from conversations.replies; history was read from the stored point on.
    assert [c.args["ts"] for c in slack.calls_of("conversations.replies")].count(top["ts"]) >= 1
    assert history_reads(slack, DM_ALICE) and len(slack.envelopes) > envelopes


async def test_a_long_gap_is_read_page_by_page(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """More missed messages than one history page holds: every page is read (Slack's cursor), each
    message stored once and in order."""
    config = slack_config()
    async with slack_daemon(config) as daemon:
        slack.message(GENERAL, BOB, "before")
        await settled(slack, daemon)

    for n in range(130):
        slack.message(GENERAL, BOB, f"line {n}", live=False)
    async with caught_up(config) as daemon:
        await settled(slack, daemon)

    async with Store.open(config.database_path()) as store:
        stored = [m.text for m in await store.history(f"agent:main:slack:channel:{GENERAL}", 500)]
    assert stored == ["before", *(f"line {n}" for n in range(130))]
    assert not slack.sent  # chatter without a mention starts no turn
    assert [bool(c.args.get("cursor")) for c in slack.calls_of("conversations.history")] == [False, True]


async def test_slack_ts_points_come_back_as_the_newest_ts_on_either_backend(store: Store) -> None:
    """The store's catch-up point of a Slack conversation is its newest inbound ts as a number (not
    cut to whole seconds, nor refused by PostgreSQL's cast)."""
    for ts in ("1700000000.000100", "1700000000.000900", "1699999999.999999"):
        key = build("main", "slack", "direct", ALICE)
        await store.append_inbound(InboundMessage(
            session_key=key, chat=ChatRef("slack", DM_ALICE), sender_id=ALICE, sender_name="alice",
            text=f"at {ts}", provider_message_id=ts, sent_at=float(ts)))

    (point,) = await store.catch_up_points("slack", 0.0)
    assert point[0] == DM_ALICE and float(point[1]) == 1700000000.0009


async def test_a_live_message_waits_for_its_conversations_catch_up(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """A message sent live while its conversation's history is still being read waits (its envelope
    unacknowledged, so Slack sends it again) and is stored after what was missed before it, once."""
    config = slack_config()
    async with slack_daemon(config) as daemon:
        slack.message(GENERAL, BOB, "before")
        await settled(slack, daemon)

    slack.message(GENERAL, BOB, "missed one", live=False)
    slack.message(GENERAL, BOB, "missed two", live=False)
    read = slack.hold("conversations.history")  # the catch-up's read waits for this
    channel = make_channel(config)
    async with running(config, [channel], AnthropicBrain(config.anthropic, API_KEY)) as daemon:
        await asyncio.wait_for(channel.ready.wait(), 10)
        slack.message(GENERAL, BOB, "live, meanwhile")
        # Not acknowledged within Slack's time, so sent again: it waits behind the catch-up.
        await slack.wait_for(lambda: slack.envelopes[-1].attempts >= 1)
        read.set()
        await asyncio.wait_for(channel.caught_up.wait(), 30)
        await settled(slack, daemon)

    stored = [m.text for m in await all_messages(config) if m.role == "user"]
    assert stored == ["before", "missed one", "missed two", "live, meanwhile"]
    assert slack.envelopes[-1].acked


async def test_a_rate_limited_history_read_is_waited_out_not_skipped(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """conversations.history answered 429 at the start (tier 3: many conversations to read back)
    with a Retry-After longer than a stalled read is given: the read waits it out and the DM written
    while the daemon was down is answered once, not skipped as an unreadable conversation."""
    monkeypatch.setattr(catch_up, "HISTORY_TIMEOUT", 1.0)
    config = slack_config()
    async with slack_daemon(config) as daemon:
        slack.message(DM_ALICE, ALICE, "first")
        await slack.wait_for(lambda: slack.sent)
        await settled(slack, daemon)

    slack.message(DM_ALICE, ALICE, "sent while you were away", live=False)
    slack.throttle("conversations.history", retry_after=2)
    async with caught_up(config) as daemon:
        await settled(slack, daemon)

    assert [c.status for c in slack.calls_of("conversations.history")] == [429, 200]
    assert slack.texts_to(DM_ALICE) == ["re: first", "re: sent while you were away"]


async def test_a_channel_the_app_was_removed_from_is_skipped_and_the_rest_caught_up(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """The app removed from a channel while the daemon was down: Slack refuses its history
    (not_in_channel), so the start skips it with a warning, and a DM written meanwhile is still
    caught up and answered once; nothing is posted where the app is no member."""
    config = slack_config()
    mention = f"<@{slack.bot_user_id}>"
    async with slack_daemon(config) as daemon:
        slack.message(GENERAL, BOB, f"{mention} hello")
        slack.message(DM_ALICE, ALICE, "first")
        await slack.wait_for(lambda: len(slack.sent) == 2)
        await settled(slack, daemon)

    slack.remove_bot(GENERAL)
    slack.message(GENERAL, BOB, f"{mention} are you still here?", live=False)
    slack.message(DM_ALICE, ALICE, "sent while you were away", live=False)
    async with caught_up(config) as daemon:
        await settled(slack, daemon)

    assert [c.error for c in slack.calls_of("conversations.history")
            if c.args.get("channel") == GENERAL] == ["not_in_channel"]
    assert slack.texts_to(DM_ALICE) == ["re: first", "re: sent while you were away"]
    assert [m.text for m in slack.sent if m.channel == GENERAL] == ["re: [bob]: @switchboard hello"]
