"""`switchboard init` on a terminal: a few questions (channels, keys and tokens, model, who may
write, the browser console and its first account), then config.toml written from the documented
example with those answers, the pasted secrets in a 0600 env file beside it, the account in the
database, and `switchboard doctor` to try them.

Secrets never go in config.toml: it names their variables, and the env file holds what was pasted
(`[secrets] env_file`, read by the daemon; variables already set in the environment win). For a
config in /etc/switchboard the env file is /etc/switchboard/env, which the systemd unit reads.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prompt_toolkit import prompt
from prompt_toolkit.completion import WordCompleter
from prompt_toolkit.document import Document
from prompt_toolkit.validation import ValidationError, Validator

from bot.cli.base import DEFAULT_CONFIG
from bot.cli.config_text import set_value, toml_value
from bot.config import Config, load_config, parse_config
from bot.config.env_file import write_env_file
from bot.config.fields import split_listen
from bot.config.root import DEFAULT_PRICES
from bot.core.errors import BotError

ENV_FILE = "switchboard.env"
# What systemd/switchboard.service reads with EnvironmentFile= (`make install` creates it, root's,
# 0600). The daemon, run as its own user there, cannot read it itself: systemd hands it over.
SERVICE_ENV_FILE = Path("/etc/switchboard/env")
# Where the unit keeps its state (StateDirectory=); `make install` writes the same path.
SERVICE_DATABASE = "/var/lib/switchboard/switchboard.db"
POLICIES = ("allowlist", "pairing", "open")
# A value as it can stand in an env file read by us, systemd and a shell alike.
_SECRET = re.compile(r"[^\s\"'\\$`#]+")


@dataclass(frozen=True, slots=True)
class Platform:
    """A chat platform as the questions name it."""

    name: str
    title: str
    token_help: str
    id_help: str
    token_shape: re.Pattern[str]


PLATFORMS = (
    Platform("telegram", "Telegram", "@BotFather's /newbot gives it", "ask @userinfobot",
             re.compile(r"[0-9]+:[A-Za-z0-9_-]+")),
    Platform("discord", "Discord", "Developer Portal: your application, Bot, Reset Token",
             "Developer Mode on, right-click your name, Copy User ID", re.compile(r"[A-Za-z0-9_.-]+")),
)


@dataclass(slots=True)
class Answers:
    """What the questions settled; `pasted` holds secrets, by variable name, for the env file only."""

    platforms: list[Platform] = field(default_factory=list)
    model: str = ""
    access: dict[str, tuple[str, list[int]]] = field(default_factory=dict)
    pasted: dict[str, str] = field(default_factory=dict)
    from_environment: list[str] = field(default_factory=list)
    unset: list[str] = field(default_factory=list)
    shadowed: list[str] = field(default_factory=list)  # pasted, but the environment's value wins
    web_listen: str | None = None  # the browser console's `[web] listen`; None: the console stays off
    admin: tuple[str, str] | None = None  # its first account: (name, password hash), never the password


def guided_setup(target: Path, example: str) -> int:
    """Ask, then write `target` (from the example text) and the env file; 130 when stopped."""
    defaults = Config()
    print(f"Setting up {target}: a few questions, then the file (other keys: defaults).")
    print("Nothing is written before the last answer; Ctrl-C stops.")
    try:
        answers = _ask(defaults, service=env_file_for(target)[1] is None)
    except (KeyboardInterrupt, EOFError):
        print("Stopped; nothing written.", file=sys.stderr)
        return 130
    env_path, env_key = env_file_for(target)
    needs_file = bool(answers.pasted or answers.unset)
    text = compose(example, answers, env_key if needs_file else None, service=env_key is None)
    parse_config(tomllib.loads(text), str(target))  # refused here, before anything is written
    try:
        if needs_file:
            write_env_file(env_path, answers.pasted)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise BotError(f"cannot write {exc.filename or target}: {exc.strerror or exc}") from exc
    config = load_config(target)  # as the daemon will: the env file read, its mode checked
    _summary(target, config, answers, env_path if needs_file else None, env_key)
    if answers.admin is not None:
        _first_account(config, *answers.admin)
    if _yes("Run `switchboard doctor` now (it tries the key and each token)?", default=True):
        _doctor(target)
    start = "`make run` (or `switchboard run`)" if str(target) == DEFAULT_CONFIG else (
        f"`switchboard run --config {target}`")
    print(f"Next: {start} starts the daemon.")
    print(f"After an update, `switchboard init --upgrade` adds the new version's keys to {target}.")
    return 0


def env_file_for(target: Path) -> tuple[Path, str | None]:
    """Where the pasted secrets go, and the `env_file` value naming it (None: systemd reads it)."""
    if target.absolute().parent == SERVICE_ENV_FILE.parent:
        return SERVICE_ENV_FILE, None
    return target.absolute().parent / ENV_FILE, ENV_FILE


def compose(example: str, answers: Answers, env_key: str | None, *, service: bool = False) -> str:
    """The example config with the answers set in it; for the systemd unit's config (`service`),
    the database where the unit keeps its state, as `make install` writes it."""
    text = set_value(example, "anthropic", "model", toml_value(answers.model))
    if service:
        text = set_value(text, "database", "path", toml_value(SERVICE_DATABASE))
    for platform in answers.platforms:
        table = f"channels.{platform.name}"
        policy, ids = answers.access[platform.name]
        text = set_value(text, table, "enabled", toml_value(True))
        text = set_value(text, table, "dm_policy", toml_value(policy))
        text = set_value(text, table, "allow_from", toml_value(ids))
    if answers.web_listen is not None:
        text = set_value(text, "web", "enabled", toml_value(True))
        text = set_value(text, "web", "listen", toml_value(answers.web_listen))
    if env_key is not None:
        text = set_value(text, "secrets", "env_file", toml_value(env_key))
    return text


def _ask(defaults: Config, *, service: bool = False) -> Answers:
    answers = Answers()
    print("The console is always on: `switchboard chat`, or `make run` on a terminal.")
    answers.platforms = [platform for platform in PLATFORMS
                         if _yes(f"Talk on {platform.title} too?", default=False)]
    _secret(answers, defaults.anthropic.api_key_env, "Anthropic API key",
            "console.anthropic.com: Settings, API keys", None)
    for platform in answers.platforms:
        section = getattr(defaults.channels, platform.name)
        _secret(answers, section.token_env, f"{platform.title} bot token", platform.token_help,
                platform.token_shape)
    answers.model = _question("Model for replies", default=defaults.anthropic.model,
                              completer=WordCompleter(sorted(DEFAULT_PRICES)), check=_one_word)
    for platform in answers.platforms:
        print(f"Who may write to the {platform.title} bot in private chats? allowlist: the ids you list;")
        print("  pairing: those and whoever you approve by code; open: anyone")
        policy = _question("  allowlist, pairing or open?", default="allowlist",
                           completer=WordCompleter(list(POLICIES)), check=_policy)
        ids: list[int] = []
        if policy != "open":
            which = "allowed" if policy == "allowlist" else "allowed without a code (optional)"
            print(f"  Your {platform.title} user id: {platform.id_help}.")
            ids = _ids(_question(f"  {platform.title} user ids {which}, spaces or commas between",
                                 check=_id_list))
        if policy == "allowlist" and not ids:
            print(f"  Nobody may write to the {platform.title} bot yet: add ids to allow_from later.")
        answers.access[platform.name] = (policy, ids)
    _ask_web(answers, defaults, service=service)
    return answers


def _ask_web(answers: Answers, defaults: Config, *, service: bool) -> None:
    """The browser console: on or not, where it listens, and its first admin account (for the
    systemd unit's config the account is made later, as the daemon's user, in its database)."""
    from bot.web.auth import account_name_problem, hash_password, password_problem

    print("The browser console shows the agents, sessions and each turn explained, and approves pairing")
    print("  requests, in a web browser (docs/web.md).")
    if not _yes("Turn on the browser console?", default=False):
        return
    answers.web_listen = _question("  Listen on HOST:PORT (keep it on loopback; put an HTTPS proxy in front)",
                                   default=defaults.web.listen, check=_listen)
    if service:
        print("  Make its first account as the daemon's user once installed: "
              "`sudo -u switchboard switchboard web user add NAME --config /etc/switchboard/config.toml`.")
        return
    if not _yes("  Make its first admin account now?", default=True):
        print("  Later: `switchboard web user add NAME`.")
        return
    name = _question("  Account name", check=account_name_problem)
    while True:
        password = _question("  Password (hidden)", check=password_problem, hidden=True)
        if _question("  The password again (hidden)", hidden=True) == password:
            break
        print("  The two passwords differ; once more.")
    answers.admin = (name, hash_password(password))


def _first_account(config: Config, name: str, password_hash: str) -> None:
    """The console's first admin account, as `switchboard web user add` makes it."""
    from bot.cli.web import add_account

    try:
        print(add_account(config, name, password_hash))
    except BotError as exc:
        print(f"The account was not made ({exc}): `switchboard web user add {name}` makes it.")


