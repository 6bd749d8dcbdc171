"""The browser console through a real socket: the daemon serves it, aiohttp's client logs in, the
store is a real SQLite file; turns come from the real daemon against the Messages API stand-in."""

from __future__ import annotations

import io
import re
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from yarl import URL

from bot.cli import main
from bot.config import Config
from bot.daemon.assembly import Daemon
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.fake_channel import FakeChannel
from bot.web.auth import ACCOUNT_LIMIT, hash_password
from bot.web.guard import CSP
from tests.harness import config_data, daemon_with, say

PASSWORD = "correct horse battery"
FORM_TOKEN = re.compile(r'name="csrf" value="([^"]+)"')


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def with_account(db: Path, name: str = "ada") -> None:
    async with Store.open(db) as store:
        assert await store.add_web_account(name, hash_password(PASSWORD), now=1.0)


@asynccontextmanager
async def console(
    make_config: Callable[[dict[str, Any]], Config], api: AnthropicStandIn, channel: FakeChannel, db: Path,
    **web: Any,
) -> AsyncIterator[tuple[Daemon, str]]:
    """A daemon serving the console (an account "ada" made first); (the daemon, the console's URL)."""
    await with_account(db)
    port = free_port()
    config = make_config(config_data(api, web={"enabled": True, "listen": f"127.0.0.1:{port}", **web},
                                     **_conversation()))
    async with daemon_with(config, channel) as daemon:
        yield daemon, f"http://127.0.0.1:{port}{config.web.base_path}"


def _conversation() -> dict[str, Any]:
    return {"conversation": {"lookback_count": 6, "always_include_recent": 2}}


def browser() -> aiohttp.ClientSession:
    # unsafe: the jar keeps cookies of an IP address host (127.0.0.1), as a browser does.
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def log_in(client: aiohttp.ClientSession, url: str, password: str = PASSWORD) -> aiohttp.ClientResponse:
    async with client.get(f"{url}/login") as page:
        token = FORM_TOKEN.search(await page.text())
    assert token is not None
    response = await client.post(f"{url}/login", allow_redirects=False,
                                 data={"name": "ada", "password": password, "csrf": token.group(1)})
    await response.read()
    return response


async def test_a_login_opens_the_overview_with_strict_cookies_and_headers(
    make_config: Any, api: AnthropicStandIn, channel: FakeChannel, db: Path
) -> None:
    """The right password sets an HttpOnly, SameSite=Strict session cookie (not Secure over plain
    http) and leads to the overview, which shows the channel and its state under a strict CSP."""
    async with console(make_config, api, channel, db) as (_, url), browser() as client:
        response = await log_in(client, url)
        assert response.status == 303 and response.headers["Location"] == "/"
        cookie = response.cookies["switchboard_session"]
        assert cookie["httponly"] and cookie["samesite"] == "Strict" and not cookie["secure"]
        async with client.get(f"{url}/") as page:
            html = await page.text()
            assert page.status == 200
            assert page.headers["Content-Security-Policy"] == CSP
            assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP
            assert page.headers["X-Frame-Options"] == "DENY"
            assert page.headers["Cache-Control"] == "no-store"
        assert re.search(r'data-channel="fake">.*?<span class="state ok">connected</span>', html, re.S)
        assert re.findall(r"<script[^>]*>", html) == ['<script type="module" src="/static/overview.js">']
        assert "</script>" in html and not re.search(r"<script[^>]*>[^<]", html)  # no inline script


async def test_a_wrong_password_is_refused_and_failures_are_rate_limited(
    make_config: Any, api: AnthropicStandIn, channel: FakeChannel, db: Path
) -> None:
    """A wrong password gets 401 and no session; after the account's limit of failures even the
    right password is refused (429 with Retry-After) until they age out."""
    async with console(make_config, api, channel, db) as (_, url), browser() as client:
        for _ in range(ACCOUNT_LIMIT):
            response = await log_in(client, url, "not the password")
            assert response.status == 401
            assert "switchboard_session" not in response.cookies
        response = await log_in(client, url)
        assert response.status == 429 and int(response.headers["Retry-After"]) > 0
        assert "switchboard_session" not in response.cookies
        async with client.get(f"{url}/", allow_redirects=False) as page:
            assert page.status == 303


