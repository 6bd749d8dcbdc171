"""Slack's HTTP mode (the Events API) end to end: the daemon serves the app's Request URL with the
real slack-bolt, the stand-in POSTs signed events to it as Slack does (sent again when not answered
200 within its ack timeout), and an event is answered 200 only once it is stored."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.cli.doctor_platforms import check_slack
from bot.config import Config, SlackConfig, load_config
from bot.core.errors import ConfigError
from bot.daemon.assembly import Daemon, build_channels
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.slack_api import SlackStandIn
from bot.testing.slack_events import SIGNING_SECRET, EventAttempt
from channels.slack.channel import SlackChannel
from tests.harness import API_KEY, config_data, reply_requests, router_of, running
from tests.test_telegram_webhook import allow_user_messages, free_port, refuse_user_messages, stored_texts

MakeConfig = Callable[[dict[str, Any]], Config]
ALICE, DM_ALICE = "U0ALICE", "D0ALICE"
PATH = "/slack/events"


@pytest.fixture
async def slack() -> AsyncIterator[SlackStandIn]:
    async with SlackStandIn(ack_timeout=3.0) as standin:
        standin.add_user(ALICE, "alice", "Alice Liddell")
        yield standin


@pytest.fixture
def http_config(
    api: AnthropicStandIn, slack: SlackStandIn, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> Config:
    """[channels.slack] in HTTP mode on a free local port; Slack POSTs there."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", slack.bot_token)
    monkeypatch.delenv("SLACK_APP_TOKEN", raising=False)  # HTTP mode needs no app-level token
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SIGNING_SECRET)
    port = free_port()
    slack.deliver_by_http(f"http://127.0.0.1:{port}{PATH}")
    section = {"enabled": True, "base_url": slack.base_url, "allow_from": [ALICE], "mode": "http",
               "webhook_listen": f"127.0.0.1:{port}", "webhook_path": PATH}
    return make_config(config_data(api, channels={"slack": section}))


@asynccontextmanager
async def http_daemon(config: Config) -> AsyncIterator[Daemon]:
    """The daemon as `switchboard run` assembles it, once it listens for Slack's events."""
    (channel,) = build_channels(config, console=False)
    assert isinstance(channel, SlackChannel)
    async with running(config, [channel], AnthropicBrain(config.anthropic, API_KEY)) as daemon:
        await asyncio.wait_for(channel.ready.wait(), 10)
        yield daemon


async def settled(slack: SlackStandIn, daemon: Daemon) -> None:
    await slack.all_acked()
    await router_of(daemon).idle()


def statuses(slack: SlackStandIn) -> list[tuple[int, str, int | None]]:
    """The first event's POSTs (the bot's own reply is sent as an event too): retry, reason, status."""
    assert slack.http is not None
    first = slack.envelopes[0].event_id
    return [(a.retry_num, a.reason, a.status) for a in slack.http.attempts if a.event_id == first]


async def test_a_signed_dm_is_stored_before_the_200_and_answered(
    slack: SlackStandIn, api: AnthropicStandIn, http_config: Config, db: Path
) -> None:
    """Slack's url_verification is answered with its challenge; a DM POSTed signed is in the
    database when the 200 goes out, and is answered in the DM. No socket is opened."""
    assert slack.http is not None
    stored_at_answer: list[tuple[EventAttempt, list[str]]] = []
    slack.http.on_answer = lambda attempt: stored_at_answer.append((attempt, stored_texts(db)))
    async with http_daemon(http_config) as daemon:
        status, verified = await slack.http.verify_url()
        slack.message(DM_ALICE, ALICE, "hello over http")
        await slack.wait_for(lambda: slack.sent)
        await settled(slack, daemon)

    assert (status, verified["challenge"]) == (200, verified["sent"])
    asked = slack.envelopes[0].event_id  # then the bot's own reply, which Slack sends as an event too
    ((attempt, stored),) = [(a, s) for a, s in stored_at_answer if a.event_id == asked]
    assert (attempt.status, attempt.retry_num, stored) == (200, 0, ["hello over http"])
    assert slack.texts_to(DM_ALICE) == ["re: hello over http"]
    assert slack.calls_of("apps.connections.open") == [] and slack.connections == 0


