"""A real PostgreSQL server for the tests: made by initdb in a temporary directory, reached over a
unix socket only, a fresh database per test, stopped when the test session ends.

Each pytest-xdist worker starts its own server (its own directory and port), so workers never share
a database. The server binaries are Debian's `postgresql` package (`.ci/run` installs it when
`initdb` is missing); without them the tests fail, saying so, rather than skip.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

INSTALL_HINT = (
    "PostgreSQL's server binaries (initdb, pg_ctl) are not on PATH: install Debian's `postgresql` "
    "package (`apt-get install -y postgresql`; `.ci/run` does it) and put its bin directory "
    "(/usr/lib/postgresql/<version>/bin) on PATH"
)
USER = "switchboard"
TEMPLATE = "switchboard_template"


def server_binary(name: str) -> str:
    """The path of a server program: on PATH, else in Debian's versioned directory."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name)
                      if p.parent.name.isdigit() else 0)
    for directory in reversed(versions):
        if (directory / name).exists():
            return str(directory / name)
    raise RuntimeError(INSTALL_HINT)


class PostgresServer:
    """One throwaway cluster: `start()`, `url(dbname)`, `create_database()`, `stop()`."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="switchboard-pg-"))
        self.data = self.root / "data"
        self.sockets = self.root / "sockets"
        # Only a unix socket in a directory of its own: the port just names the socket file.
        self.port = 5432
        self._as_postgres = os.geteuid() == 0  # initdb and the server refuse to run as root
        self._count = 0
        self._reusable: str | None = None
        self._tables: list[str] = []  # the template's, schema_migrations aside

    def _run(self, *argv: str) -> None:
        command = ["runuser", "-u", "postgres", "--", *argv] if self._as_postgres else list(argv)
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")

    def start(self) -> None:
        initdb, pg_ctl = server_binary("initdb"), server_binary("pg_ctl")
        self.sockets.mkdir()
        if self._as_postgres:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.sockets, "postgres")
        self._run(initdb, "-D", str(self.data), "-A", "trust", "-U", USER, "-E", "UTF8",
                  "--locale=C", "--no-sync")
        # No durability wanted from a throwaway server: fsync off makes CREATE DATABASE quick.
        options = (f"-c listen_addresses='' -k {self.sockets} -p {self.port} -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._run(pg_ctl, "-D", str(self.data), "-o", options, "-l", str(self.root / "server.log"),
                  "-w", "-s", "start")
        self._template()

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@/{database}?host={self.sockets}&port={self.port}"

    def _template(self) -> None:
        """A template database the store has migrated once: each test's database is a copy of it
        (a copy takes a fraction of the time the migrations take)."""
        import psycopg

        from bot.store.postgres import PostgresStore

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {TEMPLATE} TEMPLATE template0")

        async def migrate() -> None:
            async with PostgresStore.connect(self.url(TEMPLATE), state_path=self.root / "unused.db",
                                             label=TEMPLATE):
                pass

        # Its own thread and loop: the first test to ask may be running in an event loop already.
        with ThreadPoolExecutor(1) as thread:
            thread.submit(asyncio.run, migrate()).result()
        with psycopg.connect(self.url(TEMPLATE)) as conn:
            self._tables = _tables(conn)

    def create_database(self) -> str:
        """A new database, migrated; returns its url."""
        import psycopg

        self._count += 1
        name = f"test_{self._count}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        return self.url(name)

    def fresh_database(self) -> str:
        """A migrated database with no rows and every id counting from 1 again, as a new one
        would be: the previous test's database emptied (about 20 ms, where a copy of the
        template takes 10 times that), or a new copy when emptying it is not enough."""
        import psycopg

        if self._reusable is not None:
            try:
                with psycopg.connect(self._reusable, autocommit=True) as conn:
                    if _empty(conn, self._tables):
                        return self._reusable
            except psycopg.Error:
                pass
        self._reusable = self.create_database()
        return self._reusable

    def stop(self) -> None:
        try:
            if self.data.exists():
                self._run(server_binary("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-s",
                          "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _tables(conn: Any) -> list[str]:
    return sorted(row[0] for row in conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'schema_migrations'"))


def _empty(conn: Any, tables: list[str]) -> bool:
    """Delete every row but the schema history, restart the identities; False when the schema is
    not the template's (a test changed it) or another session still holds a lock."""
    from bot.store.schema import migrations

    with conn.transaction():
        conn.execute("SET LOCAL lock_timeout = '1s'")
        conn.execute("SET LOCAL session_replication_role = replica")  # no foreign keys, no triggers
        versions = conn.execute("SELECT COUNT(*), MAX(version) FROM schema_migrations").fetchone()
        if versions != (len(migrations("postgres")), len(migrations("postgres"))):
            return False
        if _tables(conn) != tables:
            return False
        for table in tables:
            conn.execute(f'DELETE FROM "{table}"')
        for (sequence,) in conn.execute(
                "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'").fetchall():
            conn.execute("SELECT setval(%s, 1, false)", (sequence,))
    return True



def database_toml(store: Any) -> str:
    """The `[database]` key naming the database `store` is on, for a config file a test writes."""
    from bot.store.postgres import PostgresStore

    return f'url = "{store.label}"' if isinstance(store, PostgresStore) else f'path = "{store.path}"'
