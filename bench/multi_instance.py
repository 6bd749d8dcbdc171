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
the 45th percent of the answers (past the start, before the kill).

`--only single` runs 1 and 2 alone and prints the daemon's CPU per answered update on each (its
process's user and system time while it answered, from /proc) and PostgreSQL's against 1.3 ×
SQLite's (issue 39, item 2).

Modes besides the default three blocks (each in a module of its own beside this one):
`--cpu-cap 0.25` (bench/multi_instance_capped.py): one and then three daemons, each in its own cgroup
held to that share of a core (PostgreSQL and the stand-ins uncapped): updates/s answered, the ratio,
CPU-seconds per answered update per instance. `--rolling` (bench/multi_instance_rolling.py): the
daemons restarted one at a time (SIGTERM, start, next) while users write, each waiting for its
answer: lost, twice, out of order and the longest wait against the lease TTL + 2 s. `--shards`
(bench/multi_instance_shards.py): two daemons splitting a Discord bot's two shards on the Discord
stand-in, one SIGKILLed and started again: its guilds answered after the restart, none twice.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.multi_instance_count import MARKER, WARM, Outcome, block, count, in_send_window, telegram_sent
from bench.multi_instance_daemons import FIRST_USER, Daemon, Plan, child, telegram_fleet, webhooks_up
from bot.testing.round_robin import RoundRobin
from bot.testing.telegram_api import TelegramStandIn, private_chat, user


async def run_once(label: str, plan: Plan, database: str, workdir: Path,
                   progress: Any = print) -> Outcome:
    async with telegram_fleet(plan, database, workdir) as (tg, lb, daemons):
        return await _drive(label, plan, database, workdir, tg, lb, daemons, random.Random(plan.seed),
                            progress)


def push_all(tg: TelegramStandIn, plan: Plan) -> list[str]:
    """Every user's messages queued at once (the stand-in posts each chat's in order); the markers."""
    pushed = []
    for u, n in [(u, n) for n in range(plan.per_user) for u in range(plan.users)]:
        person = user(FIRST_USER + u, f"User{u}")
        marker = f"m{u}-{n}"
        tg.push_message(private_chat(person), person, f"note {marker}")
        pushed.append(marker)
    return pushed


async def _drive(label: str, plan: Plan, database: str, workdir: Path, tg: TelegramStandIn,
                 lb: RoundRobin, daemons: list[Daemon], rng: random.Random, progress: Any) -> Outcome:
    for daemon in daemons:
        await daemon.start()
    await webhooks_up(daemons, tg, len(daemons))
    cpu_before = [_cpu_of(d) for d in daemons]
    started = time.monotonic()
    pushed = push_all(tg, plan)
    total = len(pushed)
    killed_at = None
    answered_before_kill = 0
    in_window: set[str] = set()
    last_count, last_change = 0, time.monotonic()
    end = ""
    while True:
        now = time.monotonic()
        answered = len(tg.sent)
        if answered != last_count:
            last_count, last_change = answered, now
        if plan.kill and killed_at is None and answered >= total // 2:
            victim = daemons[rng.randrange(len(daemons))]
            victim.kill()
            assert victim.proc is not None
            await victim.proc.wait()
            killed_at, answered_before_kill = now, answered
            in_window = in_send_window(database, tg)
            progress(f"  {label}: SIGKILL {victim.name} at {answered}/{total} answered")
            await asyncio.sleep(plan.downtime)
            await victim.start()
            await webhooks_up([victim], tg, len(tg.calls_of("setWebhook")) + 1)
            progress(f"  {label}: {victim.name} started again")
            continue
        if answered >= total and len({m for s in tg.sent for m in MARKER.findall(s.visible_text)}) >= total:
            end = "every message answered"
            break
        if now - last_change > plan.quiet:
            end = f"no reply for {plan.quiet:g} s"
            break
        if now - started > plan.settle_max:
            end = f"still replying after {plan.settle_max:g} s"
            break
        await asyncio.sleep(0.05)
    cpu = [_cpu_of(d) - before for d, before in zip(daemons, cpu_before, strict=True)]
    await asyncio.sleep(1.0)  # a late double would show here
    for daemon in daemons:
        await daemon.stop()
    return count(label, pushed, database, telegram_sent(tg), workdir, started,
                 answered_before_kill=answered_before_kill,
                 until_kill=(killed_at - started) if killed_at else 0.0, failovers=lb.failovers,
                 in_window=in_window, forwarded=[lb.forwarded[d.port] for d in daemons], end=end,
                 cpu=cpu if any(d.cap for d in daemons) or not plan.kill else [])


