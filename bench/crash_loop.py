"""Crash loop: kill the daemon at random moments under load and count, from outside, what was lost or doubled.

Usage: .venv/bin/python -m bench.crash_loop [--platform telegram|discord|matrix|slack|both|all]
       [--signals kill,term] [--cycles 20] [--users 50] [--per-cycle 1] [--seed 1] [--max-uptime 2.0]
       [--kill-from contact|spawn|reply] [--downtime 0.5] [--quiet 5] [--grace 5] [--window-samples 40]
       [--keep DIR] [--verbose]

The daemon is a real subprocess (`python -m bot run --config X`; for Discord `python -m
bot.testing.daemon_child`, which only points discord.py at the stand-in first) with JSON logs at INFO, a
file per cycle. The stand-ins of Telegram, Discord (gateway + REST) and the Anthropic Messages API
run in this process on 127.0.0.1: they stand for the platforms, so they outlive every daemon. The
model echoes the current message's last line ("re: m17-3") after 50-300 ms, so turns are in flight
when the signal comes; triage answers '{"relevant": []}'.

Each user writes messages carrying a unique marker ("m<user>-<n>"). A cycle starts the daemon and
spreads `users × per-cycle` messages at random moments over the cycle: while it starts, while it
runs, and while it is down (Telegram updates wait at the Bot API; a Discord message goes to the
channel with no live session, so no event is ever delivered for it; a Matrix message waits in the
room for the next /sync from the kept token; a Slack DM written while no socket is open goes to
history only, read back by the next start's catch-up: bench/slack_platform.py). Matrix is a real
Synapse (bench/matrix_platform.py): "contact" is the bot's first answered /sync, and what the bot
sent is counted by event id, so a resend Synapse answers by its transaction id counts once. It kills
the daemon with the signal at a random moment 0-`max-uptime` s after the daemon reached the platform
(its first getUpdates, its gateway IDENTIFY, or its Socket Mode connection), then keeps it down
`downtime` s. Discord and Slack first have a warm-up (each user's first DM, with the daemon up): a
bot cannot list its DM channels, so a DM channel the daemon never saw can never be caught up, on
Discord as here. Slack's chat.postMessage has no idempotency key either: its doubles in the send
window are counted as Telegram's are. After the last cycle the daemon runs once more until every
message is answered or no reply came for `quiet` s (counted from its first reply, which may take a
while under load: the start and the SDK's import), and stops by SIGTERM.
Then the bench counts from outside: markers pushed, stored (user rows in the SQLite file), answered
(markers in what the platform received from the bot), replies stored and never delivered, requests
left awaiting a reply, and PRAGMA integrity_check. Prints figures; never fails on them. About 7
minutes with the defaults; bench/README.md says what each line means, and what Telegram's send
window is.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

ROOT = Path(__file__).resolve().parent.parent

from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest, Response, Text  # noqa: E402
from bot.testing.discord_api import DiscordStandIn  # noqa: E402
from bot.testing.discord_api import user as discord_user  # noqa: E402
from bot.testing.models import FAST, MODEL, last_user_line  # noqa: E402
from bot.testing.synapse import SynapseServer  # noqa: E402
from bot.testing.telegram_api import TelegramStandIn, private_chat  # noqa: E402
from bot.testing.telegram_api import user as telegram_user  # noqa: E402
from bot.testing.telegram_values import SentMessage  # noqa: E402

MARKER = re.compile(r"\bm\d+-\d+\b")
API_KEY = "sk-ant-crash-loop-0123456789abcdef"
TELEGRAM_TOKEN = "7000000001:AAcrashLoopTokenValue_0123456789abcdef"
DISCORD_TOKEN = "crash.loop.discord-token"
DISCORD_BOT_ID = 900_000_000_000_000_001
FIRST_TELEGRAM_USER = 5_000_000
FIRST_DISCORD_USER = 300_000_000_000_000_000
FIRST_DM = 400_000_000_000_000_000
CONNECT_TIMEOUT = 120.0
SIGNALS = {"kill": signal.SIGKILL, "term": signal.SIGTERM}
# Platforms whose send has no idempotency key: a reply accepted just before a SIGKILL, its id not yet
# recorded, is sent again after the restart (bench/README.md, "Telegram's send window").
NO_IDEMPOTENCY_KEY = ("telegram", "slack")


# -- the platforms, as the bench sees them -------------------------------------------------------


class Platform(Protocol):
    """A platform stand-in the daemon talks to; the bench writes as its users and reads what the bot sent."""

    name: str
    warm_up: bool  # each user's first message goes through a running daemon before any crash

    def config_section(self, users: int) -> str: ...
    def env(self) -> dict[str, str]: ...
    def command(self, config: Path) -> list[str]: ...
    def contacts(self) -> int: ...  # grows each time a daemon reaches the platform
    def push(self, user: int, text: str) -> bool: ...  # False: the stand-in refused it
    def sent_texts(self) -> list[str]: ...


class TelegramPlatform:
    name, warm_up = "telegram", False

    def __init__(self, tg: TelegramStandIn) -> None:
        self.tg = tg

    def config_section(self, users: int) -> str:
        ids = ", ".join(str(FIRST_TELEGRAM_USER + u) for u in range(users))
        return (f'[channels.telegram]\nenabled = true\nbase_url = "{self.tg.base_url}"\n'
                f"allow_from = [{ids}]\nmax_reply_age = 3600\n")

    def env(self) -> dict[str, str]:
        return {"TELEGRAM_BOT_TOKEN": self.tg.token}

    def command(self, config: Path) -> list[str]:
        return [sys.executable, "-m", "bot", "run", "--config", str(config)]

    def contacts(self) -> int:
        return len(self.tg.calls_of("getUpdates"))

    def push(self, user: int, text: str) -> bool:
        person = telegram_user(FIRST_TELEGRAM_USER + user, f"User{user}")
        self.tg.push_message(private_chat(person), person, text)
        return True

    def sent_texts(self) -> list[str]:
        return [m.visible_text for m in self.tg.sent]


class DiscordPlatform:
    name, warm_up = "discord", True

    def __init__(self, dc: DiscordStandIn) -> None:
        self.dc = dc

    def config_section(self, users: int) -> str:
        ids = ", ".join(str(FIRST_DISCORD_USER + u) for u in range(users))
        return f"[channels.discord]\nenabled = true\nallow_from = [{ids}]\nmax_reply_age = 3600\n"

    def env(self) -> dict[str, str]:
        return {"DISCORD_BOT_TOKEN": self.dc.token, "SWITCHBOARD_DISCORD_BASE": self.dc.base_url,
                "SWITCHBOARD_DISCORD_GATEWAY": self.dc.gateway_url}

    def command(self, config: Path) -> list[str]:
        return [sys.executable, "-m", "bot.testing.daemon_child", "--config", str(config)]

    def contacts(self) -> int:
        return len(self.dc.identifies) + len(self.dc.resumes)

    def push(self, user: int, text: str) -> bool:
        author = discord_user(FIRST_DISCORD_USER + user, f"user{user}")
        try:
            self.dc.message_create(FIRST_DM + user, author, text)
        except RuntimeError:  # a stand-in without offline message_create, before the first session
            return False
        return True

    def sent_texts(self) -> list[str]:
        return [m.content or "" for m in self.dc.sent]


@asynccontextmanager
async def open_platform(
    name: str, users: int, synapse: SynapseServer | None = None,
) -> AsyncIterator[Platform]:
    if name == "telegram":
        async with TelegramStandIn(token=TELEGRAM_TOKEN) as tg:
            yield TelegramPlatform(tg)
    elif name == "slack":  # the Web API + Socket Mode stand-in (bench/slack_platform.py)
        from bench.slack_platform import SlackPlatform
        from bot.testing.slack_api import SlackStandIn

        async with SlackStandIn() as slack:
            yield SlackPlatform(slack)
    elif name == "matrix":  # the real Synapse, behind a counting proxy (bench/matrix_platform.py)
        from bench.matrix_platform import MatrixPlatform, matrix_world

        async with matrix_world(users, synapse) as world:
            yield MatrixPlatform(world)
    else:
        async with DiscordStandIn(token=DISCORD_TOKEN, bot_id=DISCORD_BOT_ID) as dc:
            yield DiscordPlatform(dc)


def slow_echo(seed: int) -> Callable[[RecordedRequest], Response]:
    """The model: echo the current message's last line after 50-300 ms (fixed per message and seed)."""

    def answer(request: RecordedRequest) -> Response:
        if request.model == FAST:
            return Text('{"relevant": []}')
        line = last_user_line(request)
        return Text(f"re: {line}", delay=random.Random(f"{seed}:{line}").uniform(0.05, 0.3))

    return answer


