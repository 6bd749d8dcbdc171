"""The daemon's assembly: store, brain, router and channels, run together, reloaded and stopped cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any

import structlog

from bot.brain import AnthropicBrain, Brain
from bot.channel import CatchUpPoint, Channel
from bot.config import Config, load_config
from bot.control import serving, socket_path
from bot.errors import BotError, ConfigError
from bot.inbox import Inbox
from bot.log import last_error
from bot.messages import InboundMessage
from bot.notify import Notifier
from bot.outbox import Outbox
from bot.resume import resume, sweep
from bot.router import Router
from bot.scheduler import Scheduler
from bot.store import Store
from bot.turn import TurnRunner

log = structlog.get_logger("switchboard.daemon")

PLATFORMS = ("telegram", "discord")
# READY=1 waits this long for every channel to connect; a channel still connecting is named in
# the log and the service counts as started (it keeps retrying on its own).
READY_TIMEOUT = 30.0
# A channel that stops with an unexpected error is started again after this, doubling up to the cap.
RESTART_DELAY = 1.0
MAX_RESTART_DELAY = 60.0


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
    if platforms:
        built.extend(platform_channel(config, name) for name in PLATFORMS
                     if getattr(config.channels, name).enabled)
    return built


def platform_channel(config: Config, name: str) -> Channel:
    """The Telegram or Discord channel of a config (its token read from the environment now)."""
    if name == "telegram":
        from channels.telegram import TelegramChannel

        section = config.channels.telegram
        return TelegramChannel(section, agent_id=config.agent.id,
                               token=_token(config, "telegram", section.token_env))
    from channels.discord import DiscordChannel

    discord_section = config.channels.discord
    return DiscordChannel(discord_section, agent_id=config.agent.id,
                          token=_token(config, "discord", discord_section.token_env))


def _token(config: Config, name: str, env: str) -> str:
    token = os.environ.get(env, "").strip()
    if not token:
        raise ConfigError(
            config.source, f"channels.{name}.token_env",
            f"the environment variable {env} it names is not set; export the bot token there "
            f"or set channels.{name}.enabled = false",
        )
    return token


def reloadable(old: Config, new: Config) -> tuple[Config, list[str]]:
    """The config a reload puts in force, and the changed keys that only a restart applies.

    The database, the model provider, logging, the agent id, the turn concurrency and the
    console keep their running values: they are wired into objects that live as long as the
    daemon. Everything else (conversation, history limits, access lists, channels, schedules,
    prompt files) is taken from the new file.
    """
    updates: dict[str, Any] = {}
    restart: list[str] = []
    for name in ("database", "anthropic", "logging"):
        if getattr(old, name) != getattr(new, name):
            restart.append(name)
            updates[name] = getattr(old, name)
    if old.agent.id != new.agent.id:
        restart.append("agent.id")
        updates["agent"] = new.agent.model_copy(update={"id": old.agent.id})
    if old.router.max_concurrent_turns != new.router.max_concurrent_turns:
        restart.append("router.max_concurrent_turns")
        updates["router"] = new.router.model_copy(
            update={"max_concurrent_turns": old.router.max_concurrent_turns})
    if old.channels.console != new.channels.console:
        restart.append("channels.console")
        updates["channels"] = new.channels.model_copy(update={"console": old.channels.console})
    return new.model_copy(update=updates), restart


def _changed_sections(old: Config, new: Config) -> list[str]:
    before, after = old.model_dump(), new.model_dump()
    return sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))


class Daemon:
    """Runs channels and the router until stopped; `until_input_ends` suits `switchboard chat`."""

    def __init__(
        self,
        config: Config,
        channels: Sequence[Channel],
        *,
        brain: Brain | None = None,
        until_input_ends: bool = False,
        notifier: Notifier | None = None,
        ready_timeout: float = READY_TIMEOUT,
    ) -> None:
        self.config = config
        self.channels = list(channels)
        self._brain = brain
        self._until_input_ends = until_input_ends
        self._notifier = notifier or Notifier.from_env()
        self._ready_timeout = ready_timeout
        self.stop_requested = asyncio.Event()
        # Set once the store, router, channels, scheduler and control socket are up; READY=1
        # (`ready`) may come later, when every channel has connected.
        self.started = asyncio.Event()
        self.ready = asyncio.Event()
        self.router: Router | None = None
        self.scheduler: Scheduler | None = None
        self._store: Store | None = None
        self._inbox: Inbox | None = None
        self._outbox: Outbox | None = None
        self._brain_for: Callable[[str | None], Brain] | None = None
        # The running channels by provider: the turn runner, inbox and scheduler read this one
        # dict, so a reload that starts or stops a channel is seen by all of them.
        self._by_provider: dict[str, Channel] = {}
        # Per provider: the supervising task, the last unexpected error, the restarts after one.
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._errors: dict[str, str] = {}
        self._restarts: dict[str, int] = {}
        self._stopping: set[str] = set()
        self._background: set[asyncio.Task[Any]] = set()
        self._reload_lock = asyncio.Lock()
        self._started_at = time.time()
        self.reloads: list[dict[str, Any]] = []

    async def run(self) -> None:
        config = self.config
        async with AsyncExitStack() as stack:
            store = self._store = await self._open_store(stack, config)
            brain = self._brain
            if brain is None:
                anthropic_brain = AnthropicBrain(config.anthropic, config.anthropic.api_key())
                stack.push_async_callback(anthropic_brain.aclose)
                brain = anthropic_brain
                if config.anthropic.api_key() is None:
                    log.warning("no Anthropic API key: replies will be the fallback message",
                                env=config.anthropic.api_key_env)
            self._brain = brain
            self._by_provider = {c.provider: c for c in self.channels}
            outbox = self._outbox = Outbox(store, self._by_provider)
            runner = TurnRunner(config, store, brain, self._by_provider, outbox)
            router = self.router = Router(
                store, runner, max_concurrent=config.router.max_concurrent_turns
            )
            inbox = self._inbox = Inbox(config, store, router, self._by_provider, runner.compactor)
            # Before any channel takes input: what the last run left undone goes first, in order.
            await resume(store, router, inbox, outbox, self._by_provider)
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

            self._brain_for = brain_for
            scheduler = self.scheduler = (
                Scheduler(config, store, brain_for, self._by_provider) if config.schedules else None
            )

            for channel in self.channels:
                self._start_channel(channel)
            if scheduler is not None:
                await scheduler.start()
            if not self._until_input_ends:
                await stack.enter_async_context(serving(socket_path(store.path), {
                    "status": self.status, "reload": self.reload,
                }))
            watchdog = asyncio.create_task(self._notifier.watchdog(), name="watchdog")
            self._spawn(sweep(store, router, self._current_inbox, outbox, self._by_provider))
            announce = asyncio.create_task(self._announce_ready(), name="ready")
            self.started.set()
            log.info("started", channels=[c.provider for c in self.channels],
                     database=str(store.path), agent=config.agent.id)
            waiter = asyncio.create_task(self.stop_requested.wait())
            if self._until_input_ends:
                await asyncio.wait([waiter, *self._tasks.values()], return_when=asyncio.FIRST_COMPLETED)
                if not self.stop_requested.is_set():
                    await router.idle()
            else:
                await waiter
            log.info("stopping")
            self._notifier.stopping()
            waiter.cancel()
            announce.cancel()
            # A reload half done must not run into the shutdown.
            async with self._reload_lock:
                # Input first (every received message reaches the store), then scheduled runs and
                # the turns in flight (they still need their channel to deliver), then connections.
                for channel in list(self._by_provider.values()):
                    await self._stop_channel(channel)
                if self.scheduler is not None:
                    await self.scheduler.close(self.config.router.shutdown_grace)
                await router.close(self.config.router.shutdown_grace)
                tasks = [*self._tasks.values(), *self._background, watchdog]
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, announce, return_exceptions=True)
        self._notifier.close()
        log.info("stopped")

    async def _open_store(self, stack: AsyncExitStack, config: Config) -> Store:
        path = config.database_path()
        try:
            store = await stack.enter_async_context(Store.open(path))
            await store.check_integrity()
        except sqlite3.DatabaseError as exc:
            raise Store.damaged(path, str(exc)) from exc
        return store

    # -- intake: what every channel hands its input to ------------------------------------------

    async def submit(self, inbound: InboundMessage) -> None:
        """Store and queue one message through the inbox of the config in force."""
        assert self._inbox is not None, "the daemon has not started"
        await self._inbox.submit(inbound)

    def _current_inbox(self) -> Inbox:
        assert self._inbox is not None, "the daemon has not started"
        return self._inbox

    async def catch_up_points(self, provider: str, since: float) -> list[CatchUpPoint]:
        assert self._store is not None, "the daemon has not started"
        return [CatchUpPoint(chat_id, after) for chat_id, after in
                await self._store.catch_up_points(provider, since)]

    async def quarantine(self, provider: str, ref: str | None, raw: str, error: str) -> None:
        assert self._store is not None, "the daemon has not started"
        await self._store.quarantine(provider, ref, raw, error)
        log.warning("unparseable update quarantined", channel=provider, ref=ref, error=error)

    # -- channels ------------------------------------------------------------------------------

    def _start_channel(self, channel: Channel) -> None:
        provider = channel.provider
        self._by_provider[provider] = channel
        self._errors.pop(provider, None)
        self._restarts.pop(provider, None)
        self._tasks[provider] = asyncio.create_task(self._supervise(channel), name=provider)

    async def _supervise(self, channel: Channel) -> None:
        """Run a channel; one that stops with an unexpected error is started again, with capped
        backoff, until the daemon stops or a reload retires it. A clean return (input ended, a
        rejected token) is final."""
        provider = channel.provider
        me = asyncio.current_task()
        delay = RESTART_DELAY
        while True:
            try:
                await channel.run(self)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._errors[provider] = f"{type(exc).__name__}: {exc}"
                self._restarts[provider] = self._restarts.get(provider, 0) + 1
                log.exception("channel stopped with an error; restarting it", channel=provider,
                              restarts=self._restarts[provider], restart_in=delay)
            stop = asyncio.ensure_future(self.stop_requested.wait())
            await asyncio.wait([stop], timeout=delay)
            stop.cancel()
            retired = provider in self._stopping or self._tasks.get(provider) is not me
            if retired or self.stop_requested.is_set():
                return
            delay = min(delay * 2, MAX_RESTART_DELAY)
            try:
                channel = platform_channel(self.config, provider) if provider in PLATFORMS else channel
            except BotError as exc:
                log.error("channel not restarted", channel=provider, error=str(exc))
                return
            self._by_provider[provider] = channel

    async def _stop_channel(self, channel: Channel) -> None:
        """Stop a channel's input; bounded by the grace (a store that hangs must not hang the stop:
        what it had not stored yet was not confirmed to the platform, so it comes again)."""
        self._stopping.add(channel.provider)
        try:
            await asyncio.wait_for(channel.stop(), self.config.router.shutdown_grace)
        except TimeoutError:
            log.warning("channel input did not stop within the grace", channel=channel.provider)
        except Exception:
            log.exception("channel did not stop cleanly", channel=channel.provider)

    async def _retire_channel(self, channel: Channel) -> None:
        """Take a channel out (reload): no new input now, its connection closed after the grace.

        Turns already running may still deliver through it for `shutdown_grace` seconds.
        """
        await self._stop_channel(channel)
        if self._by_provider.get(channel.provider) is channel:
            del self._by_provider[channel.provider]
        task = self._tasks.pop(channel.provider, None)
        self._stopping.discard(channel.provider)
        self._errors.pop(channel.provider, None)
        self._restarts.pop(channel.provider, None)
        if task is not None:
            grace = self.config.router.shutdown_grace

            async def close_later() -> None:
                await asyncio.wait([task], timeout=grace)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

            self._spawn(close_later())

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def channel_state(self, channel: Channel) -> str:
        """starting, connected, restarting, stopping, stopped or error (for `switchboard status`)."""
        provider = channel.provider
        task = self._tasks.get(provider)
        if task is None or task.done():
            return "error" if provider in self._errors else "stopped"
        if provider in self._stopping:
            return "stopping"
        if self._by_provider.get(provider) is not channel:
            return "restarting"
        ready = getattr(channel, "ready", None)
        if isinstance(ready, asyncio.Event) and not ready.is_set():
            return "restarting" if provider in self._errors else "starting"
        return "connected"

    async def _announce_ready(self) -> None:
        """READY=1 once every channel is connected, or after the timeout naming those still late."""
        waits = {
            channel.provider: asyncio.ensure_future(ready.wait())
            for channel in self._by_provider.values()
            if isinstance(ready := getattr(channel, "ready", None), asyncio.Event)
        }
        if waits:
            _, late = await asyncio.wait(waits.values(), timeout=self._ready_timeout)
            for waiter in late:
                waiter.cancel()
            late_names = sorted(name for name, waiter in waits.items() if waiter in late)
            if late_names:
                log.warning("channels not connected yet; reporting ready anyway", channels=late_names,
                            waited_s=self._ready_timeout)
        self.ready.set()
        self._notifier.ready(self.status_line())

    def status_line(self) -> str:
        states = ", ".join(f"{c.provider} {self.channel_state(c)}" for c in self._by_provider.values())
        pending = self.router.pending if self.router is not None else 0
        return f"{states or 'no channels'}; {pending} queued"

    # -- reload --------------------------------------------------------------------------------

    def request_reload(self) -> None:
        """SIGHUP: reload in the background (the outcome is logged)."""
        self._spawn(self.reload())

    async def reload(self) -> dict[str, Any]:
        """Re-read the config file; apply it without dropping turns, or keep the old one and say why.

        A reload asked for while the daemon starts waits until it has started.
        """
        if not self.started.is_set():
            stopping = asyncio.ensure_future(self.stop_requested.wait())
            starting = asyncio.ensure_future(self.started.wait())
            await asyncio.wait([stopping, starting], return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            starting.cancel()
        async with self._reload_lock:
            if self.stop_requested.is_set() or self.router is None:
                return {"reloaded": False, "error": "the daemon is not running (starting or stopping)"}
            self._notifier.reloading()
            try:
                outcome = await self._reload()
            except BotError as exc:
                log.error("config reload rejected; the old config stays in force", error=str(exc))
                outcome = {"reloaded": False, "error": str(exc)}
            finally:
                self._notifier.ready(self.status_line())
            self.reloads.append({"at": time.time(), **outcome})
            del self.reloads[:-5]
            return outcome

    async def _reload(self) -> dict[str, Any]:
        old = self.config
        store, router, brain = self._store, self.router, self._brain
        assert store is not None and router is not None and brain is not None
        if old.source == "<defaults>":
            raise BotError("this daemon runs on built-in defaults; there is no config file to reload")
        config, restart = reloadable(old, load_config(old.source))
        starts: list[Channel] = []
        stops: list[Channel] = []
        updates: list[tuple[Channel, Any]] = []
        if not self._until_input_ends:
            for name in PLATFORMS:
                before, after = getattr(old.channels, name), getattr(config.channels, name)
                current = self._by_provider.get(name)
                reconnect = (before.token_env != after.token_env
                             or getattr(before, "base_url", None) != getattr(after, "base_url", None))
                if after.enabled and (current is None or reconnect):
                    # Built before anything changes: a missing token rejects the whole reload.
                    starts.append(platform_channel(config, name))
                    if current is not None:
                        stops.append(current)
                elif not after.enabled and current is not None:
                    stops.append(current)
                elif current is not None and before != after:
                    updates.append((current, after))
        self.config = config
        for channel in stops:
            await self._retire_channel(channel)
        for channel in starts:
            self._start_channel(channel)
        for channel, section in updates:
            reconfigure = getattr(channel, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(section)
        # Turns already running finish with the runner they started with; queued ones get the new.
        runner = TurnRunner(config, store, brain, self._by_provider, self._outbox)
        router.replace_handler(runner)
        self._inbox = Inbox(config, store, router, self._by_provider, runner.compactor)
        if self.scheduler is not None:
            await self.scheduler.reconfigure(config)
        elif config.schedules:
            assert self._brain_for is not None
            self.scheduler = Scheduler(config, store, self._brain_for, self._by_provider)
            await self.scheduler.start()
        changed = _changed_sections(old, config)
        log.info("config reloaded", source=config.source, changed=changed,
                 channels_started=[c.provider for c in starts], channels_stopped=[c.provider for c in stops])
        if restart:
            log.warning("some changes take effect only after a restart", keys=restart)
        return {"reloaded": True, "changed": changed, "restart_required": restart}

    # -- health --------------------------------------------------------------------------------

    async def status(self) -> dict[str, Any]:
        """What `switchboard status` shows: channels, queues, schedules, the last error."""
        router = self.router
        channels = [
            {"provider": c.provider, "state": self.channel_state(c), "error": self._errors.get(c.provider),
             "restarts": self._restarts.get(c.provider, 0)}
            for c in self._by_provider.values()
        ]
        sessions = router.sessions() if router is not None else {}
        return {
            "pid": os.getpid(),
            "started_at": self._started_at,
            "uptime_s": round(time.time() - self._started_at, 1),
            "ready": self.ready.is_set(),
            "config": self.config.source,
            "database": str(self._store.path) if self._store is not None else None,
            "agent": self.config.agent.id,
            "channels": channels,
            "queue": {
                "pending": router.pending if router is not None else 0,
                "sessions": {key: {"running": running, "waiting": waiting}
                             for key, (running, waiting) in sessions.items()},
            },
            "schedules": await self.scheduler.job_states() if self.scheduler is not None else [],
            "quarantined": await self._store.quarantine_count() if self._store is not None else 0,
            "last_error": last_error(),
            "last_reload": self.reloads[-1] if self.reloads else None,
        }

    def request_stop(self) -> None:
        self.stop_requested.set()


async def serve(daemon: Daemon) -> None:
    """Run a daemon with SIGINT/SIGTERM wired to a clean stop and SIGHUP to a config reload."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, daemon.request_stop)
    loop.add_signal_handler(signal.SIGHUP, daemon.request_reload)
    try:
        await daemon.run()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(sig)


def console_attached() -> bool:
    return sys.stdin.isatty()
