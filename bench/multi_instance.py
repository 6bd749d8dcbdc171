"""Three daemons on one PostgreSQL behind a round-robin load balancer: each message answered once, in
order, while one instance is killed and started again; throughput against one instance.

Usage: .venv/bin/python -m bench.multi_instance [--quick] [--users 500] [--per-user 10]
       [--instances 3] [--seed 1] [--downtime 3] [--quiet 45] [--telegram-limits] [--keep DIR]

Every daemon is a real subprocess: this script with `--child --config X`, which is `switchboard run
--config X` with python-telegram-bot's rate limiter built with its limits off (Telegram holds a
bot to ~30 messages/s whichever instance sends; the limiter would measure only itself;
`--telegram-limits` keeps it). Each serves its own webhook port (`mode = "webhook"`), all register
the same `webhook_url`: a small aiohttp reverse proxy in this process that forwards each POST to the
next backend in turn and, on a connection error (the backend is down, or died mid-request), to the
one after (the round-robin sender). The Telegram Bot API stand-in (this process) delivers updates to
that URL as Telegram does: per chat one at a time, the next once the last was answered 2xx,
retrying anything else. The Anthropic stand-in (this process) echoes the current message at once
("re: m17-3"). PostgreSQL is a throwaway server (bot/testing/postgres.py) with its own fresh database per
run; logs are JSON at INFO, a file per daemon.

Runs, each with `users × per-user` updates (every user's messages queued at once; the stand-in
sends each chat's in order):
1. one daemon on SQLite, 2. one daemon on PostgreSQL (both webhook mode through the same proxy with
one backend), 3. `instances` daemons on PostgreSQL; once half the messages are answered one of them
is killed with SIGKILL, kept down `downtime` s and started again. Each run ends when every message
is answered or no reply came for `quiet` s (longer than the lease TTL plus the sweep interval).
Counted from outside: markers pushed, stored (user rows in the database), answered once / twice or
more / never, sessions whose replies reached the chat out of order, requests still awaiting a
reply, replies left in the outbox, leases left; throughput is answers/s from the first push to
the last answer (for run 3 also up to the kill), and warm throughput the same between the 10th and
the 45th percent of the answers (past the start's burst, before the kill).
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
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parent.parent


from bot.testing.anthropic_api import AnthropicStandIn  # noqa: E402
from bot.testing.models import FAST, MODEL, echo  # noqa: E402
from bot.testing.round_robin import RoundRobin  # noqa: E402
from bot.testing.telegram_api import TelegramStandIn, private_chat, user  # noqa: E402

MARKER = re.compile(r"\bm(\d+)-(\d+)\b")
API_KEY = "sk-ant-multi-instance-0123456789abcdef"
TELEGRAM_TOKEN = "7000000002:AAmultiInstanceToken_0123456789abcdef"
SECRET = "multi-instance-webhook-secret_0123456789"
SECRET_ENV = "SWITCHBOARD_BENCH_WEBHOOK_SECRET"
FIRST_USER = 6_000_000
START_TIMEOUT = 60.0
WARM = (0.10, 0.45)  # the share of the answers the warm throughput is counted over


# -- the daemons ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def config_text(database: str, port: int, lb_url: str, tg: TelegramStandIn, api: AnthropicStandIn,
                users: int, lease_ttl: float, pool_size: int | None = None) -> str:
    ids = ", ".join(str(FIRST_USER + u) for u in range(users))
    return f"""
[database]
{database}
lease_ttl = {lease_ttl}
{f"pool_size = {pool_size}" if pool_size else ""}

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


@dataclass
class Daemon:
    """One instance: its own config, webhook port, state folder (control socket) and log files."""

    name: str
    port: int
    workdir: Path
    env: dict[str, str]
    proc: asyncio.subprocess.Process | None = None
    starts: int = 0

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


# -- one run --------------------------------------------------------------------------------------


