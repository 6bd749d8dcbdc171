"""The daemon's assembly: store, brain, router and channels, run together, reloaded and stopped cleanly."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any

import structlog

from bot.config import Config, MediaConfig, load_config
from bot.context.embed_worker import EmbedWorker
from bot.core.errors import BotError, NotStartedError
from bot.core.messages import AGENT_PROVIDER, ChatRef, InboundMessage, StoredMessage
from bot.daemon.control import serving, socket_path
from bot.daemon.cursors import KeptCursors
from bot.daemon.health import DaemonHealth
from bot.daemon.notify import Notifier
from bot.daemon.reload_plan import plan_reload
from bot.daemon.supervisor import ChannelSupervisor, build_channels, platform_channel
from bot.daemon.upkeep import merge_recall_index
from bot.delivery.outbox import Outbox
from bot.delivery.resume import adopt_waiting, repeat, resume, sweep
from bot.intake.channel import Announcing, CatchUpPoint, Channel
from bot.intake.inbox import Inbox
from bot.intake.pairing import PairingGate, welcome_approved
from bot.intake.router import Router, TurnHandler
from bot.intake.session_lease import LeaseClock, SessionLeases
from bot.models import sdks as model_sdks
from bot.models.brain import Brain
from bot.models.providers import brains_by_model, model_sdks_of, transcriber_of
from bot.models.voice import Transcribe
from bot.ranking.embedding import Embedder, load_embedder
from bot.schedule.reminder_tools import ReminderTools
from bot.schedule.reminders import ReminderSchedule
from bot.schedule.scheduler import Scheduler
from bot.store import Store
from bot.store.leases import LIVE_WINDOW
from bot.tools.agent_messages import AgentMessageTools
from bot.tools.base import ToolSource
from bot.tools.builtins import BuiltinTools
from bot.tools.mcp import McpManager
from bot.turn.agents import Agents

log = structlog.get_logger("switchboard.daemon")

# READY=1 waits this long for every channel to connect; a channel still connecting is named in
# the log and the service counts as started (it keeps retrying on its own).
READY_TIMEOUT = 30.0

__all__ = ["Daemon", "build_channels", "console_attached", "serve"]


class Daemon(DaemonHealth, KeptCursors):
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
        clock: Callable[[], float] = time.time,
        lease_clock: LeaseClock | None = None,
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
        self.agents: Agents | None = None  # each agent's turn runner
        self.scheduler: Scheduler | None = None
        # Reminders set through the agent's tools: fired by `reminders` on `clock` (tests move it).
        self.reminders: ReminderSchedule | None = None
        self.reminder_tools: ReminderTools | None = None
        self._clock = clock
        self._lease_clock = lease_clock  # the session leases' time (tests move it); None: the real one
        self._store: Store | None = None
        self._inbox: Inbox | None = None
        self._outbox: Outbox | None = None
        self._brain_for: Callable[[str | None], Brain] | None = None
        # Semantic recall ([semantic]): the sentence model, and the worker embedding stored messages.
        self.embedder: Embedder | None = None
        self.embed_worker: EmbedWorker | None = None
        self.tool_sources: list[ToolSource] = []  # more are added as `run` builds them
        self.mcp = McpManager(config)  # [[mcp_servers]]: a tool source, the tools of those running
        self._channels = ChannelSupervisor(self, lambda: self.config, self.stop_requested)
        # The running channels by provider: the turn runner, inbox and scheduler read this one
        # dict, so a reload that starts or stops a channel is seen by all of them.
        self._by_provider = self._channels.by_provider
        self._background: set[asyncio.Task[Any]] = set()
        self._reload_lock = asyncio.Lock()
        self._started_at = time.time()
        self.reloads: list[dict[str, Any]] = []

    async def run(self) -> None:
        config = self.config
        async with AsyncExitStack() as stack:
            # About a second of reading weights, off the loop; enabled = "on" without them stops here.
            embedder = self.embedder = await asyncio.to_thread(load_embedder, config)
            store = self._store = await self._open_store(stack, config)
            if embedder is not None:
                self.embed_worker = await stack.enter_async_context(
                    EmbedWorker(store, embedder, batch_size=config.semantic.batch_size))
            # Servers start in the background; they stop as the stack unwinds, after the last turn.
            await stack.enter_async_context(self.mcp)
            self._agent_channel(config)
            # Known before they start: what the last run left undone is resumed for them.
            self._by_provider.update({c.provider: c for c in self.channels})
            outbox = self._outbox = Outbox(store, self._by_provider)
            reminders = self.reminders = ReminderSchedule(lambda: self.config, store, self._by_provider,
                                                       clock=self._clock)
            self.reminder_tools = ReminderTools(store, lambda: self.config.reminders, reminders)
            # Where the model's tools come from: the built-ins, reminders, MCP servers' (as they run).
            self.tool_sources += [BuiltinTools(store, lambda: self.config, embedder), self.reminder_tools,
                                  self.mcp, AgentMessageTools(store, lambda: self.config, self._by_provider)]
            agents = self.agents = Agents(store, self._by_provider, outbox, brain=self._brain, stack=stack,
                                          embedder=embedder, tool_sources=self.tool_sources,
                                          misconfigured=self.misconfigured)
            if self._brain is None and not config.uses_providers() and config.anthropic.api_key() is None:
                log.warning("no Anthropic API key: replies will be the fallback message",
                            env=config.anthropic.api_key_env)
            sdks = [] if self._brain is not None else sorted(
                {sdk for agent in config.agent_ids() for sdk in model_sdks_of(config.for_agent(agent))})
            brain = self._brain = agents.brain(config)
            agents.configure(config)
            # Several daemons on one store: each session's work runs under its lease.
            leases = SessionLeases(store, ttl=config.database.lease_ttl,
                                   clock=self._lease_clock) if store.shared else None
            if leases is not None:
                store.instance = leases.owner  # runs it claims are known as this instance's
                await stack.enter_async_context(leases.taking_part())  # alive, heard, one beat
            router = self.router = Router(
                store, self._announcing(agents), max_concurrent=config.router.max_concurrent_turns,
                leases=leases, send_left_over=outbox.send_left_over if leases is not None else None,
            )
            inbox = self._inbox = Inbox(config, store, router, self._by_provider, agents.compactors)
            # Before any channel takes input: what the last run left undone goes first, in order.
            await resume(store, router, inbox, outbox, self._by_provider)
            brain_for = await stack.enter_async_context(brains_by_model(brain, config))
            self._brain_for = brain_for
            scheduler = self.scheduler = (
                Scheduler(config, store, brain_for, self._by_provider) if config.schedules else None
            )
            for channel in self.channels:
                self._channels.start(channel)
            if scheduler is not None:
                await scheduler.start()
            await reminders.start()
            if not self._until_input_ends:
                await stack.enter_async_context(serving(socket_path(store.path), {
                    "status": self.status, "reload": self.reload,
                }))
            if config.web.enabled and not self._until_input_ends:
                from bot.web.server import WebConsole  # only a daemon serving the console loads it

                await stack.enter_async_context(WebConsole(config.web, store, self, self._by_provider))
            watchdog = asyncio.create_task(self._notifier.watchdog(), name="watchdog")
            self._spawn(sweep(store, router, self._current_inbox, outbox, self._by_provider))
            self._spawn(merge_recall_index(store))
            self._spawn(welcome_approved(store, self._by_provider))
            if leases is not None:
                self._spawn(leases.beat(), name="heartbeat")
                self._spawn(repeat(LIVE_WINDOW, self._take_over_runs, "taking over runs"))
                self._spawn(adopt_waiting(store, router, self._current_inbox, self._by_provider, leases.ttl,
                                          leases.clock))
            announce = asyncio.create_task(self._announce_ready(), name="ready")
            self._spawn(self._preload(sdks), name="model SDKs")
            self.started.set()
            log.info("started", channels=[c.provider for c in self.channels],
                     database=store.label, agents=config.agent_ids())
            for channel in self.channels:
                if isinstance(channel, Announcing):
                    channel.started([c.provider for c in self.channels])
            waiter = asyncio.create_task(self.stop_requested.wait())
            if self._until_input_ends:
                await asyncio.wait([waiter, *self._channels.tasks], return_when=asyncio.FIRST_COMPLETED)
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
                await self._channels.stop_all_input()
                if self.scheduler is not None:
                    await self.scheduler.close(self.config.router.shutdown_grace)
                await reminders.close(self.config.router.shutdown_grace)
                await router.close(self.config.router.shutdown_grace)
                tasks = [*self._channels.tasks, *self._background, watchdog]
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, announce, return_exceptions=True)
        self._notifier.close()
        log.info("stopped")

    async def _open_store(self, stack: AsyncExitStack, config: Config) -> Store:
        from bot.store.opening import open_store

        store = await stack.enter_async_context(open_store(config))
        await store.check_integrity()
        return store

    # -- intake: what every channel hands its input to ------------------------------------------

    async def submit(self, inbound: InboundMessage) -> None:
        """Store and queue one message through the inbox of the config in force."""
        await self._current_inbox().submit(inbound)
        self._message_stored()

    def _announcing(self, runner: TurnHandler) -> TurnHandler:
        """The turn handler, telling the embed worker when a turn has stored its reply."""

        async def handle(request: StoredMessage, inbound: InboundMessage) -> None:
            try:
                await runner(request, inbound)
            finally:
                self._message_stored()

        return handle

    async def _take_over_runs(self) -> None:
        """On a shared store: finish the job and reminder runs an instance that stopped beating
        left claimed (each start does this for its own last run)."""
        for resumable in (self.scheduler, self.reminders):
            if resumable is not None:
                await resumable.resume_interrupted()

    def _message_stored(self) -> None:
        if self.embed_worker is not None:
            self.embed_worker.notify()

    # A channel calls these only once `run` has opened the store and built the inbox; one that
    # calls earlier (a plugin's bug) is told so instead of failing on None.
    def _current_inbox(self) -> Inbox:
        if self._inbox is None:
            raise NotStartedError("the daemon has not started: no inbox to take a message yet")
        return self._inbox

    def _open(self) -> Store:
        if self._store is None:
            raise NotStartedError("the daemon has not started: its store is not open yet")
        return self._store

    async def catch_up_points(self, provider: str, since: float) -> list[CatchUpPoint]:
        return [CatchUpPoint(chat_id, after) for chat_id, after in
                await self._open().catch_up_points(provider, since)]

    async def quarantine(self, provider: str, ref: str | None, raw: str, error: str) -> None:
        await self._open().quarantine(provider, ref, raw, error)
        # Not only unparseable updates: also one that failed to store twice the same way.
        log.warning("update quarantined", channel=provider, ref=ref, error=error)

    async def pair(self, provider: str, chat_id: str, user_id: str, user_name: str | None) -> bool:
        gate = PairingGate(self.config, self._open(), self._by_provider)
        verdict = await gate.check(provider, user_id, user_name, chat_id)
        if verdict.notice is not None:  # sent beside the intake, never holding it up
            self._spawn(gate.tell(ChatRef(provider, chat_id), verdict.notice), name=f"notice {chat_id}")
        return verdict.approved

    def media_limits(self) -> MediaConfig:
        return self.config.media

    async def keep_file(self, data: bytes) -> str:
        return await self._open().kept_files().keep(data)

    def transcriber(self) -> Transcribe | None:
        return transcriber_of(self._brain)

    # -- channels ------------------------------------------------------------------------------

    async def _preload(self, sdks: list[str]) -> None:
        """Once the channels are up, the model SDKs start importing in a thread: neither the first
        poll nor the console's prompt waits for them, and the first message rarely does."""
        await self.ready.wait()
        model_sdks.preload(*sdks)

    def _spawn(self, coro: Any, name: str | None = None) -> None:
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _agent_channel(self, config: Config) -> list[Channel]:
        """The channel agents write to each other through, added once a config has two agents (it
        stays when a reload leaves one: replies between agents may still be on their way)."""
        if len(config.agent_ids()) < 2 or any(c.provider == AGENT_PROVIDER for c in self.channels):
            return []
        from channels.agent import AgentChannel

        self.channels.append(AgentChannel(lambda: self.config))
        return self.channels[-1:]

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
        store, router = self._store, self.router
        assert store is not None and router is not None
        if old.source == "<defaults>":
            raise BotError("this daemon runs on built-in defaults; there is no config file to reload")
        plan = plan_reload(old, load_config(old.source), set(self._by_provider),
                           platforms=not self._until_input_ends)
        config = plan.config
        # Built before anything changes: a missing token rejects the whole reload.
        starts = [platform_channel(config, name) for name in plan.start]
        self.config = config
        for name in plan.stop:
            await self._channels.retire(self._by_provider[name])
        for channel in [*starts, *self._agent_channel(config)]:
            self._channels.start(channel)
        for name in plan.reconfigure:
            reconfigure = getattr(self._by_provider[name], "reconfigure", None)
            if reconfigure is not None:
                reconfigure(config.channel(name))
        # Turns already running finish with the runner they started with; queued ones get the new.
        assert self.agents is not None
        self.agents.configure(config)
        self._inbox = Inbox(config, store, router, self._by_provider, self.agents.compactors)
        mcp = await self.mcp.reconfigure(config)
        if self.scheduler is not None:
            await self.scheduler.reconfigure(config)
        elif config.schedules:
            assert self._brain_for is not None
            self.scheduler = Scheduler(config, store, self._brain_for, self._by_provider)
            await self.scheduler.start()
        log.info("config reloaded", source=config.source, changed=plan.changed,
                 channels_started=plan.start, channels_stopped=plan.stop, mcp_servers=mcp)
        if plan.restart_required:
            log.warning("some changes take effect only after a restart", keys=plan.restart_required)
        return {"reloaded": True, "changed": plan.changed, "restart_required": plan.restart_required}

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
