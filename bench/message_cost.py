"""The whole cost of a message: the shipped daemon, as `make run` installs it, against the stand-ins.

Usage: flock /tmp/bench.lock .venv/bin/python -m bench.message_cost [--quick] [--users 100]
       [--per-user 20] [--samples 20] [--restarts 2] [--settle 3] [--first-token 0.3]
       [--stream-seconds 1.2] [--no-profile] [--profile-per-user N] [--trace-memory] [--keep DIR]
       [--semantic static|minilm]

The daemon is a real subprocess started as `make run` starts it (`switchboard run --config X`),
through a thin wrapper in this file (`--daemon-child`) that hides from it the installed packages
`make run` would not have installed (the project's dependencies with the extras the recipes of
`make -n -B run` name are kept; this venv also has the dev and semantic extras) and can arm
cProfile. The config is what `switchboard init` writes from config.toml.example with the stand-ins'
URLs, the bot token and the users' ids filled in and nothing else changed (`--semantic ENCODER`:
also `[semantic] enabled = "on"` with that encoder, and the `semantic` extra kept visible as
`make semantic` would install it, MiniLM's weights package too for "minilm"): python-telegram-bot's
rate limiter keeps Telegram's 30 messages/s, streaming is "auto", triage runs, tools are offered.
The Telegram Bot API and Anthropic Messages API stand-ins (bot/testing) run in this process on
127.0.0.1, so their CPU is not the daemon's; the daemon's is read from /proc/<pid>/stat (utime +
stime) and its memory from /proc/<pid>/status.

The measured run, in order:
1. start: spawn → the first getUpdates the stand-in receives (and READY=1 on $NOTIFY_SOCKET);
2. idle: `--settle` s later, RSS (VmRSS);
3. `--samples` messages one at a time, each the first of a new chat: from the update being queued
   at the Bot API to the first sendChatAction, the reply model's request, the first visible text (a
   draft with text, or the message) and the whole reply; the model writes its first text
   `--first-token` s after the request and the rest (~300 characters) over `--stream-seconds`;
4. load: `--users` × `--per-user` DMs queued at once; the model answers at once (streamed in 12
   deltas); messages/s from the push to the last reply; daemon CPU from the push until the daemon is
   quiet again (what a turn does after its reply counts too), split into the event-loop thread and
   the others (SQLite's); RSS then, and resident memory by mapping;
5. `--samples` more one-at-a-time messages, in chats that now have history;
6. SIGTERM; `--restarts` more starts on the filled database (the start figure is the median of the
   first start and these), and one more under `-X importtime` for what the start's imports cost.
Then the profile run (unless `--no-profile`): a fresh database, the same load (`--profile-per-user`
to shorten it) with cProfile on the event-loop thread measuring CPU time (`time.thread_time`) from
the push until quiet: the top 15 functions by own time, own time by package, our functions by time
inside them; `--trace-memory` adds tracemalloc over the same span (what the load leaves allocated,
by package). cProfile triples the daemon's CPU, so no figure of the table comes from this run.

Prints each figure beside its target and "met" or "MISSED"; never fails on them. About 5 minutes;
`--quick` (20 users × 5 messages, 5 samples, one restart) about a minute and a half.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

# The daemon child imports this module too: only the standard library at the top.
ROOT = Path(__file__).resolve().parent.parent

if TYPE_CHECKING:
    from bench.crash_loop import Cycle, Driver
    from bot.config import Config
    from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest, Text
    from bot.testing.telegram_api import TelegramStandIn

TARGET_CPU_MS = 10.0
TARGET_RSS_MIB = 150.0
TARGET_TYPING_MS = 10.0
TARGET_START_S = 2.0
# From the bench to the daemon child.
HIDE_ENV = "SB_BENCH_HIDE"  # JSON {"modules": [...], "dists": [...]}: what the daemon must not find
PROFILE_ENV = "SB_BENCH_PROFILE"  # the stats file: SIGUSR1 starts cProfile, SIGUSR2 stops and writes it
TRACE_ENV = "SB_BENCH_TRACE_MEMORY"  # set: tracemalloc over the same span
REPORT_ENV = "SB_BENCH_REPORT"  # each SIGUSR2 writes <this>.<n>: the modules loaded (and what was traced)
REPLY = ("The tide comes in twice a day because the moon pulls the sea toward it. The earth turns "
         "under that bulge of water, so each coast meets it in turn. The sun adds a smaller pull: "
         "when both line up the tides run high, and when they pull at right angles they run low.")
QUESTIONS = [
    "could you remind me what we decided about the trip to Lisbon?",
    "what time is the dentist on Thursday, and should I bring the forms?",
    "why are there two tides a day and not one?",
    "please summarise what I said about the budget last week",
    "is it too late to plant tomatoes outside in October?",
]
FIRST_USER = 5_000_000
PARTS = 12  # text deltas per streamed reply
QUIET_TICKS = 1  # the daemon is quiet when it spends at most this many clock ticks per 0.25 s, twice
WAIT = 60.0  # seconds without a reply before a phase gives up
TICK = 1 / os.sysconf("SC_CLK_TCK")


# -- the daemon child: `switchboard run` without what `make run` would not have installed -------------


class _Hiding:
    """A meta path finder wrapping another: it finds nothing of the hidden packages, so `import numpy`
    fails and `importlib.util.find_spec("numpy")` is None, as when the package is not installed."""

    def __init__(self, finder: Any, modules: frozenset[str], dists: frozenset[str]) -> None:
        self._finder, self._modules, self._dists = finder, modules, dists

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.partition(".")[0] in self._modules:
            return None
        find = getattr(self._finder, "find_spec", None)
        return find(fullname, path, target) if find is not None else None

    def find_distributions(self, *args: Any, **kwargs: Any) -> Any:
        find = getattr(self._finder, "find_distributions", None)
        for dist in find(*args, **kwargs) if find is not None else ():
            if _canonical(dist.metadata["Name"] or "") not in self._dists:
                yield dist

    def invalidate_caches(self) -> None:
        invalidate = getattr(self._finder, "invalidate_caches", None)
        if invalidate is not None:
            invalidate()


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def daemon_child(argv: list[str]) -> None:
    """`switchboard <argv>` with the hidden packages hidden. SIGUSR1 starts cProfile (and tracemalloc)
    when asked for; SIGUSR2 stops them, writes the stats, and writes the modules loaded so far."""
    import tracemalloc

    hidden = json.loads(os.environ.get(HIDE_ENV) or "{}")
    modules, dists = frozenset(hidden.get("modules", ())), frozenset(hidden.get("dists", ()))
    sys.meta_path[:] = [_Hiding(finder, modules, dists) for finder in sys.meta_path]
    profile_path, report_path = os.environ.get(PROFILE_ENV), os.environ.get(REPORT_ENV)
    trace = bool(os.environ.get(TRACE_ENV))
    profiler: Any = None
    if profile_path:
        import cProfile

        profiler = cProfile.Profile(time.thread_time)  # the event-loop thread's CPU, not wall time
    reports = 0

    def start(signum: int, frame: Any) -> None:
        if trace:
            tracemalloc.start()
        if profiler is not None:
            profiler.enable()

    def stop(signum: int, frame: Any) -> None:
        nonlocal reports
        report: dict[str, Any] = {}
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile_path)
        if tracemalloc.is_tracing():
            # The profiler's own tables are allocated from cProfile.py's frames: not the daemon's.
            snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, "*cProfile.py")])
            tracemalloc.stop()
            grown: dict[str, int] = {}
            for stat in snapshot.statistics("filename"):
                package = package_of(stat.traceback[0].filename, "")
                grown[package] = grown.get(package, 0) + stat.size
            report["grown"] = grown
        if report_path:
            reports += 1
            report |= {"modules": len(sys.modules),
                       "top_level": sorted({name.partition(".")[0] for name in list(sys.modules)})}
            Path(f"{report_path}.{reports}").write_text(json.dumps(report), encoding="utf-8")

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    from bot.cli import main as switchboard

    switchboard(argv)


# -- what `make run` installs ---------------------------------------------------------------------------


def run_installs(target: str = "run") -> tuple[set[str], list[tuple[str, bool]], str]:
    """The project's extras and the other requirements (each with whether --no-deps) that the
    recipes of `make <target>` pip-install, read from `make -n -B <target>`; and where that came from."""
    import shlex

    try:
        done = subprocess.run(["make", "-n", "-B", target, "CONFIG=/dev/null"], cwd=ROOT,
                              capture_output=True, text=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return set(), [], f"`make -n -B {target}` failed ({exc}), so none assumed"
    extras: set[str] = set()
    others: list[tuple[str, bool]] = []
    for line in done.stdout.splitlines():
        words = shlex.split(line)
        if "pip" not in words or "install" not in words:
            continue
        args = words[words.index("install") + 1:]
        editable = False
        for word in args:
            if word == "-e":
                editable = True
            elif not word.startswith("-"):
                if editable or word.startswith("."):
                    if "[" in word:
                        extras |= {e.strip() for e in word.split("[", 1)[1].rstrip("]").split(",")}
                elif word != "pip":
                    others.append((word, "--no-deps" in args))
                editable = False
    return extras, others, f"from `make -n -B {target}`"


def hidden_packages(extras: set[str], others: list[tuple[str, bool]]) -> dict[str, list[str]]:
    """The installed top-level modules and distributions outside what `make run` installs: the
    project with `extras` and its dependencies, `others`, and pip and setuptools (in every venv)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    wanted: set[str] = set()
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [("switchboard", frozenset(extras), True), ("pip", frozenset[str](), True),
            ("setuptools", frozenset[str](), True)]
    todo += [(Requirement(text).name, frozenset(Requirement(text).extras), not no_deps)
             for text, no_deps in others]
    while todo:
        name, with_extras, deep = todo.pop()
        if (_canonical(name), with_extras) in seen:
            continue
        seen.add((_canonical(name), with_extras))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        wanted.add(_canonical(dist.metadata["Name"]))
        environments = [{"extra": ""}] + [{"extra": e} for e in with_extras]
        for text in dist.requires or () if deep else ():
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate(env) for env in environments):
                todo.append((req.name, frozenset(req.extras), True))
    installed = {_canonical(d.metadata["Name"]) for d in metadata.distributions() if d.metadata["Name"]}
    modules = [module for module, owners in metadata.packages_distributions().items()
               if not {_canonical(o) for o in owners} & wanted]
    return {"modules": sorted(modules), "dists": sorted(installed - wanted)}


