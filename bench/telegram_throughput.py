"""Telegram end to end: updates/s and update→typing latency through the real python-telegram-bot.

Usage: .venv/bin/python bench/telegram_throughput.py [--users 100] [--per-user 30] [--samples 50]
       [--standin process|inline] [--backend default|httpx|aiohttp] [--profile FILE]

The daemon runs with the real TelegramChannel (python-telegram-bot long polling) against the local
Bot API stand-in on 127.0.0.1 and an instant in-process brain; the rate limiter is built with its
limits off, since it exists to hold us to Telegram's ~30 messages/s and would measure only itself.
Logging is the production setting (INFO JSON lines) into /dev/null.

The stand-in plays Telegram's servers, so by default it runs in a child process (this script with
`--serve-standin`, driven over a small control API) and its CPU is not charged to the daemon;
`--standin inline` shares one event loop as before, which gives a floor. `--backend` forces
python-telegram-bot's HTTP transport (PTB's httpx one or channels.telegram_request's aiohttp one);
`default` keeps whatever TelegramChannel builds.

1. Latency: one update at a time, the time from the update being queued at the Bot API to the
   first sendChatAction for that chat (target ≤ 100 ms). The brain takes 200 ms here: with an
   instant reply the typing action is rightly cancelled before it is sent.
2. Throughput: `users × per-user` updates queued at once; turns/s from queueing to the last reply
   arriving at the Bot API (target ≥ 300 turns/s), and the daemon process's CPU per turn.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402
from telegram.ext import AIORateLimiter, ApplicationBuilder  # noqa: E402
from telegram.request import BaseRequest, HTTPXRequest  # noqa: E402

from bench import standin_process  # noqa: E402
from bench.instant_brain import InstantBrain  # noqa: E402
from bot.config import parse_config  # noqa: E402
from bot.daemon import Daemon  # noqa: E402
from bot.log import configure_logging  # noqa: E402
from channels.telegram import TelegramChannel  # noqa: E402
from channels.telegram_request import AiohttpRequest  # noqa: E402
from tests.standins.telegram_api import TelegramStandIn, private_chat, user  # noqa: E402

TARGET_TURNS_PER_S = 300.0
TARGET_TYPING_MS = 100.0
MODEL_DELAY = 0.2
WAIT = 300.0
# (chat, sender, text) for TelegramStandIn.push_message
Push = tuple[dict[str, Any], dict[str, Any], str]


@dataclass(frozen=True)
class Snapshot:
    """What the Bot API has seen; times are time.monotonic(), one clock for every process on Linux."""

    sent: int
    last_sent_at: float
    actions: list[float]  # sendChatAction times, from the index asked for


def _snapshot(tg: TelegramStandIn, actions_from: int) -> Snapshot:
    actions = [c.time for c in tg.calls_of("sendChatAction")[actions_from:]]
    return Snapshot(len(tg.sent), tg.sent[-1].time if tg.sent else 0.0, actions)


def _push_all(tg: TelegramStandIn, pushes: list[Push]) -> float:
    pushed_at = time.monotonic()
    for chat, sender, text in pushes:
        tg.push_message(chat, sender, text)
    return pushed_at


class BotApi(Protocol):
    """The bench's view of the stand-in, wherever it runs."""

    token: str
    base_url: str

    async def push(self, pushes: list[Push]) -> float: ...
    async def wait_sent(self, count: int, actions_from: int = 0) -> Snapshot: ...


class InlineBotApi:
    """The stand-in on the daemon's own event loop: its CPU counts against the daemon."""

    def __init__(self, tg: TelegramStandIn) -> None:
        self._tg, self.token, self.base_url = tg, tg.token, tg.base_url

    async def push(self, pushes: list[Push]) -> float:
        return _push_all(self._tg, pushes)

    async def wait_sent(self, count: int, actions_from: int = 0) -> Snapshot:
        await self._tg.wait_for(lambda: len(self._tg.sent) >= count, timeout=WAIT)
        return _snapshot(self._tg, actions_from)


