"""The web console's server time per page at 1 M stored messages, open event streams' idle cost, and
the web chat's first streamed text.

Usage: .venv/bin/python -m bench.web [--messages 1000000] [--requests 200] [--streams 100]
       [--stream-seconds 30] [--keep DIR]

The database: context_build's generator (the real `Store`'s tables, `executemany`) fills
`--messages` minus 10 000 messages over 1 000 sessions; one more session (the in-process channel's
DM) gets 10 000 messages and a month of `model_usage` rows (`--usage-per-day`) over 1 000 sessions.
Then the real `Daemon` runs in this process with `[web]` and `[channels.web]` on and the real SDK
brain against the Anthropic stand-in: `--turns` real turns in the big session give it turns with
snapshots. Pages (after a real login, through aiohttp's client over 127.0.0.1, so each time is the
round trip, an upper bound of the server's time): the first view of each usage window the page
offers after the start (once each), then the overview, the big session paged
(`?before=` at random ids), a turn explained (random turn), usage for this month (as it is; with a
call stored by another connection before each request; windows never read before, so summed whole),
each with its slowest three and whether each was a first visit. Then `--streams`
`/events` streams, then as many `/chat/events` streams (one account's chat), held open by a child
process for `--stream-seconds` each while the daemon is idle:
this process's CPU (`time.process_time`: the daemon and the idle stand-in) as % of a core, beside
the same time with no stream open. Then the web chat: a message posted → the first preview on
`/chat/events`, against the stand-in's first token (request received + its `--first-token` delay).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

from bench.context_build import generate_db
from bot.config import Config, parse_config
from bot.core.log import configure_logging
from bot.daemon.assembly import Daemon
from bot.daemon.heap import settle
from bot.daemon.supervisor import web_channel
from bot.models.providers import model_sdks_of
from bot.ranking.budget import estimate_tokens
from bot.store import Store, UsageRecord
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest, Text
from bot.testing.fake_channel import FakeChannel
from bot.web.auth import hash_password

PASSWORD = "correct horse battery"
FORM_TOKEN = re.compile(r'name="csrf" value="([^"]+)"')
NONCE = re.compile(r'name="nonce" value="([^"]+)"')
BIG_SESSION = 10_000
PAGE_MEDIAN_MS, PAGE_P99_MS, CHAT_OVER_MS, STREAMS_CPU_PCT = 20.0, 100.0, 100.0, 5.0
DAY = 86_400.0
REPLY_MODEL = "bench-main"


def fill(path: Path, messages: int, usage_per_day: int) -> tuple[str, range]:
    """The database (see the module's docstring), described; (the big session's key, its ids).
    A database already at `path` (`--keep`) is used as it is."""
    started = time.perf_counter()
    key = str(FakeChannel().key())
    if path.exists():
        print(f"reusing {path}")
        return key, described(path, key, started)
    generate_db(path, max(messages - BIG_SESSION, 1_000), 1_000)
    now = time.time()
    rng = random.Random(11)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("BEGIN")
    conn.execute("INSERT INTO sessions (key, created_at, updated_at, message_count, user_turns) "
                 "VALUES (?, ?, ?, ?, ?)", (key, now - 30 * DAY, now - 60, BIG_SESSION, BIG_SESSION // 2))
    (next_id,) = conn.execute("SELECT MAX(id) + 1 FROM messages").fetchone()
    rows = []
    for n in range(BIG_SESSION):
        role = "user" if n % 2 == 0 else "assistant"
        text = f"message {n} about the garden, the weather and what to cook on day {n // 300}"
        rows.append((next_id + n, key, role, "interactive", "42" if role == "user" else None,
                     "Ada" if role == "user" else None, text, str(next_id + n) if role == "user" else None,
                     now - 30 * DAY + n * (30 * DAY / BIG_SESSION), estimate_tokens(text),
                     next_id + n - 1 if role == "assistant" else None))
    conn.executemany(
        "INSERT INTO messages (id, session_key, role, origin, sender_id, sender_name, text, "
        "provider_message_id, created_at, token_estimate, request_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    usage = [(f"agent:main:telegram:direct:{rng.randrange(1_000)}", str(rng.randrange(300)),
              rng.choice(["reply", "reply", "reply", "triage", "compaction"]),
              rng.choice(["claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-1"]),
              rng.randrange(500, 20_000), rng.randrange(20, 800), rng.randrange(0, 2_000),
              rng.randrange(0, 10_000), now - day * DAY - rng.random() * DAY)
             for day in range(31) for _ in range(usage_per_day)]
    conn.executemany(
        "INSERT INTO model_usage (session_key, user_id, kind, model, input_tokens, output_tokens, "
        "cache_write_tokens, cache_read_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", usage)
    conn.execute("COMMIT")
    conn.close()

    async def account() -> None:
        async with Store.open(path) as store:
            await store.add_web_account("ada", hash_password(PASSWORD), now=1.0)

    asyncio.run(account())
    return key, described(path, key, started)


def described(path: Path, key: str, started: float) -> range:
    """Print the database's size; the big session's message ids."""
    with sqlite3.connect(path) as conn:
        (total,) = conn.execute("SELECT COUNT(*) FROM messages").fetchone()
        first, last = conn.execute("SELECT MIN(id), MAX(id) FROM messages WHERE session_key = ?",
                                   (key,)).fetchone()
        (usage_rows,) = conn.execute("SELECT COUNT(*) FROM model_usage").fetchone()
    print(f"database: {total:,} messages, {usage_rows:,} usage rows, {path.stat().st_size / 2**20:.0f} MiB, "
          f"ready in {time.perf_counter() - started:.1f} s")
    return range(first, last + 1)


def config_for(db: Path, api: AnthropicStandIn, port: int) -> Config:
    return parse_config({
        "database": {"path": str(db)},
        "anthropic": {"base_url": api.base_url, "model": REPLY_MODEL, "fast_model": "bench-fast",
                      "timeout": 20.0, "max_retries": 0},
        "semantic": {"enabled": "off"},
        "web": {"enabled": True, "listen": f"127.0.0.1:{port}"},
        "channels": {"web": {"enabled": True}},
    }, str(db.parent / "config.toml"))


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def log_in(client: aiohttp.ClientSession, url: str) -> None:
    async with client.get(f"{url}/login") as page:
        token = FORM_TOKEN.search(await page.text())
    assert token is not None
    async with client.post(f"{url}/login", allow_redirects=False,
                           data={"name": "ada", "password": PASSWORD, "csrf": token.group(1)}) as done:
        assert done.status == 303, done.status


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


async def time_pages(client: aiohttp.ClientSession, url: str, key: str, ids: range, turns: int,
                     requests: int, db: Path) -> None:
    rng = random.Random(3)
    cold_days = iter(range(31, 31 + requests + 5))  # a window not read before: nothing kept to add to
    pages: dict[str, tuple[Callable[[], str], Callable[[Store], Awaitable[None]] | None]] = {
        "overview": (lambda: f"{url}/", None),
        "session, paged": (lambda: f"{url}/sessions/{key}?before={rng.randrange(ids.start + 100, ids.stop)}",
                           None),
        "turn explained": (lambda: f"{url}/sessions/{key}/turns/{rng.randrange(1, turns + 1)}", None),
        "usage, month": (lambda: f"{url}/usage", None),
        "usage, +1 call": (lambda: f"{url}/usage", one_more_call),
        "usage, cold": (lambda: f"{url}/usage?days={next(cold_days)}", None),
    }
    print(f"\npages: {requests} requests each (round trip over 127.0.0.1, one at a time), ms; "
          "usage +1 call: a call stored (by another connection) before each request; usage cold: "
          "each request a window never read before (31, 32, ... days: every stored call summed)")
    print(f"{'page':<16} {'median':>8} {'p99':>8} {'max':>8}  target median ≤ {PAGE_MEDIAN_MS:.0f}, "
          f"p99 ≤ {PAGE_P99_MS:.0f}   slowest 3 (first visit of that address?); full GC pauses")
    async with Store.open(db) as writer:
        for name, (address, before) in pages.items():
            seen: set[str] = set()
            for _ in range(5):  # warm-up: templates compiled, pages cached by SQLite
                target = address()
                seen.add(target)
                async with client.get(target) as page:
                    await page.read()
            times: list[tuple[float, bool]] = []
            pauses.clear()
            for _ in range(requests):
                target = address()
                if before is not None:
                    await before(writer)
                started = time.perf_counter()
                async with client.get(target) as page:
                    await page.read()
                    assert page.status == 200 and not page.url.path.endswith("/login"), (name, page.url)
                times.append(((time.perf_counter() - started) * 1000, target not in seen))
                seen.add(target)
            values = [ms for ms, _ in times]
            median, p99 = statistics.median(values), percentile(values, 0.99)
            slowest = ", ".join(f"{ms:.0f}{' (first)' if first else ''}" for ms, first in sorted(times)[-3:])
            full = [ms for generation, ms in pauses if generation == 2]
            print(f"{name:<16} {median:>8.2f} {p99:>8.2f} {max(values):>8.2f}  "
                  f"{verdict(median <= PAGE_MEDIAN_MS and p99 <= PAGE_P99_MS):<6}  {slowest}; "
                  f"{len(full)} full GC, longest {max(full, default=0):.0f}")


# The garbage collector's pauses in this process (the daemon's), as (generation, ms): a full
# collection walks every object the daemon holds.
pauses: list[tuple[int, float]] = []
_collecting: list[float] = []


def _timed_collection(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _collecting[:] = [time.perf_counter()]
    elif _collecting:
        pauses.append((info["generation"], (time.perf_counter() - _collecting[0]) * 1000))


gc.callbacks.append(_timed_collection)


async def first_views(client: aiohttp.ClientSession, url: str) -> None:
    """The usage page's first view of each window it offers since the daemon started (after the
    turns), once each: what an admin's first look after a start costs."""
    times = []
    for query in ("", "?days=7", "?days=30", "?days=90"):
        started = time.perf_counter()
        async with client.get(f"{url}/usage{query}") as page:
            await page.read()
            assert page.status == 200
        times.append(f"{query or 'month'} {(time.perf_counter() - started) * 1000:.1f}")
    print("usage, first view of each offered window after the start, ms: " + ", ".join(times))


