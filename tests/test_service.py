"""`switchboard run` as systemd runs it: a process of its own (forked from the session's zygote,
bot/testing/preloaded.py) talking sd_notify to a test socket, reloaded by SIGHUP, stopped by
SIGTERM, with real Telegram and Anthropic clients against local stand-ins."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest, Response, Text
from bot.testing.preloaded import Preloaded
from bot.testing.telegram_api import TelegramStandIn, private_chat, user
from tests.harness import FAST, MODEL, last_user_line

ROOT = Path(__file__).resolve().parents[1]
UNIT = ROOT / "systemd" / "switchboard.service"
# Secret-shaped values, so that both the known-value and the shape redaction are exercised.
API_KEY = "sk-ant-api03-service-test-Zq8xW2vR7tY1uI3oP5aS"
BOT_TOKEN = "7123456789:AAHservicetestTokenValue_0123456789abcdef"
ADA = user(42, "Ada", "ada")
WATCHDOG_USEC = 200_000


def unit_setting(name: str) -> str:
    """One `Name=value` of the shipped unit file."""
    match = re.search(rf"^{name}=(.*)$", UNIT.read_text(encoding="utf-8"), re.MULTILINE)
    assert match, f"{name}= missing from {UNIT}"
    return match.group(1).strip()


def config_text(api: AnthropicStandIn, tg: TelegramStandIn, db: Path, history_limit: int) -> str:
    return f"""
[database]
path = "{db}"

[anthropic]
base_url = "{api.base_url}"
model = "{MODEL}"
fast_model = "{FAST}"
timeout = 5.0
max_retries = 1

[conversation]
history_limit = {history_limit}
selection_timeout = 1.0

[router]
shutdown_grace = 5.0

[semantic]
enabled = "off"  # a second and 125 MB per start; what these tests watch is the service

[logging]
level = "DEBUG"
format = "json"

[channels.console]
enabled = false

