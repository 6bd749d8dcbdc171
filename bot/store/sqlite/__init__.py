"""The SQLite store: `SqliteStore`, one file beside the daemon, and its numbered migrations."""

from __future__ import annotations

from bot.store.sqlite.store import SqliteStore

__all__ = ["SqliteStore"]
