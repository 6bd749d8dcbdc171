"""`switchboard doctor`'s Slack check against the stand-in, with the real slack_sdk: the bot token
(auth.test) and the scopes Slack says it carries, the app-level token (apps.connections.open)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.cli.doctor_platforms import check_slack
from bot.config import SlackConfig
from bot.testing.slack_api import SlackStandIn
from bot.testing.slack_values import BOT_SCOPES
from channels.slack.scopes import NEEDED, OPTIONAL
from tests import test_doctor
from tests.test_doctor import Write, doctor, failures, line_of

# test_doctor's fixtures: the model stand-in, a database, config.toml.
api, database, write = test_doctor.api, test_doctor.database, test_doctor.write


@pytest.fixture
async def slack(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SlackStandIn]:
    async with SlackStandIn(team_id="T0DOCTOR") as standin:
        monkeypatch.setenv("SLACK_BOT_TOKEN", standin.bot_token)
        monkeypatch.setenv("SLACK_APP_TOKEN", standin.app_token)
        yield standin


def section(slack: SlackStandIn) -> SlackConfig:
    return SlackConfig(enabled=True, base_url=slack.base_url)


async def test_both_tokens_and_the_scopes_pass(slack: SlackStandIn) -> None:
    """Tokens Slack takes and every scope the channel needs: one ✓ line naming the bot and team,
    and the optional scope it goes without."""
    found = await check_slack("slack", section(slack))

    assert found.ok, found
    assert found.detail == ("@switchboard in Stand-in answers (auth.test) with the scopes it needs; without "
                            "assistant:write (optional); the app-level token opens Socket Mode "
                            "(apps.connections.open)")
    assert [(c.method, c.token) for c in slack.calls] == [("auth.test", "bot"),
                                                          ("apps.connections.open", "app")]


async def test_a_missing_scope_is_named_with_the_fix(slack: SlackStandIn) -> None:
    """A bot token without im:history and users:read (read from the x-oauth-scopes header): ✗
    naming both, and where to add them."""
    slack.scopes = slack.scopes - {"im:history", "users:read"}
    found = await check_slack("slack", section(slack))

    assert not found.ok
    assert found.detail == ("@switchboard in Stand-in answers (auth.test), but its bot token lacks "
                            "im:history, users:read")
    assert "OAuth & Permissions" in found.fix and "reinstall" in found.fix


async def test_a_refused_token_of_either_kind_says_which(
    slack: SlackStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A revoked bot token fails at auth.test, a wrong app-level token at apps.connections.open,
    each saying which variable and where to get a new one; an unset variable says so."""
    monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-revoked")
    found = await check_slack("slack", section(slack))
    assert (found.ok, found.detail) == (
        False, "Slack refused the app-level token in SLACK_APP_TOKEN (apps.connections.open: invalid_auth)")
    assert "App-Level Tokens" in found.fix

    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-revoked")
    found = await check_slack("slack", section(slack))
    assert (found.ok, found.detail) == (
        False, "Slack refused the bot token in SLACK_BOT_TOKEN (auth.test: invalid_auth)")

    monkeypatch.delenv("SLACK_APP_TOKEN")
    found = await check_slack("slack", section(slack))
    assert (found.ok, found.detail) == (False, "environment variable SLACK_APP_TOKEN is not set")


def test_the_standin_grants_what_the_manifest_asks() -> None:
    """The stand-in's default bot scopes are the channel's needed ones; the optional ones are extra."""
    assert BOT_SCOPES == NEEDED and not OPTIONAL & BOT_SCOPES


async def test_switchboard_doctor_checks_an_enabled_slack_app(slack: SlackStandIn, write: Write) -> None:
    """`switchboard doctor` with [channels.slack] enabled prints its line among the others; the
    tokens never appear."""
    path = write(channels={"slack": {"enabled": True, "base_url": slack.base_url}})
    code, lines = await doctor(path)

    assert line_of(lines, "slack").startswith("✓ slack: @switchboard in Stand-in answers (auth.test)")
    assert not any(token in "\n".join(lines) for token in (slack.bot_token, slack.app_token))
    assert "slack" not in " ".join(failures(lines)), lines
    assert code in (0, 1)  # other checks (the service, the clock) depend on the machine
