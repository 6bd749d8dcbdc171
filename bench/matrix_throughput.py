"""Matrix end to end: events/s answered and event → first visible text through mautrix against a
real Synapse, and the daemon's CPU per event, to set beside bench/telegram_throughput.py and
bench/discord_throughput.py.

Usage: .venv/bin/python -m bench.matrix_throughput [--messages 600] [--chats 30] [--serial 60]
       [--pin-cpu N]

The daemon runs in this process with the real MatrixChannel and an instant in-process brain
(bench/instant_brain.py); logging is the production setting (INFO JSON lines) into /dev/null.
A child process (this script with `--serve-standin`) starts Synapse (bench/matrix_platform.py: the
bot and `--chats` people, each in a direct chat the bot joined), the people's clients, and the
proxy the daemon uses as its homeserver, which notes when each of the bot's events was created; so
neither Synapse nor the people are charged to the daemon's CPU. Times are time.monotonic(), one
clock for every process on Linux.

1. Burst: `--messages` messages written at once (32 sends in flight), round-robin over the chats;
   events/s from the first message created to the last reply created, the latency message created
   → reply created (queueing included: the first visible text, the reply being one event), and
   the daemon's CPU per event.
2. Serial: `--serial` messages in one chat, each written after the previous reply: unloaded latency
   (a `/sync` long poll answered, the turn, the send).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import aiohttp
from aiohttp import web

from bench import standin_process
from bench.discord_throughput import _cpu, _latency_line
from bench.instant_brain import InstantBrain
from bench.matrix_platform import matrix_world
from bot.config import parse_config
from bot.core.log import configure_logging
from bot.daemon.assembly import Daemon
from channels.matrix.channel import MatrixChannel

WAIT = 600.0
IN_FLIGHT = 32
PEOPLE_ENV = "SB_BENCH_MATRIX_PEOPLE"


async def serve_standin() -> None:
    """The child: Synapse, the people and the proxy, driven over a control app; prints the
    addresses as one JSON line, stops when its stdin closes."""
    people = int(os.environ.get(PEOPLE_ENV, "30"))
    async with matrix_world(people + 1) as world:
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(person: int, text: str) -> float:
            async with gate:
                await world.people[person].send(world.rooms[person], text)
                return time.monotonic()  # the event exists once Synapse answered

        async def dispatch(request: web.Request) -> web.Response:
            writes = [(int(p), str(t)) for p, t in await request.json()]
            return web.json_response(list(await asyncio.gather(*(one(p, t) for p, t in writes))))

        async def wait(request: web.Request) -> web.Response:
            count, start = int(request.query["count"]), int(request.query["start"])
            deadline = time.monotonic() + WAIT
            while len(world.sent) < count and time.monotonic() < deadline:
                world.grew.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(world.grew.wait(), deadline - time.monotonic())
            sent = list(world.sent.values())[start:]
            return web.json_response([[world.rooms.index(s.room), s.at] for s in sent])

        async def cpu(request: web.Request) -> web.Response:
            return web.json_response({"cpu": process_cpu(world.synapse.pid), "requests": world.requests})

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/dispatch", dispatch)
        app.router.add_get("/wait", wait)
        app.router.add_get("/cpu", cpu)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        print(json.dumps({"homeserver": world.proxy_url, "user_id": world.bot.user_id,
                          "token": world.bot.access_token, "people": [p.user_id for p in world.people],
                          "control": f"http://127.0.0.1:{runner.addresses[0][1]}"}), flush=True)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        await reader.read()
        await runner.cleanup()


def process_cpu(pid: int | None) -> float:
    """A process's CPU seconds (user + system, /proc), 0 when unknown."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Bench:
    def __init__(self, session: aiohttp.ClientSession, control: str) -> None:
        self.session, self.control, self.sent = session, control, 0
        self.notes = ""

    async def write(self, writes: list[tuple[int, str]]) -> list[float]:
        async with self.session.post(f"{self.control}/dispatch", json=writes) as response:
            response.raise_for_status()
            return [float(t) for t in await response.json()]

    async def replies(self, count: int) -> list[tuple[int, float]]:
        params = {"count": self.sent + count, "start": self.sent}
        async with self.session.get(f"{self.control}/wait", params=params) as response:
            response.raise_for_status()
            found = [(int(p), float(t)) for p, t in await response.json()]
        if len(found) < count:
            raise RuntimeError(f"{len(found)} of {count} replies within {WAIT:.0f} s")
        self.sent += len(found)
        return found

    async def synapse(self) -> tuple[float, Counter[str]]:
        """Synapse's CPU seconds so far, and the daemon's requests to it by kind."""
        async with self.session.get(f"{self.control}/cpu") as response:
            response.raise_for_status()
            found = await response.json()
            return float(found["cpu"]), Counter(found["requests"])

    async def burst(self, messages: int, chats: int) -> tuple[float, list[float], float]:
        """(events/s, message → reply latencies in ms, daemon CPU ms per event); sets `notes`."""
        writes = [(n % chats, f"message {n} about the train to the airport") for n in range(messages)]
        cpu, (synapse, asked) = _cpu(), await self.synapse()
        times = await self.write(writes)
        replies = await self.replies(messages)
        cpu, (synapse_after, asked_after) = _cpu() - cpu, await self.synapse()
        per = ", ".join(f"{kind} {n / messages:.2f}" for kind, n in (asked_after - asked).most_common(6))
        self.notes = (f"the {messages} messages were created over {max(times) - min(times):.1f} s "
                      f"({messages / (max(times) - min(times)):,.1f}/s); Synapse CPU "
                      f"{(synapse_after - synapse) / messages * 1000:.1f} ms per message answered (its "
                      f"event and the reply's); the daemon's requests per message: {per}")
        written: dict[int, list[float]] = defaultdict(list)
        for (person, _), at in zip(writes, times, strict=True):
            written[person].append(at)
        for person in written:
            written[person].sort()
        seen: dict[int, int] = defaultdict(int)
        latencies = []
        for person, at in replies:  # the k-th reply in a chat answers its k-th message
            latencies.append((at - written[person][seen[person]]) * 1000)
            seen[person] += 1
        return messages / (max(at for _, at in replies) - min(times)), latencies, cpu / messages * 1000

    async def serial(self, count: int, person: int) -> list[float]:
        latencies = []
        for n in range(count):
            (at,) = await self.write([(person, f"serial message {n}")])
            ((_, replied),) = await self.replies(1)
            latencies.append((replied - at) * 1000)
        return latencies