@dataclass
class Outcome:
    label: str
    pushed: list[str]
    stored: Counter[str]
    replies: Counter[str]  # marker → stored replies carrying it
    delivered: Counter[str]
    out_of_order: int
    awaiting: int
    outbox: int
    leases: int
    elapsed: float  # first push → last answer
    answered_before_kill: int = 0
    until_kill: float = 0.0
    failovers: int = 0
    # Replies Telegram had when the SIGKILL came while the outbox still held them (the dead
    # instance had not recorded them sent): sent again on takeover, as nothing can tell it not to.
    in_window: set[str] = field(default_factory=set)
    forwarded: list[int] = field(default_factory=list)
    log_events: Counter[str] = field(default_factory=Counter)
    end: str = ""
    answer_times: list[float] = field(default_factory=list)  # when each reply reached Telegram

    @property
    def lost(self) -> int:
        return sum(1 for m in self.pushed if not self.stored[m])

    @property
    def once(self) -> int:
        return sum(1 for m in self.pushed if self.delivered[m] == 1)

    @property
    def twice(self) -> int:
        return sum(1 for m in self.pushed if self.delivered[m] > 1)

    @property
    def never(self) -> int:
        return sum(1 for m in self.pushed if not self.delivered[m])

    @property
    def doubled(self) -> list[str]:
        return [m for m in self.pushed if self.delivered[m] > 1]

    @property
    def resent(self) -> int:
        return sum(1 for m in self.pushed if self.delivered[m] > 1 and self.replies[m] <= 1)

    @property
    def two_turns(self) -> int:
        return sum(1 for m in self.pushed if self.replies[m] > 1)

    def rate(self) -> float:
        return sum(1 for m in self.pushed if self.delivered[m]) / self.elapsed if self.elapsed else 0.0

    def warm_rate(self) -> float:
        """Answers/s between the 10th and the 45th percent of the answers: past the start (the
        burst being stored, each daemon's first turns), before the SIGKILL at half."""
        times = sorted(self.answer_times)
        first, last = int(len(times) * WARM[0]), int(len(times) * WARM[1])
        span = times[last] - times[first] if last < len(times) else 0.0
        return (last - first) / span if span > 0 else 0.0


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


def database_counts(database: str) -> tuple[list[str], int, int, int, list[str]]:
    """User texts, requests awaiting a reply, outbox rows, leases still held (not expired), reply
    texts: read as any client would."""
    queries = ("SELECT text FROM messages WHERE role = 'user'",
               "SELECT COUNT(*) FROM messages WHERE awaiting_reply = 1",
               "SELECT COUNT(*) FROM outbox",
               f"SELECT COUNT(*) FROM session_leases WHERE expires_at > {time.time()}",
               "SELECT text FROM messages WHERE role = 'assistant'")
    if database.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(database) as conn:
            rows = [conn.execute(q).fetchall() for q in queries]
    else:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as lite:
            rows = [lite.execute(q).fetchall() for q in queries]
    return ([str(r[0]) for r in rows[0]], int(rows[1][0][0]), int(rows[2][0][0]), int(rows[3][0][0]),
            [str(r[0]) for r in rows[4]])


def in_send_window(database: str, tg: TelegramStandIn) -> set[str]:
    """Markers of replies in the outbox that Telegram already shows (read right after a SIGKILL)."""
    import psycopg

    with psycopg.connect(database) as conn:
        left = [str(r[0]) for r in conn.execute("SELECT text FROM outbox").fetchall()]
    shown = {f"m{a}-{b}" for m in tg.sent for a, b in MARKER.findall(m.visible_text)}
    return {f"m{a}-{b}" for t in left for a, b in MARKER.findall(t)} & shown


def out_of_order(sent: list[tuple[int, str]]) -> int:
    """Chats where a reply arrived after the reply to a later message of the same user."""
    newest: dict[int, int] = {}
    bad: set[int] = set()
    for chat_id, text in sent:
        for _, n in MARKER.findall(text):
            if int(n) < newest.get(chat_id, -1):
                bad.add(chat_id)
            newest[chat_id] = max(newest.get(chat_id, -1), int(n))
    return len(bad)


