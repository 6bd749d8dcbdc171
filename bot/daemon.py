"""The daemon's assembly: store, brain, router and channels, run together and stopped cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack

import structlog

from bot.brain import AnthropicBrain, Brain
from bot.channel import Channel, Submit
from bot.config import Config
from bot.errors import ConfigError
from bot.inbox import Inbox
from bot.router import Router
from bot.scheduler import Scheduler
from bot.store import Store
from bot.turn import TurnRunner

log = structlog.get_logger("switchboard.daemon")


def build_channels(config: Config, *, console: bool, platforms: bool = True) -> list[Channel]:
    """The enabled channels; the only place the core reaches into `channels/`."""
    from channels.console import ConsoleChannel

    built: list[Channel] = []
    if console:
        built.append(
            ConsoleChannel(
                config.agent.id, agent_name=config.agent.name,
                user_name=config.channels.console.user_name,
            )
        )
    if platforms and config.channels.telegram.enabled:
        from channels.telegram import TelegramChannel

        section = config.channels.telegram
        built.append(TelegramChannel(section, agent_id=config.agent.id,
                                     token=_token(config, "telegram", section.token_env)))
    if platforms and config.channels.discord.enabled:
        from channels.discord import DiscordChannel

        discord_section = config.channels.discord
        built.append(DiscordChannel(discord_section, agent_id=config.agent.id,
                                    token=_token(config, "discord", discord_section.token_env)))
    return built


def _token(config: Config, name: str, env: str) -> str:
    token = os.environ.get(env, "").strip()
    if not token:
        raise ConfigError(
            config.source, f"channels.{name}.token_env",
            f"the environment variable {env} it names is not set; export the bot token there "
            f"or set channels.{name}.enabled = false",
        )
    return token


class Daemon:
    """Runs channels and the router until stopped; `until_input_ends` suits `switchboard chat`."""

    def __init__(
        self,
        config: Config,
        channels: Sequence[Channel],
        *,
        brain: Brain | None = None,
        until_input_ends: bool = False,
    ) -> None:
        self.config = config
        self.channels = list(channels)
        self._brain = brain
        self._until_input_ends = until_input_ends
        self.stop_requested = asyncio.Event()
        self.router: Router | None = None
        self.scheduler: Scheduler | None = None

    async def run(self) -> None:
        config = self.config
        async with AsyncExitStack() as stack:
            store = await stack.enter_async_context(Store.open(config.database_path()))
            brain = self._brain
            if brain is None:
                anthropic_brain = AnthropicBrain(config.anthropic, config.anthropic.api_key())
                stack.push_async_callback(anthropic_brain.aclose)
                brain = anthropic_brain
                if config.anthropic.api_key() is None:
                    log.warning("no Anthropic API key: replies will be the fallback message",
                                env=config.anthropic.api_key_env)
            by_provider = {c.provider: c for c in self.channels}
            runner = TurnRunner(config, store, brain, by_provider)
            router = self.router = Router(
                store, runner, max_concurrent=config.router.max_concurrent_turns
            )
            submit: Submit = Inbox(config, store, router, by_provider).submit
            main_brain = brain
            model_brains: dict[str, Brain] = {}

            def brain_for(model: str | None) -> Brain:
                """The brain for a job's `model` (the agent's own unless it names another)."""
                resolved = main_brain.model_for(model) if model else config.anthropic.model
                if resolved == config.anthropic.model:
                    return main_brain
                if resolved not in model_brains:
                    other = AnthropicBrain(
                        config.anthropic.model_copy(update={"model": resolved}), config.anthropic.api_key()
                    )
                    stack.push_async_callback(other.aclose)
                    model_brains[resolved] = other
                return model_brains[resolved]

            scheduler = self.scheduler = (
                Scheduler(config, store, brain_for, by_provider) if config.schedules else None
            )

            tasks = [
                asyncio.create_task(self._run_channel(channel, submit), name=channel.provider)
                for channel in self.channels
            ]
            if scheduler is not None:
                await scheduler.start()
            log.info("started", channels=[c.provider for c in self.channels],
                     database=str(store.path), agent=config.agent.id)
            waiter = asyncio.create_task(self.stop_requested.wait())
            if self._until_input_ends:
                await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
                if not self.stop_requested.is_set():
                    await router.idle()
            else:
                await waiter
            log.info("stopping")
            waiter.cancel()
            # Input first (every received message reaches the store), then scheduled runs and the
            # turns in flight (they still need their channel to deliver), then the connections.
            for channel in self.channels:
                await self._stop_channel(channel)
            if scheduler is not None:
                await scheduler.close(config.router.shutdown_grace)
            await router.close(config.router.shutdown_grace)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        log.info("stopped")

    async def _run_channel(self, channel: Channel, submit: Submit) -> None:
        try:
            await channel.run(submit)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("channel stopped with an error", channel=channel.provider)

    async def _stop_channel(self, channel: Channel) -> None:
        try:
            await channel.stop()
        except Exception:
            log.exception("channel did not stop cleanly", channel=channel.provider)

    def request_stop(self) -> None:
        self.stop_requested.set()


async def serve(daemon: Daemon) -> None:
    """Run a daemon with SIGINT/SIGTERM wired to a clean stop."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, daemon.request_stop)
    try:
        await daemon.run()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def console_attached() -> bool:
    return sys.stdin.isatty()
