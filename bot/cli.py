"""The `switchboard` command: run the daemon, chat on the console, and the admin commands."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

from bot.config import Config, load_config
from bot.errors import BotError, ConfigError
from bot.log import configure_logging
from bot.session_key import parse
from bot.store import Store

DEFAULT_CONFIG = "config.toml"


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        code = args.func(args)
    except ConfigError as exc:
        print(f"switchboard: {exc}", file=sys.stderr)
        code = 2
    except BotError as exc:
        print(f"switchboard: {exc}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=DEFAULT_CONFIG, metavar="PATH",
                        help="config file (default: ./config.toml)")
    parser = argparse.ArgumentParser(
        prog="switchboard", description="A multi-channel, Claude-backed chat bot daemon."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: object, help_text: str) -> argparse.ArgumentParser:
        command = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        command.set_defaults(func=func)
        return command

    add("run", _run, "run the daemon with every enabled channel")
    add("chat", _chat, "talk to the agent on this terminal")
    add("init", _init, "write config.toml from the documented example")
    check = add("check-config", _check_config, "validate a config file without starting anything")
    check.add_argument("path", nargs="?", help="config file (default: --config)")
    add("sessions", _sessions, "list sessions with message counts and last activity")
    history = add("history", _history, "show a session's newest messages")
    history.add_argument("session_key")
    history.add_argument("--limit", type=_positive, default=20, help="messages to show (20)")
    context = add("context", _context, "show what went into a turn's context and why")
    context.add_argument("session_key")
    context.add_argument("--turn", type=int, default=0,
                         help="turn number from 1; negative counts from the newest (default: newest)")
    jobs = add("jobs", _jobs, "list scheduled jobs with their next run and last status")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", metavar="run")
    run_job = jobs_sub.add_parser(
        "run", parents=[common], help="ask the running daemon to run a job now, delivered as configured"
    )
    run_job.add_argument("job_id")
    run_job.add_argument("--wait", type=float, default=120.0, metavar="SECONDS",
                         help="how long to wait for the outcome (default 120; 0: do not wait)")
    run_job.set_defaults(func=_jobs_run)
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _load(args: argparse.Namespace) -> Config:
    config = load_config(args.config) if Path(args.config).exists() else None
    if config is None:
        raise ConfigError(
            args.config, None,
            "not found; create one with `switchboard init` (or `make init`), then set the "
            "environment variables it lists",
        )
    return config


def _logging(config: Config, *, quiet: bool = False) -> None:
    secrets = [value for name in config.secret_env_names() if (value := _env(name))]
    level = config.logging.level
    if quiet and level == "INFO":  # the chat itself shows each turn; keep only warnings
        level = "WARNING"
    configure_logging(level, config.logging.format, secrets)


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def _run(args: argparse.Namespace) -> int:
    from bot.daemon import Daemon, build_channels, console_attached, serve

    config = _load(args)
    _logging(config)
    channels = build_channels(config, console=config.channels.console.enabled and console_attached())
    if not channels:
        raise ConfigError(
            config.source, "channels",
            "no channel is enabled: enable a channel, or run `switchboard chat` on a terminal",
        )
    asyncio.run(serve(Daemon(config, channels)))
    return 0


def _chat(args: argparse.Namespace) -> int:
    from bot.config import parse_config
    from bot.daemon import Daemon, build_channels, serve

    # A newcomer with only an API key can chat before writing any config.
    explicit = args.config != DEFAULT_CONFIG
    config = _load(args) if explicit or Path(args.config).exists() else parse_config({}, "<defaults>")
    _logging(config, quiet=True)
    channels = build_channels(config, console=True, platforms=False)
    print(f"Chatting with {config.agent.name} as {config.channels.console.user_name}; Ctrl-D to leave.",
          file=sys.stderr)
    asyncio.run(serve(Daemon(config, channels, until_input_ends=True)))
    return 0


def example_config_text() -> str:
    """The documented example config, from the installed package or the source tree."""
    packaged = resources.files("bot").joinpath("config.toml.example")
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    return (Path(__file__).resolve().parent.parent / "config.toml.example").read_text("utf-8")


def _init(args: argparse.Namespace) -> int:
    target = Path(args.config)
    if target.exists():
        print(f"switchboard: {target} already exists; leaving it as it is", file=sys.stderr)
        return 1
    target.write_text(example_config_text(), encoding="utf-8")
    config = load_config(target)
    print(f"Wrote {target}. Set these environment variables (secrets never go in the file):")
    print(f"  {config.anthropic.api_key_env}  your Anthropic API key (required)")
    print(f"  {config.channels.telegram.token_env}  Telegram bot token (if [channels.telegram] is enabled)")
    print(f"  {config.channels.discord.token_env}  Discord bot token (if [channels.discord] is enabled)")
    return 0


def _check_config(args: argparse.Namespace) -> int:
    path = args.path or args.config
    config = load_config(path)
    missing = [name for name in [config.anthropic.api_key_env] if _env(name) is None]
    print(f"{path}: OK (agent {config.agent.id!r}, database {config.database_path()})")
    for name in missing:
        print(f"note: environment variable {name} is not set")
    return 0


def _open_store(config: Config) -> AbstractAsyncContextManager[Store]:
    path = config.database_path()
    if not path.exists():
        raise BotError(f"no database at {path} (nothing has been stored yet)")
    return Store.open(path)


def _sessions(args: argparse.Namespace) -> int:
    config = _load(args)

    async def show() -> None:
        async with _open_store(config) as store:
            sessions = await store.list_sessions()
            if not sessions:
                print("no sessions yet")
            for s in sessions:
                print(f"{s.key}  messages={s.message_count}  turns={s.user_turns}  "
                      f"last={_when(s.updated_at)}")

    asyncio.run(show())
    return 0


def _history(args: argparse.Namespace) -> int:
    config = _load(args)
    key = str(parse(args.session_key))

    async def show() -> None:
        async with _open_store(config) as store:
            await store.session(key)
            for m in await store.history(key, args.limit):
                who = (m.sender_name or m.sender_id or "user") if m.role == "user" else "agent"
                origin = ""
                if m.origin == "scheduled":
                    origin = f" [scheduled {m.job_id}]" if m.job_id else " [scheduled]"
                print(f"#{m.id} {_when(m.created_at)} {who}{origin}: {m.text}")

    asyncio.run(show())
    return 0


def _context(args: argparse.Namespace) -> int:
    config = _load(args)
    key = str(parse(args.session_key))

    async def show() -> None:
        async with _open_store(config) as store:
            await store.session(key)
            snapshots = await store.snapshots(key)
            if not snapshots:
                raise BotError(f"session {key} has no recorded turns yet")
            turn = args.turn or -1
            index = turn - 1 if turn > 0 else len(snapshots) + turn
            if not 0 <= index < len(snapshots):
                raise BotError(f"session {key} has turns 1..{len(snapshots)}; no turn {args.turn}")
            record = snapshots[index]
            snap = record.snapshot
            triage = snap["triage"]
            print(f"turn {record.turn} of {len(snapshots)}  at {_when(record.created_at)}  "
                  f"request #{record.request_message_id}  reply #{record.reply_message_id}")
            print(f"hash {record.hash}  history limit {snap['history_limit'] or 'none'}  "
                  f"counts {snap['counts']}")
            print(f"triage {triage['outcome']}: {triage['selected']} of {triage['candidates']} "
                  f"older turns kept, {triage['latency_ms']} ms, "
                  f"{triage['input_tokens']}+{triage['output_tokens']} tokens"
                  + (f", {triage['error']}" if triage["error"] else ""))
            for entry in snap["entries"]:
                print(f"  #{entry['id']:<8} {entry['role']:<9} {entry['reason']}")
            for message_id in snap["scheduled_block"]:
                print(f"  #{message_id:<8} scheduled previous-tasks block")

    asyncio.run(show())
    return 0


def _jobs(args: argparse.Namespace) -> int:
    from bot.scheduler import failing
    from bot.schedules import job_trigger

    config = _load(args)
    if not config.schedules:
        print(f"no [[schedules]] in {config.source}")
        return 0
    path = config.database_path()

    async def show() -> None:
        async with AsyncExitStack() as stack:
            store = await stack.enter_async_context(Store.open(path)) if path.exists() else None
            now = datetime.now(UTC)
            for job in config.schedules:
                when = f'cron "{job.cron}"' if job.cron else f"every {job.every}"
                zone = job.timezone or config.agent.timezone
                runs = await store.schedule_runs(job.id, 1) if store else []
                paused = store is not None and await failing(store, job.id, config.scheduler.max_failures)
                if not job.enabled:
                    upcoming = "disabled"
                elif paused:
                    upcoming = "paused (failing)"
                else:
                    at = job_trigger(job, config).get_next_fire_time(None, now)
                    upcoming = f"next {at.strftime('%Y-%m-%d %H:%M %Z')}" if at else "no next run"
                last = "never run"
                if runs:
                    run = runs[0]
                    last = f"last {run.status} for {_when(run.scheduled_for)}"
                    if run.error:
                        last += f" ({run.error})"
                print(f"{job.id}  {when} {zone}  to {job.deliver_to}  {upcoming}  {last}")

    asyncio.run(show())
    return 0


def _jobs_run(args: argparse.Namespace) -> int:
    config = _load(args)
    ids = [job.id for job in config.schedules]
    if args.job_id not in ids:
        raise BotError(f"no job {args.job_id!r} in {config.source}; jobs: {', '.join(ids) or 'none'}")

    async def request() -> int:
        async with Store.open(config.database_path()) as store:
            run = await store.request_run(args.job_id, time.time())
            print(f"requested run #{run.id} of {args.job_id}; the running daemon picks it up within "
                  f"{config.scheduler.request_poll:g}s")
            deadline = time.monotonic() + args.wait
            status = run.status
            while args.wait > 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                current = await store.schedule_run_by_id(run.id)
                assert current is not None
                status = current.status
                if status in ("delivered", "quiet", "failed", "stale"):
                    detail = f": {current.error}" if current.error else ""
                    print(f"run #{run.id}: {status}{detail}")
                    return 0 if status in ("delivered", "quiet") else 1
            if args.wait > 0:
                print(f"run #{run.id} is still {status}: is the daemon running (`switchboard run`) "
                      "with the job's channel?", file=sys.stderr)
                return 1
            return 0

    return asyncio.run(request())


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