async def one_more_call(store: Store) -> None:
    key = f"agent:main:telegram:direct:{random.randrange(1_000)}"
    await store.record_usage(UsageRecord(key, "7", "reply", "claude-haiku-4-5", 1_200, 80, 0, 900,
                                         time.time()))


async def streams_cpu(url: str, cookie: str, streams: int, seconds: float, path: str = "/events") -> None:
    """This process's CPU while a child holds `streams` streams of `path` open, beside none."""
    print(f"\n{streams} open {path} streams for {seconds:.0f} s, daemon idle "
          "(CPU of this process, time.process_time: the daemon and the idle stand-in)")
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.sleep(min(seconds, 10.0))
    idle = (time.process_time() - cpu) / (time.perf_counter() - wall) * 100
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.web", "--streams-child", f"{url}{path}", cookie, str(streams),
        stdout=asyncio.subprocess.PIPE)
    assert child.stdout is not None
    opened = (await child.stdout.readline()).decode().strip()
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.sleep(seconds)
    busy = (time.process_time() - cpu) / (time.perf_counter() - wall) * 100
    child.terminate()
    await child.wait()
    print(f"  no stream: {idle:.2f} % of a core; {opened}: {busy:.2f} % of a core, "
          f"{busy - idle:.2f} % above idle  target ≤ {STREAMS_CPU_PCT:.0f} %  "
          f"{verdict(busy <= STREAMS_CPU_PCT)}")


