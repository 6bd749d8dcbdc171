"""The `switchboard` command: run the daemon, chat on the console, and the admin commands.

Each command imports what it needs when it runs: a config refused, `--help` or `sessions` must not
pay for the model SDK and the platform libraries the daemon loads.
"""

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
from typing import TYPE_CHECKING, Any

from bot.context import REPLY_CALL
from bot.errors import BotError, ConfigError
from bot.session_key import parse

if TYPE_CHECKING:
    from bot.config import Config
    from bot.messages import StoredMessage
    from bot.store import SnapshotRecord, Store

DEFAULT_CONFIG = "config.toml"
# `switchboard status` and `reload` exit 3 when no daemon runs, as `systemctl status` does for a
# stopped unit.
EXIT_NOT_RUNNING = 3


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


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, like every other error, then where the help is."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


SESSION_KEY_HELP = ("a session, as `switchboard sessions` lists them: agent:<id>:<channel>:<kind>:<chat>"
                    "[:thread|topic:<id>], e.g. agent:main:telegram:direct:123456789")

EXAMPLES = {
    "run": ["switchboard run", "switchboard run --config /etc/switchboard/config.toml"],
    "chat": ["switchboard chat", "echo 'hello' | switchboard chat"],
    "init": ["switchboard init", "switchboard init --config ~/.config/switchboard/config.toml"],
    "check-config": ["switchboard check-config", "switchboard check-config /etc/switchboard/config.toml"],
    "sessions": ["switchboard sessions"],
    "history": ["switchboard history agent:main:console:direct:local --limit 5"],
    "context": ["switchboard context agent:main:telegram:direct:123456789",
                "switchboard context agent:main:telegram:direct:123456789 --turn -2 --full",
                "switchboard context agent:main:telegram:direct:123456789 --json | jq .reply_call"],
    "replay": ["switchboard replay agent:main:telegram:direct:123456789 --turn 3"],
    "compact": ["switchboard compact agent:main:discord:channel:222222222222222222"],
    "jobs": ["switchboard jobs", "switchboard jobs run morning --wait 60"],
    "jobs run": ["switchboard jobs run morning", "switchboard jobs run morning --wait 0"],
    "status": ["switchboard status", "switchboard status --json | jq .channels"],
    "reload": ["switchboard reload", "sudo systemctl reload switchboard   # the same, through systemd"],
    "db": ["switchboard db backup /var/backups/switchboard.db",
           "switchboard db prune --older-than 90 --dry-run"],
    "db backup": ["switchboard db backup backup.db", "switchboard db backup backup.db --force"],
    "db prune": ["switchboard db prune --older-than 90 --dry-run", "switchboard db prune --older-than 90"],
}