def shipped_config(workdir: Path, api: AnthropicStandIn, tg: TelegramStandIn, users: list[int],
                   semantic: str | None = None) -> Path:
    """What `switchboard init` writes, with the stand-ins' URLs and the users' ids filled in (and
    semantic recall on with the `semantic` encoder, when given); checked by loading it as the
    daemon will."""
    from bot.config import load_config

    path = workdir / "shipped.toml"  # crash_loop's Driver writes a config.toml of its own, unused here
    done = subprocess.run([sys.executable, "-m", "bot", "init", "--config", str(path)], cwd=workdir,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"switchboard init failed: {done.stderr.strip()}")
    text = path.read_text(encoding="utf-8")
    text = set_key(text, "anthropic", "base_url", json.dumps(api.base_url))
    text = set_key(text, "channels.telegram", "enabled", "true")
    text = set_key(text, "channels.telegram", "base_url", json.dumps(tg.base_url))
    text = set_key(text, "channels.telegram", "allow_from", json.dumps(users))
    if semantic:
        text = set_key(text, "semantic", "enabled", '"on"')
        text = set_key(text, "semantic", "encoder", json.dumps(semantic))
    path.write_text(text, encoding="utf-8")
    config = load_config(path)
    telegram = config.channels.telegram
    assert config.anthropic.base_url == api.base_url and telegram.enabled
    assert telegram.base_url == tg.base_url and len(telegram.allow_from) == len(users)
    return path


