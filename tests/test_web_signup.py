"""Self sign-up for the web chat, approved by pairing code: the daemon serves the pages on a real
socket, aiohttp's client signs up, the store is a real SQLite file, the approval comes from the
real `switchboard pairing approve` command, and the reply from the daemon against the Messages API
stand-in."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.web.auth import SIGNUP_LIMIT
from tests.harness import router_of
from tests.test_replay import _run_cli
from tests.test_web import FORM_TOKEN, PASSWORD, browser, free_port
from tests.test_web_chat import chat_config, chat_daemon, chat_form, post, stored, with_accounts

CODE = re.compile(r"Your pairing code is (\w+)")


async def signup_form(client: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    """The sign-up page's status and its form token ("" when there is no page)."""
    async with client.get(f"{url}/signup") as page:
        token = FORM_TOKEN.search(await page.text())
        return page.status, token.group(1) if token else ""


async def sign_up(client: aiohttp.ClientSession, url: str, name: str, password: str = PASSWORD,
                  again: str | None = None, *, token: str | None = None) -> aiohttp.ClientResponse:
    if token is None:
        status, token = await signup_form(client, url)
        assert status == 200
    response = await client.post(f"{url}/signup", allow_redirects=False, data={
        "name": name, "password": password, "again": password if again is None else again, "csrf": token})
    await response.read()
    return response


async def pairing_code(client: aiohttp.ClientSession, url: str) -> str:
    """The code the chat page shows once the core has sent it (a notice beside the sign-up)."""
    for _ in range(600):
        html, _, _ = await chat_form(client, url)
        if found := CODE.search(html):
            return found.group(1)
        await asyncio.sleep(0.05)
    raise AssertionError("no pairing code shown")


async def test_a_visitor_signs_up_and_chats_once_an_admin_approves_the_code(
    make_config: Any, api: AnthropicStandIn, db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under `dm_policy = "pairing"` the login page links the sign-up; a visitor makes a chat-only
    account and is logged in to the chat, which shows a pairing code; their message is refused
    until `switchboard pairing approve CODE` approves it, then answered. The account cannot open
    the admin pages, and its password is stored hashed."""
    config = chat_config(make_config, api, free_port(), dm_policy="pairing")
    config_file = tmp_path / "config.toml"
    config_file.write_text(f'[database]\npath = "{db}"\n', encoding="utf-8")
    async with chat_daemon(config) as (daemon, url), browser() as carol:
        async with carol.get(f"{url}/login") as login:
            assert 'href="/signup"' in await login.text()
        response = await sign_up(carol, url, "carol")
        assert response.status == 303 and response.headers["Location"] == "/chat"
        assert "switchboard_session" in response.cookies
        code = await pairing_code(carol, url)
        assert (await post(carol, url, "let me in"))[0] == 403
        async with carol.get(f"{url}/sessions", allow_redirects=False) as admin_page:
            assert admin_page.status == 303 and admin_page.headers["Location"] == "/chat"
        status, _, err = await asyncio.to_thread(
            _run_cli, ["pairing", "approve", code, "--config", str(config_file)])
        assert status == 0, err
        assert (await post(carol, url, "hello now"))[0] == 200
        await router_of(daemon).idle()
    assert await stored(db, "agent:main:web:direct:carol") == [("user", "hello now"),
                                                              ("assistant", "re: hello now")]
    async with Store.open(db) as store:
        (account,) = [a for a in await store.web_accounts() if a.name == "carol"]
        password_hash = await store.web_password_hash("carol")
    assert account.role == "chat"
    assert password_hash is not None and password_hash.startswith("$argon2id$")


async def test_sign_ups_are_checked_guarded_and_rate_limited(
    make_config: Any, api: AnthropicStandIn, db: Path
) -> None:
    """A sign-up without the form's token is refused (403); a taken name, a name the allowlist
    names, a name with a pairing on record (an approval outlives a removed account), a short or
    mistyped password are refused (400) without an account or a session; after the limit of tries
    from one address even a good one is refused (429 with Retry-After)."""
    await with_accounts(db, ada="admin")
    async with Store.open(db) as store:
        await store.decide_user("web", "gina", True, now=1.0)
    config = chat_config(make_config, api, free_port(), dm_policy="pairing", allow_from=["dave"])
    async with chat_daemon(config) as (_, url), browser() as visitor:
        async with visitor.post(f"{url}/signup", data={"name": "eve", "password": PASSWORD,
                                                       "again": PASSWORD}) as forged:
            assert forged.status == 403
        refused = [await sign_up(visitor, url, "ada"), await sign_up(visitor, url, "dave"),
                   await sign_up(visitor, url, "gina"), await sign_up(visitor, url, "erin", "short", "short"),
                   await sign_up(visitor, url, "erin", PASSWORD, PASSWORD + "!")]
        assert [r.status for r in refused] == [400] * 5
        assert not any("switchboard_session" in r.cookies for r in refused)
        for _ in range(SIGNUP_LIMIT - len(refused)):
            assert (await sign_up(visitor, url, "Bad Name")).status == 400
        limited = await sign_up(visitor, url, "frank")
        assert limited.status == 429 and int(limited.headers["Retry-After"]) > 0
    async with Store.open(db) as store:
        assert [a.name for a in await store.web_accounts()] == ["ada"]


@pytest.mark.parametrize("policy", ["allowlist", "disabled", "open"])
async def test_without_pairing_there_is_no_sign_up_page(
    make_config: Any, api: AnthropicStandIn, db: Path, policy: str
) -> None:
    """Under any other policy the sign-up page and its POST are 404 and the login page does not
    link it."""
    config = chat_config(make_config, api, free_port(), dm_policy=policy)
    async with chat_daemon(config) as (_, url), browser() as visitor:
        status, token = await signup_form(visitor, url)
        assert status == 404 and token == ""
        async with visitor.get(f"{url}/login") as login:
            html = await login.text()
            assert "/signup" not in html
        login_token = FORM_TOKEN.search(html)
        assert login_token is not None
        response = await sign_up(visitor, url, "carol", token=login_token.group(1))
        assert response.status == 404
    async with Store.open(db) as store:
        assert await store.web_accounts() == []
