"""`switchboard init` on a terminal asks its questions and writes config.toml plus a 0600 env file;
`init --upgrade` brings an old file up to this version's keys. Run as real subprocesses, the guided
one in a pseudo-terminal (pexpect)."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pexpect
import pytest

from bot.cli.guided_setup import PLATFORMS, Answers, compose, env_file_for
from bot.config import check_startable, load_config, parse_config
from bot.store.opening import open_store
from bot.store.web_accounts import WebAccount
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.preloaded import Preloaded
from bot.testing.telegram_api import TelegramStandIn
from bot.web.auth import password_matches

ROOT = Path(__file__).resolve().parents[1]
PASTED = "7654321:AAFtoken-pasted-into-the-terminal_x9"
FROM_ENV = "sk-ant-from-the-environment-0042"
WEB_PASSWORD = "typed-at-the-guided-setup"
TIMEOUT = 30


def _environment(**extra: str) -> dict[str, str]:
    environ = dict(os.environ)  # already cleaned of secrets by conftest, XDG_STATE_HOME in tmp_path
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
    environ["TERM"] = "xterm-256color"
    # No terminal emulator answers prompt_toolkit's cursor position request here.
    environ["PROMPT_TOOLKIT_NO_CPR"] = "1"
    environ.update(extra)
    return environ


def _switchboard(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bot", *args], cwd=tmp_path, env=_environment(**env),
                          capture_output=True, text=True, timeout=120, check=False)


def _answer(child: pexpect.spawn, question: str, answer: str) -> None:
    child.expect_exact(question)
    child.send(answer + "\r")


def _guided_run(tmp_path: Path, *, web: bool = False) -> tuple[int | None, str]:
    """`switchboard init` in a pseudo-terminal: Telegram with a pasted token, the Anthropic key from
    the environment, the default model, an allowlist, the browser console (`web`: on port 8799, an
    account "ada" whose password is first mistyped once), no doctor; (exit status, what it showed)."""
    child = pexpect.spawn(sys.executable, ["-m", "bot", "init"], cwd=str(tmp_path), encoding="utf-8",
                          env=_environment(ANTHROPIC_API_KEY=FROM_ENV), dimensions=(50, 200),
                          timeout=TIMEOUT)
    transcript: list[str] = []
    child.logfile_read = _Collect(transcript)
    try:
        _answer(child, "Talk on Telegram too?", "y")
        _answer(child, "Talk on Discord too?", "n")
        _answer(child, "ANTHROPIC_API_KEY is set in this environment. Use it?", "")
        child.expect_exact("Telegram bot token")
        _answer(child, "Paste the token", PASTED)
        _answer(child, "Model for replies", "")
        child.expect_exact("Who may write to the Telegram bot in private chats?")
        _answer(child, "allowlist, pairing or open?", "")
        _answer(child, "Telegram user ids allowed", "123456789, 987654321")
        _answer(child, "Turn on the browser console?", "y" if web else "")
        if web:
            _answer(child, "Listen on HOST:PORT", "127.0.0.1:8799")
            _answer(child, "Make its first admin account now?", "")
            _answer(child, "Account name", "ada")
            _answer(child, "Password (hidden)", WEB_PASSWORD)
            _answer(child, "The password again (hidden)", WEB_PASSWORD + "x")
            child.expect_exact("The two passwords differ")
            _answer(child, "Password (hidden)", WEB_PASSWORD)
            _answer(child, "The password again (hidden)", WEB_PASSWORD)
            child.expect_exact("account ada added")
        _answer(child, "Run `switchboard doctor` now", "n")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    return child.exitstatus, "".join(transcript)


async def test_doctor_after_a_guided_setup_passes_the_key_and_names_the_refused_token(
    tmp_path: Path, preloaded: Preloaded
) -> None:
    """After a guided setup, doctor against the stand-ins of the Messages API and the Bot API (the
    file pointed at them) accepts the Anthropic key taken from the environment and names the pasted
    Telegram token, which the Bot API refuses, in one line: exit 1."""
    status, shown = await asyncio.to_thread(_guided_run, tmp_path)
    assert status == 0, shown
    async with AnthropicStandIn(valid_keys={FROM_ENV}) as api, \
            TelegramStandIn(token="1234567:AAnother-token-the-bot-has-now") as tg:
        config = tmp_path / "config.toml"
        text = config.read_text(encoding="utf-8")
        text = text.replace('# base_url = "https://api.anthropic.com"', f'base_url = "{api.base_url}"', 1)
        text = text.replace('base_url = "https://api.telegram.org/bot"', f'base_url = "{tg.base_url}"', 1)
        config.write_text(text, encoding="utf-8")
        # Each check's limit is generous: a loaded machine takes seconds to answer. Doctor runs in a
        # process of its own, forked from the session's zygote (the SDKs' imports done once).
        code, out, err = await preloaded.run(["doctor", "--timeout", "60"], cwd=tmp_path,
                                             env=_environment(ANTHROPIC_API_KEY=FROM_ENV), timeout=120)
    lines = out.splitlines()
    assert code == 1, (out, err)
    accepted = "✓ provider anthropic: key in ANTHROPIC_API_KEY accepted"
    assert any(line.startswith(accepted) for line in lines), lines
    refused = [line for line in lines if line.startswith("✗")]
    assert len(refused) == 1 and refused[0].startswith("✗ telegram: Telegram refused the token"), lines
    assert PASTED not in out and FROM_ENV not in out


def test_guided_init_writes_config_and_env_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full guided setup on a terminal (Telegram with a pasted token, the Anthropic key from the
    environment, an allowlist) writes a config that loads, names the variables and holds no secret,
    and a 0600 env file with the pasted token that the daemon's config loading reads."""
    status, shown = _guided_run(tmp_path)
    assert status == 0, shown
    assert PASTED not in shown and FROM_ENV not in shown  # hidden as typed, never echoed

    config_file, env_file = tmp_path / "config.toml", tmp_path / "switchboard.env"
    text = config_file.read_text(encoding="utf-8")
    assert PASTED not in text and FROM_ENV not in text
    data = tomllib.loads(text)
    telegram = data["channels"]["telegram"]
    assert telegram["enabled"] is True and telegram["token_env"] == "TELEGRAM_BOT_TOKEN"
    assert telegram["dm_policy"] == "allowlist" and telegram["allow_from"] == [123456789, 987654321]
    assert data["channels"]["discord"]["enabled"] is False
    assert data["anthropic"]["api_key_env"] == "ANTHROPIC_API_KEY"
    assert data["secrets"]["env_file"] == "switchboard.env"

    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    secrets = env_file.read_text(encoding="utf-8")
    assert f"TELEGRAM_BOT_TOKEN={PASTED}" in secrets.splitlines()
    assert FROM_ENV not in secrets  # taken from the environment: named, not copied
    assert "switchboard.env" in shown and "ANTHROPIC_API_KEY" in shown

    # `run`'s own checks, in a shell without the token, find it through env_file.
    check = _switchboard(tmp_path, "check-config")
    assert check.returncode == 0, check.stderr
    # And so does the config loading in this process: the token is in the environment after it.
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "placeholder")
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN")  # restored to unset when the test ends
    config = load_config(config_file)
    check_startable(config)
    assert os.environ["TELEGRAM_BOT_TOKEN"] == PASTED
    assert config.channels.telegram.allow_from == ["123456789", "987654321"]