# -- one run: cycles of start, load, signal, down; then a settle run -----------------------------


@dataclass(frozen=True)
class Plan:
    signals: tuple[str, ...]  # one per cycle: "kill" or "term"
    users: int
    per_cycle: int = 1
    seed: int = 1
    max_uptime: float = 2.0
    kill_from: str = "contact"  # the signal counts from "contact" with the platform, "spawn" or first "reply"
    downtime: float = 0.5
    quiet: float = 5.0  # the settle run ends when no reply came for this long (or all are answered)
    # ... counted from its first reply: until then (the start, the SDK's import: seconds under load)
    # it waits this long
    first_reply: float = 60.0
    settle_max: float = 120.0
    grace: float = 5.0  # [router] shutdown_grace


@dataclass
class Cycle:
    """One daemon process: when it reached the platform, READY=1, how it stopped."""

    label: str  # "kill", "term", "warm-up", "settle"
    log: Path
    uptime: float = 0.0  # planned: signal this long after it reached the platform
    connect_s: float | None = None  # spawn → first contact with the platform
    ready_s: float | None = None  # spawn → READY=1
    stop_s: float | None = None  # signal → exit
    exit_code: int | None = None
    sent_while_up: int = 0  # replies the platform received from spawn to the signal
    up_s: float = 0.0  # spawn → signal
    # Replies the platform had received whose id the dead daemon had not recorded: the signal fell
    # inside their send window (a resend after restart would deliver them twice).
    in_window: int = 0
    note: str = ""