def set_key(text: str, section: str, key: str, value: str) -> str:
    """`key = value` in `[section]` of a TOML text in place of the key's line there (commented out or
    not); KeyError when the section has none."""
    lines = text.splitlines()
    inside = False
    for index, line in enumerate(lines):
        stripped = line.split("#", 1)[0].strip() if line.lstrip().startswith("[") else line.strip()
        if stripped.startswith("["):
            inside = stripped == f"[{section}]"
        elif inside and "=" in stripped and stripped.lstrip("# ").split("=", 1)[0].strip() == key:
            lines[index] = f"{key} = {value}"
            return "\n".join(lines) + "\n"
    raise KeyError(f"[{section}] {key} is not in the example config")


# -- /proc ------------------------------------------------------------------------------------------------


def cpu_s(pid: int, task: int | None = None) -> float:
    """utime + stime of a process (its ended threads included) or of one of its threads, in seconds."""
    where = f"/proc/{pid}/task/{task}/stat" if task else f"/proc/{pid}/stat"
    fields = Path(where).read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) * TICK


def threads_cpu(pid: int) -> dict[int, float]:
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError):  # a thread that ended meanwhile
            found[int(task.name)] = cpu_s(pid, int(task.name))
    return found


def status_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_by_mapping(pid: int) -> list[tuple[str, float]]:
    """Resident MiB per mapped file, anonymous memory (the heap) as one entry; largest first."""
    sizes: dict[str, float] = {}
    name = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if line.startswith("Rss:"):
            sizes[name] = sizes.get(name, 0.0) + int(head[1]) / 1024
        elif len(head) >= 5 and "-" in head[0] and ":" not in head[0]:  # a mapping's first line
            path = head[5] if len(head) == 6 else ""
            name = "anonymous" if path in ("", "[heap]") else Path(path).name if path[:1] == "/" else path
    return sorted(sizes.items(), key=lambda item: -item[1])


# -- the model --------------------------------------------------------------------------------------------


class Model:
    """The Anthropic stand-in's answers: triage picks nothing, at once; the reply model answers
    "re: <marker>. <REPLY>" at once or at a writer's pace, and notes when each marker's request came."""

    def __init__(self, fast_model: str) -> None:
        from bench.crash_loop import MARKER
        from bot.testing.anthropic_api import Text

        self._text, self._marker = Text, MARKER
        self.fast_model = fast_model
        self.asked: dict[str, float] = {}
        self.triage = self.replies = 0
        self.first_token = self.stream_seconds = 0.0  # 0: at once

    def __call__(self, request: RecordedRequest) -> Text:
        now = time.monotonic()
        if request.model == self.fast_model:
            self.triage += 1
            return self._text('{"relevant": []}')
        self.replies += 1
        content = request.messages[-1]["content"] if request.messages else ""
        text = content if isinstance(content, str) else " ".join(str(b.get("text", "")) for b in content)
        found = self._marker.findall(text)
        marker = found[-1] if found else "?"
        self.asked.setdefault(marker, now)
        return self._text(f"re: {marker}. {REPLY}", delay=self.first_token, parts=PARTS,
                          delta_delay=self.stream_seconds / PARTS)


# -- the measurements --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One message's milliseconds from its update being queued at the Bot API (None: never seen)."""

    typing: float | None
    request: float | None
    visible: float | None
    complete: float | None


@dataclass(frozen=True)
class Load:
    """Many messages queued at once, answered; CPU from the push until the daemon was quiet again."""

    messages: int
    answered: int
    push_s: float
    wall_s: float  # push → last reply
    cpu_s: float
    loop_cpu_s: float  # of it, the event-loop (main) thread's
    after_reply_s: float  # of it, after the last reply
    quiet_s: float  # last reply → quiet
    threads: int
    drafts: int
    actions: int
    triage: int
    replies: int

    def per_message(self, count: float) -> float:
        return count / max(self.messages, 1)


