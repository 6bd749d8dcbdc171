"""Channel lifecycle: building the adapters, running each under supervision, stopping and retiring.

Each channel (one per bot: "telegram", "telegram.work", "discord", …, named as in
`Config.chat_sections`) runs in a task that starts it again, with capped backoff, after an unexpected error;
a clean return (input ended, a rejected token) is final. The one `by_provider` dict is what the
turn runner, inbox and scheduler read, so a channel started, restarted or retired is seen by all.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from bot.config import Config, MatrixConfig, SlackConfig, TelegramConfig
from bot.config.root import channel_key, webhook_secret
from bot.core.errors import BotError, ConfigError, describe
from bot.core.restart_delay import MAX_RESTART_DELAY, RESTART_DELAY
from bot.intake.channel import Channel, Intake

log = structlog.get_logger("switchboard.daemon")


def build_channels(config: Config, *, console: bool, platforms: bool = True) -> list[Channel]:
    """The enabled channels, one per bot; the only place the core reaches into `channels/`."""
    from channels.console.channel import ConsoleChannel

    built: list[Channel] = []
    if console:
        agent = config.for_agent(config.channel_agent("console")).agent  # who the console talks to
        built.append(
            ConsoleChannel(agent.id, agent_name=agent.name, user_name=config.channels.console.user_name,
                           detachable=platforms)
        )
    if platforms:
        built.extend(platform_channel(config, name) for name, section in config.chat_sections.items()
                     if section.enabled)
        if config.web_chat:
            built.append(web_channel(config))
    return built


def web_channel(config: Config) -> Channel:
    """The web chat (`[channels.web]`, served by the console): each account's chat goes to the
    agent the routing gives it, as any platform's DM would."""
    from channels.web.channel import PROVIDER, WebChatChannel

    routing = config.routing()

    def agent_for(account: str) -> str:
        return routing.agent_for(PROVIDER, (account, None, account), account)

    return WebChatChannel(config.channels.web, agent_for)


def platform_channel(config: Config, name: str) -> Channel:
    """The Telegram, Discord, Slack or Matrix channel named `name` ("telegram", "telegram.work",
    "slack", ...), its token read from the environment now; its messages' sessions start with its
    account's agent."""
    section = config.chat_sections.get(name)
    if section is None:
        raise ConfigError(config.source, channel_key(name), "a channel of this config; there is none")
    tokens = {key: _token(config, name, key, env) for key, env in section.token_envs().items()}
    token = next(iter(tokens.values()))
    agent_id = config.channel_agent(name)
    if isinstance(section, MatrixConfig):
        from channels.matrix.channel import MatrixChannel  # mautrix loads only when Matrix is on

        return MatrixChannel(section, agent_id=agent_id, access_token=token, name=name)
    if isinstance(section, SlackConfig):
        from channels.slack.channel import SlackChannel  # slack-bolt loads only when Slack is on

        return SlackChannel(section, agent_id=agent_id, bot_token=tokens["bot_token_env"],
                            app_token=tokens.get("app_token_env", ""),
                            signing_secret=tokens.get("signing_secret_env", ""), name=name)
    if isinstance(section, TelegramConfig):
        from channels.telegram.channel import TelegramChannel

        secret = webhook_secret(config, name) if section.mode == "webhook" else None
        return TelegramChannel(section, agent_id=agent_id, token=token, name=name, webhook_secret=secret)
    from channels.discord.channel import DiscordChannel

    return DiscordChannel(section, agent_id=agent_id, token=token, name=name)


def _token(config: Config, name: str, key: str, env: str) -> str:
    token = os.environ.get(env, "").strip()
    if not token:
        where = channel_key(name)
        raise ConfigError(
            config.source, f"{where}.{key}",
            f"the environment variable {env} it names is not set; export the bot token there "
            f"or set {where}.enabled = false",
        )
    return token


