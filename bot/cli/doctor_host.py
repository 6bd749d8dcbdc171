"""`doctor`'s checks of this machine's side: the database (writable, migrations, integrity), MCP
servers started and their tools listed, the semantic weights, the systemd unit, and the clock
against a server's `Date`.

The database is only read, plus one write transaction rolled back: doctor never migrates a file
a running (perhaps older) daemon is using.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sqlite3
import time
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING

from bot.cli.finding import Finding, failed, listed, passed, plural, skipped

if TYPE_CHECKING:
    from bot.config import Config, McpServerConfig

UNIT = "switchboard.service"
# Beyond this the clock is wrong enough to fire jobs and reminders visibly late or early.
MAX_SKEW = 30.0
_AS_OWNER = "run doctor as the daemon's user (e.g. `sudo -u switchboard switchboard doctor --config …`)"


async def check_database(config: Config, *, daemon_running: bool) -> Finding:
    if config.database.url is not None:
        return await _postgres(config, daemon_running)
    return await asyncio.to_thread(_sqlite, config.database_path(), daemon_running)


def _sqlite(path: Path, daemon_running: bool) -> Finding:
    label = "database"
    if not path.exists():
        folder = next(parent for parent in path.parents if parent.exists())
        if os.access(folder, os.W_OK | os.X_OK):
            return passed(label, f"none yet at {path}; the first start creates it")
        return failed(label, f"none yet at {path}, and {folder} is not writable for this user",
                      f"{_AS_OWNER}, or set database.path to a writable place")
    try:  # mode=rw: a file that vanished is not created again here
        conn = sqlite3.connect(f"{path.as_uri()}?mode=rw", uri=True, timeout=5.0, isolation_level=None)
    except sqlite3.Error as exc:
        return failed(label, f"cannot open {path} for writing ({exc})", _AS_OWNER)
    with contextlib.closing(conn):
        try:
            version = _schema_version(conn)
            problems = [str(row[0]) for row in conn.execute("PRAGMA quick_check") if row[0] != "ok"]
            conn.execute("BEGIN IMMEDIATE")  # takes the write lock, as a write would
            conn.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc) or "read-only" in str(exc):
                return failed(label, f"{path} is not writable ({exc})", _AS_OWNER)
            if "locked" in str(exc) or "busy" in str(exc):
                return failed(label, f"{path} stayed locked for 5 s ({exc})",
                              "find the process holding it (`fuser` on the file) and stop it")
            return _damaged(path, str(exc))
        except sqlite3.DatabaseError as exc:
            return _damaged(path, str(exc))
    if problems:
        return _damaged(path, "; ".join(problems[:3]))
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        return failed(label, f"{path} is readable by others on this machine (mode {mode:04o})",
                      f"chmod 600 {path}")
    return _schema(label, f"{path}: writable, quick_check ok", version, daemon_running)


def _schema_version(conn: sqlite3.Connection) -> int:
    try:
        row = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return 0
        raise
    return int(row[0]) if row and row[0] is not None else 0


def _damaged(path: Path, detail: str) -> Finding:
    return failed("database", f"{path} is damaged ({detail})",
                  "stop the daemon, move the file aside and restore the newest backup "
                  "(`switchboard db backup` makes them), or start afresh")


def _schema(label: str, detail: str, version: int, daemon_running: bool) -> Finding:
    from bot.store.schema import migrations

    current = len(migrations("sqlite"))  # the same numbers on PostgreSQL
    if version > current:
        return failed(label, f"{detail}; schema {version} is newer than this Switchboard's ({current})",
                      "upgrade Switchboard: this version refuses to open it")
    if version < current and daemon_running:
        return failed(label, f"{detail}; schema {version} of {current}: the running daemon is older "
                             "than this Switchboard",
                      "restart the daemon (it applies the migrations as it starts)")
    if version < current:
        return passed(label, f"{detail}; schema {version} of {current} (the next start applies "
                             f"{plural(current - version, 'migration')})")
    return passed(label, f"{detail}; schema {version} (current)")


async def _postgres(config: Config, daemon_running: bool) -> Finding:
    import psycopg

    url = config.database.url or ""
    password = config.database.password()
    try:
        if password:
            conn = await psycopg.AsyncConnection.connect(url, connect_timeout=10, autocommit=True,
                                                         password=password)
        else:
            conn = await psycopg.AsyncConnection.connect(url, connect_timeout=10, autocommit=True)
        async with conn:
            found = await (await conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL, "
                                              "current_setting('transaction_read_only')")).fetchone()
            exists, read_only = (bool(found[0]), found[1]) if found else (False, "off")
            version = 0
            if exists:
                row = await (await conn.execute("SELECT MAX(version) FROM schema_migrations")).fetchone()
                version = int(row[0]) if row and row[0] is not None else 0
    except psycopg.Error as exc:
        return failed("database", f"cannot open {url} ({' '.join(str(exc).split())})",
                      "check database.url, the password (database.password_env or ~/.pgpass) and "
                      "that the server runs")
    if read_only == "on":
        return failed("database", f"{url} is read-only (a standby?)", "point database.url at the primary")
    return _schema("database", f"{url}: answers, writable", version, daemon_running)


async def check_mcp(config: Config, server: McpServerConfig, timeout: float) -> Finding:
    """Start the server as the daemon would, wait for its tool list, stop it."""
    from bot.tools.mcp_server import McpServer

    label = f"mcp {server.name}"
    changed = asyncio.Event()
    # No restarts: the first failure is the answer.
    mcp = McpServer(server, resolve=config.resolve, on_change=changed.set, restart_delay=3600.0,
                    max_restart_delay=3600.0)
    mcp.start()
    try:
        async with asyncio.timeout(timeout):
            while mcp.state == "starting":
                await changed.wait()
                changed.clear()
        state, error, offered = mcp.state, mcp.error, [tool.remote_name for tool in mcp.tools]
    except TimeoutError:
        return failed(label, f"no tool list within {timeout:g} s",
                      "run its command by hand to see what it waits for")
    finally:
        await mcp.stop(timeout=5.0)
    if state != "running":
        return failed(label, f"does not start: {error or state}",
                      f"check its command ({server.command!r}), args and env; run it by hand to see")
    return _mcp_tools(label, server, offered)


def _mcp_tools(label: str, server: McpServerConfig, offered: list[str]) -> Finding:
    unknown = sorted(set(server.tools or ()) - set(offered))
    if unknown:
        return failed(label, f"starts, but does not list {', '.join(unknown)}",
                      "correct mcp_servers.tools (the server's own tool names)")
    tools = plural(len(offered), "tool") + (f": {listed(offered)}" if offered else "")
    return passed(label, f"starts; {tools}")


def check_semantic(config: Config) -> Finding:
    label = "semantic recall"
    setting = config.semantic.enabled
    if setting == "off":
        return skipped(label, 'off ([semantic] enabled = "off")')
    from bot.ranking.embedding import HOW_TO_INSTALL, model_files, unavailable_reason

    reason = unavailable_reason(config)
    files = model_files(config) if reason is None else None
    if files is not None:
        return passed(label, f"weights present ({files.archive or files.directory})")
    if setting == "on":
        return failed(label, f'enabled = "on", but {reason}', f"install them: {HOW_TO_INSTALL}")
    return skipped(label, f"off: {reason}", f"{HOW_TO_INSTALL} turns it on")


async def check_service() -> Finding:
    """The systemd unit: installed, enabled, running; skipped where systemd does not run."""
    systemctl = shutil.which("systemctl")
    if not _systemd_runs() or systemctl is None:
        return skipped("service", "systemd does not run on this machine (skipped)")
    process = await asyncio.create_subprocess_exec(
        systemctl, "show", UNIT, "--property=LoadState,ActiveState,SubState,UnitFileState,Result",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    out, _ = await process.communicate()
    return service_finding(dict(line.split("=", 1) for line in out.decode().splitlines() if "=" in line))


def _systemd_runs() -> bool:
    """sd_booted(3): systemd is the init system exactly when this directory exists."""
    return Path("/run/systemd/system").is_dir()


def service_finding(props: dict[str, str]) -> Finding:
    """What `systemctl show`'s properties of the unit say."""
    load, active = props.get("LoadState", ""), props.get("ActiveState", "")
    state = f"{active} ({props.get('SubState', '?')}), {props.get('UnitFileState') or 'not enabled'}"
    if load == "not-found":
        return skipped("service", f"{UNIT} is not installed (fine when you start switchboard yourself)",
                       "`sudo make install` installs it (docs/operations.md)")
    if load != "loaded":
        return failed("service", f"{UNIT} is {load}", f"`systemctl status {UNIT}` says why")
    if active == "failed":
        return failed("service", f"{UNIT} {state}, result {props.get('Result', '?')}",
                      "`journalctl -u switchboard -e` shows why; then `sudo systemctl restart switchboard`")
    if active == "active":
        return passed("service", f"{UNIT} {state}")
    return skipped("service", f"{UNIT} installed, {state}",
                   "`sudo systemctl enable --now switchboard` starts it")


async def check_clock(url: str, timeout: float) -> Finding:
    """This machine's clock against the `Date` header of a server the daemon talks to."""
    import aiohttp

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            sent = time.time()
            async with session.head(url, allow_redirects=False) as response:
                received = time.time()
                date = response.headers.get("Date")
    except (aiohttp.ClientError, TimeoutError) as exc:
        return skipped("clock", f"no answer from {url} to compare with ({type(exc).__name__})")
    if not date:
        return skipped("clock", f"{url} sent no Date to compare with")
    # Date counts whole seconds: the server's time was within the second after it.
    skew = (sent + received) / 2 - (parsedate_to_datetime(date).timestamp() + 0.5)
    if abs(skew) > MAX_SKEW:
        return failed("clock", f"{abs(skew):.0f} s {'ahead of' if skew > 0 else 'behind'} {url}",
                      "turn on time sync (`timedatectl set-ntp true`, or chrony/ntpd): jobs and reminders "
                      "fire at the wrong time")
    return passed("clock", f"within {max(1.0, abs(skew)):.0f} s of {url}")
