"""No secret in the logs of a Discord run: the real logging chain at DEBUG, discord.py included."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.cli.base import setup_logging as _logging
from bot.config import Config
from bot.models.brain import AnthropicBrain
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.discord_api import DiscordStandIn
from tests.harness import config_data, running
from tests.test_discord import ALICE, ALICE_ID, BOT_ID, DM_ALICE, GENERAL, GUILD, make_channel

DISCORD_TOKEN = "MTIzNDU2Nzg5MDEyMzQ1Njc4OTA.GsEcRt.service-test-discord-token-value"
API_KEY = "sk-ant-api03-discord-log-test-Qm4nB8vC2xZ6"


@pytest.fixture
async def dc(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[DiscordStandIn]:
    async with DiscordStandIn(token=DISCORD_TOKEN, bot_id=BOT_ID) as standin:
        standin.add_guild(GUILD, "Test Guild", channels=[(GENERAL, "general")], members=[ALICE])
        standin.patch(monkeypatch)
        yield standin



async def test_a_discord_run_at_debug_logs_no_token_key_or_authorization_header(
    dc: DiscordStandIn, api: AnthropicStandIn, make_config: Any, monkeypatch: pytest.MonkeyPatch,
    log_stream: io.StringIO,
) -> None:
    """Connecting, a DM turn and a clean stop with every library at DEBUG leave neither the bot token,
    the API key nor an Authorization header in any log line."""
    monkeypatch.setenv("DISCORD_BOT_TOKEN", DISCORD_TOKEN)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    config: Config = make_config(config_data(
        api, channels={"discord": {"enabled": True, "allow_from": [ALICE_ID]}},
        logging={"level": "DEBUG", "format": "json"},
    ))
    monkeypatch.setattr("sys.stderr", log_stream)
    _logging(config)
    channel = make_channel(config, token=DISCORD_TOKEN)
    async with running(config, [channel], AnthropicBrain(config.anthropic, API_KEY)):
        await asyncio.wait_for(channel.ready.wait(), 5)
        dc.message_create(DM_ALICE, ALICE, "hello")
        await dc.wait_for(lambda: dc.sent)

    logs = log_stream.getvalue()
    lines = [json.loads(line) for line in logs.splitlines()]
    assert any(line["logger"].startswith("discord") for line in lines)  # discord.py's own DEBUG lines
    assert any(line["event"] == "turn" for line in lines)
    assert dc.identifies[0]["token"] == DISCORD_TOKEN
    assert api.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    for secret in (DISCORD_TOKEN, API_KEY, "Bearer", f"Bot {DISCORD_TOKEN[:10]}"):
        assert secret not in logs, f"{secret[:12]}… leaked into the logs"
    assert "authorization" not in logs.lower()