class ChannelSupervisor:
    """Runs the channels, knows each one's state, stops their input and retires them."""

    def __init__(
        self, intake: Intake, config: Callable[[], Config], stop_requested: asyncio.Event
    ) -> None:
        self._intake = intake
        self._config = config  # the config in force now (a restart builds from it)
        self._stop_requested = stop_requested
        self.by_provider: dict[str, Channel] = {}
        # Per provider: the supervising task, the last unexpected error, the restarts after one.
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._errors: dict[str, str] = {}
        self._restarts: dict[str, int] = {}
        self._stopping: set[str] = set()
        self._closing: set[asyncio.Task[Any]] = set()

    @property
    def tasks(self) -> list[asyncio.Task[Any]]:
        """Every task this supervisor runs (the channels', and connections closing after a retire)."""
        return [*self._tasks.values(), *self._closing]

    def start(self, channel: Channel) -> None:
        provider = channel.provider
        self.by_provider[provider] = channel
        self._errors.pop(provider, None)
        self._restarts.pop(provider, None)
        self._tasks[provider] = asyncio.create_task(self._supervise(channel), name=provider)

    async def _supervise(self, channel: Channel) -> None:
        provider = channel.provider
        me = asyncio.current_task()
        delay = RESTART_DELAY
        while True:
            try:
                await channel.run(self._intake)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._errors[provider] = describe(exc)
                self._restarts[provider] = self._restarts.get(provider, 0) + 1
                log.exception("channel stopped with an error; restarting it", channel=provider,
                              restarts=self._restarts[provider], restart_in=delay)
            stop = asyncio.ensure_future(self._stop_requested.wait())
            await asyncio.wait([stop], timeout=delay)
            stop.cancel()
            retired = provider in self._stopping or self._tasks.get(provider) is not me
            if retired or self._stop_requested.is_set():
                return
            delay = min(delay * 2, MAX_RESTART_DELAY)
            try:
                config = self._config()
                channel = platform_channel(config, provider) if provider in config.chat_sections else channel
            except BotError as exc:
                log.error("channel not restarted", channel=provider, error=str(exc))
                return
            self.by_provider[provider] = channel

    async def stop_input(self, channel: Channel) -> None:
        """Stop a channel's input; bounded by the grace (a store that hangs must not hang the stop:
        what it had not stored yet was not confirmed to the platform, so it comes again)."""
        self._stopping.add(channel.provider)
        try:
            await asyncio.wait_for(channel.stop(), self._config().router.shutdown_grace)
        except TimeoutError:
            log.warning("channel input did not stop within the grace", channel=channel.provider)
        except Exception:
            log.exception("channel did not stop cleanly", channel=channel.provider)

    async def stop_all_input(self) -> None:
        for channel in list(self.by_provider.values()):
            await self.stop_input(channel)

    async def retire(self, channel: Channel) -> None:
        """Take a channel out (reload): no new input now, its connection closed after the grace.

        Turns already running may still deliver through it for `shutdown_grace` seconds.
        """
        await self.stop_input(channel)
        provider = channel.provider
        if self.by_provider.get(provider) is channel:
            del self.by_provider[provider]
        task = self._tasks.pop(provider, None)
        self._stopping.discard(provider)
        self._errors.pop(provider, None)
        self._restarts.pop(provider, None)
        if task is not None:
            self._track(self._close_later(task, self._config().router.shutdown_grace))

    @staticmethod
    async def _close_later(task: asyncio.Task[None], grace: float) -> None:
        try:
            await asyncio.wait([task], timeout=grace)
        finally:  # also when the daemon stops within the grace: the channel must close its clients
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _track(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def state(self, channel: Channel) -> str:
        """starting, connected, reconnecting (the platform stopped answering; retried), restarting,
        stopping, stopped or error (for `switchboard status`)."""
        provider = channel.provider
        task = self._tasks.get(provider)
        if task is None or task.done():
            return "error" if provider in self._errors else "stopped"
        if provider in self._stopping:
            return "stopping"
        if self.by_provider.get(provider) is not channel:
            return "restarting"
        ready = getattr(channel, "ready", None)
        if isinstance(ready, asyncio.Event) and not ready.is_set():
            return "restarting" if provider in self._errors else "starting"
        return "reconnecting" if getattr(channel, "trouble", None) else "connected"

    def status(self) -> list[dict[str, Any]]:
        """Each running channel's state, last unexpected error and restarts; for a Discord bot split
        over daemons, also the gateway shards this one runs ({"ids": [...], "count": N})."""
        found = []
        for c in self.by_provider.values():
            # The last unexpected error, else why the platform is not answering now.
            error = self._errors.get(c.provider) or getattr(c, "trouble", None)
            entry = {"provider": c.provider, "state": self.state(c), "error": error,
                     "restarts": self._restarts.get(c.provider, 0)}
            shards = getattr(c, "shards", None)
            if shards is not None:
                entry["shards"] = shards.describe()
            found.append(entry)
        return found