EVENTS = ("older request of the session answered first", "request already answered; skipped",
          "newer request of the session answered in the same lease",
          "request left to the instance holding the session", "reply left in the outbox sent first",
          "redelivered message still unanswered; queued", "session lease lost while its work ran",
          "resumed from the last run", "waiting requests taken over",
          "command already run elsewhere; skipped")


def log_events(workdir: Path) -> Counter[str]:
    """Lease and resume events, warnings and errors the daemons logged."""
    seen: Counter[str] = Counter()
    for path in workdir.glob("*.log"):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                seen["non-JSON lines"] += 1
                continue
            event, level = str(entry.get("event", "")), entry.get("level")
            if event in EVENTS:
                seen[event] += 1
            elif level in ("warning", "error", "critical"):
                seen[f"{level}: {event}"] += 1
    return seen


async def run_once(label: str, plan: Plan, database: str, workdir: Path,
                   progress: Any = print) -> Outcome:
    workdir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - before anything runs
    rng = random.Random(plan.seed)
    async with AnthropicStandIn() as api, TelegramStandIn(token=TELEGRAM_TOKEN) as tg:
        api.default = echo
        tg.webhook_sender.tries = 10  # about 50 s of retries, as Telegram keeps trying far longer
        ports = [free_port() for _ in range(plan.instances)]
        async with RoundRobin(ports) as lb:
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("ANTHROPIC_", "TELEGRAM_", "DISCORD_", "SWITCHBOARD_", "PG"))}
            env |= {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                    "ANTHROPIC_API_KEY": API_KEY, "TELEGRAM_BOT_TOKEN": tg.token, SECRET_ENV: SECRET,
                    "PTB_TIMEDELTA": "1"}
            if plan.limits:
                env["SWITCHBOARD_BENCH_TELEGRAM_LIMITS"] = "1"
            key = f'url = "{database}"' if database.startswith("postgresql://") else f'path = "{database}"'
            daemons = [Daemon(f"d{i + 1}", port, workdir, env) for i, port in enumerate(ports)]
            for daemon in daemons:
                pool_size = plan.pool_size if database.startswith("postgresql://") else None
                daemon.config.write_text(config_text(key, daemon.port, lb.url, tg, api, plan.users,
                                                         plan.lease_ttl, pool_size))
            try:
                return await _drive(label, plan, database, workdir, tg, lb, daemons, rng, progress)
            finally:
                for daemon in daemons:
                    await daemon.stop()