def test_guided_init_turns_the_console_on_with_its_first_account(tmp_path: Path) -> None:
    """Asked, the guided setup turns `[web]` on at the listen address given and makes the first
    admin account as `web user add` does: in the database the config names, the password (typed
    twice, hidden) stored only as its Argon2id hash, never shown."""
    status, shown = _guided_run(tmp_path, web=True)
    assert status == 0, shown
    assert WEB_PASSWORD not in shown
    config = load_config(tmp_path / "config.toml")
    assert config.web.enabled and config.web.listen == "127.0.0.1:8799"
    assert WEB_PASSWORD not in (tmp_path / "config.toml").read_text(encoding="utf-8")

    async def accounts() -> tuple[list[WebAccount], str | None]:
        async with open_store(config) as store:
            return await store.web_accounts(), await store.web_password_hash("ada")

    listed, stored = asyncio.run(accounts())
    assert [(account.name, account.role) for account in listed] == [("ada", "admin")]
    assert stored is not None and stored.startswith("$argon2id$") and password_matches(stored, WEB_PASSWORD)
    assert "http://127.0.0.1:8799/" in shown


def test_init_without_a_terminal_copies_the_example(tmp_path: Path) -> None:
    """Without a terminal `init` asks nothing: config.toml is the documented example, no env file."""
    result = _switchboard(tmp_path, "init")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "config.toml").read_text(encoding="utf-8") == (
        ROOT / "config.toml.example").read_text(encoding="utf-8")
    assert not (tmp_path / "switchboard.env").exists()
    assert load_config(tmp_path / "config.toml").web.enabled is False  # the console stays off


