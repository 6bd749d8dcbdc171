"""MCP servers under load and crashes: call latency, crash-to-tools-back time, and nothing leaked.

Usage: .venv/bin/python -m bench.mcp_soak [--calls 2000] [--concurrency 8] [--crashes 20]

Runs the real `McpManager` with the test kit's SDK server (`bot.testing.mcp_calc`) over stdio:
`--calls` calls of `add` from `--concurrency` coroutines (latency median, p95, max; calls/s), then
`--crashes` cycles of a call that kills the server followed by waiting until its tools are offered
again (time to tools back: the restart wait, the process start, the handshake and the listing),
then a stop. Counts every server process started, those still alive after the stop (expected 0),
and the daemon's open file descriptors before and after (a leak grows them). Prints figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from bot.config import parse_config
from bot.core.log import configure_logging
from bot.core.messages import ChatRef
from bot.core.session_key import parse
from bot.testing.mcp_calc import server_entry
from bot.tools.base import ToolContext
from bot.tools.mcp import McpManager

CONTEXT = ToolContext(
    session_key=parse("agent:main:console:direct:local"), chat=ChatRef("console", "local"),
    user_id="local", request_id=1, is_admin=True, shared=False, now=0.0, timezone="UTC",
)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def millis(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[max(0, int(len(ordered) * 0.95) - 1)]
    return (f"median {statistics.median(ordered) * 1000:.2f} ms, p95 {p95 * 1000:.2f} ms, "
            f"max {ordered[-1] * 1000:.2f} ms")


async def until_running(manager: McpManager, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not manager.tools():
        if time.monotonic() > deadline:
            raise SystemExit(f"the server did not come back within {timeout} s: {manager.status()}")
        await asyncio.sleep(0.002)


async def main(args: argparse.Namespace) -> None:
    pidfile = Path(tempfile.mkdtemp()) / "pids"
    config = parse_config({"mcp_servers": [server_entry("calc", "--pidfile", str(pidfile))]}, "<bench>")
    fds_before = open_fds()
    async with McpManager(config, restart_delay=args.restart_delay,
                          max_restart_delay=args.max_restart_delay) as manager:
        started = time.perf_counter()
        await until_running(manager)
        print(f"first start to tools offered: {(time.perf_counter() - started) * 1000:.0f} ms")

        latencies: list[float] = []
        errors = 0

        async def caller(count: int) -> None:
            nonlocal errors
            for i in range(count):
                tool = next(t for t in manager.tools() if t.name == "calc__add")
                began = time.perf_counter()
                result = await tool.run({"a": i, "b": 1}, CONTEXT)
                latencies.append(time.perf_counter() - began)
                errors += result.is_error or result.content != str(i + 1)

        per = args.calls // args.concurrency
        began = time.perf_counter()
        await asyncio.gather(*(caller(per) for _ in range(args.concurrency)))
        elapsed = time.perf_counter() - began
        print(f"{len(latencies)} calls, {args.concurrency} at a time: {len(latencies) / elapsed:.0f} "
              f"calls/s; {millis(latencies)}; wrong or error results: {errors}")

        back: list[float] = []
        for _ in range(args.crashes):
            crash = next(t for t in manager.tools() if t.name == "calc__crash")
            result = await crash.run({}, CONTEXT)
            began = time.perf_counter()
            assert result.is_error and manager.tools() == (), "tools offered while the server is down"
            await until_running(manager)
            back.append(time.perf_counter() - began)
        if back:
            print(f"{len(back)} crashes (restart wait {args.restart_delay:g} s doubling up to "
                  f"{args.max_restart_delay:g} s): tools back after {millis(back)}")
        (state,) = manager.status()
        print(f"restarts counted by status: {state['restarts']}")
        stop_began = time.perf_counter()
    print(f"stop: {(time.perf_counter() - stop_began) * 1000:.0f} ms")
    pids = [int(line) for line in pidfile.read_text().split()]
    print(f"server processes started: {len(pids)}; alive after stop: {sum(alive(p) for p in pids)}")
    print(f"open file descriptors: {fds_before} before, {open_fds()} after")
    print(f"load average {os.getloadavg()[0]:.2f} (other processes share the cores)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--crashes", type=int, default=20)
    parser.add_argument("--restart-delay", type=float, default=0.05,
                        help="the first restart wait (the daemon: 1 s)")
    parser.add_argument("--max-restart-delay", type=float, default=1.0,
                        help="the cap of the doubling wait, and the uptime that resets it (the daemon: 60 s)")
    with open(os.devnull, "w") as quiet:
        configure_logging("WARNING", "json", stream=quiet)
        asyncio.run(main(parser.parse_args()))