async def run(args: argparse.Namespace, tmp: Path) -> None:
    os.environ[PEOPLE_ENV] = str(args.chats)
    async with standin_process.child_standin("bench.matrix_throughput", WAIT + 10,
                                             ready_within=300) as (session, hello):
        data = {
            "database": {"path": str(tmp / "bench.db")},
            "channels": {"matrix": {"enabled": True, "homeserver": hello["homeserver"],
                                    "user_id": hello["user_id"], "allow_from": hello["people"]}},
            "router": {"shutdown_grace": 5.0},
            "semantic": {"enabled": "off"},  # its worker would compete for the CPU being measured
        }
        config = parse_config(data, "<bench>")
        channel = MatrixChannel(config.channels.matrix, agent_id=config.agent.id, access_token=hello["token"])
        daemon = Daemon(config, [channel], brain=InstantBrain())
        task = asyncio.create_task(daemon.run())
        bench = Bench(session, hello["control"])
        try:
            await asyncio.wait_for(channel.ready.wait(), 60)
            await bench.burst(min(60, args.messages), args.chats)  # warm-up: each chat's room looked at
            rate, latencies, cpu_ms = await bench.burst(args.messages, args.chats)
            print(f"burst: {args.messages} messages over {args.chats} direct chats: {rate:,.1f} events/s "
                  f"answered end to end; daemon CPU {cpu_ms:.2f} ms per event")
            print(f"  message created -> reply created (first visible text; queueing included): "
                  f"{_latency_line(latencies)}")
            print(f"  {bench.notes}")
            one = await bench.serial(args.serial, args.chats)
            print(f"serial: {args.serial} messages in one chat, one at a time: {_latency_line(one)}")
        finally:
            daemon.request_stop()
            await asyncio.wait_for(task, 30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=600, help="messages in the burst")
    parser.add_argument("--chats", type=int, default=30, help="direct chats the burst is spread over")
    parser.add_argument("--serial", type=int, default=60, help="one-at-a-time messages for unloaded latency")
    parser.add_argument("--pin-cpu", type=int, metavar="N", help="run the daemon's threads on CPU N")
    parser.add_argument("--serve-standin", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_standin:
        asyncio.run(serve_standin())
        return
    if args.pin_cpu is not None:
        os.sched_setaffinity(0, {args.pin_cpu})
    devnull = open(os.devnull, "w")  # noqa: SIM115 - lives for the whole process
    configure_logging("INFO", "json", [], stream=devnull)
    print(f"matrix throughput: real mautrix + Daemon against Synapse (child process, behind a counting "
          f"proxy), instant brain, CPUs {sorted(os.sched_getaffinity(0))}")
    print("command: .venv/bin/python -m bench.matrix_throughput " + " ".join(sys.argv[1:]))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sb-matrix-bench-") as tmp:
        asyncio.run(run(args, Path(tmp)))
    print(f"wall time {time.monotonic() - started:.0f} s; load average {os.getloadavg()[0]:.2f} "
          f"(other processes share the CPUs)")


if __name__ == "__main__":
    main()
