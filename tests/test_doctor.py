"""`switchboard doctor` against the stand-ins: the real SDKs and platform libraries over 127.0.0.1,
real SQLite files and a real MCP server, the command run as the CLI runs it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import telegram

from bot.cli.doctor_host import check_database, service_finding
from bot.config import load_config
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.discord_api import DiscordStandIn
from bot.testing.fake_channel import FakeChannel
from bot.testing.mcp_calc import server_entry
from bot.testing.openai_api import OpenAIStandIn
from bot.testing.telegram_api import TelegramStandIn, private_chat, user
from tests.harness import FAST, MODEL, running, switchboard_cli
from tests.test_replay import _run_cli

KEY = "sk-ant-doctor-test-key"
TG_TOKEN = "123456:DOCTOR-TEST-TOKEN"
DC_TOKEN = "DOCTOR.TEST.TOKEN"
SECRETS = (KEY, TG_TOKEN, DC_TOKEN)
Write = Callable[..., Path]


def toml(data: dict[str, Any], prefix: str = "") -> str:
    """A small TOML writer: scalars, lists of scalars, nested tables and arrays of tables."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(value(item) for item in v) + "]"
        return json.dumps(v) if isinstance(v, str) else repr(v)

    def is_tables(v: Any) -> bool:
        return isinstance(v, list) and bool(v) and all(isinstance(item, dict) for item in v)

    lines = [f"{k} = {value(v)}" for k, v in data.items() if not isinstance(v, dict) and not is_tables(v)]
    for key, sub in data.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(sub, dict):
            lines += [f"[{name}]", toml(sub, name)]
        elif is_tables(sub):
            for item in sub:
                lines += [f"[[{name}]]", toml(item, name)]
    return "\n".join(lines) + "\n"


@pytest.fixture
async def api() -> AsyncIterator[AnthropicStandIn]:
    async with AnthropicStandIn(valid_keys={KEY}, models={MODEL, FAST, "test-other"}) as standin:
        yield standin


@pytest.fixture
async def tg() -> AsyncIterator[TelegramStandIn]:
    async with TelegramStandIn(token=TG_TOKEN, bot_username="doctor_bot") as standin:
        yield standin


