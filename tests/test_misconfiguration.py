"""Misconfigurations named where they happen: a refused key, an unknown model, a spent balance, a
revoked bot token. Each is one warning with the fix in the log and one line on the console, at most
once an hour per cause; the user is told the bot is not set up (not "try again"); `status` shows it
as the provider's or the channel's last error; the secret itself appears nowhere."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from bot.config import Config, load_config
from bot.core.misconfiguration import Misconfiguration, Misconfigurations
from bot.testing.anthropic_api import AnthropicStandIn, Error
from bot.testing.discord_api import DiscordStandIn
from bot.testing.fake_channel import FakeChannel
from bot.testing.openai_api import OpenAIStandIn
from bot.testing.telegram_api import TelegramStandIn
from bot.turn.runner import FALLBACK_REPLY
from channels.console.channel import ConsoleChannel
from channels.discord.channel import DiscordChannel
from channels.telegram.channel import TelegramChannel
from tests.harness import FAST, MODEL, ROOT, config_data, daemon_with, running, say, wait_until

MakeConfig = Callable[[dict[str, Any]], Config]
GOOD_KEY, BAD_KEY = "sk-ant-good-0123456789abcdef", "sk-ant-revoked-fedcba9876543210"
KEY_REFUSED = "I'm not set up correctly right now (the model key was refused); the admin has been told."
UNKNOWN_MODEL = "I'm not set up correctly right now (the model name is not known); the admin has been told."
NO_CREDIT = ("I'm not set up correctly right now (the model account is out of credit); "
             "the admin has been told.")
CREDIT_TOO_LOW = ("Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing "
                  "to upgrade or purchase credits.")


def notices(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The misconfiguration warnings among captured log lines (those that carry a fix)."""
    return [e for e in logs if e["log_level"] == "warning" and "fix" in e]


def console_channel() -> tuple[ConsoleChannel, io.StringIO]:
    """A console whose input stays open (nothing typed) and whose output the test reads."""
    output = io.StringIO()
    return ConsoleChannel("main", reader=asyncio.StreamReader(), output=output), output


def console_lines(output: io.StringIO, word: str) -> list[str]:
    return [line for line in output.getvalue().splitlines() if word in line]


def write_config(path: Path, api: AnthropicStandIn, db: Path) -> Config:
    path.write_text(
        f'[anthropic]\nbase_url = "{api.base_url}"\nmodel = "{MODEL}"\nfast_model = "{FAST}"\n'
        'timeout = 2.0\nmax_retries = 1\n'
        f'[database]\npath = "{db}"\n[conversation]\nuse_selection = false\n'
        '[router]\nshutdown_grace = 2.0\n[semantic]\nenabled = "off"\n',
        encoding="utf-8")
    return load_config(path)


async def status_text(cwd: Path, config: Path) -> str:
    """`switchboard status` as a subprocess, off the loop the daemon under test runs on."""
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "status", "--config", str(config), cwd=cwd, env=environ,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode()


# -- the model provider ----------------------------------------------------------------------------


