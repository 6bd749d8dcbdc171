"""The `switchboard` command: run the daemon, chat on the console, and the admin commands.

This module holds the parser and `main`; each command group lives in its own module and imports
what it needs when it runs: a config refused, `--help` or `sessions` must not pay for the model SDK
and the platform libraries the daemon loads.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from bot.cli.base import CONFIG_VARIABLE, UsageError, default_config
from bot.core.errors import BotError, ConfigError

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        code = _command(args.func)(args)
        sys.stdout.flush()  # here, where a reader gone away is caught, not at exit
    except ConfigError as exc:
        print(f"switchboard: {exc}", file=sys.stderr)
        code = 2
    except UsageError as exc:
        print(f"switchboard {args.command}: {exc} (see `switchboard {args.command} --help`)",
              file=sys.stderr)
        code = 2
    except BrokenPipeError:
        # The reader went away (`switchboard status | head -1`): nothing more to say to it, and
        # Python's own flush at exit must not fail on the closed pipe either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    except BotError as exc:
        print(f"switchboard: {exc}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


def _command(func: str) -> Any:
    """The function a command runs, "module:function" in bot.cli, imported only now: `--version`,
    `status` or a refused config must not load the store, the model SDKs or the platforms."""
    module, _, name = func.partition(":")
    return getattr(importlib.import_module(f"bot.cli.{module}"), name)


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, like every other error, then where the help is."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


SESSION_KEY_HELP = ("a session, as `switchboard sessions` lists them: agent:<id>:<channel>:<kind>:<chat>"
                    "[:thread|topic:<id>], e.g. agent:main:telegram:direct:123456789")


EXAMPLES = {
    "run": ["switchboard run", "switchboard run --config /etc/switchboard/config.toml"],
    "chat": ["switchboard chat", "echo 'hello' | switchboard chat"],
    "init": ["switchboard init   # on a terminal: a few questions, then config.toml and switchboard.env",
             "switchboard init --config ~/.config/switchboard/config.toml",
             "switchboard init --upgrade   # add this version's new keys, commented out"],
    "check-config": ["switchboard check-config", "switchboard check-config /etc/switchboard/config.toml"],
    "doctor": ["switchboard doctor",
               "sudo -u switchboard switchboard doctor --config /etc/switchboard/config.toml",
               "switchboard doctor --timeout 30   # a slow network"],
    "sessions": ["switchboard sessions", "switchboard sessions --agent work"],
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
    "db prune": ["switchboard db prune --older-than 90 --dry-run", "switchboard db prune --older-than 90",
                 "switchboard db prune   # only the kept files no message refers to"],
    "db embed": ["switchboard db embed", "switchboard db embed --rebuild"],
    "db copy": ["switchboard db copy --to postgresql://switchboard@db.example.com/switchboard",
                "PGPASSWORD=... switchboard db copy --to postgresql://switchboard@db.example.com/switchboard",
                "switchboard db copy --to /var/backups/switchboard.db   # from a PostgreSQL config"],
    "pairing": ["switchboard pairing list", "switchboard pairing approve K7QPM3XD"],
    "pairing list": ["switchboard pairing list"],
    "pairing approve": ["switchboard pairing approve K7QPM3XD",
                        "switchboard pairing approve --user telegram:123456789"],
    "pairing deny": ["switchboard pairing deny K7QPM3XD",
                     "switchboard pairing deny --user discord:123456789"],
    "notes": ["switchboard notes", "switchboard notes telegram:123456789"],
    "usage": ["switchboard usage", "switchboard usage --by day --days 7", "switchboard usage --by user"],
    "web": ["switchboard web user add ada", "switchboard web user list"],
    "web user": ["switchboard web user list"],
    "web user add": ["switchboard web user add ada   # asks for the password twice",
                     "switchboard web user add bob --chat-only   # the web chat only",
                     "printf '%s\\n' \"$PASSWORD\" | switchboard web user add ada"],
    "web user list": ["switchboard web user list"],
    "web user passwd": ["switchboard web user passwd ada   # asks for the new password twice",
                        "printf '%s\\n' \"$PASSWORD\" | switchboard web user passwd ada"],
    "web user remove": ["switchboard web user remove ada"],
    "matrix": ["switchboard matrix login"],
    "matrix login": ["switchboard matrix login   # asks the bot's password once, prints the token",
                     "switchboard matrix login --account work",
                     "printf '%s\\n' \"$PASSWORD\" | switchboard matrix login --password-stdin "
                     ">> switchboard.env"],
}


COPY_DESCRIPTION = """\
Copy the whole database the config names (every table, ids kept) into a new, empty one:
an SQLite bot onto PostgreSQL, or a PostgreSQL store into an SQLite file as a backup.
Then count each table's rows on both sides, print them, and exit 1 if any differ.