class RemoteBotApi:
    """The stand-in in a child process, driven over its control API (one request per step)."""

    def __init__(self, session: aiohttp.ClientSession, hello: dict[str, str]) -> None:
        self._session, self._control = session, hello["control"]
        self.token, self.base_url = hello["token"], hello["base_url"]

    async def push(self, pushes: list[Push]) -> float:
        async with self._session.post(f"{self._control}/push", json=pushes) as response:
            response.raise_for_status()
            return float((await response.json())["pushed_at"])

    async def wait_sent(self, count: int, actions_from: int = 0) -> Snapshot:
        params = {"sent": count, "actions_from": actions_from}
        async with self._session.get(f"{self._control}/wait", params=params) as response:
            response.raise_for_status()
            return Snapshot(**await response.json())


@asynccontextmanager
async def inline_standin() -> AsyncIterator[BotApi]:
    async with TelegramStandIn() as tg:
        yield InlineBotApi(tg)


@asynccontextmanager
async def child_standin() -> AsyncIterator[BotApi]:
    async with standin_process.child_standin(SCRIPT, WAIT + 10) as (session, hello):
        yield RemoteBotApi(session, hello)


async def serve_standin() -> None:
    """The child: a TelegramStandIn plus a control app; prints both addresses as one JSON line."""
    async with TelegramStandIn() as tg:

        async def push(request: web.Request) -> web.Response:
            pushes = [(chat, sender, text) for chat, sender, text in await request.json()]
            return web.json_response({"pushed_at": _push_all(tg, pushes)})

        async def wait(request: web.Request) -> web.Response:
            count, actions_from = int(request.query["sent"]), int(request.query["actions_from"])
            await tg.wait_for(lambda: len(tg.sent) >= count, timeout=WAIT)
            return web.json_response(vars(_snapshot(tg, actions_from)))

        app = web.Application()
        app.router.add_post("/push", push)
        app.router.add_get("/wait", wait)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        print(json.dumps({"base_url": tg.base_url, "token": tg.token,
                          "control": f"http://127.0.0.1:{port}"}), flush=True)
        # The parent closes our stdin when done (or dies): that is the stop signal.
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        await reader.read()
        await runner.cleanup()


def force_backend(name: str) -> None:
    """Make every Application built from now on use `name` as its transport, sized like PTB's."""
    if name == "default":
        return

    def build_request(self: ApplicationBuilder[Any, Any, Any, Any, Any, Any],
                      get_updates: bool) -> BaseRequest:
        size = 1 if get_updates else 256  # PTB's defaults: one long poll, 256 for everything else
        return HTTPXRequest(connection_pool_size=size) if name == "httpx" else AiohttpRequest(size)

    ApplicationBuilder._build_request = build_request  # type: ignore[method-assign]


async def bench(args: argparse.Namespace) -> None:
    profiler = cProfile.Profile() if args.profile else None
    standin = child_standin if args.standin == "process" else inline_standin
    with tempfile.TemporaryDirectory() as tmp:
        async with standin() as api:
            config = parse_config(
                {
                    "database": {"path": str(Path(tmp) / "bench.db")},
                    "channels": {"telegram": {"enabled": True, "base_url": api.base_url,
                                              "dm_policy": "open"}},
                    "semantic": {"enabled": "off"},  # its worker would compete for the CPU
                },
                str(Path(tmp) / "config.toml"),
            )
            limiter = AIORateLimiter(overall_max_rate=0, group_max_rate=0)
            channel = TelegramChannel(config.channels.telegram, agent_id="main", token=api.token,
                                      rate_limiter=limiter)
            brain = InstantBrain()
            daemon = Daemon(config, [channel], brain=brain)
            task = asyncio.create_task(daemon.run())
            try:
                await asyncio.wait_for(channel.ready.wait(), 10)
                transport = type(channel._app.bot.request).__name__
                print(f"stand-in: {args.standin}; transport: {transport}")
                brain.reply_delay = MODEL_DELAY  # an instant reply would cancel typing before it is sent
                await latency(api, args.samples)
                brain.reply_delay = 0.0
                await throughput(api, args.users, args.per_user, profiler)
            finally:
                daemon.request_stop()
                await asyncio.wait_for(task, 30)
    if profiler is not None:
        profiler.dump_stats(args.profile)
        print(f"profile of the throughput run (event-loop thread) written to {args.profile}")