@dataclass
class Figures:
    """What the measured run found."""

    shipped: Config
    semantic: str = ""
    settle_cpu_s: float = 0.0
    rss_idle: float = 0.0
    rss_after: float = 0.0
    peak: float = 0.0
    mappings: list[tuple[str, float]] | None = None
    idle_modules: dict[str, Any] | None = None
    after_modules: dict[str, Any] | None = None
    fresh: list[Sample] | None = None
    history: list[Sample] | None = None
    load: Load | None = None
    stops: list[float | None] | None = None
    imports: str = ""


class Bench:
    """The stand-ins, the model and every daemon process of one bench run."""

    def __init__(self, tg: TelegramStandIn, api: AnthropicStandIn, model: Model,
                 hidden: dict[str, list[str]], folder: Path, semantic: str | None = None) -> None:
        self.tg, self.api, self.model, self.hidden, self.folder = tg, api, model, hidden, folder
        self.semantic = semantic
        self.written: dict[int, int] = {}
        self.starts: list[float] = []
        self.readies: list[float | None] = []
        self.start_cpus: list[float] = []  # the daemon's CPU seconds up to its first poll
        self.cycles: list[Cycle] = []
        self.procs: list[asyncio.subprocess.Process] = []

    def driver(self, name: str, users: list[int], *, profile: bool = False, trace: bool = False) -> Driver:
        """crash_loop's Driver (spawn, READY=1, stop) for the shipped config, in a fresh folder."""
        from bench.crash_loop import Driver, Plan, TelegramPlatform

        class Platform(TelegramPlatform):
            def command(self, config: Path) -> list[str]:
                return [sys.executable, "-m", "bench.message_cost", "--daemon-child", "run",
                        "--config", str(config)]

        workdir = self.folder / name
        shutil.rmtree(workdir, ignore_errors=True)  # a --keep folder used before
        workdir.mkdir(parents=True)
        driver = Driver(Platform(self.tg), workdir, Plan(signals=(), users=len(users), grace=10.0), self.api)
        driver.config = shipped_config(workdir, self.api, self.tg, [FIRST_USER + u for u in users],
                                       self.semantic)
        driver.env.pop("XDG_STATE_HOME", None)  # so the database goes to ./state in the folder
        driver.env |= {HIDE_ENV: json.dumps(self.hidden), REPORT_ENV: str(workdir / "modules")}
        if profile:
            driver.env[PROFILE_ENV] = str(workdir / "profile.pstats")
        if trace:
            driver.env[TRACE_ENV] = "1"
        return driver

    async def start(self, driver: Driver, label: str,
                    timed: bool = True) -> tuple[asyncio.subprocess.Process, Cycle]:
        """Spawn and wait for the first getUpdates (the time joins `starts` when `timed`) and READY=1."""
        from bench.crash_loop import CONNECT_TIMEOUT, Cycle

        cycle = Cycle(label, driver.workdir / f"{len(self.cycles):02d}-{label}.log")
        self.cycles.append(cycle)
        calls = len(self.tg.calls)
        spawned = time.monotonic()
        proc = await driver.spawn(cycle)
        self.procs.append(proc)
        if not await driver.watch(proc, cycle, spawned, driver.platform.contacts(),
                                  lambda: self._first_poll(calls) is not None, CONNECT_TIMEOUT):
            tail = cycle.log.read_text(errors="replace").splitlines()[-8:]
            raise SystemExit(f"the daemon never polled ({label}); its log ends:\n" + "\n".join(tail))
        first = self._first_poll(calls)
        assert first is not None
        cpu = cpu_s(proc.pid)
        await driver.watch(proc, cycle, spawned, 0, lambda: cycle.ready_s is not None, 2.0)
        if timed:
            self.starts.append(first - spawned)
            self.readies.append(cycle.ready_s)
            self.start_cpus.append(cpu)
        return proc, cycle

    def _first_poll(self, since: int) -> float | None:
        return next((c.time for c in self.tg.calls[since:] if c.method.lower() == "getupdates"), None)

    async def close(self) -> None:
        """Kill any daemon still running (a bench cut short)."""
        for proc in self.procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

    def push(self, user: int) -> tuple[str, int]:
        """One DM from `user` carrying a fresh marker ("m17-3"); the marker and the chat id."""
        from bot.testing.telegram_api import private_chat
        from bot.testing.telegram_api import user as telegram_user

        n = self.written.get(user, 0)
        self.written[user] = n + 1
        marker = f"m{user}-{n}"
        person = telegram_user(FIRST_USER + user, f"User{user}")
        self.tg.push_message(private_chat(person), person, f"{marker} {QUESTIONS[n % len(QUESTIONS)]}")
        return marker, int(person["id"])

    async def sample(self, user: int) -> Sample:
        """One message alone: its way from the Bot API to the model and back to the screen."""
        calls, drafts, sent = len(self.tg.calls), len(self.tg.drafts), len(self.tg.sent)
        pushed = time.monotonic()
        marker, chat = self.push(user)
        reply = None
        while reply is None and time.monotonic() < pushed + WAIT:
            await asyncio.sleep(0.002)
            reply = next((m for m in self.tg.sent[sent:] if m.chat_id == chat and marker in m.visible_text),
                         None)
        await asyncio.sleep(0.05)
        if reply is None:
            return Sample(None, None, None, None)
        typing = next((c.time for c in self.tg.calls[calls:] if c.method.lower() == "sendchataction"
                       and c.params.get("chat_id") == chat), None)
        shown = [d.time for d in self.tg.drafts[drafts:] if d.chat_id == chat and d.visible_text]

        def ms(moment: float | None) -> float | None:
            return None if moment is None else (moment - pushed) * 1000

        return Sample(ms(typing), ms(self.model.asked.get(marker)), ms(min([reply.time, *shown])),
                      ms(reply.time))

    async def load(self, pid: int, users: list[int], per_user: int, *, profile: bool = False) -> Load:
        """Queue users × per_user DMs at once (in rounds); wait for every reply, then for quiet."""
        sent, drafts = len(self.tg.sent), len(self.tg.drafts)
        actions = len(self.tg.calls_of("sendChatAction"))
        triage, replies = self.model.triage, self.model.replies
        cpu, threads = cpu_s(pid), threads_cpu(pid)
        if profile:
            os.kill(pid, signal.SIGUSR1)
        began = time.monotonic()
        pending = {self.push(user)[0] for _ in range(per_user) for user in users}
        total = len(pending)
        pushed = last = time.monotonic()
        while pending and time.monotonic() - last < WAIT:
            await asyncio.sleep(0.02)
            for message in self.tg.sent[sent:]:
                marker = message.visible_text.split(".", 1)[0].removeprefix("re: ")
                if marker in pending:
                    pending.discard(marker)
                    last = message.time
            sent = len(self.tg.sent)
        replied_cpu = cpu_s(pid)
        quiet_at = await until_quiet(pid)
        if profile:
            os.kill(pid, signal.SIGUSR2)
        end_cpu, end_threads = cpu_s(pid), threads_cpu(pid)
        return Load(
            messages=total, answered=total - len(pending), push_s=pushed - began, wall_s=last - pushed,
            cpu_s=end_cpu - cpu, loop_cpu_s=end_threads.get(pid, 0.0) - threads.get(pid, 0.0),
            after_reply_s=end_cpu - replied_cpu, quiet_s=quiet_at - last, threads=len(end_threads),
            drafts=len(self.tg.drafts) - drafts, actions=len(self.tg.calls_of("sendChatAction")) - actions,
            triage=self.model.triage - triage, replies=self.model.replies - replies,
        )