@dataclass
class Tally:
    """What an outside observer can count once the last daemon has stopped."""

    pushed: list[str]
    refused: int
    stored: Counter[str]  # marker → user rows
    replies: Counter[str]  # marker → assistant rows "re: <marker>"
    delivered: Counter[str]  # marker → bot messages the platform received
    recorded: set[str]  # markers whose stored reply has the platform's id recorded
    awaiting: int
    integrity: str

    @property
    def lost(self) -> list[str]:
        return [m for m in self.pushed if not self.stored[m]]

    @property
    def stored_twice(self) -> list[str]:
        return [m for m in self.pushed if self.stored[m] > 1]

    @property
    def answered_once(self) -> list[str]:
        return [m for m in self.pushed if self.delivered[m] == 1]

    @property
    def answered_twice(self) -> list[str]:
        return [m for m in self.pushed if self.delivered[m] > 1]

    @property
    def never_answered(self) -> list[str]:
        """Stored, and nothing the bot sent carries the marker."""
        return [m for m in self.pushed if self.stored[m] and not self.delivered[m]]

    @property
    def undelivered_replies(self) -> list[str]:
        return [m for m in self.replies if not self.delivered[m]]

    @property
    def unrecorded(self) -> list[str]:
        """Delivered, but the daemon never recorded the platform's id for the reply."""
        return [m for m in self.replies if self.delivered[m] and m not in self.recorded]

    @property
    def same_reply_twice(self) -> list[str]:
        """One stored reply that reached the platform more than once: a resend (Telegram's window)."""
        return [m for m in self.answered_twice if self.replies[m] <= 1]

    @property
    def two_replies(self) -> list[str]:
        """The turn ran twice: two stored replies to one message."""
        return [m for m in self.pushed if self.replies[m] > 1]


@dataclass
class Run:
    platform: str
    plan: Plan
    cycles: list[Cycle] = field(default_factory=list)
    tally: Tally | None = None
    settle_s: float = 0.0
    settle_end: str = ""
    workdir: Path | None = None
    # Markers whose reply the platform had, id unrecorded, when a SIGKILL came: a resend of these is
    # the one double an at-least-once sender without an idempotency key (Telegram) cannot avoid.
    in_window: set[str] = field(default_factory=set)
    # Telegram, seen from outside: ms from the stand-in creating each reply to its id in the file,
    # for the replies no signal fell between; and how many a signal cut (recorded after a restart).
    outside_windows: list[float] = field(default_factory=list)
    cut_windows: int = 0

    def replies_per_s(self) -> float:
        """Replies the platform received per second between contact and signal, over the crash cycles."""
        crashes = [c for c in self.cycles if c.label in SIGNALS and c.connect_s is not None]
        up = sum(c.up_s - (c.connect_s or 0) for c in crashes)
        return sum(c.sent_while_up for c in crashes) / up if up > 0 else 0.0


class Notify:
    """The systemd side of $NOTIFY_SOCKET: READY=1 tells when the daemon says it is up."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setblocking(False)

    def ready(self) -> bool:
        """Whether READY=1 arrived since the last call."""
        seen = False
        while True:
            try:
                raw = self.sock.recv(4096).decode()
            except BlockingIOError:
                return seen
            seen = seen or "READY=1" in raw.splitlines()

    def close(self) -> None:
        self.sock.close()


def config_text(api: AnthropicStandIn, platform: Platform, db: Path, plan: Plan) -> str:
    return f"""
[database]
path = "{db}"

[anthropic]
base_url = "{api.base_url}"
model = "{MODEL}"
fast_model = "{FAST}"
timeout = 10.0
max_retries = 1

[conversation]
selection_timeout = 1.0

[router]
shutdown_grace = {plan.grace}

[semantic]
enabled = "off"

[logging]
level = "INFO"
format = "json"

[channels.console]
enabled = false

