"""Two Slack apps in one daemon: `[channels.slack]` and `[channels.slack.accounts.work]`, each with
its own bot and app-level tokens and its own Socket Mode connection, served by one stand-in as
slack.com serves every app; each answers what was sent to it, in sessions of its own, and one
app's refused token leaves the other running."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from bot.config import Config
from bot.daemon.assembly import Daemon, build_channels
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.slack_api import SlackStandIn
from channels.slack.channel import SlackChannel
from tests import test_slack
from tests.harness import API_KEY, config_data, reply_requests, request_text, router_of, running
from tests.test_slack import ALICE, DM_ALICE

WORK_BOT, WORK_APP = "xoxb-work-token", "xapp-work-token"
MakeConfig = Callable[[dict[str, Any]], Config]
slack = test_slack.slack  # the fixture, shared


@pytest.fixture
async def work(slack: SlackStandIn) -> SlackStandIn:
    """A second app, in a workspace of its own, at the same base URL; Alice is a member there too
    (one Enterprise Grid member id), and her DM with this app has the same id as with the first."""
    app = slack.add_app(bot_token=WORK_BOT, app_token=WORK_APP, team_id="T0WORK",
                        bot_user_id="U0WORKBOT", bot_id="B0WORK", app_id="A0WORK")
    app.add_user(ALICE, "alice.at.work")
    return app


def slack_data(api: AnthropicStandIn, slack: SlackStandIn, monkeypatch: pytest.MonkeyPatch, *,
               work_bot: str = WORK_BOT, work_app: str = WORK_APP) -> dict[str, Any]:
    """Both apps' sections, each naming its own token variables; messages to the work app go to
    the agent `work` (a binding on its channel)."""
    for name, value in (("SLACK_BOT_TOKEN", slack.bot_token), ("SLACK_APP_TOKEN", slack.app_token),
                        ("WORK_SLACK_BOT_TOKEN", work_bot), ("WORK_SLACK_APP_TOKEN", work_app)):
        monkeypatch.setenv(name, value)
    account = {"bot_token_env": "WORK_SLACK_BOT_TOKEN", "app_token_env": "WORK_SLACK_APP_TOKEN"}
    section = {"enabled": True, "base_url": slack.base_url, "allow_from": [ALICE],
               "accounts": {"work": account}}
    return {**config_data(api, channels={"slack": section}), "agents": [{"id": "work", "name": "Desk"}],
            "bindings": [{"agent": "work", "channel": "slack.work"}]}


@asynccontextmanager
async def two_apps(config: Config) -> AsyncIterator[tuple[Daemon, dict[str, SlackChannel]]]:
    """The daemon as `switchboard run` builds it from the config: both Slack apps, no console."""
    channels = build_channels(config, console=False)
    by_name = {c.provider: c for c in channels if isinstance(c, SlackChannel)}
    assert sorted(by_name) == ["slack", "slack.work"]
    async with running(config, channels, AnthropicBrain(config.anthropic, API_KEY)) as daemon:
        yield daemon, by_name


async def answered(app: SlackStandIn, daemon: Daemon, text: str) -> None:
    """Alice DMs `app`; returns once the daemon stored it (acknowledged) and answered it."""
    replies = len(app.sent)
    app.message(DM_ALICE, ALICE, text)
    await app.wait_for(lambda: len(app.sent) > replies)
    await app.all_acked()
    await router_of(daemon).idle()


async def test_each_app_answers_its_own_dms_with_its_own_token_in_its_own_session(
    slack: SlackStandIn, work: SlackStandIn, api: AnthropicStandIn, make_config: MakeConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Alice DMs both apps (the same member id, the same DM id in each workspace): each message is
    answered in the app it went to, posted with that app's bot token; each app has its own socket;
    the two conversations are two sessions of two agents and neither reaches the other's model."""
    config = make_config(slack_data(api, slack, monkeypatch))
    async with two_apps(config) as (daemon, channels):
        for channel in channels.values():
            await asyncio.wait_for(channel.ready.wait(), 10)
        await answered(slack, daemon, "my cat is called Tom")
        await answered(work, daemon, "my dog is called Rex")
        await answered(slack, daemon, "which pet did I name?")
        await answered(work, daemon, "which pet did I name, again?")

    assert slack.texts_to(DM_ALICE) == ["re: my cat is called Tom", "re: which pet did I name?"]
    assert work.texts_to(DM_ALICE) == ["re: my dog is called Rex", "re: which pet did I name, again?"]
    # Each app's calls carried its own tokens only; each opened its own socket with its app token.
    posted = {(c.method, c.token) for c in work.calls
              if c.method in ("chat.postMessage", "apps.connections.open")}
    assert posted == {("chat.postMessage", "bot"), ("apps.connections.open", "app")}
    assert all(c.token in ("bot", "app") and c.error is None for c in (*slack.calls, *work.calls))
    assert (slack.connections, work.connections) == (1, 1)
    assert all(e.acked for e in (*slack.envelopes, *work.envelopes))

    *_, to_main, to_work = reply_requests(api)
    assert "Tom" in request_text(to_main) and "Rex" not in request_text(to_main)
    assert "Rex" in request_text(to_work) and "Tom" not in request_text(to_work)
    async with Store.open(config.database_path()) as store:
        main = await store.history(f"agent:main:slack:direct:{ALICE}", 10)
        desk = await store.history(f"agent:work:slack.work:direct:{ALICE}", 10)
        keys = {s.key for s in await store.list_sessions()}
    assert keys == {f"agent:main:slack:direct:{ALICE}", f"agent:work:slack.work:direct:{ALICE}"}
    assert [(m.text, m.sender_name) for m in main if m.role == "user"] == [
        ("my cat is called Tom", "alice"), ("which pet did I name?", "alice")]
    assert [(m.text, m.sender_name) for m in desk if m.role == "user"] == [
        ("my dog is called Rex", "alice.at.work"), ("which pet did I name, again?", "alice.at.work")]
    # The work app's reply is found by its own ts under its own channel name.
    assert [m.provider_message_id for m in desk if m.role == "assistant"] == [m.ts for m in work.sent]


@pytest.mark.parametrize("refused", ["bot", "app-level"])
async def test_one_apps_refused_token_leaves_the_other_answering(
    slack: SlackStandIn, work: SlackStandIn, api: AnthropicStandIn, make_config: MakeConfig,
    monkeypatch: pytest.MonkeyPatch, refused: str,
) -> None:
    """The work app's bot (or app-level) token is refused: that channel stays off, status says why
    and what to do, and the first app connects and answers as before."""
    tokens = {"work_bot": "xoxb-revoked"} if refused == "bot" else {"work_app": "xapp-revoked"}
    config = make_config(slack_data(api, slack, monkeypatch, **tokens))
    async with two_apps(config) as (daemon, channels):
        await asyncio.wait_for(channels["slack"].ready.wait(), 10)
        await slack.wait_for(lambda: daemon.misconfigured.latest("channel", "slack.work"))
        await answered(slack, daemon, "still there?")
        states = {c["provider"]: c for c in (await daemon.status())["channels"]}

    assert slack.texts_to(DM_ALICE) == ["re: still there?"]
    assert states["slack"]["state"] == "connected"
    assert states["slack.work"]["state"] == "stopped"
    assert f"{refused} token: invalid_auth" in states["slack.work"]["error"]
    env = "WORK_SLACK_BOT_TOKEN" if refused == "bot" else "WORK_SLACK_APP_TOKEN"
    assert env in states["slack.work"]["fix"]
    assert work.connections == 0 and not work.sent