async def hold_streams(url: str, cookie: str, streams: int) -> None:
    """The child: open the streams, say so, read them until killed."""
    async with aiohttp.ClientSession(headers={"Cookie": cookie}) as client:
        responses = [await client.get(url) for _ in range(streams)]
        assert all(r.status == 200 for r in responses), [r.status for r in responses]
        print(f"{len(responses)} streams open", flush=True)

        async def drain(response: aiohttp.ClientResponse) -> None:
            async for _ in response.content:
                pass

        await asyncio.gather(*(drain(r) for r in responses))


async def chat_latency(client: aiohttp.ClientSession, url: str, api: AnthropicStandIn, samples: int,
                       first_token: float) -> None:
    arrived: list[float] = []

    def answer(request: RecordedRequest) -> Text:
        if request.model != REPLY_MODEL:  # triage (once the chat has history): answered at once
            return Text("[]")
        arrived.append(time.perf_counter())
        return Text("The tides follow the moon, and the earth turns under it.", delay=first_token,
                    parts=6, delta_delay=0.05)

    api.default = answer
    print(f"\nweb chat: posted → first streamed text, {samples} messages, reply model's first token "
          f"{first_token * 1000:.0f} ms after its request (triage answers at once); ms")
    overs, totals, to_model = [], [], []
    async with client.get(f"{url}/chat/events?after=0") as stream:
        for n in range(samples):
            async with client.get(f"{url}/chat") as page:
                html = await page.text()
            csrf, nonce = FORM_TOKEN.search(html), NONCE.search(html)
            assert csrf is not None and nonce is not None
            arrived.clear()
            posted = time.perf_counter()
            async with client.post(f"{url}/chat", headers={"Accept": "application/json"},
                                   data={"csrf": csrf.group(1), "nonce": nonce.group(1),
                                         "text": f"why are there tides? ({n})"}) as done:
                assert done.status == 200, done.status
            kind = ""
            while kind != "preview":
                line = (await stream.content.readline()).decode()
                if line.startswith("event: "):
                    kind = line[len("event: "):].strip()
            seen = time.perf_counter()
            while kind != "reply":  # let the turn finish before the next message
                line = (await stream.content.readline()).decode()
                if line.startswith("event: "):
                    kind = line[len("event: "):].strip()
            first = arrived[0] + first_token
            totals.append((seen - posted) * 1000)
            to_model.append((arrived[0] - posted) * 1000)
            overs.append((seen - first) * 1000)
    over = statistics.median(overs)
    print(f"  posted → first text median {statistics.median(totals):.1f}, posted → model request "
          f"{statistics.median(to_model):.1f}, first text after the model's first token median "
          f"{over:.1f} (max {max(overs):.1f})  target ≤ {CHAT_OVER_MS:.0f}  {verdict(over <= CHAT_OVER_MS)}")


