"""Telegram end to end: updates/s and update→typing latency through the real python-telegram-bot.

Usage: .venv/bin/python -m bench.telegram_throughput [--users 100] [--per-user 30] [--samples 50]
       [--standin process|inline] [--backend default|httpx|aiohttp] [--profile FILE]
       [--model brain|instant|stream] [--stream-seconds 1.0] [--limiter off|on]
       [--streaming auto|off] [--max-turns N]

The daemon runs with the real TelegramChannel (python-telegram-bot long polling) against the local
Bot API stand-in on 127.0.0.1. By default (`--model brain --limiter off`) the brain is an instant
in-process one that streams nothing, and the rate limiter is built with its limits off, since it
exists to hold us to Telegram's ~30 messages/s and would measure only itself: this measures our
own cost per turn. Logging is the production setting (INFO JSON lines) into /dev/null.

`--limiter on` keeps Telegram's limits (30 requests/s, 20 a minute per group) and `--model instant`
or `stream` use the real SDK brain against the Anthropic stand-in (in the same child process as
the Bot API's), which streams its reply at once or over `--stream-seconds`: with `streaming =
"auto"` (`--streaming`) every reply may be previewed as a draft, so this measures how many final
replies a second get through the send budget, and how many previews were sent beside them. A
model that takes a second per reply needs 30 turns in flight for 30 replies/s: `--max-turns` sets
`[router].max_concurrent_turns` (default 8).

The stand-in plays Telegram's servers, so by default it runs in a child process (this script with
`--serve-standin`, driven over a small control API) and its CPU is not charged to the daemon;
`--standin inline` shares one event loop as before, which gives a floor. `--backend` forces
python-telegram-bot's HTTP transport (PTB's httpx one or channels.telegram.request's aiohttp one);
`default` keeps whatever TelegramChannel builds.

1. Latency: one update at a time, the time from the update being queued at the Bot API to the
   first sendChatAction for that chat (target ≤ 100 ms). The brain takes 200 ms here: with an
   instant reply the typing action is rightly cancelled before it is sent.
   Only with `--model brain`.
2. Throughput: `users × per-user` updates queued at once; final replies/s from queueing to the
   last reply arriving at the Bot API (target ≥ 300 turns/s with the limiter off, ≥ 29 with it on),
   the same over the run's second half (past the limiter's first burst), previews sent beside
   them (drafts, and message edits, which these private chats' previews never are), and the
   daemon process's CPU per turn.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import json
import math
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

import aiohttp
from aiohttp import web
from telegram.ext import ApplicationBuilder
from telegram.request import BaseRequest, HTTPXRequest

from bench import standin_process
from bench.instant_brain import InstantBrain
from bot.config import parse_config
from bot.core.log import configure_logging
from bot.daemon.assembly import Daemon
from bot.models.brain import AnthropicBrain, Brain
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest, Text
from bot.testing.telegram_api import TelegramStandIn, private_chat, user
from channels.telegram.channel import TelegramChannel
from channels.telegram.limits import FloodLimiter
from channels.telegram.request import AiohttpRequest

TARGET_TURNS_PER_S = 300.0
TARGET_LIMITED_PER_S = 29.0  # Telegram's 30 messages/s, less a little
MAIN_MODEL, FAST_MODEL = "bench-main", "bench-fast"
# About the length of a short chat answer; a streamed one arrives in STREAM_PARTS deltas.
REPLY = ("Sure, noted. The moon pulls the sea toward it, and the earth turning under that bulge "
         "gives two high tides a day; the sun adds a smaller pull of its own. Anything else?")
STREAM_PARTS = 20
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
    sent_times: list[float]  # sendMessage times, from the index asked for
    drafts: int  # sendMessageDraft calls that succeeded
    edits: int  # editMessageText calls that succeeded


def _snapshot(tg: TelegramStandIn, actions_from: int, sent_from: int) -> Snapshot:
    actions = [c.time for c in tg.calls_of("sendChatAction")[actions_from:]]
    return Snapshot(len(tg.sent), tg.sent[-1].time if tg.sent else 0.0, actions,
                    [m.time for m in tg.sent[sent_from:]], len(tg.drafts), len(tg.edits))


def model_reply(seconds: float) -> Any:
    """The Anthropic stand-in's answer to every request: triage picks two units at once; the reply
    is streamed at once (`seconds` 0) or over `seconds`."""
    triage = Text('{"relevant":[1,2]}')
    reply = (Text(REPLY, parts=STREAM_PARTS, delta_delay=seconds / STREAM_PARTS) if seconds
             else Text(REPLY, parts=3))

    def answer(request: RecordedRequest) -> Text:
        return triage if request.model == FAST_MODEL else reply

    return answer


def _push_all(tg: TelegramStandIn, pushes: list[Push]) -> float:
    pushed_at = time.monotonic()
    for chat, sender, text in pushes:
        tg.push_message(chat, sender, text)
    return pushed_at


class BotApi(Protocol):
    """The bench's view of the stand-in, wherever it runs."""

    token: str
    base_url: str

    anthropic_url: str

    async def push(self, pushes: list[Push]) -> float: ...
    async def wait_sent(self, count: int, actions_from: int = 0, sent_from: int = 0) -> Snapshot: ...
    async def set_model(self, seconds: float) -> None: ...


