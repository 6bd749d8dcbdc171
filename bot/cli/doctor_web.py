"""`doctor`'s checks of the browser console (`[web]`, only when enabled): its listen address free to
bind or served by this daemon, an admin account to log in with, https where the network is crossed,
`trust_forwarded` only behind a proxy, and the page's own static files in place.

The accounts are read as the database check reads it, without the store: doctor never migrates a
database a running (perhaps older) daemon is using.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import re
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from bot.cli.base import DEFAULT_CONFIG
from bot.cli.finding import Finding, failed, listed, passed, plural, skipped
from bot.config.fields import split_listen

if TYPE_CHECKING:
    from bot.config import Config

WEB_PACKAGE = Path(__file__).resolve().parents[1] / "web"
# What a page asks the console for: `{{ base }}/static/NAME` in a template.
_STATIC_REFERENCE = re.compile(r"/static/([A-Za-z0-9_.-]+)")
_PROXY_FIX = ('keep listen on 127.0.0.1 behind an HTTPS reverse proxy and set public_url = "https://…" '
              "(docs/web.md)")

Run = Callable[[], Awaitable[Finding]]


def web_checks(config: Config, daemon: dict[str, Any] | None) -> list[tuple[str, Run]]:
    """The console's checks, as (label, coroutine function); none when `[web]` is off."""
    if not config.web.enabled:
        return []

    async def now(finding: Finding) -> Finding:
        return finding

    found: list[tuple[str, Run]] = [
        ("web listen", lambda: check_listen(config, daemon_running=daemon is not None)),
        ("web accounts", lambda: check_accounts(config)),
        ("web public_url", lambda: now(public_url_finding(config))),
    ]
    if config.web.trust_forwarded:
        found.append(("web trust_forwarded", lambda: now(trust_forwarded_finding(config))))
    found.append(("web files", lambda: now(static_finding(WEB_PACKAGE))))
    return found


def on_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


async def check_listen(config: Config, *, daemon_running: bool) -> Finding:
    """Bind the address as the console does (and let it go); one in use is fine when the console
    answering there is ours and this config's daemon runs."""
    label, listen = "web listen", config.web.listen
    try:
        host, port = split_listen(listen)
    except ValueError as exc:
        return failed(label, f"{listen!r} is not an address ({exc})", "correct [web] listen")
    try:
        server = await asyncio.get_running_loop().create_server(asyncio.Protocol, host, port)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            fix = ("a port from 1024 up, or run as a user allowed to bind it" if exc.errno == errno.EACCES
                   else "an address of this machine (127.0.0.1 behind a proxy)")
            return failed(label, f"cannot listen on {listen} ({exc.strerror or exc})", f"[web] listen: {fix}")
    else:
        server.close()
        await server.wait_closed()
        return passed(label, f"{listen} is free (the daemon listens there once it starts)")
    ours = await _console_answers(host, port, config.web.base_path)
    if ours and daemon_running:
        return passed(label, f"{listen}: the running daemon serves the console there")
    if ours:
        return failed(label, f"another Switchboard serves a console on {listen} (this config's daemon "
                             "does not run)", "stop that one, or give this one another [web] listen")
    return failed(label, f"{listen} is in use by another program",
                  f"find it (`ss -ltnp 'sport = :{port}'`) and stop it, or set another [web] listen")


async def _console_answers(host: str, port: int, base: str) -> bool:
    """Whether what listens there is a Switchboard console: its login page with our own CSP."""
    import aiohttp

    from bot.web.guard import CSP

    target = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    if ":" in target:
        target = f"[{target}]"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as client, \
                client.get(f"http://{target}:{port}{base}/login", allow_redirects=False) as page:
            return page.headers.get("Content-Security-Policy") == CSP
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