async def latency(api: BotApi, samples: int) -> None:
    person = user(1, "Solo")
    chat = private_chat(person)
    delays = []
    seen = await api.wait_sent(0)
    for n in range(samples):
        pushed_at = await api.push([(chat, person, f"sample {n}")])
        after = await api.wait_sent(seen.sent + 1, actions_from=len(seen.actions))
        delays.append((after.actions[0] - pushed_at) * 1000)
        seen = Snapshot(after.sent, after.last_sent_at, seen.actions + after.actions)
    delays.sort()
    p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))]
    print(f"update → first sendChatAction over {samples} updates: median {statistics.median(delays):.1f} ms, "
          f"p99 {p99:.1f} ms, max {delays[-1]:.1f} ms (target ≤ {TARGET_TYPING_MS:.0f} ms)")


async def throughput(api: BotApi, users: int, per_user: int, profiler: cProfile.Profile | None) -> None:
    total = users * per_user
    people = [user(1000 + n, f"User{n}") for n in range(users)]
    pushes = [(private_chat(person), person, f"message {round_} from {person['first_name']}")
              for round_ in range(per_user) for person in people]
    start_sent = (await api.wait_sent(0)).sent
    cpu, loop_cpu = time.process_time(), time.thread_time()
    if profiler is not None:
        profiler.enable()
    pushed_at = await api.push(pushes)
    done = await api.wait_sent(start_sent + total)
    if profiler is not None:
        profiler.disable()
    cpu, loop_cpu = time.process_time() - cpu, time.thread_time() - loop_cpu
    wall = done.last_sent_at - pushed_at
    print(f"{total} updates from {users} users: {wall:.2f} s, {total / wall:.0f} turns/s "
          f"(target ≥ {TARGET_TURNS_PER_S:.0f})")
    print(f"  daemon CPU per turn {cpu / total * 1000:.2f} ms (event-loop thread "
          f"{loop_cpu / total * 1000:.2f} ms), {cpu / wall * 100:.0f}% of one core")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--per-user", type=int, default=30)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--standin", choices=["process", "inline"], default="process",
                        help="run the Bot API stand-in in a child process (default) or in the daemon's loop")
    parser.add_argument("--backend", choices=["default", "httpx", "aiohttp"], default="default",
                        help="force python-telegram-bot's HTTP transport")
    parser.add_argument("--profile", metavar="FILE", help="write a cProfile of the throughput run to FILE")
    parser.add_argument("--serve-standin", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_standin:
        asyncio.run(serve_standin())
        return
    force_backend(args.backend)
    print("command: .venv/bin/python bench/telegram_throughput.py " + " ".join(sys.argv[1:]))
    with open(os.devnull, "w") as sink:
        configure_logging("INFO", "json", secrets=[], stream=sink)
        asyncio.run(bench(args))
    print(f"load average {os.getloadavg()[0]:.2f}, {memory_pressure()} (other processes share the machine)")


def memory_pressure() -> str:
    """Linux PSI: the share of the last minute some task stalled on memory (reclaim slows everything)."""
    try:
        line = Path("/proc/pressure/memory").read_text().splitlines()[0]
    except OSError:
        return "memory pressure unknown"
    avg60 = dict(field.split("=") for field in line.split()[1:])["avg60"]
    return f"memory pressure {avg60}% (PSI some, avg60)"


if __name__ == "__main__":
    main()
