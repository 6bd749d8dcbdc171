"""`bench.multi_instance --shards`: one Discord bot's two gateway shards split over two daemons on one
PostgreSQL (`shard_count = 2`, `shard_ids = [0]` and `[1]`), on the Discord stand-in; one of them
(seeded choice) SIGKILLed once half the first wave is answered, kept down `--downtime` s while the
second wave is written, and started again.

Each user writes in a guild channel of their own (`require_mention = false`), guilds spread over
both shards. What the killed daemon's shard was sent while it was down never reaches a new
session on the gateway (Discord replays only to a RESUME), so it is answered only if the restart
catches up from channel history; a reply sent again after the kill carries its nonce, which Discord
(and the stand-in) answers with the message already made. Printed: the usual block, then for the
killed daemon's guilds how many messages were unanswered at the kill and written while it was
down, and how many of them were answered after the restart; lost, twice, out of order.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

from bench.multi_instance_count import MARKER, block, count
from bench.multi_instance_daemons import Daemon, Plan, Ready, common_config, daemon_env, wait_up
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.discord_api import DiscordStandIn
from bot.testing.discord_api import user as discord_user
from bot.testing.models import echo

FIRST_USER = 7_000_000
GUILDS = 8  # four a shard
FIRST_GUILD = 1000  # guild k's id is (FIRST_GUILD + k) << 22, a snowflake on shard (FIRST_GUILD + k) % 2


def guild_of(u: int) -> int:
    return (FIRST_GUILD + u % GUILDS) << 22


def channel_of(u: int) -> int:
    return guild_of(u) + 1 + u // GUILDS


def shard_of_user(u: int) -> int:
    return (FIRST_GUILD + u % GUILDS) % 2


def discord_config(database: str, api: AnthropicStandIn, plan: Plan, shard: int) -> str:
    guilds = "\n".join(f'[channels.discord.guilds."{guild_of(k)}"]' for k in range(GUILDS))
    return common_config(database, api, plan.lease_ttl, plan.pool_size) + f"""
[channels.discord]
enabled = true
require_mention = false
max_reply_age = 3600
streaming = "off"
shard_count = 2
shard_ids = [{shard}]