def _cpu_of(daemon: Daemon) -> float:
    """The CPU-seconds `daemon` has used: its cgroup's when capped, else its process's (user and
    system, from /proc; 0 where there is none)."""
    if daemon.cap:
        return daemon.cap.usage()
    try:
        assert daemon.proc is not None
        fields = Path(f"/proc/{daemon.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, AssertionError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
        if only in (None, "sqlite", "single"):
            outcomes.append(await run_once("1 instance, SQLite", one, str(workdir / "single.db"),
                                           workdir / "sqlite"))
            print("\n".join(block(outcomes[-1])), flush=True)
        if only in (None, "pg", "single"):
            outcomes.append(await run_once("1 instance, PostgreSQL", one, server.create_database(),
                                           workdir / "pg1"))
            print("\n".join(block(outcomes[-1])), flush=True)
        if len(outcomes) == 2:
            print(cpu_per_update(*outcomes), flush=True)
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


def cpu_per_update(sqlite: Outcome, pg: Outcome) -> str:
    """The one daemon's CPU per answered update on each backend, and PostgreSQL's against 1.3 ×
    SQLite's (issue 39, item 2)."""
    ms = [1000 * sum(o.cpu) / o.once if o.once and o.cpu else 0.0 for o in (sqlite, pg)]
    ratio = ms[1] / ms[0] if ms[0] else 0.0
    return (f"daemon CPU per answered update: SQLite {ms[0]:.2f} ms, PostgreSQL {ms[1]:.2f} ms, "
            f"ratio {ratio:.2f} (target <= 1.3; load average {os.getloadavg()[0]:.2f})")


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
    parser.add_argument("--only", choices=("sqlite", "pg", "multi", "single"),
                        help="one run; single: SQLite and PostgreSQL with one daemon each, and their "
                        "CPU per answered update")
    parser.add_argument("--think", type=float, default=10.0,
                        help="--rolling: a user's mean pause between an answer and the next message, s")
    parser.add_argument("--keep", type=Path, help="keep configs, logs and the SQLite file here")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--cpu-cap", type=float, metavar="CORES",
                       help="one and then --instances daemons, each held to CORES of a core (a cgroup each)")
    modes.add_argument("--rolling", action="store_true",
                       help="restart the daemons one at a time (SIGTERM, start, next) while users write")
    modes.add_argument("--shards", action="store_true",
                       help="two daemons splitting a Discord bot's shards, one killed and started again")
    args = parser.parse_args()
    quick = args.quick
    plan = Plan(users=60 if quick else args.users, per_user=5 if quick else args.per_user,
                instances=args.instances, kill=True, seed=args.seed, downtime=1.0 if quick else args.downtime,
                quiet=20.0 if quick else args.quiet, limits=args.telegram_limits,
                lease_ttl=5.0 if quick else args.lease_ttl, settle_max=args.settle_max,
                pool_size=args.pool_size, cap=args.cpu_cap)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        asyncio.run(run_mode(args, plan, args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="multi-instance-") as tmp:
            asyncio.run(run_mode(args, plan, Path(tmp)))


async def run_mode(args: argparse.Namespace, plan: Plan, workdir: Path) -> None:
    if args.cpu_cap is not None:
        from bench.multi_instance_capped import capped

        await capped(plan, workdir)
    elif args.rolling:
        from bench.multi_instance_rolling import rolling

        await rolling(plan, workdir, think=args.think)
    elif args.shards:
        from bench.multi_instance_shards import shards

        await shards(plan, workdir)
    else:
        await bench(plan, workdir, args.only)


if __name__ == "__main__":
    main()