async def check_accounts(config: Config) -> Finding:
    """At least one admin account, or nobody can log in (chat-only accounts see only the chat)."""
    label = "web accounts"
    try:
        if config.database.url is None:
            names = await asyncio.to_thread(_sqlite_admins, config.database_path())
        else:
            names = await _postgres_admins(config)
    except Exception as exc:  # the database line says what is wrong with it
        return skipped(label, f"cannot read them ({' '.join(str(exc).split())})", "see the database line")
    if names:
        return passed(label, f"{plural(len(names), 'admin account')}: {listed(names)}")
    where = "" if config.source == DEFAULT_CONFIG else f" --config {config.source}"
    return failed(label, "no admin account: nobody can log in to the console",
                  f"`switchboard web user add NAME{where}` (as the daemon's user; the password is "
                  "asked twice)")


def _sqlite_admins(path: Path) -> list[str]:
    if not path.exists():
        return []
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=5.0)
    with contextlib.closing(conn):
        try:
            rows = conn.execute("SELECT name FROM web_accounts WHERE role = 'admin' ORDER BY name").fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []  # a database from before the console
            if "no such column" not in str(exc):
                raise
            rows = conn.execute("SELECT name FROM web_accounts ORDER BY name").fetchall()  # all admins then
    return [str(row[0]) for row in rows]


async def _postgres_admins(config: Config) -> list[str]:
    import psycopg

    url, password = config.database.url or "", config.database.password()
    if password:
        conn = await psycopg.AsyncConnection.connect(url, connect_timeout=10, autocommit=True,
                                                     password=password)
    else:
        conn = await psycopg.AsyncConnection.connect(url, connect_timeout=10, autocommit=True)
    async with conn:
        try:
            cursor = await conn.execute("SELECT name FROM web_accounts WHERE role = 'admin' ORDER BY name")
        except psycopg.errors.UndefinedTable:
            return []
        except psycopg.errors.UndefinedColumn:
            cursor = await conn.execute("SELECT name FROM web_accounts ORDER BY name")
        return [str(row[0]) for row in await cursor.fetchall()]


def public_url_finding(config: Config) -> Finding:
    """https wherever the console is reached over a network; plain http only on loopback."""
    label, web = "web public_url", config.web
    host = split_listen(web.listen)[0]
    url = web.public_url or f"http://{web.listen}/"
    if web.secure:
        return passed(label, f"{url}: over HTTPS, the cookies Secure")
    url_host = urlsplit(url).hostname or ""
    if on_loopback(host) and on_loopback(url_host):
        return passed(label, f"{url}: on loopback only (an SSH tunnel or an HTTPS proxy for other machines)")
    why = (f"listens on {web.listen}, not loopback, without an https public_url" if not on_loopback(host)
           else f"{url} is not https")
    return skipped(label, f"{why}: passwords and session cookies would cross the network unencrypted",
                   _PROXY_FIX)


def trust_forwarded_finding(config: Config) -> Finding:
    """X-Forwarded-For is only to be believed when a proxy writes it and nobody else can reach us."""
    label, web = "web trust_forwarded", config.web
    host = split_listen(web.listen)[0]
    if on_loopback(host) and web.public_url is not None:
        return passed(label, "on: the login limit counts the address the proxy appends to X-Forwarded-For")
    why = (f"{web.listen} is reachable without the proxy" if not on_loopback(host)
           else "no public_url names a proxy")
    return skipped(label, f"on, but {why}: a client can write its own X-Forwarded-For and dodge the login "
                          "limit", "trust_forwarded = false unless an HTTPS proxy is in front; " + _PROXY_FIX)


def static_finding(package: Path) -> Finding:
    """Every file a page asks for (`/static/NAME` in its templates) is shipped, not empty."""
    label, templates, static = "web files", package / "templates", package / "static"
    pages = sorted(templates.glob("*.html"))
    if not pages:
        return failed(label, f"no page templates in {templates}", "reinstall Switchboard (`make install`)")
    wanted = sorted({name for page in pages
                     for name in _STATIC_REFERENCE.findall(page.read_text(encoding="utf-8"))})
    missing = [name for name in wanted if not (static / name).is_file() or not (static / name).stat().st_size]
    if missing:
        return failed(label, f"missing or empty in {static}: {listed(missing)}",
                      "reinstall Switchboard (`make install`); nothing is loaded from elsewhere")
    return passed(label, f"{plural(len(pages), 'template')} and the {plural(len(wanted), 'static file')} "
                         f"they load: {listed(wanted)}")
