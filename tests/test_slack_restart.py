"""Slack across a kill: `switchboard run` in a subprocess, killed with SIGKILL after a message is
stored and before Slack has its acknowledgement; the envelope sent again after the restart is
answered once."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest, Text
from bot.testing.anthropic_responses import Response
from bot.testing.models import FAST, MODEL
from bot.testing.preloaded import Forked, Preloaded
from bot.testing.slack_api import SlackStandIn
from tests.harness import API_KEY, echo

ROOT = Path(__file__).resolve().parent.parent
ALICE, DM_ALICE, GENERAL = "U0ALICE", "D0ALICE", "C0GENERAL"


def config_text(api: AnthropicStandIn, slack: SlackStandIn, db: Path) -> str:
    return f"""
[database]
path = "{db}"

[anthropic]
base_url = "{api.base_url}"
model = "{MODEL}"
fast_model = "{FAST}"
timeout = 60.0
max_retries = 1

[conversation]
selection_timeout = 1.0

[semantic]
enabled = "off"

[channels.console]
enabled = false

[channels.slack]
enabled = true
base_url = "{slack.base_url}"
allow_from = ["{ALICE}"]
channels = ["{GENERAL}"]
"""


@asynccontextmanager
async def daemon(preloaded: Preloaded, config: Path, slack: SlackStandIn, log: Path) -> AsyncIterator[Forked]:
    """`switchboard run` as a service would start it, forked from the session's zygote (its imports
    done once: what is tested is what a started daemon does); killed (if running) on the way out."""
    ours = ("ANTHROPIC_", "SLACK_", "SWITCHBOARD_")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    env = environ | {"SLACK_BOT_TOKEN": slack.bot_token, "SLACK_APP_TOKEN": slack.app_token,
                     "ANTHROPIC_API_KEY": API_KEY, "PYTHONPATH": str(ROOT)}
    proc = await preloaded.spawn(["run", "--config", str(config)], cwd=config.parent, env=env, log=log)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()


@pytest.mark.parametrize("where", ["dm", "thread"])
async def test_a_message_stored_but_not_acknowledged_before_a_kill_is_answered_once(
    tmp_path: Path, where: str, preloaded: Preloaded
) -> None:
    """The daemon stores Alice's message (a DM, or a mention in a thread) and starts its turn, but
    Slack never gets the acknowledgement; it is killed mid-turn. Started again, it gets the same
    event once more (Slack's retry) and also finds the stored request unanswered: one reply, in the
    DM or the thread, and one stored copy of the question."""
    db, config, log = tmp_path / "switchboard.db", tmp_path / "config.toml", tmp_path / "daemon.log"
    async with AnthropicStandIn() as api, SlackStandIn(ack_timeout=1.0) as slack:
        config.write_text(config_text(api, slack, db), encoding="utf-8")

        def slow(rec: RecordedRequest) -> Response:
            return Text("never seen", delay=60.0) if rec.model == MODEL else echo(rec)

        api.default = slow
        async with daemon(preloaded, config, slack, log) as first:
            await slack.connected(1)
            if where == "dm":
                chat, thread_ts, text = DM_ALICE, None, "remember the milk"
                key = f"agent:main:slack:direct:{ALICE}"
            else:
                top = slack.message(GENERAL, ALICE, "shopping list")
                await slack.all_acked()
                chat, thread_ts = GENERAL, top["ts"]
                text = f"<@{slack.bot_user_id}> remember the milk"
                key = f"agent:main:slack:channel:{GENERAL}:thread:{thread_ts}"
            slack.drop_acks = True  # as if the daemon died before its acknowledgement left
            asked = slack.message(chat, ALICE, text, thread_ts=thread_ts)
            # Stored: its turn is at the model.
            await slack.wait_for(lambda: api.requests_for(MODEL), timeout=60)
            first.send_signal(signal.SIGKILL)
            await first.wait()

        api.default = echo
        slack.drop_acks = False
        unacked = slack.unacked
        assert unacked and all(e.payload["event"]["ts"] == asked["ts"] for e in unacked)
        async with daemon(preloaded, config, slack, log) as second:
            await slack.wait_for(lambda: slack.sent, timeout=60)
            await slack.all_acked(timeout=60)
            second.send_signal(signal.SIGTERM)  # a clean stop ends every turn it started
            assert await asyncio.wait_for(second.wait(), 60) == 0, log.read_text()

        assert all(e.attempts >= 1 for e in unacked), log.read_text()  # each sent again
        (sent,) = slack.sent
        assert (sent.channel, sent.thread_ts) == (chat, thread_ts), log.read_text()
        async with Store.open(db) as store:
            history = await store.history(key, 10)
        assert [(m.role, m.text) for m in history] == [("user", history[0].text), ("assistant", sent.text)]
        assert history[0].text.endswith("remember the milk") and sent.text.endswith("remember the milk")
