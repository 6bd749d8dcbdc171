"""The PostgreSQL store: `PostgresStore`, one database several daemons share, and its numbered
migrations. psycopg is imported only when a store is opened."""

from __future__ import annotations

from bot.store.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