def _secret(answers: Answers, name: str, what: str, where: str, shape: re.Pattern[str] | None) -> None:
    """Take a secret from the environment, or have it pasted (hidden), or leave it to be set later."""
    print(f"{what} ({where})")
    set_here = bool(os.environ.get(name, "").strip())
    if set_here:
        if _yes(f"  {name} is set in this environment. Use it?", default=True):
            answers.from_environment.append(name)
            return
    else:
        print(f"  {name} is not set in this environment.")

    def check(text: str) -> str | None:
        if not text:
            return None
        if not _SECRET.fullmatch(text) or (shape is not None and not shape.fullmatch(text)):
            return f"that does not look like a {what} ({where})"
        return None

    value = _question(f"  Paste the {what.split()[-1]} (hidden; empty: set {name} later)",
                      check=check, hidden=True)
    if value:
        answers.pasted[name] = value
        if set_here:
            answers.shadowed.append(name)
    else:
        answers.unset.append(name)


def _question(text: str, *, default: str = "", check: Callable[[str], str | None] | None = None,
              completer: WordCompleter | None = None, hidden: bool = False) -> str:
    shown = f"{text} [{default}]: " if default else f"{text}: "
    validator = _Check(check, default) if check is not None else None
    answer = prompt(shown, is_password=hidden, completer=completer, validator=validator,
                    validate_while_typing=False)
    return answer.strip() or default