@pytest.fixture
async def dc(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[DiscordStandIn]:
    async with DiscordStandIn(token=DC_TOKEN, bot_name="doctorbot") as standin:
        standin.patch(monkeypatch)
        yield standin


@pytest.fixture
async def database(tmp_path: Path) -> Path:
    """A real database file, created and migrated as the daemon does."""
    path = tmp_path / "switchboard.db"
    async with Store.open(path):
        pass
    return path


@pytest.fixture
def write(tmp_path: Path, api: AnthropicStandIn, database: Path, monkeypatch: pytest.MonkeyPatch) -> Write:
    """Write config.toml (every check has something to check) with the secrets in the environment;
    keyword arguments replace or add whole sections."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TG_TOKEN)
    monkeypatch.setenv("DISCORD_BOT_TOKEN", DC_TOKEN)

    def write_config(tg: TelegramStandIn | None = None, **sections: Any) -> Path:
        data: dict[str, Any] = {
            "anthropic": {"base_url": api.base_url, "model": MODEL, "fast_model": FAST, "timeout": 5.0},
            "database": {"path": str(database)},
            "semantic": {"enabled": "auto"},
            "channels": {"telegram": {"enabled": tg is not None, **({"base_url": tg.base_url} if tg else {})},
                         "discord": {"enabled": True}},
        }
        data.update(sections)
        path = tmp_path / "config.toml"
        path.write_text(toml(data), encoding="utf-8")
        return path

    return write_config


_run = _run_cli  # the CLI in this process, its exit code and both streams


async def doctor(config: Path, *extra: str) -> tuple[int, list[str]]:
    """`switchboard doctor --config PATH` in-process (its own event loop, in a thread, as `main`
    runs it): the exit status and the lines printed; nothing on stderr, no secret anywhere."""
    code, out, err = await asyncio.to_thread(_run, ["doctor", "--config", str(config), *extra])
    assert err == ""
    assert not any(secret in out for secret in SECRETS)
    return code, out.splitlines()


def line_of(lines: list[str], label: str) -> str:
    (found,) = [line for line in lines if line[2:].startswith(f"{label}:")]
    return found


def failures(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("✗")]


async def test_all_good(write: Write, tg: TelegramStandIn, dc: DiscordStandIn, api: AnthropicStandIn) -> None:
    """With every key, token, model and server good, every line is a ✓ (only what this machine lacks,
    systemd and a running daemon, is marked not applicable) and the exit status is 0."""
    mcp = [server_entry("calc", tools=["add"])]
    code, lines = await doctor(write(tg, mcp_servers=mcp))
    assert code == 0, lines
    assert lines[-1] == "all checks passed"
    checks = lines[:-1]
    assert [line[0] for line in checks if line[2:].split(":")[0] not in ("daemon", "service")] == ["✓"] * 8
    assert line_of(lines, "daemon").startswith("– daemon: not running")
    assert line_of(lines, "provider anthropic") == (
        f"✓ provider anthropic: key in ANTHROPIC_API_KEY accepted; 2 models known: {MODEL}, {FAST}")
    assert line_of(lines, "telegram") == "✓ telegram: @doctor_bot answers (getMe)"
    assert line_of(lines, "discord") == (
        "✓ discord: doctorbot (id 9000) logs in; Message Content Intent enabled")
    assert line_of(lines, "mcp calc") == "✓ mcp calc: starts; 1 tool: add"
    assert "schema" in line_of(lines, "database") and "(current)" in line_of(lines, "database")
    assert line_of(lines, "semantic recall").startswith("✓ semantic recall: weights present")
    assert line_of(lines, "clock").startswith("✓ clock: within 1 s of http://127.0.0.1:")
    assert sorted(api.model_lookups) == [f"/v1/models/{FAST}", f"/v1/models/{MODEL}"]
    assert api.count == 0  # no message was generated: nothing spent
    assert [call.method for call in tg.calls] == ["getMe"]
    assert not dc.identifies  # a REST login only: no gateway session beside the daemon's


async def test_a_refused_key_is_one_line_with_the_fix(
    write: Write, tg: TelegramStandIn, dc: DiscordStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key the API answers 401 is named in one ✗ line saying where to put a good one; exit 1."""
    path = write(tg)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-revoked-key")
    code, lines = await doctor(path)
    assert code == 1
    assert failures(lines) == [
        "✗ provider anthropic: the key in ANTHROPIC_API_KEY was refused (HTTP 401 authentication_error: "
        "invalid x-api-key) — put a valid key in ANTHROPIC_API_KEY (console.anthropic.com → Settings → "
        "API keys)"]
    assert lines[-1] == "1 problem found"
    assert "sk-ant-revoked-key" not in "\n".join(lines)


async def test_a_revoked_telegram_token_is_one_line_with_the_fix(
    write: Write, tg: TelegramStandIn, dc: DiscordStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bot token Telegram answers 401 (getMe) is named in one ✗ line pointing at @BotFather; exit 1."""
    path = write(tg)
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123456:REVOKED")
    code, lines = await doctor(path)
    assert code == 1
    assert failures(lines) == [
        "✗ telegram: Telegram refused the token in TELEGRAM_BOT_TOKEN (revoked, or mistyped) "
        "— get the bot's current token from @BotFather (/mybots → API Token) and export it in "
        "TELEGRAM_BOT_TOKEN"]
    assert "REVOKED" not in "\n".join(lines)


async def test_an_unknown_model_is_one_line_naming_the_key_and_the_known_models(
    write: Write, dc: DiscordStandIn, api: AnthropicStandIn
) -> None:
    """A model the Models API answers 404 for is named with the key that sets it and the models the
    key can use; the other models still check out; exit 1."""
    code, lines = await doctor(write(anthropic={
        "base_url": api.base_url, "model": "test-retired", "fast_model": FAST, "timeout": 5.0}))
    assert code == 1
    assert failures(lines) == [
        "✗ provider anthropic: model test-retired (set in anthropic.model) unknown to "
        f"{api.base_url} (HTTP 404 not_found_error) — set a model id this key can use: {FAST}, "
        f"{MODEL}, test-other"]


async def test_discord_bad_token_and_missing_intent(write: Write, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Discord token refused at login, and one whose application lacks the Message Content intent,
    are each one ✗ line saying what to do in the Developer Portal."""
    async with DiscordStandIn(token=DC_TOKEN, message_content_intent=False) as dc:
        dc.patch(monkeypatch)
        path = write()
        code, lines = await doctor(path)
        assert code == 1
        assert failures(lines) == [
            "✗ discord: switchboard (id 9000) logs in, but Message Content Intent is off for it (Discord "
            "then closes the gateway with 4014) — Developer Portal → your application → Bot → Privileged "
            "Gateway Intents: turn on Message Content Intent"]
        monkeypatch.setenv("DISCORD_BOT_TOKEN", "RESET.OLD.TOKEN")
        code, lines = await doctor(path)
    assert code == 1
    assert failures(lines) == [
        "✗ discord: Discord refused the token in DISCORD_BOT_TOKEN (401 Unauthorized: reset, or mistyped) "
        "— Developer Portal → your application → Bot → Reset Token, and export it in DISCORD_BOT_TOKEN"]


async def test_telegram_webhook_state(
    write: Write, tg: TelegramStandIn, dc: DiscordStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In webhook mode doctor reads getWebhookInfo: no webhook yet is fine while no daemon runs;
    Telegram's recent failed delivery to the configured URL is a ✗ with what to look at."""
    monkeypatch.setenv("WEBHOOK_SECRET", "s3cret-value")
    url = "http://127.0.0.1:9/hook"  # the discard port: nothing listens
    webhook = {"enabled": True, "base_url": tg.base_url, "mode": "webhook", "webhook_url": url,
               "webhook_listen": "127.0.0.1:8443", "webhook_secret_env": "WEBHOOK_SECRET"}
    path = write(channels={"telegram": webhook, "discord": {"enabled": False}})
    code, lines = await doctor(path)
    assert code == 0, lines
    assert line_of(lines, "telegram") == (
        f"✓ telegram: @doctor_bot answers (getMe); no webhook set yet (the daemon sets {url} when it starts)")

    async with telegram.Bot(TG_TOKEN, base_url=tg.base_url) as bot:
        await bot.set_webhook(url, secret_token="s3cret-value")
    tg.webhook_sender.tries, tg.webhook_sender.first_delay = 1, 0.0
    assert await tg.delivered(tg.push_message(private_chat(user(7)), user(7), "hello")) is None
    code, lines = await doctor(path)
    assert code == 1
    (line,) = failures(lines)
    assert line.startswith(
        f"✗ telegram: @doctor_bot answers (getMe); Telegram's last delivery to {url} failed ")
    assert line.endswith(
        "s ago (Connection refused); 1 update waiting — make http://127.0.0.1:9/hook reach "
        "channels.telegram.webhook_listen (127.0.0.1:8443): proxy, TLS certificate, firewall")
    assert "s3cret-value" not in "\n".join(lines)


async def test_each_check_has_a_timeout_and_they_run_at_once(
    write: Write, tg: TelegramStandIn, dc: DiscordStandIn
) -> None:
    """A server that never answers costs its check's timeout, not the whole run (which ends while
    that request still hangs); the line says so, and the other checks answer as usual."""
    hanging = tg.hold_next("getMe")  # never released: Telegram never answers this one
    code, lines = await doctor(write(tg), "--timeout", "5")
    assert not hanging.is_set()
    assert code == 1
    assert failures(lines) == [
        "✗ telegram: no answer within 5 s — check the network (or allow longer: --timeout)"]


async def test_the_running_daemons_view(write: Write, dc: DiscordStandIn, database: Path) -> None:
    """With a daemon running on the database, doctor shows it and each channel's state from its
    control socket."""
    path = write(semantic={"enabled": "off"})
    channel = FakeChannel()
    async with running(load_config(path), [channel], None):
        code, lines = await doctor(path)
    assert code == 0, lines
    assert line_of(lines, "daemon").startswith("✓ daemon: running (pid ")
    assert line_of(lines, "daemon's fake") == "✓ daemon's fake: connected"


async def test_a_channel_reconnecting_is_a_warning_with_its_reason(
    write: Write, dc: DiscordStandIn, database: Path
) -> None:
    """A channel whose platform stopped answering (it retries) is a warning line saying why, not a
    pass and not a failure."""
    path = write(semantic={"enabled": "off"})
    channel = FakeChannel()
    async with running(load_config(path), [channel], None):
        channel.trouble = "ConnectError: [Errno 111] Connection refused"  # as the Telegram poller sets it
        code, lines = await doctor(path)
    assert code == 0, lines
    assert line_of(lines, "daemon's fake") == (
        "– daemon's fake: reconnecting (ConnectError: [Errno 111] Connection refused) — it retries by "
        "itself; if it stays so, the line for its token below and the log say why")


async def test_an_openai_provider_without_a_model_list(
    write: Write, dc: DiscordStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OpenAI-compatible URL that answers no /models (a base_url without /v1, say) is one ✗ line."""
    async with OpenAIStandIn() as local:
        path = write(providers={"local": {"kind": "openai", "base_url": f"{local.base_url}/v1"}},
                     roles={"main": ["local:qwen3", "anthropic:test-model"]})
        code, lines = await doctor(path)
    assert code == 1
    assert failures(lines) == [
        f"✗ provider local: no model list at {local.base_url}/v1/models (HTTP 404) — check "
        "providers.local.base_url (OpenAI-compatible servers answer at …/v1/models)"]


async def test_a_config_that_does_not_load_exits_2(tmp_path: Path) -> None:
    """An invalid file is the one line `check-config` gives, and exit 2, from the real command."""
    (tmp_path / "config.toml").write_text("[conversation]\nlookbak_count = 5\n", encoding="utf-8")
    code, out, _ = await switchboard_cli(tmp_path, "doctor")
    assert code == 2
    first, last = out.splitlines()
    assert first.startswith(
        "✗ config: config.toml: conversation.lookbak_count: unknown key; expected one of:")
    assert last == "1 problem found"


async def test_a_bot_token_variable_unset_exits_2_after_every_other_check(
    write: Write, tg: TelegramStandIn, dc: DiscordStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file that loads but that `run` would refuse (a token's variable unset) is a config problem,
    exit 2, and the other checks still run."""
    path = write(tg)
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN")
    code, lines = await doctor(path)
    assert code == 2
    assert lines[0].startswith("✗ config: ") and "TELEGRAM_BOT_TOKEN" in lines[0]
    assert line_of(lines, "provider anthropic").startswith("✓")


async def test_database_findings(tmp_path: Path, database: Path) -> None:
    """The database line: a file not yet made, one others can read, a newer schema, a damaged file."""
    config = load_config(_plain_config(tmp_path, tmp_path / "new" / "switchboard.db"))
    fresh = await check_database(config, daemon_running=False)
    assert fresh.ok and "none yet" in fresh.detail

    config = load_config(_plain_config(tmp_path, database))
    os.chmod(database, 0o644)
    shared = await check_database(config, daemon_running=False)
    assert (shared.ok, shared.fix) == (False, f"chmod 600 {database}")
    os.chmod(database, 0o600)
    with contextlib.closing(sqlite3.connect(database)) as conn, conn:
        conn.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (9999, 0)")
    newer = await check_database(config, daemon_running=False)
    assert newer.ok is False and "newer than this Switchboard" in newer.detail

    _overwrite(database, b"not a database, " * 512)
    damaged = await check_database(config, daemon_running=False)
    assert damaged.ok is False and "is damaged" in damaged.detail and "backup" in damaged.fix


def _overwrite(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def _plain_config(tmp_path: Path, database: Path) -> Path:
    path = tmp_path / "plain.toml"
    path.write_text(toml({"database": {"path": str(database)}}), encoding="utf-8")
    return path


async def test_the_models_api_standin_answers_the_sdk_as_the_api_does(api: AnthropicStandIn) -> None:
    """The stand-in's Models API, read by the real SDK: a page of the known models, a known model
    retrieved, 404 not_found_error for another (and for a message to it), 401 for a wrong key."""
    import anthropic

    async with anthropic.AsyncAnthropic(api_key=KEY, base_url=api.base_url, max_retries=0) as client:
        page = await client.models.list(limit=2)
        assert ([m.id for m in page.data], page.has_more) == ([FAST, MODEL], True)
        assert (await client.models.retrieve(MODEL)).id == MODEL
        with pytest.raises(anthropic.NotFoundError) as missing:
            await client.models.retrieve("test-gone")
        assert (missing.value.type, missing.value.api_message) == ("not_found_error", "model: test-gone")
        with pytest.raises(anthropic.NotFoundError):
            await client.messages.create(model="test-gone", max_tokens=10,
                                         messages=[{"role": "user", "content": "hi"}])
    async with anthropic.AsyncAnthropic(api_key="wrong", base_url=api.base_url, max_retries=0) as client:
        with pytest.raises(anthropic.AuthenticationError):
            await client.models.list()


def test_service_states() -> None:
    """What `systemctl show` says of the unit becomes one line: missing is not a failure, failed is."""
    missing = service_finding({"LoadState": "not-found", "ActiveState": "inactive"})
    assert missing.ok is None and "not installed" in missing.detail
    up = service_finding({"LoadState": "loaded", "ActiveState": "active", "SubState": "running",
                          "UnitFileState": "enabled"})
    assert (up.ok, up.detail) == (True, "switchboard.service active (running), enabled")
    down = service_finding({"LoadState": "loaded", "ActiveState": "failed", "SubState": "failed",
                            "UnitFileState": "enabled", "Result": "exit-code"})
    assert down.ok is False and "exit-code" in down.detail and "journalctl" in down.fix
