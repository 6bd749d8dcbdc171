"""The env file: secrets as NAME=value lines in a 0600 file the config names (`[secrets] env_file`),
read into the process environment when the config loads, never over a variable already set.

The format is the one systemd's EnvironmentFile= reads: `NAME=value` lines, `#` comments and blank
lines, a value optionally in one pair of quotes. `export NAME=value` is accepted too, so the file
may also be sourced by a shell. Errors name the file and the line, never a value.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from bot.config.fields import Section
from bot.core.errors import ConfigError

KEY = "secrets.env_file"
_LINE = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)$")
# What this process put in its environment from an env file, by name: only such a value may be
# replaced when the file is read again (a reload); a variable from the real environment never is.
_from_file: dict[str, str] = {}


class SecretsConfig(Section):
    """Where secrets come from besides the process environment."""

    # A file of NAME=value lines, relative to the config's folder; unset: the environment only.
    env_file: str | None = None


def read_env_file(path: Path, source: str) -> dict[str, str]:
    """The NAME=value pairs of an env file; a ConfigError (naming `source`'s key and the file)
    when it is missing, readable by others than its owner, or has a line that is not NAME=value."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(source, KEY, f"a file of NAME=value lines; {path} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(source, KEY, f"a readable file of NAME=value lines; {path}: {reason}") from None
    if mode & 0o077:
        raise ConfigError(source, KEY, f"a file only its owner may read; {path} has mode {mode:04o} "
                                       f"(it holds secrets): chmod 600 {path}")
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        match = _LINE.match(stripped)
        if match is None:
            # The line may be a pasted secret: say where it is, never what it says.
            raise ConfigError(source, KEY, f"NAME=value lines, comments (#) and blank lines; {path} "
                                           f"line {number} is none of these")
        values[match.group(1)] = _unquoted(match.group(2).strip())
    return values


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def apply_env_file(path: Path, source: str) -> list[str]:
    """Put the file's variables into this process's environment where not already set (or set by
    an earlier read of such a file); the names it set."""
    applied = []
    for name, value in read_env_file(path, source).items():
        current = os.environ.get(name)
        if current is None or _from_file.get(name) == current:
            os.environ[name] = value
            _from_file[name] = value
            applied.append(name)
    return applied


def write_env_file(path: Path, values: dict[str, str]) -> None:
    """Set these variables in an env file, created or rewritten whole with mode 0600; its other
    lines (comments, other variables) are kept, an existing line for a name is replaced."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        lines = ["# Secrets for Switchboard: NAME=value lines, read by the daemon (config.toml's",
                 "# [secrets] env_file) and by systemd's EnvironmentFile=. Keep it mode 0600."]
    pending = dict(values)
    kept = []
    for line in lines:
        match = _LINE.match(line.strip())
        if match and match.group(1) in values:
            if match.group(1) in pending:
                kept.append(f"{match.group(1)}={pending.pop(match.group(1))}")
            continue
        kept.append(line)
    kept += [f"{name}={value}" for name, value in pending.items()]
    partial = path.with_name(f".{path.name}.partial")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w",
                       encoding="utf-8") as out:
            os.fchmod(out.fileno(), 0o600)  # a partial file left behind may have had another mode
            out.write("\n".join(kept) + "\n")
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
