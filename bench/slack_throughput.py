"""Slack end to end: DM events/s answered, event → first visible text, and daemon CPU per event,
beside Telegram and Discord measured the same way.

Usage: .venv/bin/python -m bench.slack_throughput [--platforms slack|all] [--users 50]
       [--per-user 20] [--serial 30] [--keep DIR]

The daemon is a real subprocess (`python -m bot run --config X`; Slack needs only its `base_url`,
Discord runs through bot.testing.daemon_child) with JSON logs at INFO into a file; the platform's
stand-in (for Slack: Web API + Socket Mode, bench/slack_platform.py) and the Anthropic Messages API
stand-in run in this process on 127.0.0.1. The model answers at once ("re: <the message>"), so what
is measured is the daemon's own cost per turn: the real slack-bolt / python-telegram-bot /
discord.py client, intake, the store, the turn, the outbox.

1. Warm-up: each user's first DM, answered (Discord needs it to know the DM channels; every
   platform gets it, so the burst runs on warm caches).
2. Burst: `users × per-user` DMs written at once, round-robin over the users; events/s from the
   first write to the last answer; event → first visible text (the first message the bot posted
   that shows the marker: a preview or the reply), queueing included; the daemon process's CPU
   (utime + stime from /proc/<pid>/stat) over the burst, per event.
3. Serial: `--serial` DMs from one user, each written after the previous answer: unloaded latency.

The stand-ins share this process and the machine's CPUs with the daemon: events/s and latencies
include their cost; CPU per event is the daemon's alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.crash_loop import (
    CONNECT_TIMEOUT,
    MARKER,
    Cycle,
    DiscordPlatform,
    Driver,
    Plan,
    Platform,
    TelegramPlatform,
    open_platform,
)
from bench.slack_platform import SlackPlatform
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest, Response, Text
from bot.testing.models import FAST, last_user_line

WAIT = 300.0
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def instant_echo(request: RecordedRequest) -> Response:
    if request.model == FAST:
        return Text('{"relevant": []}')
    return Text(f"re: {last_user_line(request)}")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (its threads included), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


def timed_texts(platform: Platform) -> list[tuple[float, str]]:
    """(when the platform created it, what it shows now) for each message the bot posted."""
    if isinstance(platform, SlackPlatform):
        return platform.posted()
    if isinstance(platform, TelegramPlatform):
        return [(m.time, m.visible_text) for m in platform.tg.sent]
    if isinstance(platform, DiscordPlatform):
        return [(m.time, m.content or "") for m in platform.dc.sent]
    raise TypeError(platform)


def first_shown(platform: Platform) -> dict[str, float]:
    """marker → when a message of the bot's first showed it."""
    seen: dict[str, float] = {}
    for at, text in timed_texts(platform):
        for marker in MARKER.findall(text):
            seen[marker] = min(at, seen.get(marker, at))
    return seen


async def until(predicate: Callable[[], bool], proc: asyncio.subprocess.Process, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        if proc.returncode is not None:
            raise RuntimeError(f"the daemon exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)  # latencies come from the platform's clock, not from this poll


def all_answered(driver: Driver, markers: list[str]) -> Callable[[], bool]:
    wanted = set(markers)
    return lambda: wanted <= driver.answered()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def spread(values: list[float]) -> str:
    return (f"median {statistics.median(values):.1f} ms, p90 {percentile(values, 0.9):.1f} ms, "
            f"p99 {percentile(values, 0.99):.1f} ms, max {max(values):.1f} ms")


async def measure(name: str, args: argparse.Namespace, workdir: Path) -> list[str]:
    plan = Plan(signals=(), users=args.users, grace=5.0)
    async with AnthropicStandIn() as api, open_platform(name, args.users) as platform:
        api.default = instant_echo
        driver = Driver(platform, workdir, plan, api)
        cycle = Cycle("bench", workdir / "daemon.log")
        proc = await driver.spawn(cycle)
        try:
            if not await driver.watch(proc, cycle, time.monotonic(), 0, lambda: platform.contacts() > 0,
                                      CONNECT_TIMEOUT):
                raise RuntimeError(f"the daemon did not reach {name}; see {cycle.log}")
            for user in range(args.users):  # warm-up
                driver.write(user)
            await until(all_answered(driver, driver.pushed), proc, "the warm-up")
            # The burst
            start_cpu, pushed_before = cpu_seconds(proc.pid), len(driver.pushed)
            written: dict[str, float] = {}
            for _ in range(args.per_user):
                for user in range(args.users):
                    driver.write(user)
                    written[driver.pushed[-1]] = time.monotonic()
            burst = driver.pushed[pushed_before:]
            await until(all_answered(driver, burst), proc, "the burst's answers")
            cpu = cpu_seconds(proc.pid) - start_cpu
            shown = first_shown(platform)
            latencies = [(shown[m] - written[m]) * 1000 for m in burst]
            elapsed = max(shown[m] for m in burst) - min(written.values())
            # Serial: one user, one message at a time
            serial = []
            for _ in range(args.serial):
                driver.write(0)
                marker, at = driver.pushed[-1], time.monotonic()
                await until(all_answered(driver, [marker]), proc, "a serial answer")
                serial.append((first_shown(platform)[marker] - at) * 1000)
            doubles = sum(len(MARKER.findall(text)) for text in platform.sent_texts()) - len(driver.pushed)
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 30)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
    n = len(burst)
    return [
        f"{name}: burst of {n} DMs ({args.users} users × {args.per_user}): {n / elapsed:,.1f} events/s "
        f"answered; daemon CPU {cpu / n * 1000:.2f} ms per event",
        f"  event → first visible text (queueing included): {spread(latencies)}",
        f"  serial ({args.serial} DMs, one at a time): {spread(serial)}",
        f"  answers beyond one per message: {doubles}",
    ]


async def bench(args: argparse.Namespace, folder: Path) -> None:
    names = ["slack", "telegram", "discord"] if args.platforms == "all" else [args.platforms]
    for name in names:
        workdir = folder / name
        workdir.mkdir(parents=True, exist_ok=True)
        print("\n".join(await measure(name, args, workdir)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platforms", choices=["slack", "telegram", "discord", "all"], default="all",
                        help="all (default): Slack, then Telegram and Discord measured the same way")
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--per-user", type=int, default=20, help="DMs each user writes in the burst")
    parser.add_argument("--serial", type=int, default=30, help="one-at-a-time DMs for unloaded latency")
    parser.add_argument("--keep", metavar="DIR", help="keep databases and daemon logs in DIR")
    args = parser.parse_args()
    print("command: .venv/bin/python -m bench.slack_throughput " + " ".join(sys.argv[1:]))
    with tempfile.TemporaryDirectory(prefix="sb-slack-bench-") as tmp:
        asyncio.run(bench(args, Path(args.keep) if args.keep else Path(tmp)))
    print(f"load average {os.getloadavg()[0]:.2f} (other processes share the machine)")


if __name__ == "__main__":
    main()
