"""Logging: structlog for our lines and the libraries' (JSON off a terminal), with secrets redacted."""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, Processor

REDACTED = "[redacted]"
# Shapes of secrets that might reach a log line even when we don't know their value.
_SECRET_PATTERNS = [
    re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\b\d{6,12}:[A-Za-z0-9_\-]{30,}\b"),  # Telegram bot token
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}"),
    re.compile(r"/bot\d{6,12}:[A-Za-z0-9_\-]+"),  # token inside a Bot API URL
    re.compile(r"(?i)(?<=postgres://)[^@/\s:]*:[^@/\s]+(?=@)"),  # user:password in a database URL
    re.compile(r"(?i)(?<=postgresql://)[^@/\s:]*:[^@/\s]+(?=@)"),
    re.compile(r"(?i)(?<=password=)[^&\s]+"),  # password= in a conninfo string or URL query
]
# Whether any of them could match, in one search: most strings in a line hold none of their shapes.
_MAYBE_SECRET = re.compile("|".join(
    f"(?i:{p.pattern.removeprefix('(?i)')})" if p.pattern.startswith("(?i)") else f"(?:{p.pattern})"
    for p in _SECRET_PATTERNS
))
# httpx logs every request at INFO; the turn line already says what matters.
_QUIET_LIBRARIES = ("httpx", "httpx2", "httpcore", "aiosqlite")


class Redactor:
    """A processor that blanks known secret values and secret-shaped strings in every field."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets = sorted({s for s in secrets if len(s) >= 6}, key=len, reverse=True)
        # Whether a string holds a known secret or a secret's shape, in one search.
        self._maybe = re.compile("|".join([*map(re.escape, self._secrets), _MAYBE_SECRET.pattern]))
        # Strings found clean, as most of a line's recur (its event, logger, level, channel, model).
        self._clean: set[str] = set()

    def redact(self, text: str) -> str:
        if text in self._clean:
            return text
        if self._maybe.search(text) is None:  # most strings: nothing to replace below
            if len(text) <= _CLEAN_LENGTH:
                if len(self._clean) >= _CLEAN_STRINGS:
                    self._clean.clear()
                self._clean.add(text)
            return text
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        if _MAYBE_SECRET.search(text) is None:
            return text
        for pattern in _SECRET_PATTERNS:
            text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + REDACTED, text)
        return text

    def __call__(self, logger: Any, name: str, event_dict: EventDict) -> EventDict:
        redact = self.redact
        for key, value in event_dict.items():  # values replaced in place: the keys stay as they are
            kind = type(value)
            if kind is str:
                event_dict[key] = redact(value)
            elif kind not in _SCALARS and isinstance(value, _CONTAINERS):  # a str subclass too
                event_dict[key] = _walk(value, redact)
        return event_dict


# What a line's fields mostly are: nothing to redact in them, told apart by their exact type.
_SCALARS = frozenset((int, float, bool, type(None)))
_CONTAINERS = (str, dict, list, tuple)
_CLEAN_STRINGS, _CLEAN_LENGTH = 1024, 200  # how many clean strings are remembered, and how long

_last_error: dict[str, Any] | None = None


def last_error() -> dict[str, Any] | None:
    """The newest ERROR (or worse) line logged since logging was configured, for `switchboard status`."""
    return dict(_last_error) if _last_error is not None else None


def _remember_errors(logger: Any, name: str, event_dict: EventDict) -> EventDict:
    global _last_error
    if event_dict.get("level") in ("error", "critical", "exception"):
        _last_error = {key: event_dict[key] for key in ("event", "logger", "timestamp", "error")
                       if key in event_dict}
    return event_dict


def _walk(value: Any, redact: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _walk(item, redact) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_walk(item, redact) for item in value)
    return value


def configure_logging(
    level: str = "INFO",
    fmt: str = "auto",
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
    path: Path | None = None,
) -> None:
    """Route structlog and stdlib logging (telegram, discord, httpx, apscheduler) through one chain,
    to `path` (appended) when given, else to `stream` (stderr)."""
    out = stream or sys.stderr
    tty = path is None and out.isatty()
    handler: logging.StreamHandler[Any] = (
        logging.FileHandler(_private(path), encoding="utf-8") if path is not None
        else logging.StreamHandler(out)
    )
    use_json = fmt == "json" or (fmt == "auto" and not tty)
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        # The traceback becomes text before the redactor, in both formats: a secret in an exception
        # message (a token in a URL) is blanked there too, and the console never renders locals.
        structlog.processors.format_exc_info,
        Redactor(secrets),
        _remember_errors,  # after the redactor: status shows what the log shows
    ]
    renderer: Processor = (
        structlog.processors.JSONRenderer() if use_json
        else structlog.dev.ConsoleRenderer(colors=tty)
    )
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,  # drop lines below the level before any work
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        if isinstance(old, logging.FileHandler):
            old.close()
    root.addHandler(handler)
    root.setLevel(level)
    for name in _QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(level)))


def log_file(database: Path) -> Path:
    """Where the daemon logs while the console has the terminal: beside the database."""
    return database.with_name("switchboard.log")


def _private(path: Path) -> Path:
    # Logs hold conversation metadata: only the daemon's user may read them.
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    return path