[channels.telegram]
enabled = true
base_url = "{tg.base_url}"
allow_from = [42]
"""


def slow_echo(request: RecordedRequest) -> Response:
    """Replies take a moment, so turns are still running when SIGTERM arrives."""
    if request.model == FAST:
        return Text('{"relevant": []}')
    return Text(f"re: {last_user_line(request)}", delay=0.3)


class ServiceManager:
    """The part of systemd a Type=notify service talks to: a datagram socket read continuously, as
    systemd reads it. A thread of its own reads it, so a busy test loop never lets the watchdog's
    pings fill the socket's short queue (10 datagrams on Linux) and crowd out STOPPING."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.05)  # how often the reader looks whether it should stop
        self.received: list[dict[str, str]] = []
        self._taken = 0  # datagrams before this one were looked at by a `wait_for` already
        self._closing = threading.Event()
        self._reader = threading.Thread(target=self._read, name="notify socket", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._arrived = asyncio.Event()

    async def __aenter__(self) -> ServiceManager:
        self._loop = asyncio.get_running_loop()
        self._reader.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._closing.set()
        await asyncio.to_thread(self._reader.join)
        self.sock.close()

    def _read(self) -> None:
        assert self._loop is not None
        while not self._closing.is_set():
            try:
                raw = self.sock.recv(4096).decode()
            except TimeoutError:
                continue
            fields = dict(line.split("=", 1) for line in raw.splitlines())
            self._loop.call_soon_threadsafe(self._add, fields)

    def _add(self, fields: dict[str, str]) -> None:
        self.received.append(fields)
        self._arrived.set()

    async def wait_for(self, key: str, value: str = "1", timeout: float = 30.0) -> dict[str, str]:
        """The next datagram, after those an earlier call looked at, that sets `key` to `value`."""
        async with asyncio.timeout(timeout):
            while True:
                while self._taken < len(self.received):
                    self._taken += 1
                    if self.received[self._taken - 1].get(key) == value:
                        return self.received[self._taken - 1]
                self._arrived.clear()
                await self._arrived.wait()


@pytest.fixture
async def tg() -> AsyncIterator[TelegramStandIn]:
    async with TelegramStandIn(token=BOT_TOKEN, bot_username="switchboard_bot") as standin:
        yield standin


@pytest.fixture
async def manager(tmp_path: Path) -> AsyncIterator[ServiceManager]:
    async with ServiceManager(tmp_path / "notify.sock") as reading:
        yield reading


def stored_requests(db: Path) -> int:
    """User messages the running daemon has stored (read beside it, as WAL allows)."""
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM messages WHERE role = 'user'").fetchone()[0])


async def test_service_notifies_reloads_on_sighup_and_stops_on_sigterm_losing_nothing(
    tmp_path: Path, api: AnthropicStandIn, tg: TelegramStandIn, manager: ServiceManager,
    preloaded: Preloaded,
) -> None:
    """READY=1 once Telegram is connected, WATCHDOG=1 pings, SIGHUP applies an edited config
    (RELOADING=1 then READY=1), SIGTERM with turns in flight exits 0 within TimeoutStopSec with
    every message stored and answered, and no secret appears anywhere in the logs."""
    api.default = slow_echo
    db = tmp_path / "state" / "switchboard.db"
    config = tmp_path / "config.toml"
    config.write_text(config_text(api, tg, db, history_limit=0), encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "ANTHROPIC_API_KEY": API_KEY,
        "TELEGRAM_BOT_TOKEN": BOT_TOKEN,
        "NOTIFY_SOCKET": str(manager.path),
        "WATCHDOG_USEC": str(WATCHDOG_USEC),
    }
    log_path = tmp_path / "daemon.log"
    # The daemon in a process of its own, forked from the session's zygote (its imports done once).
    proc = await preloaded.spawn(["run", "--config", str(config)], cwd=tmp_path, env=env, log=log_path)
    try:
        ready = await manager.wait_for("READY")
        assert ready["STATUS"].startswith("telegram connected")
        await manager.wait_for("WATCHDOG")

        chat = private_chat(ADA)
        tg.push_message(chat, ADA, "first")
        await tg.wait_for(lambda: len(tg.sent) == 1, timeout=30)

        # An admin edits the file and runs `systemctl reload` (ExecReload sends SIGHUP).
        config.write_text(config_text(api, tg, db, history_limit=1), encoding="utf-8")
        proc.send_signal(signal.SIGHUP)
        await manager.wait_for("RELOADING")
        await manager.wait_for("READY")
        code, out, err = await preloaded.run(["status", "--config", str(config), "--json"],
                                             cwd=tmp_path, env=env)
        assert code == 0, err
        answer = json.loads(out)
        assert answer["channels"] == [
            {"provider": "telegram", "state": "connected", "error": None, "restarts": 0}]
        assert answer["last_reload"]["reloaded"] is True
        assert answer["last_reload"]["changed"] == ["conversation"]

        texts = [f"burst {i}" for i in range(4)]
        for text in texts:
            tg.push_message(chat, ADA, text)
        # SIGTERM once the burst is stored and its first reply is being written.
        await tg.wait_for(lambda: stored_requests(db) == 5 and len(api.requests_for(MODEL)) >= 2,
                          timeout=15)
        stop_timeout = float(unit_setting("TimeoutStopSec"))
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), stop_timeout)
        took = time.monotonic() - started
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    # The daemon sent STOPPING before it exited; the reader may still be taking it off the socket.
    stopping = await manager.wait_for("STOPPING")
    logs = log_path.read_text(encoding="utf-8")
    assert code == 0, logs[-3000:]
    assert took < stop_timeout
    assert stopping["STATUS"] == "stopping"

    async with Store.open(db) as store:
        (session,) = await store.list_sessions()
        history = await store.history(session.key, 100)
        snapshots = await store.snapshots(session.key)
    asked = [m.text for m in history if m.role == "user"]
    answered = [m.text for m in history if m.role == "assistant"]
    assert asked == ["first", *texts]
    assert sorted(answered) == sorted(f"re: {t}" for t in asked)
    assert sorted(m.visible_text for m in tg.sent) == sorted(answered)
    # The reload applied from the next turn: the first turn had no limit, later ones a limit of 1.
    assert [s.snapshot["history_limit"] for s in snapshots][:2] == [None, 1]

    lines = [json.loads(line) for line in logs.splitlines() if line.strip()]
    assert {line["event"] for line in lines} >= {"started", "config reloaded", "stopping", "stopped"}
    turns = [line for line in lines if line["event"] == "turn"]
    assert len(turns) == 5
    for line in turns:
        assert line["session_key"] == session.key and line["channel"] == "telegram"
        assert line["model"] == MODEL
        for field in ("queue_ms", "context_ms", "triage_ms", "model_ms", "send_ms", "total_ms",
                      "tokens_in", "tokens_out", "context_messages", "triage"):
            assert field in line, field
    # The secrets were on the wire (the stand-ins checked them), and in no log line.
    assert all(r.headers.get("authorization") == f"Bearer {API_KEY}" for r in api.requests)
    assert tg.calls_of("getMe")
    for secret in (API_KEY, BOT_TOKEN, BOT_TOKEN.split(":")[1], "Bearer"):
        assert secret not in logs, f"{secret[:12]}… leaked into the logs"
    assert "authorization" not in logs.lower()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed (Debian: systemd); see docs/operations.md")
def test_the_unit_file_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    """`systemd-analyze verify` accepts the shipped unit once its ExecStart points at an installed binary."""
    unit = tmp_path / "switchboard.service"
    binary = Path(sys.executable).with_name("switchboard")
    assert binary.exists(), "the switchboard script is installed next to the test's Python"
    unit.write_text(UNIT.read_text(encoding="utf-8").replace(
        "/opt/switchboard/.venv/bin/switchboard", str(binary)), encoding="utf-8")
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


def test_the_unit_file_has_what_a_supervised_hardened_service_needs() -> None:
    """Type=notify with a watchdog, restart on failure, SIGHUP reload, its own user and state directory,
    secrets from an environment file, and the sandboxing docs/operations.md promises."""
    expected: dict[str, Any] = {
        "Type": "notify", "Restart": "on-failure", "ExecReload": "/bin/kill -HUP $MAINPID",
        "User": "switchboard", "StateDirectory": "switchboard", "NoNewPrivileges": "yes",
        "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
        "ReadWritePaths": "/var/lib/switchboard",
    }
    for name, value in expected.items():
        assert unit_setting(name) == value, name
    assert int(unit_setting("WatchdogSec")) > 0
    assert unit_setting("EnvironmentFile").lstrip("-") == "/etc/switchboard/env"