async def until_quiet(pid: int, limit: float = 30.0) -> float:
    """Wait until the daemon spends at most QUIET_TICKS per 0.25 s twice in a row; when it did."""
    started, calm, before = time.monotonic(), 0, cpu_s(pid)
    while time.monotonic() - started < limit and calm < 2:
        await asyncio.sleep(0.25)
        now = cpu_s(pid)
        calm = calm + 1 if now - before <= QUIET_TICKS * TICK + 1e-9 else 0
        before = now
    return time.monotonic()


async def read_report(path: Path, timeout: float = 15.0) -> dict[str, Any]:
    """A JSON file the daemon child writes on a signal; {} when none came."""
    deadline = time.monotonic() + timeout
    # A file another process writes: poll (a stat takes microseconds).
    while not path.exists() and time.monotonic() < deadline:  # noqa: ASYNC110, ASYNC240
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.1)  # written, perhaps not yet closed
    with contextlib.suppress(OSError, ValueError):
        found: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))  # noqa: ASYNC240
        return found
    return {}


# -- the runs ---------------------------------------------------------------------------------------------


async def measure(args: argparse.Namespace, hidden: dict[str, list[str]], folder: Path) -> list[str]:
    """The stand-ins, the measured run, the profile run; the report's lines."""
    from bench.crash_loop import TELEGRAM_TOKEN
    from bot.testing.anthropic_api import AnthropicStandIn
    from bot.testing.telegram_api import TelegramStandIn

    async with AnthropicStandIn() as api, TelegramStandIn(token=TELEGRAM_TOKEN) as tg:
        model = Model(fast_model="")
        api.default = model
        bench = Bench(tg, api, model, hidden, folder, args.semantic)
        try:
            figures = await measured_run(args, bench)
            profile = await profile_run(args, bench) if args.profile else []
        finally:
            await bench.close()
    return report(args, bench, figures, hidden) + profile


async def measured_run(args: argparse.Namespace, bench: Bench) -> Figures:
    from bot.config import load_config

    load_users = list(range(args.users))
    new_users = list(range(args.users, args.users + args.samples))
    driver = bench.driver("run", load_users + new_users)
    try:
        figures = Figures(shipped=load_config(driver.config))
        bench.model.fast_model = figures.shipped.anthropic.fast_model
        proc, cycle = await bench.start(driver, "run")
        settled_from = cpu_s(proc.pid)
        await asyncio.sleep(args.settle)
        figures.settle_cpu_s = cpu_s(proc.pid) - settled_from
        figures.rss_idle = status_mib(proc.pid, "VmRSS")
        os.kill(proc.pid, signal.SIGUSR2)
        figures.idle_modules = await read_report(driver.workdir / "modules.1")

        bench.model.first_token, bench.model.stream_seconds = args.first_token, args.stream_seconds
        figures.fresh = [await bench.sample(user) for user in new_users]
        bench.model.first_token = bench.model.stream_seconds = 0.0
        figures.load = await bench.load(proc.pid, load_users, args.per_user)
        figures.rss_after = status_mib(proc.pid, "VmRSS")
        figures.mappings = rss_by_mapping(proc.pid)
        os.kill(proc.pid, signal.SIGUSR2)
        figures.after_modules = await read_report(driver.workdir / "modules.2")
        bench.model.first_token, bench.model.stream_seconds = args.first_token, args.stream_seconds
        figures.history = [await bench.sample(user) for user in load_users[: args.samples]]
        bench.model.first_token = bench.model.stream_seconds = 0.0
        figures.peak = status_mib(proc.pid, "VmHWM")
        await driver.stop(proc, cycle, signal.SIGTERM)
        figures.stops = [cycle.stop_s]
        figures.semantic = semantic_state(cycle.log)

        for n in range(args.restarts):
            again, again_cycle = await bench.start(driver, f"restart{n + 1}")
            await asyncio.sleep(1.0)
            await driver.stop(again, again_cycle, signal.SIGTERM)
            figures.stops.append(again_cycle.stop_s)
        driver.env["PYTHONPROFILEIMPORTTIME"] = "1"  # -X importtime, into the daemon's log
        timed, timed_cycle = await bench.start(driver, "imports", timed=False)
        await driver.stop(timed, timed_cycle, signal.SIGTERM)
        figures.imports = import_times(timed_cycle.log)
    finally:
        driver.notify.close()
    return figures