def test_a_service_config_leaves_the_secrets_to_the_units_env_file() -> None:
    """For /etc/switchboard/config.toml the pasted secrets go to /etc/switchboard/env, which the
    systemd unit reads: the config names no env_file and keeps the database where the unit's state is."""
    env_path, env_key = env_file_for(Path("/etc/switchboard/config.toml"))
    assert (env_path, env_key) == (Path("/etc/switchboard/env"), None)
    answers = Answers(platforms=[PLATFORMS[1]], model="claude-haiku-5-5",
                      access={"discord": ("pairing", [])}, pasted={"DISCORD_BOT_TOKEN": "x.y.z"})
    text = compose((ROOT / "config.toml.example").read_text(encoding="utf-8"), answers, env_key, service=True)
    assert "x.y.z" not in text
    config = parse_config(tomllib.loads(text), "/etc/switchboard/config.toml")
    assert config.secrets.env_file is None
    assert config.database_path() == Path("/var/lib/switchboard/switchboard.db")
    assert config.channels.discord.enabled and config.channels.discord.dm_policy == "pairing"
    assert config.anthropic.model == "claude-haiku-5-5"


OLD_CONFIG = """\
# My bot, set up last year.
[agent]
name = "Penny"
timezone = "Europe/Berlin"
tone = "cheerful"              # this version has no such key

[anthropic]
api_key_env = "ANTHROPIC_API_KEY"
model = "claude-sonnet-5-5"
max_tokens = 1024              # longest reply, in tokens

[channels.telegram]
enabled = false
token_env = "TELEGRAM_BOT_TOKEN"

[logging]
level = "INFO"
"""


def test_upgrade_adds_new_keys_as_comments_and_names_removed_ones(tmp_path: Path) -> None:
    """`init --upgrade` on an old file adds the keys it lacks as commented lines with their example
    comment, in their section, changes no value, and names the key this version no longer knows."""
    path = tmp_path / "config.toml"
    path.write_text(OLD_CONFIG, encoding="utf-8")
    result = _switchboard(tmp_path, "init", "--upgrade")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "agent.tone" in result.stderr and "line 5" in result.stderr

    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    # A key missing from a section the file has: commented, with the example's comment, in that section.
    fast = next(i for i, line in enumerate(lines) if line.startswith("# fast_model = "))
    assert "the fast model that triages older messages" in lines[fast]
    assert lines.index("[anthropic]") < fast < lines.index("[channels.telegram]")
    # A section the file lacks: added with its keys commented out, the file still meaning the same.
    assert "[secrets]" in lines
    assert any(line.startswith("# env_file = ") for line in lines)
    assert "# timeout = 60.0" in text
    assert "[anthropic] fast_model, timeout" in result.stdout and "[secrets] env_file" in result.stdout
    assert (tmp_path / "config.toml.bak").read_text(encoding="utf-8") == OLD_CONFIG
    old, new = tomllib.loads(OLD_CONFIG), tomllib.loads(text)
    assert _without_empty_tables(new) == old  # only comments and empty tables were added

    # Once the removed key is gone the upgraded file loads, with every old value kept.
    path.write_text(text.replace('tone = "cheerful"              # this version has no such key\n', ""),
                    encoding="utf-8")
    config = load_config(path)
    assert config.agent.name == "Penny" and config.agent.timezone == "Europe/Berlin"
    again = _switchboard(tmp_path, "init", "--upgrade")
    assert again.returncode == 0, again.stderr
    assert "up to date" in again.stdout


def test_upgrade_without_a_file_points_to_init(tmp_path: Path) -> None:
    """`init --upgrade` with no config file says so in one line and exits 2."""
    result = _switchboard(tmp_path, "init", "--upgrade")
    assert result.returncode == 2
    assert "switchboard init" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def _without_empty_tables(data: dict[str, object]) -> dict[str, object]:
    kept = {key: _without_empty_tables(value) if isinstance(value, dict) else value
            for key, value in data.items()}
    return {key: value for key, value in kept.items() if value != {}}


class _Collect:
    """A file-like sink for pexpect's log: everything the terminal showed."""

    def __init__(self, into: list[str]) -> None:
        self._into = into

    def write(self, text: str) -> None:
        self._into.append(text)

    def flush(self) -> None:
        pass