async def test_a_refused_key_is_told_once_to_the_admin_and_as_misconfigured_to_the_user(
    api: AnthropicStandIn, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A 401 answers the user "not set up (the model key was refused)", logs one warning naming the
    variable to fix, prints one console line, and shows in `status` as the provider's last error; a
    second 401 within the hour is told to the user again but not logged again; the key is nowhere."""
    api.valid_keys = {GOOD_KEY}
    monkeypatch.setenv("ANTHROPIC_API_KEY", BAD_KEY)
    path = tmp_path / "config.toml"
    config = write_config(path, api, tmp_path / "switchboard.db")
    channel = FakeChannel()
    console, output = console_channel()
    with capture_logs() as logs:
        async with running(config, [channel, console], None) as daemon:
            await say(daemon, channel, "hello?")
            await say(daemon, channel, "anyone there?")
            status = await daemon.status()
            printed = await status_text(tmp_path, path)
    assert [m.text for m in channel.sent] == [KEY_REFUSED, KEY_REFUSED]
    (warning,) = notices(logs)
    assert warning["provider"] == "anthropic" and warning["problem"] == "auth"
    assert "HTTP 401" in warning["event"] and "ANTHROPIC_API_KEY" in warning["fix"]
    (line,) = console_lines(output, "ANTHROPIC_API_KEY")
    assert "refused" in line
    (provider,) = status["providers"]
    assert provider["name"] == "anthropic" and "HTTP 401" in provider["error"]
    assert "ANTHROPIC_API_KEY" in provider["fix"]
    (shown,) = [row for row in printed.splitlines() if row.startswith("provider anthropic:")]
    assert "HTTP 401" in shown and "fix: " in shown and "ANTHROPIC_API_KEY" in shown
    everything = repr(logs) + output.getvalue() + json.dumps(status) + printed + repr(channel.sent)
    assert BAD_KEY not in everything


@pytest.mark.parametrize(("error", "reply", "named"), [
    pytest.param(Error(404, "not_found_error", f"model: {MODEL}"), UNKNOWN_MODEL, MODEL, id="unknown model"),
    pytest.param(Error(400, "invalid_request_error", CREDIT_TOO_LOW), NO_CREDIT, "credit",
                 id="credit too low"),
    pytest.param(Error(402, "billing_error", "Billing error"), NO_CREDIT, "credit", id="billing error"),
])
async def test_an_unknown_model_or_a_spent_balance_is_named(
    api: AnthropicStandIn, make_config: MakeConfig, error: Error, reply: str, named: str
) -> None:
    """An unknown model (404 not_found_error) or a spent balance (Anthropic's 400 "credit balance is
    too low", or a billing_error) is answered as a misconfiguration, with one warning saying what to fix."""
    config = make_config(config_data(api, conversation={"use_selection": False}))
    channel = FakeChannel()
    api.script(error, error, model=MODEL)
    with capture_logs() as logs:
        async with daemon_with(config, channel) as daemon:
            await say(daemon, channel, "hello?")
            await say(daemon, channel, "still?")
            status = await daemon.status()
    assert [m.text for m in channel.sent] == [reply, reply]
    (warning,) = notices(logs)
    assert named in warning["event"] + warning["fix"]
    assert [p["name"] for p in status["providers"]] == ["anthropic"]


async def test_an_overloaded_model_still_gets_try_again(
    api: AnthropicStandIn, make_config: MakeConfig
) -> None:
    """A passing failure (529 overloaded, after the retries) keeps today's "try again" reply and
    is no misconfiguration: no warning with a fix, nothing in status."""
    config = make_config(config_data(api, conversation={"use_selection": False}))
    channel = FakeChannel()
    api.script(Error(529, "overloaded_error"), Error(529, "overloaded_error"), model=MODEL)
    with capture_logs() as logs:
        async with daemon_with(config, channel) as daemon:
            await say(daemon, channel, "hello?")
            status = await daemon.status()
    assert [m.text for m in channel.sent] == [FALLBACK_REPLY]
    assert notices(logs) == [] and status["providers"] == []


async def test_a_refused_key_on_an_openai_kind_provider_names_its_variable(
    api: AnthropicStandIn, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 401 from an OpenAI-compatible server names that provider and the variable its key is in."""
    monkeypatch.setenv("LOCAL_API_KEY", "revoked-local-key-0123")
    async with OpenAIStandIn(valid_keys={"right-local-key"}) as local:
        config = make_config({**config_data(api, conversation={"use_selection": False}),
                              "providers": {"local": {"kind": "openai", "base_url": local.base_url,
                                                      "api_key_env": "LOCAL_API_KEY", "timeout": 2.0}},
                              "roles": {"main": "local:qwen-test", "fast": "local:qwen-test"}})
        channel = FakeChannel()
        with capture_logs() as logs:
            async with running(config, [channel], None) as daemon:
                await say(daemon, channel, "hello?")
                status = await daemon.status()
    assert [m.text for m in channel.sent] == [KEY_REFUSED]
    (warning,) = notices(logs)
    assert warning["provider"] == "local" and "LOCAL_API_KEY" in warning["fix"]
    assert [p["name"] for p in status["providers"]] == ["local"]
    assert "revoked-local-key-0123" not in repr(logs)


async def test_a_refused_key_early_in_a_fallback_chain_is_told_though_the_next_answers(
    api: AnthropicStandIn, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the first provider refuses its key and the next one answers, the user gets the answer
    and the admin the warning (once), and status names the first provider."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", GOOD_KEY)
    monkeypatch.setenv("LOCAL_API_KEY", "revoked-local-key-0123")
    async with OpenAIStandIn(valid_keys={"right-local-key"}) as local:
        config = make_config({**config_data(api, conversation={"use_selection": False}),
                              "providers": {"local": {"kind": "openai", "base_url": local.base_url,
                                                      "api_key_env": "LOCAL_API_KEY", "timeout": 2.0}},
                              "roles": {"main": ["local:qwen-test", f"anthropic:{MODEL}"]}})
        channel = FakeChannel()
        with capture_logs() as logs:
            async with running(config, [channel], None) as daemon:
                await say(daemon, channel, "hello?")
                await say(daemon, channel, "again?")
                status = await daemon.status()
    assert [m.text for m in channel.sent] == ["re: hello?", "re: again?"]
    (warning,) = notices(logs)
    assert warning["provider"] == "local"
    assert [p["name"] for p in status["providers"]] == ["local"]


def test_the_openai_sdk_is_imported_when_the_daemon_starts_not_in_the_first_call(tmp_path: Path) -> None:
    """With an OpenAI-kind provider configured, the daemon imports the openai library by itself once
    it has started, before any call: the first reply's deadline is not spent importing it."""
    script = f"""
import asyncio, sys
from bot.config import parse_config
from bot.daemon.assembly import Daemon

async def main() -> None:
    config = parse_config({{
        "providers": {{"local": {{"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}}}},
        "roles": {{"main": "local:qwen-test"}},
        "database": {{"path": {str(tmp_path / "switchboard.db")!r}}},
        "semantic": {{"enabled": "off"}},
    }}, "<test>")
    daemon = Daemon(config, [])
    task = asyncio.create_task(daemon.run())
    await asyncio.wait_for(daemon.started.wait(), 30)
    for _ in range(600):  # imported in a thread once the channels are up: no call asks for it
        if "openai" in sys.modules and hasattr(sys.modules["openai"], "AsyncOpenAI"):
            break
        await asyncio.sleep(0.1)
    print("openai loaded:", "openai" in sys.modules)
    daemon.request_stop()
    await task

asyncio.run(main())
"""
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("ANTHROPIC_", "TELEGRAM_", "DISCORD_"))}
    environ["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=environ, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "openai loaded: True" in done.stdout


# -- the channels ----------------------------------------------------------------------------------


async def test_a_revoked_telegram_token_is_told_on_the_console_and_in_status(
    api: AnthropicStandIn, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Telegram answering 401 to the bot's token turns the channel off with one warning saying where
    to put a new token, one console line, and the channel's last error in status."""
    revoked = "123456789:AAHrevokedrevokedrevokedrevokedrevo"
    async with TelegramStandIn() as tg:
        section = {"enabled": True, "base_url": tg.base_url}
        config = make_config(config_data(api, channels={"telegram": section}))
        telegram = TelegramChannel(config.channels.telegram, agent_id="main", token=revoked)
        console, output = console_channel()
        with capture_logs() as logs:
            async with running(config, [telegram, console], None) as daemon:
                await wait_until(lambda: daemon.channel_state(telegram) == "stopped")
                status = await daemon.status()
    (warning,) = notices(logs)
    assert warning["channel"] == "telegram" and "TELEGRAM_BOT_TOKEN" in warning["fix"]
    assert [e for e in logs if e["log_level"] == "error"] == []
    (line,) = console_lines(output, "TELEGRAM_BOT_TOKEN")
    assert "Telegram" in line
    (entry,) = [c for c in status["channels"] if c["provider"] == "telegram"]
    assert entry["state"] == "stopped" and "rejected the bot token" in entry["error"]
    assert "TELEGRAM_BOT_TOKEN" in entry["fix"]
    assert revoked not in repr(logs) + output.getvalue() + json.dumps(status)


async def test_a_revoked_discord_token_is_told_in_the_log_and_in_status(
    api: AnthropicStandIn, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Discord refusing the token at login (401) is one warning naming DISCORD_BOT_TOKEN and the
    Discord channel's last error in status."""
    async with DiscordStandIn(token="GOOD.TOKEN") as dc:
        dc.patch(monkeypatch)
        config = make_config(config_data(api, channels={"discord": {"enabled": True}}))
        discord = DiscordChannel(config.channels.discord, agent_id="main", token="REVOKED.SECRET",
                                 guild_ready_timeout=0.05, retry_delay=0.05)
        with capture_logs() as logs:
            async with running(config, [discord], None) as daemon:
                await wait_until(lambda: daemon.channel_state(discord) == "stopped")
                status = await daemon.status()
    (warning,) = notices(logs)
    assert warning["channel"] == "discord" and "DISCORD_BOT_TOKEN" in warning["fix"]
    (entry,) = status["channels"]
    assert "rejected the bot token" in entry["error"] and "DISCORD_BOT_TOKEN" in entry["fix"]
    assert "REVOKED.SECRET" not in repr(logs) + json.dumps(status)


async def test_a_cause_is_told_again_after_an_hour() -> None:
    """The same cause is logged once an hour at most; another cause is logged at once."""
    now = [1000.0]
    told = Misconfigurations({}, clock=lambda: now[0])
    key = Misconfiguration("provider", "anthropic", "auth", "Anthropic refused the API key (HTTP 401)",
                           "put a valid key in ANTHROPIC_API_KEY and restart", "the model key was refused")
    model = Misconfiguration("provider", "anthropic", "model", "Anthropic does not know the model 'x'",
                             "use a model Anthropic offers", "the model name is not known")
    with capture_logs() as logs:
        first = await told.report(key)
        now[0] += 3599
        again = await told.report(key)
        other = await told.report(model)
        now[0] += 2
        later = await told.report(key)
    assert (first, again, other, later) == (True, False, True, True)
    assert [e["problem"] for e in notices(logs)] == ["auth", "model", "auth"]


async def test_a_discord_token_reset_while_running_is_told_from_the_gateways_4004(
    api: AnthropicStandIn, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token reset in the Developer Portal while the bot runs: the gateway refuses the resume with
    4004, and that is told as a refused token (not a generic "closed the gateway" error)."""
    async with DiscordStandIn(token="FIRST.TOKEN") as dc:
        dc.patch(monkeypatch)
        config = make_config(config_data(api, channels={"discord": {"enabled": True}}))
        discord = DiscordChannel(config.channels.discord, agent_id="main", token="FIRST.TOKEN",
                                 guild_ready_timeout=0.05, retry_delay=0.05)
        with capture_logs() as logs:
            async with running(config, [discord], None) as daemon:
                await asyncio.wait_for(discord.ready.wait(), 5)
                dc.token = "RESET.TOKEN"
                await dc.disconnect(4000)  # resumable: discord.py resumes with the old token
                await wait_until(lambda: daemon.channel_state(discord) == "stopped")
                status = await daemon.status()
    (warning,) = notices(logs)
    assert "4004" in warning["event"] and "DISCORD_BOT_TOKEN" in warning["fix"]
    assert [e for e in logs if e["log_level"] == "error"] == []
    (entry,) = status["channels"]
    assert "rejected the bot token" in entry["error"]