{platform.config_section(plan.users)}"""


class Driver:
    """Starts, loads and stops daemons of one run; the stand-ins and the message counters live on."""

    def __init__(self, platform: Platform, workdir: Path, plan: Plan, api: AnthropicStandIn) -> None:
        self.platform, self.workdir, self.plan = platform, workdir, plan
        self.db = workdir / "switchboard.db"
        self.config = workdir / "config.toml"
        self.config.write_text(config_text(api, platform, self.db, plan), encoding="utf-8")
        self.notify = Notify(workdir / "notify.sock")
        environ = {k: v for k, v in os.environ.items()
                   if not k.startswith(("ANTHROPIC_", "TELEGRAM_", "DISCORD_", "SLACK_", "SWITCHBOARD_",
                                             "WATCHDOG_"))}
        self.env = environ | platform.env() | {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "ANTHROPIC_API_KEY": API_KEY, "NOTIFY_SOCKET": str(self.notify.path),
        }
        self.rng = random.Random(plan.seed)
        self.pushed: list[str] = []
        self.refused = 0
        self._written = [0] * plan.users
        self.connect_estimate = 1.0
        self.unrecorded: set[str] = set()
        self.signalled: list[float] = []  # time.monotonic() of every signal sent

    def _contact(self, since: int) -> Callable[[], bool]:
        return lambda: self.platform.contacts() > since

    def write(self, user: int) -> None:
        marker = f"m{user}-{self._written[user]}"
        self._written[user] += 1
        if self.platform.push(user, marker):
            self.pushed.append(marker)
        else:
            self.refused += 1

    def answered(self) -> set[str]:
        return {m for text in self.platform.sent_texts() for m in MARKER.findall(text)}

    async def spawn(self, cycle: Cycle) -> asyncio.subprocess.Process:
        self.notify.ready()  # drop what an earlier process said
        with cycle.log.open("wb") as log:
            return await asyncio.create_subprocess_exec(
                *self.platform.command(self.config), cwd=self.workdir, env=self.env,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )

    async def watch(self, proc: asyncio.subprocess.Process, cycle: Cycle, spawned: float,
                    contacts: int, until: Callable[[], bool], timeout: float) -> bool:
        """Note contact and READY=1 while waiting for `until`; False when the daemon exited first or
        `timeout` passed."""
        deadline = time.monotonic() + timeout
        while not until():
            now = time.monotonic()
            if cycle.connect_s is None and self.platform.contacts() > contacts:
                cycle.connect_s = now - spawned
            if cycle.ready_s is None and self.notify.ready():
                cycle.ready_s = now - spawned
            if proc.returncode is not None or now > deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    async def stop(self, proc: asyncio.subprocess.Process, cycle: Cycle, sig: signal.Signals) -> None:
        if proc.returncode is not None:
            cycle.exit_code, cycle.note = proc.returncode, cycle.note or "exited by itself"
            return
        started = time.monotonic()
        self.signalled.append(started)
        proc.send_signal(sig)
        try:
            await asyncio.wait_for(proc.wait(), self.plan.grace + 10)
        except TimeoutError:
            cycle.note = f"still running {self.plan.grace + 10:.0f} s after SIG{sig.name[3:]}; killed"
            proc.kill()
            await proc.wait()
        cycle.stop_s, cycle.exit_code = time.monotonic() - started, proc.returncode

    async def crash_cycle(self, number: int, label: str) -> Cycle:
        """Start, write while it starts, runs and is down; signal at a random moment after contact."""
        plan = self.plan
        cycle = Cycle(label, self.workdir / f"{number:02d}-{label}.log",
                      uptime=self.rng.uniform(0, plan.max_uptime))
        writes = [u for u in range(plan.users) for _ in range(plan.per_cycle)]
        self.rng.shuffle(writes)
        span = (self.connect_estimate if plan.kill_from == "contact" else 0) + cycle.uptime + plan.downtime
        offsets = sorted(self.rng.uniform(0, span) for _ in writes)
        sent_before, contacts = len(self.platform.sent_texts()), self.platform.contacts()
        spawned = time.monotonic()
        proc = await self.spawn(cycle)
        writer = asyncio.create_task(self._write_at(spawned, zip(offsets, writes, strict=True)))
        try:
            if plan.kill_from == "spawn":
                up_until = spawned + cycle.uptime
                await self.watch(proc, cycle, spawned, contacts, lambda: time.monotonic() >= up_until,
                                 cycle.uptime + 1)
            elif await self.watch(proc, cycle, spawned, contacts, self._contact(contacts), CONNECT_TIMEOUT):
                self.connect_estimate = time.monotonic() - spawned
                if plan.kill_from == "reply":  # the daemon's first reply: its sends are flowing
                    first = lambda: len(self.platform.sent_texts()) > sent_before  # noqa: E731
                    if not await self.watch(proc, cycle, spawned, contacts, first, CONNECT_TIMEOUT):
                        cycle.note = cycle.note or f"no reply within {CONNECT_TIMEOUT:.0f} s of contact"
                up_until = time.monotonic() + cycle.uptime
                await self.watch(proc, cycle, spawned, contacts, lambda: time.monotonic() >= up_until,
                                 cycle.uptime + 1)
            elif proc.returncode is None:
                cycle.note = f"no contact with {self.platform.name} within {CONNECT_TIMEOUT:.0f} s"
            cycle.up_s = time.monotonic() - spawned
            cycle.sent_while_up = len(self.platform.sent_texts()) - sent_before
            await self.stop(proc, cycle, SIGNALS[label])
            if self.db.exists():
                unrecorded = set(count(self.db, self.pushed, 0, self.platform.sent_texts()).unrecorded)
                cycle.in_window = len(unrecorded - self.unrecorded)
                self.unrecorded |= unrecorded
            await asyncio.sleep(plan.downtime)
            await writer
        finally:
            writer.cancel()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        return cycle

    async def _write_at(self, start: float, schedule: Iterable[tuple[float, int]]) -> None:
        for offset, user in schedule:
            await asyncio.sleep(max(0.0, start + offset - time.monotonic()))
            self.write(user)

    async def settle(self, label: str, number: int, *, first_words: bool = False) -> tuple[Cycle, float, str]:
        """Run until every message is answered or no reply came for `quiet` s; stop by SIGTERM.
        `first_words`: each user writes once, as soon as the daemon reached the platform."""
        cycle = Cycle(label, self.workdir / f"{number:02d}-{label}.log")
        contacts = self.platform.contacts()
        spawned = time.monotonic()
        proc = await self.spawn(cycle)
        end = "daemon exited"
        try:
            if await self.watch(proc, cycle, spawned, contacts, self._contact(contacts), CONNECT_TIMEOUT):
                if first_words:
                    for user in range(self.plan.users):
                        self.write(user)
                end = await self._until_quiet(proc, cycle, spawned, contacts)
            elif proc.returncode is None:
                end = f"no contact with {self.platform.name} within {CONNECT_TIMEOUT:.0f} s"
            settled = time.monotonic() - spawned
            cycle.up_s = settled
            await self.stop(proc, cycle, signal.SIGTERM)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        return cycle, settled, end

    async def _until_quiet(self, proc: asyncio.subprocess.Process, cycle: Cycle, spawned: float,
                           contacts: int) -> str:
        started = time.monotonic()
        seen = len(self.platform.sent_texts())
        last_change: float | None = None  # this run's last reply
        while True:
            sent = len(self.platform.sent_texts())
            now = time.monotonic()
            if sent != seen:
                seen, last_change = sent, now
            if set(self.pushed) <= self.answered():
                return "every message answered"
            if last_change is None and now - started > self.plan.first_reply:
                return f"no reply within {self.plan.first_reply:g} s"
            if last_change is not None and now - last_change > self.plan.quiet:
                return f"no reply for {self.plan.quiet:g} s"
            if now - started > self.plan.settle_max:
                return f"still replying after {self.plan.settle_max:g} s"
            if proc.returncode is not None:
                return "daemon exited"
            await asyncio.sleep(0.05)


async def crash_run(
    platform_name: str, plan: Plan, workdir: Path, progress: Callable[[str], None] | None = None,
    synapse: SynapseServer | None = None,
) -> Run:
    """Warm-up (Discord, Matrix), the plan's cycles, one settle run; then count from outside.
    Matrix runs on `synapse` when given (a test's server), else on one of its own."""
    run = Run(platform_name, plan, workdir=workdir)
    async with AnthropicStandIn() as api, open_platform(platform_name, plan.users, synapse) as platform:
        api.default = slow_echo(plan.seed)
        driver = Driver(platform, workdir, plan, api)
        watch = IdWatch(driver.db) if isinstance(platform, TelegramPlatform) else None
        try:
            if watch is not None:
                watch.start()
            number = 0
            if platform.warm_up:
                cycle, _, end = await driver.settle("warm-up", number, first_words=True)
                cycle.note = cycle.note or end
                run.cycles.append(cycle)
            for label in plan.signals:
                number += 1
                run.cycles.append(await driver.crash_cycle(number, label))
                if progress is not None:
                    progress(f"{platform_name} cycle {number}/{len(plan.signals)} ({label}): "
                             f"{len(driver.pushed)} pushed, {len(driver.answered())} answered")
            cycle, run.settle_s, run.settle_end = await driver.settle("settle", number + 1)
            run.cycles.append(cycle)
            run.in_window = driver.unrecorded
        finally:
            driver.notify.close()
            if watch is not None:
                watch.stop()
        if watch is not None and isinstance(platform, TelegramPlatform):
            run.outside_windows, run.cut_windows = watch.windows(platform.tg.sent, driver.signalled)
        run.tally = count(driver.db, driver.pushed, driver.refused, platform.sent_texts())
    return run


def count(db: Path, pushed: list[str], refused: int, sent: list[str]) -> Tally:
    """Read the database as any SQLite client would, and match markers against what was sent."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        users = [text for (text,) in conn.execute("SELECT text FROM messages WHERE role = 'user'")]
        replies = conn.execute("SELECT text, provider_message_id IS NOT NULL FROM messages "
                               "WHERE role = 'assistant' AND text LIKE 're: %'").fetchall()
        awaiting = int(conn.execute("SELECT COUNT(*) FROM messages WHERE awaiting_reply = 1").fetchone()[0])
        integrity = "; ".join(row[0] for row in conn.execute("PRAGMA integrity_check"))
    return Tally(
        pushed, refused,
        stored=Counter(m for text in users for m in MARKER.findall(text)),
        replies=Counter(m for text, _ in replies for m in MARKER.findall(text)),
        recorded={m for text, has_id in replies if has_id for m in MARKER.findall(text)},
        delivered=Counter(m for text in sent for m in MARKER.findall(text)),
        awaiting=awaiting, integrity=integrity,
    )


# -- Telegram's send window: Telegram holds the message, the daemon has not recorded its id ----------


class IdWatch:
    """A thread polling the SQLite file every `poll` s for the Telegram ids recorded since its last
    look, noting when each first showed (one clock with the stand-in's: monotonic, one process)."""

    REACH = 300

    def __init__(self, db: Path, poll: float = 0.001) -> None:
        self.db, self.poll = db, poll
        self.first_seen: dict[tuple[str, str], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="id watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def windows(self, sent: Iterable[SentMessage], signalled: list[float]) -> tuple[list[float], int]:
        """ms from each reply's creation to its id's first sight, for the replies no signal fell
        between; and how many a signal fell between (their id was recorded by a later daemon)."""
        found, cut = [], 0
        for message in sent:
            seen = self.first_seen.get((str(message.chat_id), str(message.message_id)))
            if seen is None:
                continue  # never recorded: sent again, or still in the outbox
            if any(message.time < moment < seen for moment in signalled):
                cut += 1
            else:
                found.append((seen - message.time) * 1000)
        return found, cut

    def _run(self) -> None:
        # provider_messages has no rowid: each look reads the rows of the newest REACH messages (a
        # reply recorded later than that is a kill's, whose id comes after a restart anyway), once
        # the file changed (`data_version`).
        conn: sqlite3.Connection | None = None
        newest, version = 0, None
        try:
            while not self._stop.is_set():
                if conn is None and self.db.exists():
                    conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, check_same_thread=False)
                rows: list[tuple[str, str, int]] = []
                if conn is not None:
                    with contextlib.suppress(sqlite3.OperationalError):  # no schema yet, a busy moment
                        changed = conn.execute("PRAGMA data_version").fetchone()[0]
                        if changed != version:
                            rows = conn.execute(
                                "SELECT chat_id, provider_message_id, message_id FROM provider_messages "
                                "WHERE message_id >= ? AND provider = 'telegram'",
                                (newest - self.REACH,)).fetchall()
                            version = changed
                now = time.monotonic()
                for chat_id, ident, message_id in rows:
                    self.first_seen.setdefault((str(chat_id), str(ident)), now)
                    newest = max(newest, message_id)
                time.sleep(self.poll)
        finally:
            if conn is not None:
                conn.close()


@dataclass
class Window:
    samples: list[float]  # ms from the Bot API creating a reply to its id in the database
    missing: int  # replies whose id never showed up in provider_messages
    poll_ms: float


async def send_window(workdir: Path, samples: int, seed: int, poll: float = 0.0005) -> Window:
    """One user, one message at a time, the daemon up throughout; a thread polls the SQLite file for
    the id of each reply the Bot API created (table provider_messages), timing both on one clock."""
    plan = Plan(signals=(), users=1, seed=seed)
    async with AnthropicStandIn() as api, TelegramStandIn(token=TELEGRAM_TOKEN) as tg:
        api.default = slow_echo(seed)
        platform = TelegramPlatform(tg)
        driver = Driver(platform, workdir, plan, api)
        first_seen: dict[str, float] = {}
        stop = threading.Event()
        chat_id = str(FIRST_TELEGRAM_USER)
        poller = threading.Thread(target=_poll_ids, args=(driver.db, chat_id, first_seen, stop, poll))
        cycle = Cycle("window", workdir / "window.log")
        proc = await driver.spawn(cycle)
        try:
            contacts = 0
            await driver.watch(proc, cycle, time.monotonic(), contacts, lambda: platform.contacts() > 0,
                               CONNECT_TIMEOUT)
            poller.start()
            for n in range(samples):
                driver.write(0)
                done = lambda n=n: len(tg.sent) > n  # noqa: E731
                await driver.watch(proc, cycle, 0.0, contacts, done, 15)
                await asyncio.sleep(0.05)  # the commit comes after the send
            await asyncio.sleep(0.2)
            await driver.stop(proc, cycle, signal.SIGTERM)
        finally:
            stop.set()
            if poller.is_alive():
                poller.join()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            driver.notify.close()
        windows = [(first_seen[str(m.message_id)] - m.time) * 1000 for m in tg.sent
                   if str(m.message_id) in first_seen]
        return Window(windows, len(tg.sent) - len(windows), poll * 1000)


def _poll_ids(db: Path, chat_id: str, first_seen: dict[str, float], stop: threading.Event,
              poll: float) -> None:
    conn: sqlite3.Connection | None = None
    try:
        while not stop.is_set():
            if conn is None:
                if not db.exists():
                    time.sleep(poll)
                    continue
                conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, check_same_thread=False)
            try:
                rows = conn.execute("SELECT provider_message_id FROM provider_messages "
                                    "WHERE provider = 'telegram' AND chat_id = ?", (chat_id,)).fetchall()
            except sqlite3.OperationalError:  # schema not there yet, or a busy moment
                rows = []
            now = time.monotonic()
            for (ident,) in rows:
                first_seen.setdefault(str(ident), now)
            time.sleep(poll)
    finally:
        if conn is not None:
            conn.close()


# -- printing ---------------------------------------------------------------------------------------


def _some(markers: list[str], n: int = 6) -> str:
    return "" if not markers else " (" + ", ".join(markers[:n]) + (", …" if len(markers) > n else "") + ")"


def _spread(values: list[float], unit: str = "s") -> str:
    if not values:
        return "n/a"
    return f"median {statistics.median(values):.2f} {unit}, max {max(values):.2f} {unit}"


def report(run: Run) -> list[str]:
    """The block of figures for one run."""
    plan, tally = run.plan, run.tally
    assert tally is not None
    crashes = [c for c in run.cycles if c.label in SIGNALS]
    labels = Counter(c.label for c in crashes)
    kind = ", ".join(f"{n} × SIG{label.upper()}" for label, n in labels.items())
    after = {"contact": "contact", "reply": "its first reply"}.get(plan.kill_from, "spawn")
    lines = [f"{run.platform}, {kind}: {plan.users} users × {plan.per_cycle} message(s) per cycle, "
             f"seed {plan.seed}; signal 0-{plan.max_uptime:g} s after {after}, down {plan.downtime:g} s"]
    cycle_s = sum(c.up_s + (c.stop_s or 0) for c in crashes) + plan.downtime * len(crashes)
    offered = plan.users * plan.per_cycle * len(crashes) / max(cycle_s, 1e-9)
    readies = [c.ready_s for c in crashes if c.ready_s]
    lines.append(f"  start: spawn → contact {_spread([c.connect_s for c in crashes if c.connect_s])} "
                 f"({sum(c.connect_s is not None for c in crashes)} of {len(crashes)} reached it); "
                 f"→ READY=1 {_spread(readies)} ({len(readies)} of {len(crashes)} said it"
                 f"{'; discord.py is ready 2 s after connecting' * (run.platform == 'discord')}); "
                 f"offered {offered:.1f} messages/s")
    for label in labels:
        stops = [c.stop_s for c in crashes if c.label == label and c.stop_s is not None]
        codes = Counter(c.exit_code for c in crashes if c.label == label)
        within = "" if label != "term" else (
            f", {'all within' if all(s <= plan.grace for s in stops) else 'NOT ALL within'} "
            f"the {plan.grace:g} s grace")
        lines.append(f"  SIG{label.upper()} → exit: {_spread(stops)}{within}; exit codes "
                     + ", ".join(f"{code}: {n}" for code, n in sorted(codes.items(), key=str)))
    warm = [c for c in run.cycles if c.label == "warm-up"]
    if warm:
        lines.append(f"  warm-up (each user's first DM, daemon up): {warm[0].note}")
    final = run.cycles[-1]
    lines.append(f"  settle run: {run.settle_end} after {run.settle_s:.1f} s; SIGTERM → exit "
                 f"{final.stop_s or float('nan'):.2f} s, exit code {final.exit_code}")
    refused = f" ({tally.refused} more refused by the stand-in: no session yet)" if tally.refused else ""
    lines.append(f"  pushed {len(tally.pushed)}{refused}; stored {len(tally.pushed) - len(tally.lost)}")
    lines.append(f"  lost (never stored) {len(tally.lost)}{_some(tally.lost)}; "
                 f"stored more than once {len(tally.stored_twice)}{_some(tally.stored_twice)}")
    lines.append(f"  answered once {len(tally.answered_once)}, twice or more {len(tally.answered_twice)}"
                 f"{_some(tally.answered_twice)}, never {len(tally.lost) + len(tally.never_answered)} "
                 f"({len(tally.lost)} lost, {len(tally.never_answered)} stored but never answered"
                 f"{_some(tally.never_answered)})")
    lines.append(f"  of the doubles: same stored reply delivered twice {len(tally.same_reply_twice)}"
                 f"{' (no idempotency key)' if run.platform in NO_IDEMPOTENCY_KEY else ''}, "
                 f"two stored replies to one message {len(tally.two_replies)}{_some(tally.two_replies)}")
    kills = [c for c in crashes if c.label == "kill"]
    if kills:
        hit = [c for c in kills if c.in_window]
        lines.append(f"  SIGKILLs inside a send window (the platform had a reply whose id was not recorded): "
                     f"{len(hit)} of {len(kills)}, {sum(c.in_window for c in kills)} replies; delivered "
                     f"replies whose id was never recorded at the end {len(tally.unrecorded)}")
    windows = send_windows(run.cycles)
    if windows:
        ordered = sorted(windows)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        lines.append(f"  send window under this load (the daemon's `record_ms`: platform answered → id "
                     f"committed), {len(windows)} replies: median {statistics.median(windows):.2f} ms, "
                     f"p99 {p99:.2f} ms, max {ordered[-1]:.2f} ms")
    if run.outside_windows:
        ordered = sorted(run.outside_windows)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        lines.append(f"  send window seen from outside under this load (Telegram created the reply → "
                     f"its id in the file, polled every 1 ms), {len(ordered)} replies: median "
                     f"{statistics.median(ordered):.2f} ms, p99 {p99:.2f} ms, max {ordered[-1]:.2f} ms; "
                     f"{run.cut_windows} cut by a signal (recorded after the restart)")
    per_thousand = 1000 * len(tally.answered_twice) / max(len(tally.pushed), 1)
    lines.append(f"  doubles per 1 000 messages: {per_thousand:.1f} "
                 f"(load average now {os.getloadavg()[0]:.2f})")
    lines.append(f"  replies stored but never delivered {len(tally.undelivered_replies)}"
                 f"{_some(tally.undelivered_replies)}; requests still awaiting a reply {tally.awaiting}; "
                 f"integrity_check: {tally.integrity}")
    notes = [f"{c.log.name}: {c.note}" for c in run.cycles if c.note and c.label != "warm-up"]
    lines += [f"  ! {note}" for note in notes]
    lines.append("  " + log_summary(run.cycles))
    misses = {"lost": len(tally.lost), "never answered": len(tally.lost) + len(tally.never_answered),
              "answered twice": len(tally.answered_twice)}
    missed = ", ".join(f"{name} {n}" for name, n in misses.items() if n)
    no_key = run.platform in NO_IDEMPOTENCY_KEY
    inherent = [m for m in tally.answered_twice if m in run.in_window] if no_key else []
    why = f" ({len(inherent)} of the doubles from SIGKILLs inside the send window)" * bool(inherent)
    lines.append(f"  targets (0 lost, 0 never answered, 0 answered twice): "
                 f"{'met' if not missed else 'MISSED: ' + missed}{why}")
    return lines


def send_windows(cycles: list[Cycle]) -> list[float]:
    """Every turn's `record_ms` (its longest chunk's send window) over every cycle's log."""
    found = []
    for cycle in cycles:
        for line in cycle.log.read_text(encoding="utf-8", errors="replace").splitlines():
            if '"record_ms"' not in line:
                continue
            with contextlib.suppress(ValueError):
                value = json.loads(line).get("record_ms")
                if isinstance(value, int | float):
                    found.append(float(value))
    return found


def log_summary(cycles: list[Cycle]) -> str:
    """Warnings and errors the daemons logged, by event, over every cycle's file."""
    events: Counter[str] = Counter()
    for cycle in cycles:
        for line in cycle.log.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                events["(not JSON) " + line[:60]] += 1
                continue
            if isinstance(entry, dict) and entry.get("level") in ("warning", "error", "critical") \
                    and "voice will NOT be supported" not in str(entry.get("event")):  # discord.py, at import
                events[f"{entry['level']}: {str(entry.get('event'))[:60]}"] += 1
    if not events:
        return "logs: no warnings or errors"
    return "logs: " + "; ".join(f"{event} ×{n}" for event, n in events.most_common(5))


def log_tail(path: Path, lines: int = 8) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]