{guilds}
"""


async def shards(plan: Plan, workdir: Path) -> None:
    from bot.testing.postgres import PostgresServer

    print(f"multi_instance --shards: two daemons with one of a Discord bot's two shards each, one "
          f"PostgreSQL, {plan.users} users × {plan.per_user} messages in {GUILDS} guilds; load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    workdir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - before anything runs
    server = PostgresServer()
    server.start()
    try:
        database = server.create_database()
        async with AnthropicStandIn() as api, DiscordStandIn() as dc:
            api.default = echo
            people = [discord_user(FIRST_USER + u, f"user{u}") for u in range(plan.users)]
            for k in range(GUILDS):
                mine = range(k, plan.users, GUILDS)
                dc.add_guild(guild_of(k), f"guild{k}", channels=[(channel_of(u), f"c{u}") for u in mine],
                             members=[people[u] for u in mine])
            env = daemon_env({"DISCORD_BOT_TOKEN": dc.token, "SWITCHBOARD_DISCORD_BASE": dc.base_url,
                              "SWITCHBOARD_DISCORD_GATEWAY": dc.gateway_url})
            daemons = [Daemon(f"shard{s}", 0, workdir, env) for s in (0, 1)]
            for s, daemon in enumerate(daemons):
                daemon.config.write_text(discord_config(database, api, plan, s))
            try:
                await _drive(plan, dc, daemons, people, database, workdir)
            finally:
                for daemon in daemons:
                    await daemon.stop()
    finally:
        server.stop()


def answered(dc: DiscordStandIn) -> set[str]:
    return {f"m{a}-{b}" for s in dc.sent for a, b in MARKER.findall(s.content or "")}


async def _answered(dc: DiscordStandIn, want: int, quiet: float) -> bool:
    """Until `want` messages are answered, or no new one was for `quiet` s."""
    last, since = -1, time.monotonic()
    while (n := len(answered(dc))) < want:
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since > quiet:
            return False
        await asyncio.sleep(0.05)
    return True


async def _connected(dc: DiscordStandIn, daemons: list[Daemon], shards: list[tuple[int, int]]) -> None:
    async def ready() -> bool:
        return all(shard in dc.live_shards for shard in shards)

    await wait_up(daemons, ready)
    # discord.py takes the guilds in before it hands on messages: a word in each shard, answered.
    before = len(dc.sent)
    for s, _ in shards:
        u = next(u for u in range(GUILDS) if shard_of_user(u) == s)
        dc.message_create(channel_of(u), discord_user(FIRST_USER + u, f"user{u}"), "hello")
    await wait_up(daemons, _more(dc, before + len(shards)))


def _more(dc: DiscordStandIn, n: int) -> Ready:
    async def ready() -> bool:
        return len(dc.sent) >= n

    return ready


async def _drive(plan: Plan, dc: DiscordStandIn, daemons: list[Daemon], people: list[dict[str, object]],
                 database: str, workdir: Path) -> None:
    for daemon in daemons:
        await daemon.start()
    await _connected(dc, daemons, [(0, 2), (1, 2)])
    half = plan.per_user // 2
    waves = [[(u, n) for n in range(lo, hi) for u in range(plan.users)]
             for lo, hi in ((0, half), (half, plan.per_user))]
    started = time.monotonic()
    pushed: list[str] = []
    for u, n in waves[0]:
        dc.message_create(channel_of(u), people[u], f"note m{u}-{n}")
        pushed.append(f"m{u}-{n}")
    await _answered(dc, len(waves[0]) // 2, plan.quiet)
    victim = random.Random(plan.seed).randrange(2)
    daemons[victim].kill()
    killed = daemons[victim].proc
    assert killed is not None
    await killed.wait()
    answered_at_kill = answered(dc)
    print(f"  SIGKILL shard{victim} at {len(answered_at_kill)}/{len(waves[0])} of the first wave answered",
          flush=True)
    for u, n in waves[1]:
        dc.message_create(channel_of(u), people[u], f"note m{u}-{n}")
        pushed.append(f"m{u}-{n}")
    await asyncio.sleep(plan.downtime)
    await daemons[victim].start()
    await _connected(dc, [daemons[victim]], [(victim, 2)])
    print(f"  shard{victim} started again", flush=True)
    everything = await _answered(dc, len(pushed), plan.quiet)
    await asyncio.sleep(1.0)  # a late double would show here
    for daemon in daemons:
        await daemon.stop()
    sent = [(m.channel_id, m.content or "", m.time) for m in dc.sent]
    outcome = count("2 daemons, a shard each, one killed and restarted", pushed, database, sent,
                    workdir, started, end="every message answered" if everything else
                    f"no reply for {plan.quiet:g} s")
    print("\n".join(block(outcome)))
    theirs = [f"m{u}-{n}" for u, n in waves[0] + waves[1] if shard_of_user(u) == victim]
    waiting = [m for m in theirs if m not in answered_at_kill]
    after = sum(1 for m in waiting if outcome.delivered[m])
    twice = sum(1 for m in theirs if outcome.delivered[m] > 1)
    print(f"shard{victim}'s guilds: {len(waiting)} messages unanswered at the SIGKILL or written while it "
          f"was down, {after} answered after the restart, {twice} twice")
    nonces = [r.body["nonce"] for r in dc.requests if r.method == "POST" and r.path.endswith("/messages")
              and isinstance(r.body, dict) and r.body.get("nonce") is not None]
    print(f"shards: lost {outcome.lost}, twice {outcome.twice}, out of order {outcome.out_of_order}; replies "
          f"posted again under a nonce already used (Discord returns the message it made) "
          f"{len(nonces) - len(set(nonces))}; load average {os.getloadavg()[0]:.2f}")
