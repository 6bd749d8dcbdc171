"""Shared fixtures: a guard against real network, a clean environment, temp databases."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.config import Config, parse_config
from bot.store import Store
from tests.fakes import FakeChannel
from tests.harness import echo
from tests.standins.anthropic_api import AnthropicStandIn
from tests.standins.discord_api import DiscordStandIn
from tests.standins.telegram_api import TelegramStandIn

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _is_local(address: Any) -> bool:
    if not isinstance(address, tuple):  # unix sockets, socketpairs
        return True
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _guarded_connect(self: socket.socket, address: Any) -> None:
    if not _is_local(address):
        raise AssertionError(f"test tried to reach a non-local host: {address!r}")
    _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    if not _is_local(address):
        raise AssertionError(f"test tried to reach a non-local host: {address!r}")
    return _real_connect_ex(self, address)


@pytest.fixture(autouse=True)
def _no_real_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection to a non-loopback address fails the test."""
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded_connect_ex)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No credentials or state paths leak in from the developer's environment."""
    import os

    for name in list(os.environ):
        if name.startswith(("ANTHROPIC_", "TELEGRAM_", "DISCORD_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("PTB_TIMEDELTA", "1")


@pytest.fixture
async def api() -> AsyncIterator[AnthropicStandIn]:
    """The Messages API stand-in, answering with echoes (see `tests.harness.echo`)."""
    async with AnthropicStandIn() as standin:
        standin.default = echo
        yield standin


@pytest.fixture
def make_config(tmp_path: Path) -> Iterator[Any]:
    """Build a Config from a dict of sections, with the database in tmp_path."""

    def make(data: dict[str, Any] | None = None) -> Config:
        data = dict(data or {})
        data.setdefault("database", {"path": str(tmp_path / "switchboard.db")})
        return parse_config(data, str(tmp_path / "config.toml"))

    yield make


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Where a test daemon built by `make_config` keeps its database."""
    return tmp_path / "switchboard.db"


@pytest.fixture
async def view(db: Path) -> AsyncIterator[Store]:
    """A second connection on the test daemon's database (opened first, so it runs the migrations)."""
    async with Store.open(db) as opened:
        yield opened


@pytest.fixture
def channel() -> FakeChannel:
    return FakeChannel()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store.open(tmp_path / "switchboard.db") as opened:
        yield opened


# -- the platform stand-ins most channel tests share (a module may define its own instead) ---------


@pytest.fixture
async def tg() -> AsyncIterator[TelegramStandIn]:
    """The Telegram Bot API stand-in, as @switchboard_bot."""
    async with TelegramStandIn(bot_username="switchboard_bot") as standin:
        yield standin


@pytest.fixture
async def dc(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[DiscordStandIn]:
    """The Discord stand-in with the test guilds of tests/test_discord.py, patched into discord.py."""
    from tests.test_discord import standin_with_guilds

    async with standin_with_guilds(monkeypatch) as standin:
        yield standin


@pytest.fixture
def discord_config(
    api: AnthropicStandIn, dc: DiscordStandIn, make_config: Callable[[dict[str, Any]], Config],
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., Config]:
    """Configs with Discord on: Alice and Bob allowed, the test guild open."""
    from tests.test_discord import config_maker

    return config_maker(api, dc, make_config, monkeypatch)
