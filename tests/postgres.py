"""A real PostgreSQL server for the tests: made by initdb in a temporary directory, reached over a
unix socket only, a fresh database per test, stopped when the test session ends.

Each pytest-xdist worker starts its own server (its own directory and port), so workers never share
a database. The server binaries are Debian's `postgresql` package (`.ci/run` installs it when
`initdb` is missing); without them the tests fail, saying so, rather than skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

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
        """A template database with the extensions a test database may need, copied per test."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {TEMPLATE} TEMPLATE template0")

    def create_database(self) -> str:
        """A new empty database; returns its url."""
        import psycopg

        self._count += 1
        name = f"test_{self._count}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        return self.url(name)

    def stop(self) -> None:
        try:
            if self.data.exists():
                self._run(server_binary("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-s",
                          "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

