"""`switchboard doctor`'s lines about the browser console (`[web]`): the command run in-process
against a real SQLite file, the Messages API stand-in, real sockets on 127.0.0.1 and a real
daemon serving the console."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bot.cli.doctor_web import (
    WEB_PACKAGE,
    check_accounts,
    public_url_finding,
    static_finding,
    trust_forwarded_finding,
)
from bot.config import parse_config
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.fake_channel import FakeChannel
from tests.test_doctor import line_of, toml
from tests.test_replay import _run_cli
from tests.test_web import console, free_port


def _write(tmp_path: Path, api: AnthropicStandIn, db: Path, **web_keys: Any) -> Path:
    data = {"anthropic": {"base_url": api.base_url, "timeout": 5.0}, "database": {"path": str(db)},
            "semantic": {"enabled": "off"}, "web": {"enabled": True, **web_keys}}
    path = tmp_path / "config.toml"
    path.write_text(toml(data), encoding="utf-8")
    return path


async def _doctor(config: Path) -> tuple[int, list[str]]:
    code, out, err = await asyncio.to_thread(_run_cli, ["doctor", "--config", str(config)])
    assert err == ""
    return code, out.splitlines()


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-doctor-web")


async def test_a_console_nobody_can_log_in_to_on_an_open_address(
    tmp_path: Path, api: AnthropicStandIn, db: Path
) -> None:
    """Enabled on 0.0.0.0 with trust_forwarded and no account: the port is free (✓), but no admin
    account fails with the command that makes one, and the address without https and the forwarded
    header without a proxy are warned about; the static files are there. Exit 1."""
    async with Store.open(db) as store:
        assert await store.add_web_account("bob", "hash", now=1.0, role="chat")  # chat-only: no admin
    port = free_port()
    config = _write(tmp_path, api, db, listen=f"0.0.0.0:{port}", trust_forwarded=True)
    code, lines = await _doctor(config)
    assert code == 1, lines
    assert line_of(lines, "web listen") == (
        f"✓ web listen: 0.0.0.0:{port} is free (the daemon listens there once it starts)")
    accounts = line_of(lines, "web accounts")
    assert accounts.startswith("✗ web accounts: no admin account")
    assert f"`switchboard web user add NAME --config {config}`" in accounts
    assert line_of(lines, "web public_url").startswith(
        f"– web public_url: listens on 0.0.0.0:{port}, not loopback")
    assert line_of(lines, "web trust_forwarded").startswith("– web trust_forwarded: on, but 0.0.0.0:")
    assert line_of(lines, "web files").startswith("✓ web files: ")
    assert [line for line in lines if line.startswith("✗")] == [accounts]


async def test_a_console_the_running_daemon_serves_passes(
    make_config: Any, api: AnthropicStandIn, channel: FakeChannel, db: Path, tmp_path: Path
) -> None:
    """With the daemon serving the console on its port (bound, so not free) and an admin account,
    the listen line says the daemon serves it there and the accounts line names the account."""
    async with console(make_config, api, channel, db) as (daemon, _):
        config = _write(tmp_path, api, db, listen=daemon.config.web.listen)
        _, lines = await _doctor(config)
    assert line_of(lines, "web listen") == (
        f"✓ web listen: {daemon.config.web.listen}: the running daemon serves the console there")
    assert line_of(lines, "web accounts") == "✓ web accounts: 1 admin account: ada"
    assert line_of(lines, "web public_url").startswith("✓ web public_url: http://127.0.0.1:")
    assert not any(line.startswith("✗ web") for line in lines), lines


async def test_a_port_another_program_holds_fails(tmp_path: Path, api: AnthropicStandIn, db: Path) -> None:
    """Another HTTP server on the console's port (not a Switchboard console): the listen line fails
    and says how to find it."""
    async def login(request: web.Request) -> web.Response:
        return web.Response(text="someone else")

    app = web.Application()
    app.router.add_get("/login", login)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        code, lines = await _doctor(_write(tmp_path, api, db, listen=f"127.0.0.1:{port}"))
    finally:
        await runner.cleanup()
    assert code == 1
    assert line_of(lines, "web listen").startswith(
        f"✗ web listen: 127.0.0.1:{port} is in use by another program")


def test_a_missing_static_file_is_named(tmp_path: Path) -> None:
    """A copy of the console's package lacking one file a template loads: that file is named."""
    copy = tmp_path / "web"
    shutil.copytree(WEB_PACKAGE / "templates", copy / "templates")
    shutil.copytree(WEB_PACKAGE / "static", copy / "static")
    assert static_finding(copy).ok
    (copy / "static" / "chat.js").unlink()
    found = static_finding(copy)
    assert found.ok is False and found.detail.endswith(": chat.js")


def test_https_behind_a_proxy_passes_and_http_elsewhere_is_warned() -> None:
    """On loopback with an https public_url both the address and trust_forwarded pass; an http
    public_url on another host is warned about even on loopback."""
    proxied = parse_config({"web": {"enabled": True, "public_url": "https://bot.example.com/console",
                                    "trust_forwarded": True}}, "<test>")
    assert public_url_finding(proxied).ok and trust_forwarded_finding(proxied).ok
    plain = parse_config({"web": {"enabled": True, "public_url": "http://bot.example.com/"}}, "<test>")
    warned = public_url_finding(plain)
    assert warned.ok is None and "http://bot.example.com/ is not https" in warned.detail


async def test_the_admin_accounts_are_read_on_either_backend(store: Store, make_config: Any) -> None:
    """On SQLite and on PostgreSQL the accounts line reads the store's accounts without the store:
    none fails, a chat-only account does not count, an admin does."""
    config = make_config({"web": {"enabled": True}})
    assert (await check_accounts(config)).ok is False
    assert await store.add_web_account("bob", "hash", now=1.0, role="chat")
    assert (await check_accounts(config)).ok is False
    assert await store.add_web_account("ada", "hash", now=1.0)
    found = await check_accounts(config)
    assert found.ok and found.detail == "1 admin account: ada"