async def profile_run(args: argparse.Namespace, bench: Bench) -> list[str]:
    users = list(range(args.users))
    driver = bench.driver("profile", users, profile=True, trace=args.trace_memory)
    try:
        proc, cycle = await bench.start(driver, "profile", timed=False)
        await asyncio.sleep(args.settle)
        load = await bench.load(proc.pid, users, args.profile_per_user or args.per_user, profile=True)
        traced = await read_report(driver.workdir / "modules.1")
        await driver.stop(proc, cycle, signal.SIGTERM)
    finally:
        driver.notify.close()
    stats = driver.workdir / "profile.pstats"
    if not stats.exists():
        return ["profile run: the daemon wrote no stats"]
    return profile_lines(stats, load, traced.get("grown", {}))


def import_times(log: Path) -> str:
    """What the start's imports cost, by top-level package, from a `-X importtime` log."""
    by_package: dict[str, int] = {}
    modules = 0
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = line.removeprefix("import time:").split("|", 2)
        modules += 1
        package = name.strip().partition(".")[0]
        by_package[package] = by_package.get(package, 0) + int(self_us)
    top = sorted(by_package.items(), key=lambda item: -item[1])[:14]
    return (f"imports at start (one more start under -X importtime, which slows them): {modules} modules "
            f"in {sum(by_package.values()) / 1e6:.2f} s; by package: "
            + ", ".join(f"{p} {us / 1e6:.2f}" for p, us in top) + " s")


def semantic_state(log: Path) -> str:
    """What the daemon said about semantic recall at start."""
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if '"semantic recall' in line:
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                detail = entry.get("reason") or entry.get("model") or ""
                return f"{entry.get('event')}" + (f" ({detail})" if detail else "")
    return "semantic recall: nothing logged"


# -- the report -------------------------------------------------------------------------------------------


def report(args: argparse.Namespace, bench: Bench, figures: Figures,
           hidden: dict[str, list[str]]) -> list[str]:
    load, fresh, history = figures.load, figures.fresh or [], figures.history or []
    assert load is not None
    shipped = figures.shipped
    rate = load.answered / load.wall_s if load.wall_s > 0 else 0.0
    cpu_ms = load.per_message(load.cpu_s) * 1000
    start = _median(bench.starts)
    lines = [
        f"setup: the config `switchboard init` writes (model {shipped.anthropic.model}, triage by "
        f"{shipped.anthropic.fast_model}, streaming {shipped.channels.telegram.streaming!r}, "
        f"{shipped.router.max_concurrent_turns} turns at once) with the stand-ins' URLs, the token and "
        f"{args.users + args.samples} users' ids; packages as `make {INSTALLS_TARGET}` installs "
        "them (extras: "
        f"{', '.join(sorted(EXTRAS)) or 'none'}, {INSTALLS_HOW}); installed here but hidden from the "
        f"daemon: {', '.join(hidden['dists'])}",
        f"  {figures.semantic}",
        f"model stand-in: triage answers at once; the load's replies at once ({len(REPLY) + 10} characters "
        f"in {PARTS} deltas); the samples' first text {args.first_token:g} s after the request, the rest "
        f"over {args.stream_seconds:g} s",
        "",
        _row("figure", "value", "target"),
        _row(f"messages/s ({load.messages:,} DMs from {args.users} users)", f"{rate:.1f}", "(reported)"),
        _row("daemon CPU per message", f"{cpu_ms:.1f} ms", f"≤ {TARGET_CPU_MS:g} ms",
             cpu_ms <= TARGET_CPU_MS),
        _row("RSS idle (after start, before the load)", f"{figures.rss_idle:.0f} MiB", "(reported)"),
        _row(f"RSS after {load.messages:,} messages", f"{figures.rss_after:.0f} MiB",
             f"≤ {TARGET_RSS_MIB:g} MiB", figures.rss_after <= TARGET_RSS_MIB),
    ]
    kinds = (("new chat", fresh), ("chat with history", history))
    for label, samples in kinds:
        typing = _median([s.typing for s in samples if s.typing is not None])
        lines.append(_row(f"message → typing (median, {label})", f"{typing:.1f} ms",
                          f"≤ {TARGET_TYPING_MS:g} ms", typing <= TARGET_TYPING_MS))
    for label, samples in kinds:
        asked = _median([s.request for s in samples if s.request is not None])
        lines.append(_row(f"message → model request (median, {label})", f"{asked:.1f} ms", "(reported)"))
    for label, samples in kinds:
        shown = _median([s.visible for s in samples if s.visible is not None])
        lines.append(_row(f"message → first visible text (median, {label})", f"{shown:.0f} ms", "(reported)"))
    lines.append(_row(f"start → first getUpdates (median of {len(bench.starts)})", f"{start:.2f} s",
                      f"≤ {TARGET_START_S:g} s", start <= TARGET_START_S))
    lines.append("")
    return lines + detail_lines(args, bench, figures)