def _yes(text: str, *, default: bool) -> bool:
    answer = _question(f"{text} {'[Y/n]' if default else '[y/N]'}", check=_yes_no)
    return default if not answer else answer.lower().startswith("y")


class _Check(Validator):
    """A prompt's answer checked when Enter is pressed: the problem is shown below, the text kept."""

    def __init__(self, check: Callable[[str], str | None], default: str) -> None:
        self._check = check
        self._default = default

    def validate(self, document: Document) -> None:
        problem = self._check(document.text.strip() or self._default)
        if problem is not None:
            raise ValidationError(message=problem, cursor_position=len(document.text))


def _yes_no(text: str) -> str | None:
    return None if text.lower() in ("", "y", "yes", "n", "no") else "y or n"


def _one_word(text: str) -> str | None:
    return None if text and not any(ch.isspace() for ch in text) else "a model id, such as claude-sonnet-5-5"


def _listen(text: str) -> str | None:
    try:
        split_listen(text)
    except ValueError as exc:
        return str(exc)
    return None


def _policy(text: str) -> str | None:
    return None if text in POLICIES else "one of: " + ", ".join(POLICIES)


def _id_list(text: str) -> str | None:
    wrong = [part for part in re.split(r"[\s,]+", text) if part and not part.isdigit()]
    return f"user ids are numbers ({wrong[0]!r} is not)" if wrong else None


def _ids(text: str) -> list[int]:
    return list(dict.fromkeys(int(part) for part in re.split(r"[\s,]+", text) if part))


def _summary(target: Path, config: Config, answers: Answers, env_path: Path | None,
             env_key: str | None) -> None:
    channels = ", ".join(["console", *(platform.name for platform in answers.platforms)])
    print(f"Wrote {target}: channels {channels}; model {config.anthropic.model}.")
    for platform in answers.platforms:
        policy, ids = answers.access[platform.name]
        listed = f", {len(ids)} id{'s' if len(ids) != 1 else ''}" if ids else ""
        print(f"  {platform.title} private chats: {policy}{listed}; groups: none yet (docs/channels.md).")
    if config.web.enabled:
        print(f"  Browser console: http://{config.web.listen}/ once the daemon runs (docs/web.md).")
    if env_path is not None:
        print(f"Wrote {env_path} (mode 0600): {', '.join(answers.pasted) or 'no secret yet'}.")
        print("  The systemd unit reads it (EnvironmentFile=)." if env_key is None
              else f'  The daemon reads it (env_file = "{env_key}"); the environment, where set, wins.')
    for name in answers.from_environment:
        print(f"  {name}: from this environment; set it wherever the daemon runs.")
    for name in answers.unset:
        print(f"  {name}: not set yet; add {name}=... to {env_path}, or export it.")
    for name in answers.shadowed:
        print(f"  {name} is also set in this environment, and that value wins: unset it here.")


def _doctor(target: Path) -> None:
    """`switchboard doctor` on the new file, through the CLI's own parser and function, when this
    version has it."""
    from bot.cli import _command, _parser

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = _parser().parse_args(["doctor", "--config", str(target)])
    except SystemExit:
        print("(This version has no `switchboard doctor`: skipped.)")
        return
    try:
        code = _command(args.func)(args)
    except BotError as exc:
        print(f"switchboard doctor: {exc}")
        code = 1
    if code:
        print("Fix what doctor names above, then run `switchboard doctor` again.")
