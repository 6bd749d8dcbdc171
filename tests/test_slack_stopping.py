"""Slack while the daemon stops: events still being handed over when the socket closes are left
unacknowledged (Slack sends them again to the next start), and the log says so in one line each,
not as errors."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

from bot.config import SlackConfig
from bot.core.log import configure_logging
from bot.core.messages import InboundMessage
from bot.intake.router import RouterClosedError
from bot.testing.recording_intake import RecordingIntake
from bot.testing.slack_api import SlackStandIn
from channels.slack.bolt_setup import UNACKNOWLEDGED
from channels.slack.channel import SlackChannel
from tests import test_slack
from tests.test_slack import ALICE, BOB, DM_ALICE

slack = test_slack.slack  # the fixture, shared
DM_BOB = "D0BOB"


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]


async def test_events_caught_by_the_stop_are_one_line_each_and_no_error(
    slack: SlackStandIn, log_stream: io.StringIO
) -> None:
    """Two DMs are being handed over when the channel stops: the router refuses one (it is shutting
    down), the other is stored after the socket closed, so its acknowledgement cannot be written.
    Both stay unacknowledged at Slack; the log has one info line for each and no error or warning."""
    configure_logging("INFO", "json", stream=log_stream)
    release = asyncio.Event()

    async def store(inbound: InboundMessage) -> None:
        await release.wait()
        if inbound.text == "too late":
            raise RouterClosedError("the router is shutting down")

    config = SlackConfig(enabled=True, base_url=slack.base_url, allow_from=[ALICE, BOB])
    channel = SlackChannel(config, agent_id="main", bot_token=slack.bot_token, app_token=slack.app_token)
    intake = RecordingIntake(store)
    task = asyncio.create_task(channel.run(intake))
    try:
        await asyncio.wait_for(channel.ready.wait(), 10)
        slack.message(DM_ALICE, ALICE, "too late")
        slack.message(DM_BOB, BOB, "stored late")
        await slack.wait_for(lambda: len(intake.received) == 2)  # both at the core
        stopping = asyncio.create_task(channel.stop())
        await slack.wait_for(lambda: not slack.live)  # the socket is closed
        release.set()
        await stopping

        def told() -> list[dict[str, Any]]:  # ours, or anything louder than info, for either event
            return [e for e in lines(log_stream) if e["event"] == UNACKNOWLEDGED or e["level"] != "info"]

        await slack.wait_for(lambda: len(told()) >= 2)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    assert not any(e.acked for e in slack.envelopes)  # Slack sends both again
    logged = lines(log_stream)
    loud = [(e["level"], e["event"]) for e in logged if e["level"] not in ("info", "debug")]
    assert not loud, "\n".join(map(str, loud))
    ours = [e for e in logged if e["event"] == UNACKNOWLEDGED]
    assert len(ours) == 2 and {e["channel"] for e in ours} == {"slack"}
    assert {e["message_id"] for e in ours} == {e.payload["event"]["ts"] for e in slack.envelopes}


async def test_a_listener_failing_outside_a_stop_is_still_an_error(
    slack: SlackStandIn, log_stream: io.StringIO
) -> None:
    """A stranger's DM under pairing, the pairing failing (not a stop): Bolt's error line with its
    traceback, as before, and the event unacknowledged."""
    configure_logging("INFO", "json", stream=log_stream)

    class Failing(RecordingIntake):
        async def pair(self, provider: str, chat_id: str, user_id: str, user_name: str | None) -> bool:
            raise RuntimeError("pairing table unreadable")

    config = SlackConfig(enabled=True, base_url=slack.base_url, dm_policy="pairing")
    channel = SlackChannel(config, agent_id="main", bot_token=slack.bot_token, app_token=slack.app_token)
    task = asyncio.create_task(channel.run(Failing()))
    try:
        await asyncio.wait_for(channel.ready.wait(), 10)
        slack.message(DM_BOB, BOB, "hello?")
        await slack.wait_for(lambda: [e for e in lines(log_stream) if e["level"] == "error"])
    finally:
        await channel.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    errors = [e for e in lines(log_stream) if e["level"] == "error"]  # one per attempt Slack made
    assert all("pairing table unreadable" in e["event"] and "RuntimeError" in e["exception"] for e in errors)
    assert not slack.envelopes[0].acked
    assert all(e["event"] != UNACKNOWLEDGED for e in lines(log_stream))