def _examples(name: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[name])


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("switchboard")
    except PackageNotFoundError:
        return "unknown (not installed; run from a source tree)"


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=DEFAULT_CONFIG, metavar="PATH",
                        help="config file (default: ./config.toml)")
    parser = _Parser(
        prog="switchboard", description="A multi-channel, Claude-backed chat bot daemon.",
        epilog="Exit status: 0 done, 1 failed, 2 config or usage error, 3 no daemon running "
               "(status, reload). `switchboard COMMAND --help` shows each command's examples.",
    )
    parser.add_argument("--version", action="version", version=f"switchboard {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: object, help_text: str, parent: Any = sub) -> argparse.ArgumentParser:
        command: argparse.ArgumentParser = parent.add_parser(
            name.split()[-1], parents=[common], help=help_text, description=help_text,
            epilog=_examples(name), formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.set_defaults(func=func)
        return command

    add("run", _run, "run the daemon with every enabled channel")
    add("chat", _chat, "talk to the agent on this terminal")
    add("init", _init, "write config.toml from the documented example")
    check = add("check-config", _check_config,
                "check a config file as `run` would (values, tokens, channels) without starting anything")
    check.add_argument("path", nargs="?", help="config file (default: --config)")
    add("sessions", _sessions, "list sessions with message counts and last activity")
    history = add("history", _history, "show a session's newest messages")
    history.add_argument("session_key", metavar="SESSION_KEY", help=SESSION_KEY_HELP)
    history.add_argument("--limit", type=_positive, default=20, help="messages to show (20)")
    context = add("context", _context, "show what went into a turn's context and why")
    context.add_argument("session_key", metavar="SESSION_KEY", help=SESSION_KEY_HELP)
    context.add_argument("--turn", type=_turn, default=None, metavar="N",
                         help="turn number from 1; negative counts from the newest (default: newest)")
    context.add_argument("--full", action="store_true", help="whole texts, not one line each")
    context.add_argument("--json", action="store_true",
                         help="the whole record (snapshot, reply call, texts) as JSON, for scripts")
    replay = add("replay", _replay,
                 "build a turn's context again from the stored log and config; exit 1 if it differs")
    replay.add_argument("session_key", metavar="SESSION_KEY", help=SESSION_KEY_HELP)
    replay.add_argument("--turn", type=_turn, default=None, metavar="N",
                        help="turn number from 1; negative counts from the newest (default: newest)")
    compact = add("compact", _compact,
                  "summarise a session's older messages now (the full history stays stored)")
    compact.add_argument("session_key", metavar="SESSION_KEY", help=SESSION_KEY_HELP)
    jobs = add("jobs", _jobs, "list scheduled jobs with their next run and last status")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", metavar="run")
    run_job = add("jobs run", _jobs_run,
                  "ask the running daemon to run a job now, delivered as configured",
                  jobs_sub)
    run_job.add_argument("job_id", metavar="ID",
                         help="the job's id in [[schedules]] (see `switchboard jobs`)")
    run_job.add_argument("--wait", type=_seconds, default=120.0, metavar="SECONDS",
                         help="how long to wait for the outcome (default 120; 0: do not wait)")
    status = add("status", _status, "show whether the daemon runs: channels, queues, schedules, last error")
    status.add_argument("--json", action="store_true", help="print the daemon's answer as JSON")
    add("reload", _reload, "make the running daemon re-read its config file (as SIGHUP does)")
    db = add("db", _db_help, "database care: backup, prune")
    db_sub = db.add_subparsers(dest="db_command", metavar="backup|prune")
    backup = add("db backup", _db_backup, "copy the database, safely while it runs", db_sub)
    backup.add_argument("path", help="the new backup file")
    backup.add_argument("--force", action="store_true", help="replace the file if it exists")
    prune = add("db prune", _db_prune, "delete old conversation messages that no limit still needs", db_sub)
    prune.add_argument("--older-than", type=_positive, required=True, metavar="DAYS",
                       help="only messages older than this many days")
    prune.add_argument("--dry-run", action="store_true", help="show what would go, delete nothing")
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _turn(text: str) -> int:
    value = int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("turns count from 1 (negative counts back from the newest); "
                                         "there is no turn 0")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 86400:  # also refuses nan and inf
        raise argparse.ArgumentTypeError("a number of seconds from 0 to 86400")
    return value


def _load(args: argparse.Namespace) -> Config:
    from bot.config import load_config

    config = load_config(args.config) if Path(args.config).exists() else None
    if config is None:
        raise ConfigError(
            args.config, None,
            "not found; create one with `switchboard init` (or `make init`), then set the "
            "environment variables it lists",
        )
    return config


def _logging(config: Config, *, quiet: bool = False, console: bool = False) -> None:
    from bot.log import configure_logging, log_file

    secrets = [value for name in config.secret_env_names() if (value := _env(name))]
    level = config.logging.level
    if console:  # the console has the terminal: log lines must not land in the conversation
        path = log_file(config.database_path())
        configure_logging(level, config.logging.format, secrets, path=path)
        print(f"Logging to {path}", file=sys.stderr)
        return
    if quiet and level == "INFO":  # the chat itself shows each turn; keep only warnings
        level = "WARNING"
    configure_logging(level, config.logging.format, secrets)


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def _run(args: argparse.Namespace) -> int:
    config = _load_or_defaults(args)
    # Everything `run` can refuse is refused before the daemon (the SDKs, the platform libraries)
    # is imported: a bad file costs what check-config costs.
    _check_startable(config, terminal=sys.stdin.isatty())

    from bot.daemon import Daemon, build_channels, console_attached, serve

    console = config.channels.console.enabled and console_attached()
    _logging(config, console=console)
    channels = build_channels(config, console=console)
    asyncio.run(serve(Daemon(config, channels)))
    return 0


def _load_or_defaults(args: argparse.Namespace) -> Config:
    """The config file; on a terminal with no ./config.toml, the built-in defaults (and one line
    saying so). Headless, a missing file stays an error: nothing would be there to talk to."""
    from bot.config import parse_config

    if args.config != DEFAULT_CONFIG or Path(args.config).exists() or not sys.stdin.isatty():
        return _load(args)
    config = parse_config({}, "<defaults>")
    print(f"switchboard: no {DEFAULT_CONFIG} here, so running on the built-in defaults (the console; "
          f"database {config.database_path()}); `make init` (or `switchboard init`) writes one to edit",
          file=sys.stderr)
    return config


def _check_startable(config: Config, *, terminal: bool) -> None:
    """Refuse what `run` would: a missing bot token, a job for a disabled channel, no channel."""
    from bot.config import check_startable

    check_startable(config)
    if not _platforms(config) and not (config.channels.console.enabled and terminal):
        raise ConfigError(
            config.source, "channels",
            "no channel is enabled: enable a channel, or run `switchboard chat` on a terminal",
        )


def _platforms(config: Config) -> list[str]:
    return [name for name in ("telegram", "discord") if getattr(config.channels, name).enabled]


def _chat(args: argparse.Namespace) -> int:
    from bot.config import parse_config
    from bot.daemon import Daemon, build_channels, serve

    # A newcomer with only an API key can chat before writing any config.
    explicit = args.config != DEFAULT_CONFIG
    config = _load(args) if explicit or Path(args.config).exists() else parse_config({}, "<defaults>")
    _logging(config, quiet=True, console=sys.stdin.isatty())
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
    from bot.config import load_config

    target = Path(args.config)
    if target.exists():
        print(f"switchboard: {target} already exists; leaving it as it is", file=sys.stderr)
        return 1
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(example_config_text(), encoding="utf-8")
    except OSError as exc:
        raise BotError(f"cannot write {target}: {exc.strerror or exc}") from exc
    config = load_config(target)
    print(f"Wrote {target}. Set these environment variables (secrets never go in the file):")
    print(f"  {config.anthropic.api_key_env}  your Anthropic API key (required)")
    print(f"  {config.channels.telegram.token_env}  Telegram bot token (if [channels.telegram] is enabled)")
    print(f"  {config.channels.discord.token_env}  Discord bot token (if [channels.discord] is enabled)")
    return 0


def _check_config(args: argparse.Namespace) -> int:
    from bot.config import Config, load_config

    path = args.path or args.config
    config = load_config(path)
    # What `run` checks, in this shell's environment; whether a terminal is attached is not
    # known here, so a console-only config passes with a note.
    _check_startable(config, terminal=True)
    platforms = _platforms(config)
    channels = ", ".join((["console"] if config.channels.console.enabled else []) + platforms)
    print(f"{path}: OK (agent {config.agent.id!r}, database {config.database_path()}, channels: {channels})")
    if config.model_dump() == Config().model_dump():
        print("note: the file sets nothing: every value is the built-in default")
    if not platforms:
        print("note: no channel but the console is enabled, so `switchboard run` needs a terminal; "
              "enable [channels.telegram] or [channels.discord] to run as a service")
    if _env(config.anthropic.api_key_env) is None:
        print(f"note: environment variable {config.anthropic.api_key_env} is not set "
              "(replies will be the fallback message)")
    return 0


def _open_store(config: Config) -> AbstractAsyncContextManager[Store]:
    from bot.store import Store

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
                status = f" [not answered: {m.unanswered}]" if m.unanswered else ""
                print(f"#{m.id} {_when(m.created_at)} {who}{origin}{status}: {m.text}")

    asyncio.run(show())
    return 0


def _context(args: argparse.Namespace) -> int:
    import json

    from bot.turn_choice import pick_turn

    config = _load(args)
    _logging(config, quiet=True)  # an unreadable snapshot's warning goes to stderr
    key = str(parse(args.session_key))

    async def read() -> tuple[SnapshotRecord, int, dict[int, StoredMessage | None]]:
        async with _open_store(config) as store:
            await store.session(key)
            total = await store.snapshot_count(key)
            record = pick_turn(await store.snapshots(key), key, args.turn or 0, total)
            # Texts come from the log at display time: the snapshot holds ids and reasons only.
            messages = {i: await store.message_by_id(i) for i in _snapshot_ids(record)}
        return record, total, messages

    record, total, messages = _on_database(config, read)
    if args.json:
        print(json.dumps(_context_record(key, record, total, messages), indent=2, ensure_ascii=False))
    else:
        print("\n".join(_context_lines(record, total, messages, full=args.full)))
    return 0


# One line per message unless --full: enough to recognise it, short enough for a terminal row.
LINE_CHARS = 80
# Counts in the order the pipeline makes them (the stored snapshot's keys are sorted).
COUNT_ORDER = ["fetched", "within_history_limit", "within_recency", "recalled", "trimmed", "included",
               "scheduled_block"]


def _snapshot_ids(record: SnapshotRecord) -> list[int]:
    snap = record.snapshot
    ids = [record.request_message_id, *([record.reply_message_id] if record.reply_message_id else [])]
    ids += [int(e["id"]) for e in snap.get("entries", [])]
    ids += [int(i) for i in snap.get("scheduled_block", [])]
    ids += [int(t["id"]) for t in snap.get("trimmed", [])]
    return list(dict.fromkeys(ids))


def _failure(snap: dict[str, Any]) -> str | None:
    """Why the turn was not answered by the model: the context or the model call failed."""
    if snap.get("status") == "failed":
        return str(snap.get("error"))
    error = (snap.get(REPLY_CALL) or {}).get("error")
    return str(error) if error else None


def _message_record(message_id: int, message: StoredMessage | None) -> dict[str, Any]:
    if message is None:
        return {"id": message_id, "stored": False, "text": None}
    return {
        "id": message_id, "stored": True, "role": message.role, "origin": message.origin,
        "sender": _speaker(message), "job_id": message.job_id, "created_at": message.created_at,
        "time": datetime.fromtimestamp(message.created_at, UTC).isoformat(), "text": message.text,
    }


def _context_record(
    key: str, record: SnapshotRecord, total: int, messages: dict[int, StoredMessage | None]
) -> dict[str, Any]:
    """The whole turn for scripts: the snapshot as stored, its reply call, and every message's text."""
    snap = record.snapshot

    def message(message_id: int) -> dict[str, Any]:
        return _message_record(message_id, messages.get(message_id))

    return {
        "session": key, "turn": record.turn, "turns": total, "recorded_at": record.created_at,
        "hash": record.hash, "status": snap.get("status", "ok"), "failed": _failure(snap) is not None,
        "error": _failure(snap),
        "reply_call": snap.get(REPLY_CALL),
        "request": message(record.request_message_id),
        "reply": message(record.reply_message_id) if record.reply_message_id else None,
        "entries": [{**message(int(e["id"])), **e} for e in snap.get("entries", [])],
        "scheduled_block": [message(int(i)) for i in snap.get("scheduled_block", [])],
        "trimmed": [{**message(int(t["id"])), **t} for t in snap.get("trimmed", [])],
        "snapshot": snap,
    }


def _context_lines(
    record: SnapshotRecord, total: int, messages: dict[int, StoredMessage | None], *, full: bool
) -> list[str]:
    snap = record.snapshot
    lines = [f"turn {record.turn} of {total}  at {_when(record.created_at)}  "
             f"request #{record.request_message_id}  reply #{record.reply_message_id}  (times UTC)"]
    lines.append("request: " + _text(messages.get(record.request_message_id), full, indent=9))
    lines += _reply_call_lines(snap)
    failure = _failure(snap)
    if failure:
        lines.append(f"FAILED: {failure}")
    if record.reply_message_id:
        call = snap.get(REPLY_CALL) or {}
        label = "reply (the fallback reply): " if call.get("fallback") else "reply: "
        lines.append(label + _text(messages.get(record.reply_message_id), full, indent=len(label),
                                   speaker=False))
    lines.append(f"hash {record.hash}  history limit {snap.get('history_limit') or 'none'}")
    tokens = snap.get("tokens")
    if tokens and tokens.get("budget"):
        lines.append(f"tokens ~{tokens.get('estimate')} of a {tokens['budget']} history budget "
                     "(estimates x1.2)")
    if snap.get("compaction") is not None:
        lines.append(f"summary from compaction #{snap['compaction']} leads the context")
    triage = snap.get("triage")
    if triage:
        error = triage.get("error")
        lines.append(f"triage {triage.get('outcome')}: {triage.get('selected', 0)} of "
                     f"{triage.get('candidates', 0)} older turns kept, {triage.get('latency_ms', 0)} ms, "
                     f"{triage.get('input_tokens', 0)}+{triage.get('output_tokens', 0)} tokens"
                     + (f", {error}" if error else ""))
    counts = snap.get("counts") or {}
    if counts:
        names = sorted(counts, key=lambda name: (COUNT_ORDER.index(name) if name in COUNT_ORDER
                                                 else len(COUNT_ORDER), name))
        width = max(len(str(name)) for name in names)
        value_width = max(len(str(counts[name])) for name in names)
        lines.append("counts")
        lines += [f"  {name:<{width}}  {counts[name]:>{value_width}}" for name in names]
    rows: list[tuple[str, int, str]] = [("in the context", int(e["id"]), str(e["reason"]))
                                        for e in snap.get("entries", [])]
    rows += [("scheduled previous-tasks block", int(i), "scheduled") for i in snap.get("scheduled_block", [])]
    rows += [("trimmed by the token budget", int(t["id"]), str(t.get("reason", "budget")))
             for t in snap.get("trimmed", [])]
    id_width = max((len(str(message_id)) for _, message_id, _ in rows), default=1) + 1
    reason_width = max((len(reason) for *_, reason in rows), default=0)
    section = ""
    for title, message_id, reason in rows:
        if title != section:
            section = title
            count = sum(1 for row in rows if row[0] == title)
            lines.append(f"{title} ({count}, oldest first)")
        found = messages.get(message_id)
        when = datetime.fromtimestamp(found.created_at, UTC).strftime("%Y-%m-%d %H:%M:%S") \
            if found else "?" * 19
        role = found.role if found else "?"
        prefix = f"  {'#' + str(message_id):<{id_width}}  {when}  {role:<9}  {reason:<{reason_width}}  "
        lines.append(prefix + _text(found, full, indent=len(prefix)))
    recalled = snap.get("recalled") or []
    if recalled:
        lines.append(f"recalled by full-text search: {' '.join(f'#{i}' for i in recalled)}")
    return lines


def _reply_call_lines(snap: dict[str, Any]) -> list[str]:
    call = snap.get(REPLY_CALL)
    if call is None:
        return ["model call: not recorded (a turn stored before this version recorded it)"]
    if not call.get("called"):
        return [f"model {call.get('model')}: not called (the context could not be built)"]
    attempts = call.get("attempts")
    tried = f"{attempts} attempt{'s' if attempts != 1 else ''}" if attempts else "failed"
    stop = f"  stopped: {call['stop_reason']}" if call.get("stop_reason") not in (None, "end_turn") else ""
    files = ", ".join(
        f"{f.get('name')} {Path(str(f.get('file'))).name} "
        + ("(left out: the total cap was used up)" if f.get("left_out") else f"({f.get('chars')} chars)")
        for f in call.get("prompt_files") or []
    ) or "none"
    return [
        f"model {call.get('model')}  tokens {call.get('tokens_in', 0)} in, {call.get('tokens_out', 0)} out  "
        f"{tried}  {call.get('model_ms', 0)} ms{stop}",
        f"system prompt {call.get('system_prompt_chars')} chars; prompt files: {files}",
    ]


def _speaker(message: StoredMessage) -> str:
    if message.role == "user":
        return message.sender_name or message.sender_id or "user"
    if message.origin == "scheduled":
        return f"agent [scheduled {message.job_id}]" if message.job_id else "agent [scheduled]"
    return "agent"


def _text(message: StoredMessage | None, full: bool, *, indent: int, speaker: bool = True) -> str:
    """A message's text after its speaker: cut to one line, or whole (lines aligned) with --full."""
    if message is None:
        return "(not in the store any more)"
    text = f"{_speaker(message)}: {message.text}" if speaker else message.text
    if full:
        return text.replace("\n", "\n" + " " * indent)
    line = " ".join(text.split())
    return line if len(line) <= LINE_CHARS else line[:LINE_CHARS - 1] + "…"


def _replay(args: argparse.Namespace) -> int:
    from bot.brain import AnthropicBrain
    from bot.replay import replay

    config = _load(args)
    _logging(config, quiet=True)  # skipped rows and snapshots are warned about on stderr
    key = str(parse(args.session_key))

    async def run() -> int:
        async with _open_store(config) as store:
            await store.session(key)
            # No key: replay never calls a model (triage answers come from the snapshot).
            result = await replay(config, store, AnthropicBrain(config.anthropic, None), key,
                                  args.turn or 0)
        record, rebuilt = result.record, result.rebuilt
        print(f"turn {record.turn}: hash recorded {record.hash or '(none)'}, "
              f"rebuilt {rebuilt.input_hash}")
        print(f"entries recorded {len(result.recorded_ids)}, rebuilt {len(result.rebuilt_ids)}")
        if result.matches:
            print("match")
            return 0
        missing = [i for i in result.recorded_ids if i not in result.rebuilt_ids]
        extra = [i for i in result.rebuilt_ids if i not in result.recorded_ids]
        print("MISMATCH")
        if record.snapshot.get("status") == "failed":
            print(f"the turn failed to build its context: {record.snapshot.get('error')}")
        print("only recorded: " + (" ".join(f"#{i}" for i in missing) or "-"))
        print("only rebuilt:  " + (" ".join(f"#{i}" for i in extra) or "-"))
        return 1

    code: int = _on_database(config, run)
    return code


def _compact(args: argparse.Namespace) -> int:
    from bot.brain import AnthropicBrain
    from bot.compaction import Compactor
    from bot.context_builder import ContextBuilder

    config = _load(args)
    _logging(config, quiet=True)
    key = str(parse(args.session_key))

    async def run() -> int:
        brain = AnthropicBrain(config.anthropic, config.anthropic.api_key())
        try:
            async with _open_store(config) as store:
                await store.session(key)
                budget = ContextBuilder(config, store, brain).budget
                outcome = await Compactor(config, store, brain, budget).compact(key)
        finally:
            await brain.aclose()
        record = outcome.record
        if record is None:
            print(outcome.reason)
            return 0
        print(f"compaction #{record.id}: summarised {outcome.summarised} messages "
              f"(up to #{record.last_summarised_id}) in {outcome.calls} calls; "
              f"~{record.tokens_before} -> ~{record.tokens_after} tokens; "
              f"context now starts at #{record.first_kept_message_id}")
        print(record.summary)
        return 0

    return asyncio.run(run())


def _jobs(args: argparse.Namespace) -> int:
    from bot.scheduler import failing
    from bot.schedules import job_trigger
    from bot.store import Store

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
    from bot.control import NotRunningError, request
    from bot.store import Store

    config = _load(args)
    ids = [job.id for job in config.schedules]
    if args.job_id not in ids:
        raise BotError(f"no job {args.job_id!r} in {config.source}; jobs: {', '.join(ids) or 'none'}")
    # The daemon is asked first: a request nobody takes up would run whenever it next starts.
    try:
        reply = request(_control_path(config), "status", timeout=10.0)
    except NotRunningError as exc:
        print(f"switchboard: {exc}; start it with `switchboard run`, then ask again", file=sys.stderr)
        return EXIT_NOT_RUNNING
    if not reply.get("ok"):
        raise BotError(f"the daemon could not answer: {reply.get('error')}")
    job = next((j for j in reply.get("schedules", []) if j.get("id") == args.job_id), None)
    if job is None:
        raise BotError(f"the running daemon has no job {args.job_id!r}: it runs {reply.get('config')}; "
                       "after editing the file, `switchboard reload`")
    if not job.get("runnable", True):
        raise BotError(f"job {args.job_id!r} cannot run now: its channel is not running in the daemon")

    async def ask() -> int:
        async with Store.open(config.database_path()) as store:
            waiting = [run for run in await store.pending_runs("requested") if run.job_id == args.job_id]
            if waiting:  # asked twice before the daemon took it up: still one run
                run = waiting[0]
                print(f"run #{run.id} of {args.job_id} was already requested; the daemon picks it up "
                      f"within {config.scheduler.request_poll:g}s")
            else:
                run = await store.request_run(args.job_id, time.time())
                print(f"requested run #{run.id} of {args.job_id}; the daemon picks it up within "
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
                print(f"run #{run.id} is still {status} after {args.wait:g}s; `switchboard jobs` shows "
                      "its outcome later", file=sys.stderr)
                return 1
            return 0

    code: int = _on_database(config, ask)
    return code


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# -- operations: status, reload, database care (see README "Operations") -----------------------


def _control_path(config: Config) -> Path:
    from bot.control import socket_path

    return socket_path(config.database_path())


def _status(args: argparse.Namespace) -> int:
    import json

    from bot.control import NotRunningError, request

    config = _load(args)
    try:
        reply = request(_control_path(config), "status", timeout=10.0)
    except NotRunningError as exc:
        print(f"switchboard: {exc}")
        return EXIT_NOT_RUNNING
    if args.json:
        print(json.dumps(reply, indent=2, sort_keys=True))
        return 0 if reply.get("ok") else 1
    if not reply.get("ok"):
        raise BotError(f"the daemon could not answer: {reply.get('error')}")
    print(f"running: pid {reply['pid']}, up {_duration(reply['uptime_s'])}, agent {reply['agent']}, "
          f"{'ready' if reply['ready'] else 'starting'}")
    print(f"config {reply['config']}  database {reply['database']}")
    for channel in reply["channels"]:
        error = f"  (last error: {channel['error']})" if channel["error"] else ""
        restarts = channel.get("restarts", 0)
        restarted = f", restarted {restarts} time{'s' if restarts != 1 else ''}" if restarts else ""
        print(f"channel {channel['provider']}: {channel['state']}{restarted}{error}")
    queue = reply["queue"]
    print(f"queue: {queue['pending']} message(s) in {len(queue['sessions'])} session(s)")
    for key, state in sorted(queue["sessions"].items()):
        print(f"  {key}  {'running' if state['running'] else 'idle'}, {state['waiting']} waiting")
    for job in reply["schedules"]:
        upcoming = ("paused (failing)" if job["paused"] else "disabled" if not job["enabled"]
                    else "not here: its channel is not running" if not job["runnable"]
                    else f"next {job['next_run']}")
        last = f"last {job['last_status']}" if job["last_status"] else "never run"
        if job["last_error"]:
            last += f" ({job['last_error']})"
        print(f"job {job['id']}: {upcoming}; {last}")
    if reply.get("quarantined"):
        print(f"quarantined updates: {reply['quarantined']} (could not be parsed; kept raw in the "
              "database's quarantine table)")
    failure = reply.get("last_error")
    print(f"last error: {failure.get('timestamp', '')} {failure.get('event')}"
          + (f": {failure['error']}" if failure.get("error") else "") if failure else "last error: none")
    reload = reply.get("last_reload")
    if reload:
        outcome = "applied" if reload["reloaded"] else f"rejected: {reload['error']}"
        print(f"last reload: {_when(reload['at'])} {outcome}")
    return 0


def _reload(args: argparse.Namespace) -> int:
    from bot.control import NotRunningError, request

    config = _load(args)  # a broken file is reported here (exit 2), before the daemon is asked
    try:
        reply = request(_control_path(config), "reload")
    except NotRunningError as exc:
        print(f"switchboard: {exc}", file=sys.stderr)
        return EXIT_NOT_RUNNING
    if not reply.get("ok"):
        raise BotError(f"the daemon could not reload: {reply.get('error')}")
    if not reply["reloaded"]:
        print(f"switchboard: reload rejected, the old config stays in force: {reply['error']}",
              file=sys.stderr)
        return 1
    print(f"reloaded {config.source}: changed {', '.join(reply['changed']) or 'nothing'}")
    if reply["restart_required"]:
        print(f"note: restart the daemon to apply {', '.join(reply['restart_required'])}")
    return 0


def _db_help(args: argparse.Namespace) -> int:
    print("usage: switchboard db backup PATH [--force] | switchboard db prune --older-than DAYS "
          "[--dry-run]", file=sys.stderr)
    return 2


def _db_backup(args: argparse.Namespace) -> int:
    import sqlite3

    from bot.store import Store

    config = _load(args)
    target = Path(args.path)
    if target.exists() and not args.force:
        raise BotError(f"{target} already exists; choose a new file or pass --force to replace it")
    # Written beside the target, then renamed: a failed backup never leaves half a file behind.
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)

    async def copy() -> int:
        async with _open_store(config) as store:
            await store.backup_to(partial)
        async with Store.open(partial) as copied:
            await copied.check_integrity()
            return await copied.message_count()

    try:
        count = _on_database(config, copy)
        os.replace(partial, target)
    except (OSError, sqlite3.Error) as exc:
        raise BotError(f"backup to {target} failed: {exc}") from exc
    finally:
        partial.unlink(missing_ok=True)
    print(f"backed up {config.database_path()} to {target} ({count} messages)")
    return 0


def _db_prune(args: argparse.Namespace) -> int:
    from bot.config import resolve_history_limit

    config = _load(args)
    before = time.time() - args.older_than * 86400

    async def prune() -> None:
        async with _open_store(config) as store:
            keep_turns: dict[str, int] = {}
            for session in await store.list_sessions():
                try:
                    keep_turns[session.key] = resolve_history_limit(config, parse(session.key)) or 0
                except BotError:
                    continue  # a key this version cannot read: the lookback floor still applies
            report = await store.prune_interactive(
                before, keep_recent=config.conversation.lookback_count, keep_turns=keep_turns,
                dry_run=args.dry_run,
            )
        verb = "would remove" if report.dry_run else "removed"
        print(f"{verb} {report.messages} message(s) older than {args.older_than} day(s) and "
              f"{report.snapshots} context snapshot(s); kept the newest "
              f"{config.conversation.lookback_count} messages and the history-limit turns of each session")
        for key, count in report.messages_by_session.items():
            print(f"  {key}  {count}")

    _on_database(config, prune)
    return 0


def _on_database(config: Config, work: Any) -> Any:
    """Run an async database job; a damaged file becomes the one-line StoreError, not a traceback."""
    import sqlite3

    from bot.store import Store

    try:
        return asyncio.run(work())
    except sqlite3.DatabaseError as exc:
        raise Store.damaged(config.database_path(), str(exc)) from exc


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h" if days else f"{hours}h{minutes}m" if hours else f"{minutes}m{secs}s"