async def test_pages_without_a_session_lead_to_the_login(
    make_config: Any, api: AnthropicStandIn, channel: FakeChannel, db: Path
) -> None:
    """A page asked for without a session is redirected to the login, which leads back to it; a
    forged cookie is no session."""
    async with console(make_config, api, channel, db) as (_, url), browser() as client:
        async with client.get(f"{url}/sessions?agent=main", allow_redirects=False) as page:
            assert page.status == 303
            location = URL(page.headers["Location"])
            assert location.path == "/login" and location.query["next"] == "/sessions?agent=main"
            assert page.headers["Content-Security-Policy"] == CSP
        client.cookie_jar.update_cookies({"switchboard_session": "forged"})
        async with client.get(f"{url}/", allow_redirects=False) as page:
            assert page.status == 303
        async with client.get(f"{url}/login?next=%2Fsessions") as page:
            token = FORM_TOKEN.search(await page.text())
        assert token is not None
        async with client.post(f"{url}/login", allow_redirects=False, data={
                "name": "ada", "password": PASSWORD, "csrf": token.group(1), "next": "/sessions"}) as done:
            assert done.headers["Location"] == "/sessions"


async def test_a_post_without_its_csrf_token_is_refused(
    make_config: Any, api: AnthropicStandIn, channel: FakeChannel, db: Path
) -> None:
    """A logged-in browser's POST without the session's CSRF token (or with another) gets 403 and
    changes nothing; the login form without its token is refused too."""
    async with console(make_config, api, channel, db) as (_, url), browser() as client:
        async with client.post(f"{url}/login", data={"name": "ada", "password": PASSWORD}) as refused:
            assert refused.status == 403
        assert (await log_in(client, url)).status == 303
        for data in ({}, {"csrf": "guessed"}):
            async with client.post(f"{url}/logout", data=data, allow_redirects=False) as response:
                assert response.status == 403
                assert response.headers["Content-Security-Policy"] == CSP
        async with client.get(f"{url}/") as page:
            assert page.status == 200
            token = FORM_TOKEN.search(await page.text())
        assert token is not None
        async with client.post(f"{url}/logout", data={"csrf": token.group(1)}, allow_redirects=False) as out:
            assert out.status == 303
        async with client.get(f"{url}/", allow_redirects=False) as page:
            assert page.status == 303


async def test_message_text_is_escaped(
    make_config: Any, api: AnthropicStandIn, channel: FakeChannel, db: Path
) -> None:
    """A stored message holding markup is shown as text in the session's history, never as markup."""
    async with console(make_config, api, channel, db) as (daemon, url), browser() as client:
        await say(daemon, channel, '<script>alert("owned")</script><b>bold</b>')
        await log_in(client, url)
        async with client.get(f"{url}/sessions/{channel.key()}") as page:
            html = await page.text()
    assert "&lt;script&gt;alert(&#34;owned&#34;)&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt;" in html
    assert "<script>alert" not in html and "<b>bold</b>" not in html


async def test_a_turn_explained_shows_its_candidates(
    make_config: Any, api: AnthropicStandIn, channel: FakeChannel, db: Path
) -> None:
    """After real turns, the newest turn's page shows the candidate pool (the old message with its
    lexical rank and whether triage kept it), the context entries with their reasons and the model
    call; search finds the message; a turn that does not exist is a 404."""
    async with console(make_config, api, channel, db) as (daemon, url), browser() as client:
        await say(daemon, channel, "my gym locker combination is 4711")
        for n in range(5):
            await say(daemon, channel, f"small talk number {n}")
        await say(daemon, channel, "what was the gym locker combination?")
        await log_in(client, url)
        key = str(channel.key())
        async with client.get(f"{url}/sessions/{key}/turns/-1") as page:
            html = await page.text()
            assert page.status == 200
        async with client.get(f"{url}/sessions", params={"q": "locker combination"}) as page:
            found = await page.text()
        async with client.get(f"{url}/sessions/{key}/turns/99") as page:
            assert page.status == 404
    assert "Turn 7 of 7" in html
    candidates = html[html.index("<h2>Candidates ("):]
    first = candidates[candidates.index('<tr class="candidate'):]
    first = first[:first.index("</tr>")]
    assert "<td>#1</td>" in first and "my gym locker combination is 4711" in first
    assert re.search(r"<td>1 <span class=\"muted\">\d+\.\d{3}</span></td>", first)  # lexical rank, score
    assert "<td>no</td>" in first  # triage (the stand-in) kept nothing
    assert "test-model" in html and "what was the gym locker combination?" in html
    assert '<span class="reason">' in html
    assert "Messages with" in found and "my gym locker combination is 4711" in found