async def _up(daemons: list[Daemon], tg: TelegramStandIn, webhooks: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not (len(tg.calls_of("setWebhook")) >= webhooks and all([await d.listening() for d in daemons])):
        for d in daemons:
            if d.proc is not None and d.proc.returncode is not None:
                raise RuntimeError(f"{d.name} exited ({d.proc.returncode}); see {d.workdir}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"daemons not up within {START_TIMEOUT:.0f} s; see the logs in "
                               f"{daemons[0].workdir}")
        await asyncio.sleep(0.05)


async def _drive(label: str, plan: Plan, database: str, workdir: Path, tg: TelegramStandIn,
                 lb: RoundRobin, daemons: list[Daemon], rng: random.Random, progress: Any) -> Outcome:
    for daemon in daemons:
        await daemon.start()
    await _up(daemons, tg, len(daemons))
    pushed: list[str] = []
    order = [(u, n) for n in range(plan.per_user) for u in range(plan.users)]
    started = time.monotonic()
    for u, n in order:
        person = user(FIRST_USER + u, f"User{u}")
        marker = f"m{u}-{n}"
        tg.push_message(private_chat(person), person, f"note {marker}")
        pushed.append(marker)
    total = len(pushed)
    killed_at = None
    answered_before_kill = 0
    in_window: set[str] = set()
    last_count, last_change = 0, time.monotonic()
    end = ""
    while True:
        now = time.monotonic()
        count = len(tg.sent)
        if count != last_count:
            last_count, last_change = count, now
        if plan.kill and killed_at is None and count >= total // 2:
            victim = daemons[rng.randrange(len(daemons))]
            victim.kill()
            assert victim.proc is not None
            await victim.proc.wait()
            killed_at, answered_before_kill = now, count
            in_window = in_send_window(database, tg)
            progress(f"  {label}: SIGKILL {victim.name} at {count}/{total} answered")
            await asyncio.sleep(plan.downtime)
            await victim.start()
            calls = len(tg.calls_of("setWebhook"))
            await _up([victim], tg, calls + 1)
            progress(f"  {label}: {victim.name} started again")
            continue
        if count >= total and len({m for s in tg.sent for m in MARKER.findall(s.visible_text)}) >= total:
            end = "every message answered"
            break
        if now - last_change > plan.quiet:
            end = f"no reply for {plan.quiet:g} s"
            break
        if now - started > plan.settle_max:
            end = f"still replying after {plan.settle_max:g} s"
            break
        await asyncio.sleep(0.05)
    last_answer = max((m.time for m in tg.sent), default=started)
    await asyncio.sleep(1.0)  # a late double would show here
    for daemon in daemons:
        await daemon.stop()
    texts, awaiting, outbox, leases, replies = database_counts(database)
    sent = [(m.chat_id, m.visible_text) for m in tg.sent]
    (workdir / "sent.json").write_text(json.dumps([[m.chat_id, m.visible_text, m.time] for m in tg.sent]))
    return Outcome(
        label, pushed,
        stored=Counter(f"m{a}-{b}" for t in texts for a, b in MARKER.findall(t)),
        replies=Counter(f"m{a}-{b}" for t in replies for a, b in MARKER.findall(t)),
        delivered=Counter(f"m{a}-{b}" for _, t in sent for a, b in MARKER.findall(t)),
        out_of_order=out_of_order(sent), awaiting=awaiting, outbox=outbox, leases=leases,
        elapsed=last_answer - started, answered_before_kill=answered_before_kill,
        until_kill=(killed_at - started) if killed_at else 0.0, failovers=lb.failovers, in_window=in_window,
        forwarded=[lb.forwarded[d.port] for d in daemons], log_events=log_events(workdir), end=end,
        answer_times=[m.time for m in tg.sent],
    )


# -- printing --------------------------------------------------------------------------------------


def block(o: Outcome) -> list[str]:
    lines = [
        f"{o.label}: {o.end}",
        f"  updates sent {len(o.pushed)}, stored {sum(1 for m in o.pushed if o.stored[m])}"
        f" (stored twice {sum(1 for m in o.pushed if o.stored[m] > 1)})",
        f"  answered once {o.once}, answered twice {o.twice}, never answered {o.never}",
        f"    of the doubles: one stored reply sent twice {o.resent} ({len(o.in_window & set(o.doubled))} of "
        f"them in Telegram's send window at the SIGKILL), two stored replies {o.two_turns}",
        f"  sessions with replies out of order {o.out_of_order}",
        f"  left: awaiting a reply {o.awaiting}, in the outbox {o.outbox}, leases still held {o.leases}",
        f"  throughput {o.rate():.0f} updates/s answered ({o.elapsed:.1f} s from the first push to the "
        "last answer)",
    ]
    lines.append(f"  warm throughput {o.warm_rate():.0f} updates/s answered (from {WARM[0]:.0%} to "
                 f"{WARM[1]:.0%} of the answers: past the start, before any kill)")
    if o.until_kill:
        lines.append(f"  before the SIGKILL: {o.answered_before_kill / o.until_kill:.0f} updates/s answered "
                     f"({o.answered_before_kill} in {o.until_kill:.1f} s)")
    lines.append(f"  webhook POSTs per instance {o.forwarded}, moved to the next instance {o.failovers}")
    if o.log_events:
        lines.append("  logged: " + "; ".join(f"{k} ×{v}" for k, v in sorted(o.log_events.items())))
    return lines


async def bench(plan: Plan, workdir: Path, only: str | None) -> None:
    from bot.testing.postgres import PostgresServer

    print(f"multi_instance: {plan.users} users × {plan.per_user} = {plan.users * plan.per_user} updates, "
          f"instant model replies, webhook mode through the round-robin proxy, Telegram limiter "
          f"{'on' if plan.limits else 'off'}, lease_ttl {plan.lease_ttl:g} s, "
          f"pool_size {plan.pool_size or 'default'}; load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    server = PostgresServer()
    server.start()
    outcomes: list[Outcome] = []
    try:
        one = Plan(**{**plan.__dict__, "instances": 1, "kill": False})
        if only in (None, "sqlite"):
            outcomes.append(await run_once("1 instance, SQLite", one, str(workdir / "single.db"),
                                           workdir / "sqlite"))
            print("\n".join(block(outcomes[-1])), flush=True)
        if only in (None, "pg"):
            outcomes.append(await run_once("1 instance, PostgreSQL", one, server.create_database(),
                                           workdir / "pg1"))
            print("\n".join(block(outcomes[-1])), flush=True)
        if only in (None, "multi"):
            multi = await run_once(f"{plan.instances} instances, PostgreSQL, one killed and restarted", plan,
                                   server.create_database(), workdir / "multi")
            outcomes.append(multi)
            print("\n".join(block(multi)), flush=True)
            rates = ", ".join(f"{o.label.split(',')[0]} {o.rate():.0f}" for o in outcomes)
            print(f"throughput (updates/s answered): {rates}; {plan.instances} instances before the kill "
                  f"{multi.answered_before_kill / multi.until_kill:.0f}" if multi.until_kill else rates)
            warm = ", ".join(f"{o.label.split(',')[0]} {o.warm_rate():.0f}" for o in outcomes)
            print(f"warm throughput (updates/s answered, {WARM[0]:.0%}-{WARM[1]:.0%} of the answers): {warm}")
            print(f"lost {multi.lost}, twice {multi.twice}, out of order {multi.out_of_order}")
    finally:
        server.stop()


def child(argv: list[str]) -> None:
    """`switchboard run`, with python-telegram-bot's rate limiter off unless asked for."""
    if not os.environ.get("SWITCHBOARD_BENCH_TELEGRAM_LIMITS"):
        from telegram.ext import AIORateLimiter

        import channels.telegram.channel

        channels.telegram.default_rate_limiter = lambda: AIORateLimiter(  # type: ignore[assignment]
            overall_max_rate=0, group_max_rate=0)
    from bot.cli import main as cli

    cli(["run", *argv])


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="300 updates from 60 users, lease_ttl 5 s, quiet 20 s (about a minute)")
    parser.add_argument("--users", type=int, default=500)
    parser.add_argument("--per-user", type=int, default=10)
    parser.add_argument("--instances", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--downtime", type=float, default=3.0)
    parser.add_argument("--quiet", type=float, default=45.0)
    parser.add_argument("--lease-ttl", type=float, default=15.0, help="[database] lease_ttl")
    parser.add_argument("--pool-size", type=int, help="[database] pool_size (PostgreSQL runs)")
    parser.add_argument("--settle-max", type=float, default=900.0, help="give a run up to this long")
    parser.add_argument("--telegram-limits", action="store_true")
    parser.add_argument("--only", choices=("sqlite", "pg", "multi"))
    parser.add_argument("--keep", type=Path, help="keep configs, logs and the SQLite file here")
    args = parser.parse_args()
    quick = args.quick
    plan = Plan(users=60 if quick else args.users, per_user=5 if quick else args.per_user,
                instances=args.instances, kill=True, seed=args.seed, downtime=1.0 if quick else args.downtime,
                quiet=20.0 if quick else args.quiet, limits=args.telegram_limits,
                lease_ttl=5.0 if quick else args.lease_ttl, settle_max=args.settle_max,
                pool_size=args.pool_size)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        asyncio.run(bench(plan, args.keep, args.only))
    else:
        with tempfile.TemporaryDirectory(prefix="multi-instance-") as tmp:
            asyncio.run(bench(plan, Path(tmp), args.only))


if __name__ == "__main__":
    main()
