"""The daemons of the multi-instance bench: a config each, a child process each, and waiting for them.

Every daemon is `python -m bench.multi_instance --child --config X` (`child` below), which is
`switchboard run --config X` with python-telegram-bot's rate limiter built with its limits off and
discord.py pointed at the Discord stand-in when the environment names one. A daemon may be put in
a CPU-capped cgroup (`bench/cpu_cap.py`) as it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from bench.cpu_cap import CpuCap
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.models import FAST, MODEL, echo
from bot.testing.round_robin import RoundRobin
from bot.testing.telegram_api import TelegramStandIn

ROOT = Path(__file__).resolve().parent.parent
API_KEY = "sk-ant-multi-instance-0123456789abcdef"
TELEGRAM_TOKEN = "7000000002:AAmultiInstanceToken_0123456789abcdef"
SECRET = "multi-instance-webhook-secret_0123456789"
SECRET_ENV = "SWITCHBOARD_BENCH_WEBHOOK_SECRET"
FIRST_USER = 6_000_000
START_TIMEOUT = 60.0
Ready = Callable[[], Awaitable[bool]]  # whether the daemons are up


@dataclass(frozen=True)
class Plan:
    users: int
    per_user: int
    instances: int
    kill: bool
    seed: int = 1
    downtime: float = 3.0
    quiet: float = 45.0
    settle_max: float = 300.0
    limits: bool = False
    lease_ttl: float = 15.0
    pool_size: int | None = None
    cap: float | None = None  # each daemon's CPU quota in cores (a cgroup each), or uncapped


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def common_config(database: str, api: AnthropicStandIn, lease_ttl: float, pool_size: int | None) -> str:
    """Everything but the channel: the store, the echoing model, JSON logs at INFO."""
    key = f'url = "{database}"' if database.startswith("postgresql://") else f'path = "{database}"'
    pool = f"pool_size = {pool_size}" if pool_size and database.startswith("postgresql://") else ""
    return f"""
[database]
{key}
lease_ttl = {lease_ttl}
{pool}

[anthropic]
base_url = "{api.base_url}"
model = "{MODEL}"
fast_model = "{FAST}"
timeout = 10.0
max_retries = 1

[conversation]
selection_timeout = 1.0

[router]
shutdown_grace = 5.0

[semantic]
enabled = "off"

[logging]
level = "INFO"
format = "json"

[channels.console]
enabled = false
"""


def config_text(database: str, port: int, lb_url: str, tg: TelegramStandIn, api: AnthropicStandIn,
                users: int, lease_ttl: float, pool_size: int | None = None) -> str:
    ids = ", ".join(str(FIRST_USER + u) for u in range(users))
    return common_config(database, api, lease_ttl, pool_size) + f"""
[channels.telegram]
enabled = true
base_url = "{tg.base_url}"
allow_from = [{ids}]
max_reply_age = 3600
mode = "webhook"
webhook_listen = "127.0.0.1:{port}"
webhook_url = "{lb_url}"
webhook_secret_env = "{SECRET_ENV}"
"""


def daemon_env(extra: dict[str, str]) -> dict[str, str]:
    """This environment without our and the SDKs' variables, the repository on the path, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "TELEGRAM_", "DISCORD_", "SWITCHBOARD_", "PG"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return env | {"ANTHROPIC_API_KEY": API_KEY} | extra


@dataclass
class Daemon:
    """One instance: its own config, webhook port, state folder (control socket), log files and,
    when capped, its own cgroup."""

    name: str
    port: int
    workdir: Path
    env: dict[str, str]
    proc: asyncio.subprocess.Process | None = None
    starts: int = 0
    cap: CpuCap | None = None

    @property
    def config(self) -> Path:
        return self.workdir / f"{self.name}.toml"

    async def start(self) -> None:
        self.starts += 1
        state = self.workdir / f"{self.name}-state"
        state.mkdir(exist_ok=True)
        log = self.workdir / f"{self.name}-{self.starts}.log"
        with log.open("wb") as out:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.multi_instance", "--child", "--config", str(self.config),
                cwd=self.workdir, env=self.env | {"XDG_STATE_HOME": str(state)},
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        if self.cap is not None:
            # Within microseconds of the fork: the interpreter has not got far into its imports.
            self.cap.add(self.proc.pid)

    async def listening(self) -> bool:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            return False
        writer.close()
        await writer.wait_closed()
        return True

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)

    async def stop(self) -> int | None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return proc.returncode if proc else None
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        return proc.returncode