async def test_an_https_public_url_makes_cookies_secure_under_its_path(
    make_config: Any, api: AnthropicStandIn, channel: FakeChannel, db: Path
) -> None:
    """With an https public_url the console answers under its path, its cookies are Secure and
    scoped to that path, and HSTS is sent."""
    async with console(make_config, api, channel, db, public_url="https://bot.example.com/console",
                       trust_forwarded=True) as (_, url), browser() as client:
        assert url.endswith("/console")
        async with client.get(f"{url}/login") as page:
            assert page.status == 200
            assert page.headers["Strict-Transport-Security"].startswith("max-age=")
            login_cookie = page.cookies["switchboard_login"]
            assert login_cookie["secure"] and login_cookie["path"] == "/console"
            token = FORM_TOKEN.search(await page.text())
        assert token is not None
        async with client.post(f"{url}/login", allow_redirects=False, headers={"Cookie": (
                f"switchboard_login={token.group(1)}"), "X-Forwarded-For": "203.0.113.9"},
                data={"name": "ada", "password": PASSWORD, "csrf": token.group(1)}) as response:
            assert response.status == 303 and response.headers["Location"] == "/console/"
            cookie = response.cookies["switchboard_session"]
            assert cookie["secure"] and cookie["httponly"] and cookie["samesite"] == "Strict"
            assert cookie["path"] == "/console"


def test_web_user_commands_add_list_and_remove(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`web user add` reads the password from stdin and stores only its hash; `list` shows the
    account, `remove` deletes it; a taken name and a short password are refused."""
    import asyncio

    config = tmp_path / "config.toml"
    config.write_text(f'[database]\npath = "{tmp_path / "bot.db"}"\n', encoding="utf-8")

    def run(*args: str, stdin: str = "") -> int:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        with pytest.raises(SystemExit) as done:
            main([*args, "--config", str(config)])
        return int(str(done.value.code))

    assert run("web", "user", "add", "ada", stdin=PASSWORD + "\n") == 0
    assert "account ada added" in capsys.readouterr().out
    assert run("web", "user", "add", "ada", stdin=PASSWORD + "\n") == 1
    assert "exists already" in capsys.readouterr().err
    assert run("web", "user", "add", "bob", stdin="short\n") == 2
    assert run("web", "user", "add", "Bad Name", stdin=PASSWORD + "\n") == 2
    capsys.readouterr()
    assert run("web", "user", "list") == 0
    assert re.fullmatch(r"ada  added [\d-]+ [\d:]+ UTC  last login never\n", capsys.readouterr().out)

    async def stored() -> str | None:
        async with Store.open(tmp_path / "bot.db") as store:
            return await store.web_password_hash("ada")

    password_hash = asyncio.run(stored())
    assert password_hash is not None and password_hash.startswith("$argon2id$")
    assert PASSWORD not in password_hash
    assert run("web", "user", "remove", "ada") == 0
    assert run("web", "user", "remove", "ada") == 1
    assert asyncio.run(stored()) is None


async def test_the_store_keeps_accounts_sessions_and_failed_logins(store: Store) -> None:
    """On either backend: a name is taken once; a session is found by its cookie's hash until it
    expires or its account is removed; failures count per address and per account within the window,
    and a login forgets the account's."""
    assert await store.add_web_account("ada", "hash-1", now=10.0)
    assert not await store.add_web_account("ada", "hash-2", now=11.0)
    assert await store.web_password_hash("ada") == "hash-1"
    await store.record_login_failure("10.0.0.1", "ada", now=20.0, keep=100.0)
    await store.record_login_failure("10.0.0.1", "eve", now=30.0, keep=100.0)
    assert await store.login_failures("10.0.0.1", "ada", since=0.0) == (2, 1)
    assert await store.login_failures("10.0.0.1", "ada", since=25.0) == (1, 0)
    await store.open_web_session("cookie-hash", "ada", "csrf", now=40.0, expires_at=100.0)
    assert await store.login_failures("10.0.0.2", "ada", since=0.0) == (0, 0)
    found = await store.web_session("cookie-hash", now=50.0)
    assert found is not None and (found.account, found.csrf_token) == ("ada", "csrf")
    assert await store.web_session("cookie-hash", now=100.0) is None
    assert [a.name for a in await store.web_accounts()] == ["ada"]
    assert (await store.web_accounts())[0].last_login_at == 40.0
    assert await store.remove_web_account("ada")
    assert await store.web_session("cookie-hash", now=50.0) is None
    assert not await store.remove_web_account("ada")
