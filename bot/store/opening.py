"""Opening the configured store: the SQLite file, or PostgreSQL when `[database] url` is set."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

from bot.store.base import Store
from bot.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from bot.config import Config


def open_store(config: Config) -> AbstractAsyncContextManager[Store]:
    """The store `config` names, opened (and migrated) on entry and closed on exit.

    PostgreSQL's driver is imported only here, when a url is configured. The daemon's local state
    (kept files, control socket, console log) stays in the folder the SQLite file would be in.
    """
    url = config.database.url
    if url is None:
        return SqliteStore.open(config.database_path())
    from bot.store.postgres import PostgresStore

    return PostgresStore.connect(url, state_path=config.database_path(), label=url,
                                 password=config.database.password(),
                                 max_connections=config.database.pool_size)