def detail_lines(args: argparse.Namespace, bench: Bench, figures: Figures) -> list[str]:
    from bench.crash_loop import log_summary

    load = figures.load
    assert load is not None
    per = load.per_message
    lines = [
        f"load: {load.answered} of {load.messages} answered in {load.wall_s:.1f} s (pushed in "
        f"{load.push_s * 1000:.0f} ms); quiet {load.quiet_s:.1f} s after the last reply",
        f"  daemon CPU {load.cpu_s:.2f} s, per message {per(load.cpu_s) * 1000:.2f} ms: event-loop thread "
        f"{per(load.loop_cpu_s) * 1000:.2f} ms, other threads (SQLite, executors) "
        f"{per(load.cpu_s - load.loop_cpu_s) * 1000:.2f} ms; after the last reply "
        f"{load.after_reply_s * 1000:.0f} ms in all; {load.threads} threads",
        f"  per message: {per(load.replies):.2f} reply requests, {per(load.triage):.2f} triage requests, "
        f"{per(load.actions):.2f} sendChatAction, {per(load.drafts):.2f} sendMessageDraft",
    ]
    for label, samples in (("new chats", figures.fresh or []), ("chats with history", figures.history or [])):
        after_model = [s.visible - s.request - args.first_token * 1000 for s in samples
                       if s.visible is not None and s.request is not None]
        lines += [
            f"samples, {label} ({len(samples)}, one at a time), from the update queued at the Bot API:",
            f"  → typing {_spread([s.typing for s in samples])}",
            f"  → model request {_spread([s.request for s in samples])}",
            f"  → first visible text {_spread([s.visible for s in samples])}; of it, from the model's first "
            f"text to the screen {_spread(list(after_model))}",
            f"  → whole reply {_spread([s.complete for s in samples])}",
        ]
    starts = ", ".join(f"{s:.2f}" for s in bench.starts)
    readies = ", ".join("n/a" if s is None else f"{s:.2f}" for s in bench.readies)
    cpus = ", ".join(f"{s:.2f}" for s in bench.start_cpus)
    stops = ", ".join("n/a" if s is None else f"{s:.2f}" for s in figures.stops or [])
    lines += [
        f"start → first getUpdates {starts} s (on an empty database, then {args.restarts} restart(s) on "
        f"the filled one); → READY=1 {readies} s; daemon CPU to the first poll {cpus} s; idle CPU "
        f"in the {args.settle:g} s after the first {figures.settle_cpu_s * 1000:.0f} ms; "
        f"SIGTERM → exit {stops} s",
        f"  {figures.imports}",
        f"memory: peak (VmHWM) {figures.peak:.0f} MiB; resident after the load by mapping: "
        + ", ".join(f"{name} {mib:.1f}" for name, mib in (figures.mappings or [])[:7]) + " MiB",
    ]
    idle, after = figures.idle_modules or {}, figures.after_modules or {}
    if idle and after:
        lines.append(f"  modules loaded: {idle.get('modules')} idle, {after.get('modules')} after the load; "
                     f"installed packages imported: {', '.join(third_party(after.get('top_level', [])))}")
    lines.append("  " + log_summary([c for c in bench.cycles if c.label != "imports"]))
    return lines


def profile_lines(stats_path: Path, load: Load, grown: dict[str, int]) -> list[str]:
    """Top 15 functions by own CPU time in the event-loop thread, own time by package, our
    functions by time inside them, and what the load left allocated (when traced)."""
    import pstats

    entries = pstats.Stats(str(stats_path)).stats  # type: ignore[attr-defined]
    total = sum(row[2] for row in entries.values()) or 1e-9
    rate = load.answered / max(load.wall_s, 1e-9)
    lines = [f"profile run: {load.messages} messages ({load.answered} answered, {rate:.1f}/s under "
             f"cProfile); event-loop thread CPU in the profile {total:.2f} s = "
             f"{load.per_message(total) * 1000:.1f} ms per message (cProfile's own cost included)",
             f"  {'own s':>7} {'own %':>6} {'calls':>9} {'cum s':>7}  function"]
    for (filename, line, name), (_, calls, own, inside, _) in sorted(entries.items(),
                                                                       key=lambda e: -e[1][2])[:15]:
        lines.append(f"  {own:7.2f} {own / total * 100:5.1f}% {calls:9d} {inside:7.2f}  "
                     f"{where(filename, line, name)}")
    packages: dict[str, float] = {}
    for (filename, _, name), row in entries.items():
        package = package_of(filename, name)
        packages[package] = packages.get(package, 0.0) + row[2]
    top = sorted(packages.items(), key=lambda item: -item[1])[:16]
    lines.append("  own time by package: " + ", ".join(f"{p} {t / total * 100:.0f}%" for p, t in top))
    ours = sorted(((key, row) for key, row in entries.items()
                   if package_of(key[0], key[2]) in ("bot", "channels")), key=lambda item: -item[1][3])
    lines.append("  bot/ and channels/ by time inside (cumulative; a coroutine's, each time it resumes):")
    lines += [f"  {row[3] / total * 100:7.1f}% {row[1]:9d}  {where(*key)}" for key, row in ours[:20]]
    if grown:
        mib = sorted(((p, b / 2**20) for p, b in grown.items()), key=lambda item: -item[1])
        lines.append(f"  left allocated by the load (tracemalloc, {sum(m for _, m in mib):.1f} MiB): "
                     + ", ".join(f"{p} {m:.1f}" for p, m in mib[:10]) + " MiB")
    return lines