async def run(args: argparse.Namespace, db: Path, key: str, ids: range) -> None:
    os.environ["ANTHROPIC_API_KEY"] = "bench-key"
    started = time.perf_counter()
    async with AnthropicStandIn() as api:
        api.default = lambda _: Text("Noted, and the garden will be fine.")
        port = free_port()
        config = config_for(db, api, port)
        channel = FakeChannel()
        daemon = Daemon(config, [channel, web_channel(config)])
        starting = time.perf_counter()
        task = asyncio.create_task(daemon.run())
        await asyncio.wait_for(daemon.started.wait(), 60)
        print(f"daemon started (run → started) in {(time.perf_counter() - starting) * 1000:.0f} ms")
        assert daemon.router is not None
        # Start-up's heap (the model SDKs imported first) frozen, as `switchboard run` does.
        sdks = {sdk for agent in config.agent_ids() for sdk in model_sdks_of(config.for_agent(agent))}
        await asyncio.wait_for(settle(daemon, tuple(sorted(sdks))), 60)
        try:
            for n in range(args.turns):
                await channel.inject(channel.message(f"what should I plant next, question {n}?"))
                await daemon.router.idle()
            url = f"http://127.0.0.1:{port}"
            async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:
                await log_in(client, url)
                await first_views(client, url)
                await time_pages(client, url, key, ids, args.turns, args.requests, db)
                cookie = "; ".join(f"{c.key}={c.value}" for c in client.cookie_jar)
                await streams_cpu(url, cookie, args.streams, args.stream_seconds)
                # The chat's streams: one look at the store every 2 s for all of them (ChatFeed).
                await streams_cpu(url, cookie, args.streams, args.stream_seconds, "/chat/events?after=0")
                await chat_latency(client, url, api, args.chat_samples, args.first_token)
        finally:
            daemon.request_stop()
            await asyncio.wait_for(task, 30)
    print(f"\nwhole run {time.perf_counter() - started:.0f} s")


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--streams-child":
        asyncio.run(hold_streams(sys.argv[2], sys.argv[3], int(sys.argv[4])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--usage-per-day", type=int, default=300)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--stream-seconds", type=float, default=30.0)
    parser.add_argument("--chat-samples", type=int, default=10)
    parser.add_argument("--first-token", type=float, default=0.3)
    parser.add_argument("--keep", type=Path, help="a folder for the database (kept, and reused when there)")
    args = parser.parse_args()
    print("command: .venv/bin/python -m bench.web " + " ".join(sys.argv[1:]))
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    print(f"commit {head.stdout.strip() or '(not a git checkout)'}")
    with open(os.devnull, "w") as sink, tempfile.TemporaryDirectory() as tmp:
        configure_logging("WARNING", "json", secrets=[], stream=sink)
        folder = args.keep or Path(tmp)
        db = folder / "web.db"
        key, ids = fill(db, args.messages, args.usage_per_day)
        asyncio.run(run(args, db, key, ids))
    print(f"load average {os.getloadavg()[0]:.2f} (other processes share the machine)")


if __name__ == "__main__":
    main()
