"""What every command shares: the config file, logging, the database, the daemon's socket, and
times shown the same way everywhere."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.core.errors import BotError, ConfigError

if TYPE_CHECKING:
    from bot.config import Config
    from bot.store import Store


DEFAULT_CONFIG = "config.toml"
# Names the config file for commands run anywhere (`status` from another folder, scripts, the unit).
CONFIG_VARIABLE = "SWITCHBOARD_CONFIG"


def default_config() -> str:
    """The config file when --config is not given: $SWITCHBOARD_CONFIG, else ./config.toml."""
    return os.environ.get(CONFIG_VARIABLE) or DEFAULT_CONFIG


class UsageError(BotError):
    """The command was called wrongly (an argument argparse cannot check): exit 2, as argparse's."""


# `switchboard status` and `reload` exit 3 when no daemon runs, as `systemctl status` does for a
# stopped unit.
EXIT_NOT_RUNNING = 3


def load_config_file(args: argparse.Namespace) -> Config:
    from bot.config import load_config

    config = load_config(args.config) if Path(args.config).exists() else None
    if config is None:
        raise ConfigError(
            args.config, None,
            f"not found; create one with `switchboard init` (or `make init`) and set the "
            f"environment variables it lists, or name yours with --config or ${CONFIG_VARIABLE}",
        )
    return config


def setup_logging(config: Config, *, quiet: bool = False, console: bool = False) -> None:
    from bot.core.log import configure_logging, log_file

    secrets = [value for name in config.secret_env_names() if (value := env_value(name))]
    level = config.logging.level
    if console:  # the console has the terminal: log lines must not land in the conversation
        path = log_file(config.database_path())
        configure_logging(level, config.logging.format, secrets, path=path)
        print(f"Logging to {path}", file=sys.stderr)
        return
    if quiet and level == "INFO":  # the chat itself shows each turn; keep only warnings
        level = "WARNING"
    configure_logging(level, config.logging.format, secrets)


def env_value(name: str) -> str | None:
    return os.environ.get(name) or None


def open_store(config: Config) -> AbstractAsyncContextManager[Store]:
    """The configured store; an SQLite file must exist already (a command never creates one)."""
    from bot.store.opening import open_store as opening

    path = config.database_path()
    if config.database.url is None and not path.exists():
        raise BotError(f"no database at {path} (nothing has been stored yet)")
    return opening(config)


def on_database(config: Config, work: Any) -> Any:
    """Run an async database job; a damaged file becomes the one-line StoreError, not a traceback."""
    import sqlite3

    from bot.store import SqliteStore

    try:
        return asyncio.run(work())
    except sqlite3.DatabaseError as exc:
        raise SqliteStore.damaged(config.database_path(), str(exc)) from exc


def control_path(config: Config) -> Path:
    from bot.daemon.control import socket_path

    return socket_path(config.database_path())


def utc_time(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# -- operations: status, reload, database care (see docs/operations.md) ------------------------


def format_duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h" if days else f"{hours}h{minutes}m" if hours else f"{minutes}m{secs}s"