def third_party(top_level: list[str]) -> list[str]:
    """The installed distributions that provide the top-level modules loaded."""
    from importlib import metadata

    owners = metadata.packages_distributions()
    return sorted({owners[name][0] for name in top_level if name in owners} - {"switchboard"})


def where(filename: str, line: int, name: str) -> str:
    return name if filename == "~" else f"{short_path(filename)}:{line} {name}"


def short_path(filename: str) -> str:
    if "site-packages" + os.sep in filename:
        return filename.split("site-packages" + os.sep, 1)[1]
    if filename.startswith(str(ROOT) + os.sep):
        return filename[len(str(ROOT)) + 1:]
    stdlib = os.path.dirname(os.__file__)
    if filename.startswith(stdlib + os.sep):
        return "stdlib/" + filename[len(stdlib) + 1:]
    return filename


def package_of(filename: str, name: str) -> str:
    """The package of a profiled function: bot, channels, a site-package, stdlib:<module>, or for
    a built-in the module of the type it is a method of (builtin:sqlite3, builtin:select, ...)."""
    if filename == "~":
        owner = name.split(" of '", 1)[1].split("'", 1)[0] if " of '" in name else ""
        return "builtin" + (":" + owner.split(".", 1)[0] if owner else "")
    path = short_path(filename)
    if path.startswith("stdlib/"):
        return "stdlib:" + path.split("/")[1].removesuffix(".py")
    return path.split("/", 1)[0].removesuffix(".py")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _spread(values: list[float | None], unit: str = "ms") -> str:
    found = sorted(v for v in values if v is not None)
    if not found:
        return "n/a"
    p90 = found[min(len(found) - 1, int(0.9 * len(found)))]
    missing = f", {len(values) - len(found)} missing" if len(found) < len(values) else ""
    return f"median {_median(found):.1f}, p90 {p90:.1f}, max {found[-1]:.1f} {unit}{missing}"


def _row(name: str, value: str, target: str, met: bool | None = None) -> str:
    verdict = "" if met is None else ("met" if met else "MISSED")
    return f"  {name:<56} {value:>10}  {target:<12} {verdict}".rstrip()


# -- main -------------------------------------------------------------------------------------------------

EXTRAS: set[str] = set()
INSTALLS_HOW = ""
INSTALLS_TARGET = "run"


def main() -> None:
    if sys.argv[1:2] == ["--daemon-child"]:  # before any import of the bench's: the daemon pays none
        daemon_child(sys.argv[2:])
        return
    from bench.crash_loop import code_version
    from bench.telegram_throughput import memory_pressure

    global EXTRAS, INSTALLS_HOW, INSTALLS_TARGET
    started = time.monotonic()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="20 users × 5 messages, 5 samples, one restart (for development)")
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--per-user", type=int, default=20, help="DMs each user sends in the load")
    parser.add_argument("--samples", type=int, default=20, help="one-at-a-time messages, before and after")
    parser.add_argument("--restarts", type=int, default=2, help="starts on the filled database")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds after the first poll to idle")
    parser.add_argument("--first-token", type=float, default=0.3, help="samples: seconds to the first text")
    parser.add_argument("--stream-seconds", type=float, default=1.2, help="samples: the rest of the reply")
    parser.add_argument("--no-profile", dest="profile", action="store_false", help="skip the profile run")
    parser.add_argument("--profile-per-user", type=int, default=0,
                        help="DMs per user in the profile run (default: --per-user)")
    parser.add_argument("--trace-memory", action="store_true",
                        help="tracemalloc in the profile run too (about doubles its overhead)")
    parser.add_argument("--keep", metavar="DIR", help="keep configs, databases, logs and the profile in DIR")
    parser.add_argument("--semantic", choices=("static", "minilm"),
                        help='semantic recall on with this encoder (the extra visible as `make semantic` '
                        'installs it); unset: the shipped config as it is')
    args = parser.parse_args()
    if args.quick:
        args.users, args.per_user, args.samples, args.restarts = 20, 5, 5, 1
    print("command: .venv/bin/python -m bench.message_cost " + " ".join(sys.argv[1:]))
    print(code_version())
    INSTALLS_TARGET = "semantic" if args.semantic else "run"
    EXTRAS, others, INSTALLS_HOW = run_installs(INSTALLS_TARGET)
    hidden = hidden_packages(EXTRAS, others)
    with tempfile.TemporaryDirectory(prefix="sb-cost-") as tmp:
        folder = Path(args.keep) if args.keep else Path(tmp)
        print("\n".join(asyncio.run(measure(args, hidden, folder))))
        print(f"wall time {time.monotonic() - started:.0f} s; load average {os.getloadavg()[0]:.2f}, "
              f"{memory_pressure()} (other processes share the machine)")


if __name__ == "__main__":
    main()