def code_version() -> str:
    """The commit measured, and whether the daemon's code differs from it. Read-only git: no
    optional locks, so `git status` never rewrites the index of a tree others work in."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False,
                              env=os.environ | {"GIT_OPTIONAL_LOCKS": "0"})
        return done.stdout.strip()

    head = git("log", "-1", "--format=%h %s")[:90]
    if not head:
        return f"code: {ROOT} (not a git checkout)"
    dirty = git("status", "--porcelain", "--", "bot", "channels")
    changed = f" + uncommitted changes in {len(dirty.splitlines())} file(s) of bot/, channels/" * bool(dirty)
    return f"code: {head}{changed}"


# -- main -------------------------------------------------------------------------------------------


async def bench(args: argparse.Namespace, folder: Path) -> None:
    platforms = {"both": ["telegram", "discord"], "all": ["telegram", "discord", "matrix", "slack"]}.get(
        args.platform, [args.platform])
    killed: Run | None = None
    for name in platforms:
        for sig in args.signals.split(","):
            plan = Plan(signals=(sig,) * args.cycles, users=args.users, per_cycle=args.per_cycle,
                        seed=args.seed, max_uptime=args.max_uptime, kill_from=args.kill_from,
                        downtime=args.downtime,
                        quiet=args.quiet, grace=args.grace)
            workdir = folder / f"{name}-{sig}"
            workdir.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()
            run = await crash_run(name, plan, workdir, progress=print if args.verbose else None)
            print("\n".join(report(run)))
            print(f"  wall time {time.monotonic() - started:.0f} s; logs in {workdir}")
            for cycle in run.cycles:
                if cycle.note and cycle.label != "warm-up":
                    print(f"  last lines of {cycle.log.name}:")
                    print("\n".join("    " + line[:200] for line in log_tail(cycle.log)))
            if name == "telegram" and sig == "kill":
                killed = run
            print()
    if "telegram" in platforms and args.window_samples:
        workdir = folder / "telegram-window"
        workdir.mkdir(parents=True, exist_ok=True)
        window = await send_window(workdir, args.window_samples, args.seed)
        print(f"telegram send window (the Bot API created the reply → its id committed, polled every "
              f"{window.poll_ms:g} ms), {len(window.samples)} replies, one at a time: "
              f"{_spread(window.samples, 'ms')}, mean {statistics.fmean(window.samples or [0]):.2f} ms"
              + (f"; {window.missing} ids never seen" if window.missing else ""))
        if killed is not None and window.samples:
            rate, mean = killed.replies_per_s(), statistics.fmean(window.samples) / 1000
            kills = [c for c in killed.cycles if c.label == "kill"]
            print(f"  a SIGKILL falls inside a window with p ≈ replies/s while up × mean window = "
                  f"{rate:.1f} × {mean * 1000:.2f} ms = {rate * mean:.3f}: ≈ {rate * mean * len(kills):.2f} "
                  f"of {len(kills)} kills expected, {sum(bool(c.in_window) for c in kills)} seen above")
            hits = sum(bool(c.in_window) for c in kills)
            if hits and rate:
                print(f"  the kills seen inside a window imply a mean window under that load of "
                      f"{hits / len(kills) / rate * 1000:.1f} ms (hits / kills / replies per s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", default="both",
                        choices=["telegram", "discord", "matrix", "slack", "both", "all"],
                        help="both: Telegram and Discord; all: and Matrix (a real Synapse, installed once) "
                             "and Slack")
    parser.add_argument("--signals", default="kill,term", help="comma-separated, each a block: kill, term")
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--per-cycle", type=int, default=1, help="messages per user per cycle (default 1)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-uptime", type=float, default=2.0,
                        help="the signal comes 0-N s after the daemon reached the platform (default 2)")
    parser.add_argument("--kill-from", choices=["contact", "spawn", "reply"], default="contact",
                        help="count the signal's moment from the daemon's first contact with the platform "
                             "(default), from its spawn (then some cycles end before it connects), or "
                             "from its first reply (every signal comes while replies are being sent)")
    parser.add_argument("--downtime", type=float, default=0.5, help="seconds down between cycles")
    parser.add_argument("--quiet", type=float, default=5.0,
                        help="the settle run ends after this long without a reply (default 5)")
    parser.add_argument("--grace", type=float, default=5.0, help="[router] shutdown_grace (default 5)")
    parser.add_argument("--window-samples", type=int, default=40,
                        help="replies timed for Telegram's send window (0: skip)")
    parser.add_argument("--keep", metavar="DIR", help="keep databases and daemon logs in DIR")
    parser.add_argument("--verbose", action="store_true", help="a line per cycle")
    args = parser.parse_args()
    if any(s not in SIGNALS for s in args.signals.split(",")):
        parser.error("--signals takes kill and/or term")
    print("command: .venv/bin/python -m bench.crash_loop " + " ".join(sys.argv[1:]))
    print(code_version())
    with tempfile.TemporaryDirectory(prefix="sb-crash-") as tmp:
        folder = Path(args.keep) if args.keep else Path(tmp)
        asyncio.run(bench(args, folder))
    from bench.telegram_throughput import memory_pressure

    print(f"load average {os.getloadavg()[0]:.2f}, {memory_pressure()} (other processes share the machine)")


if __name__ == "__main__":
    main()