class InlineBotApi:
    """The stand-ins on the daemon's own event loop: their CPU counts against the daemon."""

    def __init__(self, tg: TelegramStandIn, api: AnthropicStandIn) -> None:
        self._tg, self._api, self.token, self.base_url = tg, api, tg.token, tg.base_url
        self.anthropic_url = api.base_url

    async def push(self, pushes: list[Push]) -> float:
        return _push_all(self._tg, pushes)

    async def wait_sent(self, count: int, actions_from: int = 0, sent_from: int = 0) -> Snapshot:
        await self._tg.wait_for(lambda: len(self._tg.sent) >= count, timeout=WAIT)
        return _snapshot(self._tg, actions_from, sent_from)

    async def set_model(self, seconds: float) -> None:
        self._api.default = model_reply(seconds)


class RemoteBotApi:
    """The stand-ins in a child process, driven over its control API (one request per step)."""

    def __init__(self, session: aiohttp.ClientSession, hello: dict[str, str]) -> None:
        self._session, self._control = session, hello["control"]
        self.token, self.base_url = hello["token"], hello["base_url"]
        self.anthropic_url = hello["anthropic_url"]

    async def push(self, pushes: list[Push]) -> float:
        async with self._session.post(f"{self._control}/push", json=pushes) as response:
            response.raise_for_status()
            return float((await response.json())["pushed_at"])

    async def wait_sent(self, count: int, actions_from: int = 0, sent_from: int = 0) -> Snapshot:
        params = {"sent": count, "actions_from": actions_from, "sent_from": sent_from}
        async with self._session.get(f"{self._control}/wait", params=params) as response:
            response.raise_for_status()
            return Snapshot(**await response.json())

    async def set_model(self, seconds: float) -> None:
        async with self._session.post(f"{self._control}/model", json={"seconds": seconds}) as response:
            response.raise_for_status()


@asynccontextmanager
async def inline_standin() -> AsyncIterator[BotApi]:
    async with TelegramStandIn() as tg, AnthropicStandIn() as api:
        yield InlineBotApi(tg, api)


@asynccontextmanager
async def child_standin() -> AsyncIterator[BotApi]:
    async with standin_process.child_standin("bench.telegram_throughput", WAIT + 10) as (session, hello):
        yield RemoteBotApi(session, hello)


