"""Shared fixtures: a guard against real network, a clean environment, temp databases."""

from __future__ import annotations

import io
import ipaddress
import logging
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from bot.config import Config, parse_config
from bot.ranking.encode_threads import single_threaded_blas
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.discord_api import DiscordStandIn
from bot.testing.fake_channel import FakeChannel
from bot.testing.postgres import PostgresServer
from bot.testing.preloaded import Preloaded
from bot.testing.synapse import SynapseServer
from bot.testing.telegram_api import TelegramStandIn
from tests.harness import close_zygote, echo, zygote

# One BLAS thread, as the daemon runs its encoders: set here, before any test module imports numpy
# (tests/test_db_copy.py does at collection), since the first import fixes OpenBLAS's thread count.
# With a thread a core, the threads spin waiting for cores the other worker keeps busy: beside two
# busy loops, search by meaning (tests/test_tool_privacy.py) took 104 s instead of 13 s.
single_threaded_blas()

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
def _logging_kept() -> Iterator[None]:
    """The CLI (doctor, run, history, ...) configures logging for its whole process; a test that runs
    it in-process would otherwise leave the next test on this worker logging somewhere else."""
    saved_structlog = structlog.get_config()
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    yield
    structlog.configure(**saved_structlog)
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved_handlers:
        root.addHandler(handler)
    root.setLevel(saved_level)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No credentials or state paths leak in from the developer's environment."""
    import os

    for name in list(os.environ):
        if name.startswith(("ANTHROPIC_", "TELEGRAM_", "DISCORD_", "SLACK_", "MATRIX_")):
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
def make_config(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Build a Config from a dict of sections, with the database in tmp_path; in a test that also
    uses `store`, the database that store is on (the SQLite file, or its PostgreSQL database)."""
    uses_store = "store_backend" in request.fixturenames
    backend = request.getfixturevalue("store_backend") if uses_store else "sqlite"
    database = ({"path": str(tmp_path / "switchboard.db")} if backend == "sqlite"
                else {"url": request.getfixturevalue("pg_url")})

    def make(data: dict[str, Any] | None = None) -> Config:
        data = dict(data or {})
        data.setdefault("database", database)
        return parse_config(data, str(tmp_path / "config.toml"))

    yield make


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Where a test daemon built by `make_config` keeps its database."""
    return tmp_path / "switchboard.db"


@pytest.fixture
async def view(db: Path, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """A second connection on the test daemon's database (opened first, so it runs the migrations);
    in a test that asks for `store_backend`, on the database `make_config` names for it."""
    if "store_backend" in request.fixturenames and request.getfixturevalue("store_backend") == "postgres":
        from bot.store.postgres import PostgresStore

        url = request.getfixturevalue("pg_url")
        async with PostgresStore.connect(url, state_path=db, label=url) as pg:
            yield pg
        return
    async with Store.open(db) as opened:
        yield opened


@pytest.fixture
def channel() -> FakeChannel:
    return FakeChannel()


BACKENDS = ("sqlite", "postgres")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test using `store` runs on each backend (SQLite alone when marked sqlite_only)."""
    if "store_backend" in metafunc.fixturenames:
        only = metafunc.definition.get_closest_marker("sqlite_only") is not None
        metafunc.parametrize("store_backend", ("sqlite",) if only else BACKENDS)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """This test session's own PostgreSQL server (one per xdist worker), started on first use."""
    server = PostgresServer()
    try:
        server.start()
    except RuntimeError as exc:
        server.stop()
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def synapse() -> Iterator[SynapseServer]:
    """This test session's own Synapse homeserver (one per xdist worker), started on first use;
    installed into a cached virtualenv the first time (bot/testing/synapse.py)."""
    server = SynapseServer()
    try:
        server.start()
    except RuntimeError as exc:
        server.stop()
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the zygote as soon as a test collected here will fork from it: its imports (two seconds
    of CPU, ten times that beside stress-ng) then run beside the first tests, not in the first fork's."""
    forking = ("switchboard_cli", "switchboard")  # tests.harness's and tests.test_cli's helpers
    if any("preloaded" in getattr(item, "fixturenames", ()) or
           any(hasattr(getattr(item, "module", None), name) for name in forking) for item in session.items):
        zygote()


def pytest_sessionfinish(session: pytest.Session) -> None:
    close_zygote()


@pytest.fixture(scope="session")
def preloaded() -> Preloaded:
    """This test session's zygote (one per xdist worker): `switchboard` commands forked from a
    Python that imported their modules once (bot/testing/preloaded.py, tests.harness.zygote)."""
    return zygote()


@pytest.fixture
def pg_url(pg_server: PostgresServer) -> str:
    """The url of a new, empty database on the test server."""
    return pg_server.fresh_database()


@pytest.fixture
async def store(store_backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """A fresh store on SQLite (a file in tmp_path) or on PostgreSQL (a new database)."""
    if store_backend == "sqlite":
        async with Store.open(tmp_path / "switchboard.db") as opened:
            yield opened
        return
    from bot.store.postgres import PostgresStore

    url = request.getfixturevalue("pg_url")
    async with PostgresStore.connect(url, state_path=tmp_path / "switchboard.db", label=url) as pg:
        yield pg


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


@pytest.fixture
def log_stream() -> io.StringIO:
    """A stream for the real logging chain (as `switchboard run` configures it); `_logging_kept`
    puts the test run's own setup back after."""
    return io.StringIO()