async def test_a_bad_or_old_signature_is_refused_401_and_nothing_is_stored(
    slack: SlackStandIn, api: AnthropicStandIn, http_config: Config, db: Path
) -> None:
    """A request signed with another secret, with no valid signature, or signed correctly but more
    than five minutes ago (a replay) is refused 401: nothing stored, nothing answered."""
    assert slack.http is not None
    forged = {"type": "event_callback", "event_id": "Ev0FORGED", "team_id": slack.team_id,
              "api_app_id": slack.app_id, "event": {"type": "message", "channel": DM_ALICE, "user": ALICE,
                                                    "text": "forged", "ts": "1700000000.000100",
                                                    "channel_type": "im"}}
    async with http_daemon(http_config) as daemon:
        wrong = await slack.http.post_raw(forged, secret="not-the-signing-secret")
        garbled = await slack.http.post_raw(forged, signature="v0=00")
        replayed = await slack.http.post_raw(forged, timestamp=int(time.time()) - 6 * 60)
        assert stored_texts(db) == []
        slack.message(DM_ALICE, ALICE, "the real one")
        await slack.wait_for(lambda: slack.sent)
        await settled(slack, daemon)

    assert (wrong, garbled, replayed) == (401, 401, 401)
    assert stored_texts(db) == ["the real one"]
    assert slack.texts_to(DM_ALICE) == ["re: the real one"]
    assert len(reply_requests(api)) == 1


async def test_an_event_sent_again_while_its_first_post_is_storing_is_answered_once(
    slack: SlackStandIn, api: AnthropicStandIn, http_config: Config, db: Path
) -> None:
    """The first POST is not answered within Slack's timeout (the sender's name is slow to look up),
    so Slack sends it again (X-Slack-Retry-Num 1, http_timeout) while the first is still storing:
    a 200 in the end, the message stored once and answered once."""
    slack.ack_timeout = 1.0
    assert slack.http is not None
    slack.http.ack_timeout = 1.0
    async with http_daemon(http_config) as daemon:
        slack.delay("users.info", 2.5)
        slack.message(DM_ALICE, ALICE, "slow to store")
        await slack.wait_for(lambda: slack.sent)
        await settled(slack, daemon)

    attempts = statuses(slack)
    assert attempts[0] == (0, "", None) and attempts[1][:2] == (1, "http_timeout")
    assert attempts[-1][2] == 200
    assert stored_texts(db) == ["slow to store"]
    assert slack.texts_to(DM_ALICE) == ["re: slow to store"]
    assert len(reply_requests(api)) == 1


async def test_an_event_the_store_refuses_gets_a_500_and_slacks_retry_is_answered_once(
    slack: SlackStandIn, api: AnthropicStandIn, http_config: Config, db: Path, view: Store,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """While the database refuses the message the daemon answers 500 (before Slack's timeout), so
    Slack sends it again (http_error); once the database takes it, the retry gets a 200 and one
    reply. The same event sent once more (a 200 Slack never saw) is a repeat: still one of each."""
    assert slack.http is not None
    slack.http.ack_timeout = 20.0  # the 500 comes after the store's budget, whatever the load
    refuse_user_messages(db)

    async def allow_after_the_500(attempt: EventAttempt) -> None:
        if attempt.status == 500:
            assert slack.http is not None
            slack.http.on_answer = None
            await asyncio.to_thread(allow_user_messages, db)  # as another process writes

    slack.http.on_answer = allow_after_the_500
    async with http_daemon(http_config) as daemon:
        slack.message(DM_ALICE, ALICE, "are you there?")
        await slack.wait_for(lambda: slack.sent)
        await settled(slack, daemon)
        assert await slack.http.post_raw(slack.envelopes[0].payload) == 200
        await router_of(daemon).idle()

    assert statuses(slack) == [(0, "", 500), (1, "http_error", 200)]
    assert stored_texts(db) == ["are you there?"]
    assert slack.texts_to(DM_ALICE) == ["re: are you there?"]
    assert len(reply_requests(api)) == 1
    assert "slack message not stored; trying again" in capsys.readouterr().out


async def test_doctor_in_http_mode_checks_the_bot_token_and_looks_for_the_signing_secret(
    slack: SlackStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP mode has no app-level token to try: doctor checks the bot token (auth.test) and names
    the signing secret's variable when it is unset."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", slack.bot_token)
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SIGNING_SECRET)
    section = SlackConfig(enabled=True, base_url=slack.base_url, mode="http")
    found = await check_slack("slack", section)
    monkeypatch.delenv("SLACK_SIGNING_SECRET")
    unset = await check_slack("slack", section)

    assert found.ok and found.detail.endswith("HTTP mode: the signing secret is set"), found
    assert [c.method for c in slack.calls] == ["auth.test"]
    assert not unset.ok and unset.detail == "environment variable SLACK_SIGNING_SECRET is not set"


def test_two_slack_apps_in_http_mode_on_one_address_are_refused(tmp_path: Path) -> None:
    """Each app in HTTP mode runs its own server: a second one on the same webhook_listen is
    refused when the file is read, naming the key."""
    config = tmp_path / "config.toml"
    config.write_text('[channels.slack]\nenabled = true\nmode = "http"\n'
                      '[channels.slack.accounts.work]\nbot_token_env = "WORK_SLACK_BOT_TOKEN"\n'
                      'signing_secret_env = "WORK_SLACK_SIGNING_SECRET"\n')
    with pytest.raises(ConfigError) as refused:
        load_config(config)
    assert refused.value.key == "channels.slack.accounts.work.webhook_listen"