async def serve_standin() -> None:
    """The child: a TelegramStandIn, an AnthropicStandIn and a control app; prints their addresses
    as one JSON line."""
    async with TelegramStandIn() as tg, AnthropicStandIn() as api:

        async def push(request: web.Request) -> web.Response:
            pushes = [(chat, sender, text) for chat, sender, text in await request.json()]
            return web.json_response({"pushed_at": _push_all(tg, pushes)})

        async def wait(request: web.Request) -> web.Response:
            count, actions_from = int(request.query["sent"]), int(request.query["actions_from"])
            await tg.wait_for(lambda: len(tg.sent) >= count, timeout=WAIT)
            return web.json_response(vars(_snapshot(tg, actions_from, int(request.query["sent_from"]))))

        async def model(request: web.Request) -> web.Response:
            api.default = model_reply(float((await request.json())["seconds"]))
            return web.json_response({})

        app = web.Application()
        app.router.add_post("/push", push)
        app.router.add_get("/wait", wait)
        app.router.add_post("/model", model)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        print(json.dumps({"base_url": tg.base_url, "token": tg.token, "anthropic_url": api.base_url,
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
                    "anthropic": {"base_url": api.anthropic_url, "model": MAIN_MODEL,
                                  "fast_model": FAST_MODEL, "timeout": WAIT, "max_retries": 0},
                    "channels": {"telegram": {"enabled": True, "base_url": api.base_url,
                                              "dm_policy": "open", "streaming": args.streaming}},
                    "router": {"max_concurrent_turns": args.max_turns},
                    "semantic": {"enabled": "off"},  # its worker would compete for the CPU
                },
                str(Path(tmp) / "config.toml"),
            )
            limiter = (FloodLimiter(max_retries=3) if args.limiter == "on"
                       else FloodLimiter(overall_max_rate=0, group_max_rate=0))
            channel = TelegramChannel(config.channels.telegram, agent_id="main", token=api.token,
                                      rate_limiter=limiter)
            instant = InstantBrain()
            brain: Brain = instant if args.model == "brain" else AnthropicBrain(config.anthropic, "bench-key")
            await api.set_model(args.stream_seconds if args.model == "stream" else 0.0)
            daemon = Daemon(config, [channel], brain=brain)
            task = asyncio.create_task(daemon.run())
            try:
                await asyncio.wait_for(channel.ready.wait(), 10)
                transport = type(channel._app.bot.request).__name__
                model = {"brain": "instant in-process brain (no streaming)",
                         "instant": "SDK brain, reply streamed at once",
                         "stream": f"SDK brain, reply streamed over {args.stream_seconds:g} s"}[args.model]
                print(f"stand-in: {args.standin}; transport: {transport}; limiter: {args.limiter}; "
                      f"model: {model}; streaming: {args.streaming}; "
                      f"max_concurrent_turns: {args.max_turns}")
                if args.model == "brain":
                    # An instant reply would cancel typing before it is sent.
                    instant.reply_delay = MODEL_DELAY
                    await latency(api, args.samples)
                    instant.reply_delay = 0.0
                target = TARGET_LIMITED_PER_S if args.limiter == "on" else TARGET_TURNS_PER_S
                await throughput(api, args.users, args.per_user, profiler, target)
            finally:
                daemon.request_stop()
                await asyncio.wait_for(task, 30)
                if isinstance(brain, AnthropicBrain):
                    await brain.aclose()
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
        seen = dataclasses.replace(after, actions=seen.actions + after.actions)
    delays.sort()
    p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))]
    print(f"update → first sendChatAction over {samples} updates: median {statistics.median(delays):.1f} ms, "
          f"p99 {p99:.1f} ms, max {delays[-1]:.1f} ms (target ≤ {TARGET_TYPING_MS:.0f} ms)")


async def throughput(
    api: BotApi, users: int, per_user: int, profiler: cProfile.Profile | None, target: float
) -> None:
    total = users * per_user
    people = [user(1000 + n, f"User{n}") for n in range(users)]
    pushes = [(private_chat(person), person, f"message {round_} from {person['first_name']}")
              for round_ in range(per_user) for person in people]
    start = await api.wait_sent(0)
    cpu, loop_cpu = time.process_time(), time.thread_time()
    if profiler is not None:
        profiler.enable()
    pushed_at = await api.push(pushes)
    done = await api.wait_sent(start.sent + total, sent_from=start.sent)
    if profiler is not None:
        profiler.disable()
    cpu, loop_cpu = time.process_time() - cpu, time.thread_time() - loop_cpu
    wall = done.last_sent_at - pushed_at
    # The second half: past the limiter's first burst (30 at once) and the turns' start.
    half = done.sent_times[total // 2 :]
    steady = (len(half) - 1) / (half[-1] - half[0]) if len(half) > 1 and half[-1] > half[0] else math.inf
    print(f"{total} updates from {users} users: {wall:.2f} s, {total / wall:.1f} final replies/s "
          f"(second half {steady:.1f}/s; target ≥ {target:.0f})")
    drafts, edits = done.drafts - start.drafts, done.edits - start.edits
    print(f"  previews sent: {drafts} drafts, {edits} edits "
          f"({(drafts + edits) / wall:.1f}/s beside the replies)")
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
    parser.add_argument("--model", choices=["brain", "instant", "stream"], default="brain",
                        help="the in-process instant brain (default), or the SDK brain against the "
                             "Anthropic stand-in streaming at once or over --stream-seconds")
    parser.add_argument("--stream-seconds", type=float, default=1.0,
                        help="how long the model writes each reply with --model stream")
    parser.add_argument("--limiter", choices=["off", "on"], default="off",
                        help="keep Telegram's limits (30 requests/s, 20 a minute per group) or not")
    parser.add_argument("--streaming", choices=["auto", "off"], default="auto",
                        help="the channel's `streaming` setting (previews while the model writes)")
    parser.add_argument("--max-turns", type=int, default=8, help="[router].max_concurrent_turns")
    parser.add_argument("--serve-standin", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_standin:
        asyncio.run(serve_standin())
        return
    force_backend(args.backend)
    print("command: .venv/bin/python -m bench.telegram_throughput " + " ".join(sys.argv[1:]))
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