Stop the daemon first (the command refuses while one runs on the database). The copy
reads one consistent snapshot of the source and writes in one transaction, so a failed
copy leaves the target as empty as it was; a new SQLite file appears only when complete.
Recall's index and the vector counts are rebuilt on the target as the rows arrive."""


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
    common.add_argument("--config", default=default_config(), metavar="PATH",
                        help=f"config file (default: ${CONFIG_VARIABLE}, else ./config.toml)")
    parser = _Parser(
        prog="switchboard", description="A multi-channel, Claude-backed chat bot daemon.",
        epilog="Exit status: 0 done, 1 failed, 2 config or usage error, 3 no daemon running "
               "(status, reload). `switchboard COMMAND --help` shows each command's examples.",
    )
    parser.add_argument("--version", action="version", version=f"switchboard {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: str, help_text: str, parent: Any = sub) -> argparse.ArgumentParser:
        command: argparse.ArgumentParser = parent.add_parser(
            name.split()[-1], parents=[common], help=help_text, description=help_text,
            epilog=_examples(name), formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.set_defaults(func=func)
        return command

    add("run", "daemon_commands:run", "run the daemon with every enabled channel")
    add("chat", "daemon_commands:chat", "talk to the agent on this terminal")
    init = add("init", "daemon_commands:init", "write config.toml: on a terminal by a few questions "
               "(channels, keys and tokens, model, who may write), else as the documented example")
    init.add_argument("--upgrade", action="store_true",
                      help="bring an existing file up to this version: add its new keys commented out, "
                           "name the keys it no longer knows")
    check = add("check-config", "daemon_commands:check_config",
                "check a config file as `run` would (values, tokens, channels) without starting anything")
    check.add_argument("path", nargs="?", help="config file (default: --config)")
    doctor = add("doctor", "doctor:doctor", "check that everything works: config, database, each key and "
                 "model, bot tokens, MCP servers, service, clock; one line each with what to do")
    doctor.add_argument("--timeout", type=_doctor_timeout, default=10.0, metavar="SECONDS",
                        help="how long each check may take (default 10)")
    sessions = add("sessions", "history:list_sessions", "list sessions with message counts and last activity")
    sessions.add_argument("--agent", metavar="ID", help="only this agent's sessions")
    history = add("history", "history:show_history", "show a session's newest messages")
    history.add_argument("session_key", metavar="SESSION_KEY", help=SESSION_KEY_HELP)
    history.add_argument("--limit", type=_positive, default=20, help="messages to show (20)")
    context = add("context", "history:show_context",
                  "show what went into a turn's context and why, the model call and the reply")
    context.add_argument("session_key", metavar="SESSION_KEY", help=SESSION_KEY_HELP)
    context.add_argument("--turn", type=_turn, default=None, metavar="N",
                         help="turn number from 1; negative counts from the newest (default: newest)")
    context.add_argument("--full", action="store_true", help="whole texts, not one line each")
    context.add_argument("--json", action="store_true",
                         help="the whole record (snapshot, reply call, texts) as JSON, for scripts")
    replay = add("replay", "history:replay_turn",
                 "build a turn's context again from the stored log and config; exit 1 if it differs")
    replay.add_argument("session_key", metavar="SESSION_KEY", help=SESSION_KEY_HELP)
    replay.add_argument("--turn", type=_turn, default=None, metavar="N",
                        help="turn number from 1; negative counts from the newest (default: newest)")
    compact = add("compact", "history:compact_session",
                  "summarise a session's older messages now (the full history stays stored)")
    compact.add_argument("session_key", metavar="SESSION_KEY", help=SESSION_KEY_HELP)
    jobs = add("jobs", "jobs:list_jobs", "list scheduled jobs with their next run and last status")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", metavar="run")
    run_job_cmd = add("jobs run", "jobs:run_job",
                      "ask the running daemon to run a job now, delivered as configured",
                      jobs_sub)
    run_job_cmd.add_argument("job_id", metavar="ID",
                             help="the job's id in [[schedules]] (see `switchboard jobs`)")
    run_job_cmd.add_argument("--wait", type=_seconds, default=120.0, metavar="SECONDS",
                             help="how long to wait for the outcome (default 120; 0: do not wait)")
    status = add("status", "daemon_commands:show_status",
                 "show whether the daemon runs: channels, queues, schedules, last error")
    status.add_argument("--json", action="store_true", help="print the daemon's answer as JSON")
    add("reload", "daemon_commands:reload",
        "make the running daemon re-read its config file (as SIGHUP does)")
    db = add("db", "db:db_usage", "database care: backup, prune, embed, copy")
    db_sub = db.add_subparsers(dest="db_command", metavar="backup|prune|embed|copy")
    backup_cmd = add("db backup", "db:backup", "copy the database, safely while it runs", db_sub)
    backup_cmd.add_argument("path", help="the new backup file")
    backup_cmd.add_argument("--force", action="store_true", help="replace the file if it exists")
    prune_cmd = add("db prune", "db:prune", "delete old conversation messages that no limit still needs, "
                    "and kept pictures and files that no stored message refers to", db_sub)
    prune_cmd.add_argument("--older-than", type=_positive, metavar="DAYS",
                           help="only messages older than this many days (without it: only files go)")
    prune_cmd.add_argument("--dry-run", action="store_true", help="show what would go, delete nothing")
    embed_cmd = add("db embed", "db:embed", "compute the sentence vectors semantic recall needs for messages "
                    "that lack one (the [semantic] extra)", db_sub)
    embed_cmd.add_argument("--rebuild", action="store_true",
                           help="drop every stored vector and compute them all again")
    copy_cmd = add("db copy", "db:copy", "copy the whole database into a new, empty one (SQLite onto "
                   "PostgreSQL, or PostgreSQL into an SQLite file) and count every table on both sides",
                   db_sub)
    copy_cmd.description = COPY_DESCRIPTION
    copy_cmd.add_argument("--to", required=True, metavar="URL|PATH",
                          help="a postgresql:// URL without a password (PGPASSWORD or ~/.pgpass give "
                               "it; the database must be empty), or an SQLite file (new or empty)")
    pairing = add("pairing", "access:pairing_usage", "let strangers in by the code they were sent "
                  '(dm_policy = "pairing"): list, approve, deny')
    pairing_sub = pairing.add_subparsers(dest="pairing_command", metavar="list|approve|deny")
    add("pairing list", "access:list_pairings", "every pairing request and decision, newest first",
        pairing_sub)
    for verb, func, what in (("approve", "access:approve", "let a user in now (no reload needed)"),
                             ("deny", "access:deny", "refuse a request, or take back an approval (--user)")):
        decide = add(f"pairing {verb}", func, what, pairing_sub)
        decide.add_argument("code", nargs="?", metavar="CODE", help="the code the user was sent")
        decide.add_argument("--user", metavar="PROVIDER:ID", help="a user by id, e.g. telegram:123456789")
    notes = add("notes", "notes:list_notes", "the notes users asked the agent to keep (the remember tool)")
    notes.add_argument("user", nargs="?", metavar="USER", help="only this user: PROVIDER:ID")
    usage = add("usage", "access:show_usage", "tokens in and out and the estimated cost of model calls")
    usage.add_argument("--by", choices=("user", "session", "day", "model", "kind", "agent"),
                       default="session", help="how to group the calls (default: session)")
    usage.add_argument("--days", type=_positive, default=None, metavar="N",
                       help="the last N days, today included (default: this month)")
    web = add("web", "web:web_usage", "the browser console ([web]): its admin accounts")
    web_sub = web.add_subparsers(dest="web_command", metavar="user")
    user = add("web user", "web:web_usage", "admin accounts: add, list, passwd, remove", web_sub)
    user_sub = user.add_subparsers(dest="user_command", metavar="add|list|passwd|remove")
    user_add = add("web user add", "web:add_user", "add an account; the password is asked twice (or "
                   "read from standard input) and stored hashed (Argon2id)", user_sub)
    user_add.add_argument("name", metavar="NAME")
    user_add.add_argument("--chat-only", action="store_true",
                          help="an account for the web chat alone ([channels.web]), not the console")
    add("web user list", "web:list_users", "every account, with its last login", user_sub)
    add("web user passwd", "web:change_password", "set an account's password (asked twice, or read "
        "from standard input; hashed as by add) and end its sessions", user_sub).add_argument(
        "name", metavar="NAME")
    add("web user remove", "web:remove_user", "remove an account and end its sessions",
        user_sub).add_argument("name", metavar="NAME")
    matrix = add("matrix", "matrix_login:matrix_usage", "the Matrix bot account: log in for a token")
    matrix_sub = matrix.add_subparsers(dest="matrix_command", metavar="login")
    matrix_login = add("matrix login", "matrix_login:login", "log the bot in with its password (asked once, "
                       "or read from standard input) and print the access token to set", matrix_sub)
    matrix_login.add_argument("--account", metavar="NAME",
                              help="an account of [channels.matrix.accounts] (default: [channels.matrix])")
    matrix_login.add_argument("--password-stdin", action="store_true",
                              help="read the password from standard input's first line (for scripts)")
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


def _doctor_timeout(text: str) -> float:
    value = float(text)
    if not 0 < value <= 600:  # also refuses nan and inf
        raise argparse.ArgumentTypeError("a number of seconds above 0, at most 600")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 86400:  # also refuses nan and inf
        raise argparse.ArgumentTypeError("a number of seconds from 0 to 86400")
    return value
