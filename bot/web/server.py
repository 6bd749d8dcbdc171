"""The console's HTTP server: one aiohttp app on `[web] listen`, started and stopped with the daemon.

The app holds no state of its own between requests: sessions, accounts and failed logins are in
the store, so every instance on a shared PostgreSQL store serves the same console.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Protocol

import structlog
from aiohttp import web

from bot.config.fields import split_listen
from bot.config.web_sections import WebConfig
from bot.core.errors import BotError
from bot.intake.channel import Channel
from bot.web.admin_pages import AdminPages, AdminStore
from bot.web.auth import AccountStore, Logins
from bot.web.chat import Chat
from bot.web.config_page import ConfigPage
from bot.web.guard import BODY_LIMIT, Door
from bot.web.live import Overview, QuarantineStore
from bot.web.pages import Pages, PageStore
from bot.web.rendering import Renderer, templates
from bot.web.replay_page import ReplayPage, ReplayPageStore
from bot.web.running import RunningDaemon
from bot.web.signup import SignUp, signup_channel
from bot.web.usage_page import UsagePage, UsageStore

log = structlog.get_logger("switchboard.web")

STATIC = Path(__file__).resolve().parent / "static"
# Seconds a stopping server gives requests in hand to finish.
CLOSE_TIMEOUT = 2.0


class ConsoleStore(
    AccountStore, PageStore, AdminStore, UsageStore, QuarantineStore, ReplayPageStore, Protocol
):
    """The store as the console uses it: its logins, the pages' reads and the admin's decisions."""


def console_app(
    config: WebConfig, store: ConsoleStore, daemon: RunningDaemon,
    channels: Mapping[str, Channel] | None = None,
) -> web.Application:
    """The console's routes behind its door, under the path of `public_url`; the web chat's too
    when `channels` has one (looked up there at each request)."""
    base = config.base_path
    channels = channels or {}
    renderer = Renderer(templates(), base, chat=lambda: "web" in channels)
    app = web.Application(client_max_size=BODY_LIMIT)
    chat = Chat(base, store, channels, renderer)
    door = Door(config, Logins(store), renderer, chat.body_limit,
                signup_open=lambda: signup_channel(channels) is not None)
    door.routes(app)
    SignUp(door, store, channels).routes(app)
    Overview(base, store, daemon, renderer).routes(app)
    Pages(base, store, lambda: daemon.config.prices, renderer).routes(app)
    ReplayPage(base, store, daemon, renderer).routes(app)
    UsagePage(base, store, daemon, renderer).routes(app)
    AdminPages(base, store, daemon, renderer).routes(app)
    ConfigPage(base, daemon, renderer).routes(app)
    chat.routes(app)
    app.router.add_static(f"{base}/static", STATIC)
    return app


class WebConsole:
    """The console served while the daemon runs: `async with WebConsole(...)` listens, exit stops."""

    def __init__(
        self, config: WebConfig, store: ConsoleStore, daemon: RunningDaemon,
        channels: Mapping[str, Channel] | None = None,
    ) -> None:
        self._config = config
        self._app = console_app(config, store, daemon, channels)
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> WebConsole:
        host, port = split_listen(self._config.listen)
        # No access log: the console's requests would drown the turn lines.
        runner = web.AppRunner(self._app, access_log=None, shutdown_timeout=CLOSE_TIMEOUT)
        await runner.setup()
        self._runner = runner
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            await self._close()
            raise BotError(f"the web console cannot listen on {self._config.listen} ([web] listen): "
                           f"{exc.strerror or exc}") from exc
        log.info("web console listening", url=self._config.public_url or f"http://{self._config.listen}/")
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self._close()

    async def _close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