async def wait_up(daemons: list[Daemon], ready: Ready) -> None:
    """Until `ready()` says so (webhooks set, shards connected), failing when a daemon exited."""
    deadline = time.monotonic() + START_TIMEOUT
    while not await ready():
        for d in daemons:
            if d.proc is not None and d.proc.returncode is not None:
                raise RuntimeError(f"{d.name} exited ({d.proc.returncode}); see {d.workdir}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"daemons not up within {START_TIMEOUT:.0f} s; see the logs in "
                               f"{daemons[0].workdir}")
        await asyncio.sleep(0.05)


async def webhooks_up(daemons: list[Daemon], tg: TelegramStandIn, webhooks: int) -> None:
    """Until `webhooks` setWebhook calls came and every daemon's webhook port takes connections."""
    async def ready() -> bool:
        return len(tg.calls_of("setWebhook")) >= webhooks and all([await d.listening() for d in daemons])

    await wait_up(daemons, ready)


def child(argv: list[str]) -> None:
    """`switchboard run`, with python-telegram-bot's rate limiter off unless asked for (Telegram's
    ~30 messages/s are per bot whichever instance sends; the limiter would measure only itself)."""
    if not os.environ.get("SWITCHBOARD_BENCH_TELEGRAM_LIMITS"):
        import channels.telegram.channel
        from channels.telegram.limits import FloodLimiter

        # The name the channel calls when it builds its bot (a rate of 0 turns a limit off).
        channels.telegram.channel.default_rate_limiter = lambda: FloodLimiter(
            overall_max_rate=0, group_max_rate=0)
    from bot.testing.daemon_child import point_discord_at_standin

    point_discord_at_standin()
    from bot.cli import main as cli

    cli(["run", *argv])


@contextlib.asynccontextmanager
async def telegram_fleet(plan: Plan, database: str, workdir: Path
                         ) -> AsyncIterator[tuple[TelegramStandIn, RoundRobin, list[Daemon]]]:
    """The stand-ins, the round-robin proxy and `plan.instances` daemons configured (not started) on
    `database`, each in a CPU-capped cgroup when `plan.cap`; all stopped and removed at the end."""
    workdir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - before anything runs
    async with AnthropicStandIn() as api, TelegramStandIn(token=TELEGRAM_TOKEN) as tg:
        api.default = echo
        tg.webhook_sender.tries = 10  # about 50 s of retries, as Telegram keeps trying far longer
        ports = [free_port() for _ in range(plan.instances)]
        async with RoundRobin(ports) as lb:
            env = daemon_env({"TELEGRAM_BOT_TOKEN": tg.token, SECRET_ENV: SECRET, "PTB_TIMEDELTA": "1"}
                             | ({"SWITCHBOARD_BENCH_TELEGRAM_LIMITS": "1"} if plan.limits else {}))
            daemons = [Daemon(f"d{i + 1}", port, workdir, env) for i, port in enumerate(ports)]
            try:
                for daemon in daemons:
                    if plan.cap:
                        daemon.cap = CpuCap.create(f"switchboard-bench-{os.getpid()}-{daemon.name}", plan.cap)
                    daemon.config.write_text(config_text(database, daemon.port, lb.url, tg, api, plan.users,
                                                         plan.lease_ttl, plan.pool_size))
                yield tg, lb, daemons
            finally:
                for daemon in daemons:
                    await daemon.stop()
                    if daemon.cap is not None:
                        daemon.cap.remove()
