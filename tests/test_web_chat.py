"""The web chat through a real socket: the daemon serves the chat page, aiohttp's client posts and
reads the event stream, the store is a real SQLite file, and replies come from the real daemon
against the Messages API stand-in."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from bot.config import Config
from bot.daemon.assembly import Daemon
from bot.daemon.supervisor import web_channel
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.store.records import delivery_key
from bot.testing.anthropic_api import AnthropicStandIn, Text
from bot.testing.fake_channel import FakeChannel
from bot.web.auth import hash_password
from channels.web.channel import WebChatChannel, access
from channels.web.hub import ChatHub
from tests.harness import API_KEY, MODEL, config_data, router_of, running
from tests.test_web import FORM_TOKEN, PASSWORD, browser, free_port

ANSWER = "Tides follow the moon. Its pull and the earth turning under it give two high tides a day."
NONCE = re.compile(r'name="nonce" value="([^"]+)"')
ADA_KEY = "agent:main:web:direct:ada"


def chat_config(make_config: Callable[[dict[str, Any]], Config], api: AnthropicStandIn, port: int,
                **web_chat: Any) -> Config:
    return make_config(config_data(api, web={"enabled": True, "listen": f"127.0.0.1:{port}"},
                                   channels={"web": {"enabled": True, **web_chat}}))


async def with_accounts(db: Path, **roles: str) -> None:
    """Accounts by name and role ("admin" or "chat"), all with PASSWORD."""
    async with Store.open(db) as store:
        for name, role in roles.items():
            assert await store.add_web_account(name, hash_password(PASSWORD), now=1.0,
                                               role="chat" if role == "chat" else "admin")


@asynccontextmanager
async def chat_daemon(config: Config) -> AsyncIterator[tuple[Daemon, str]]:
    """A daemon with the web chat (and a fake platform beside it); (the daemon, the console's URL)."""
    channels = [FakeChannel(), web_channel(config)]
    async with running(config, channels, AnthropicBrain(config.anthropic, API_KEY)) as daemon:
        yield daemon, f"http://{config.web.listen}"


async def log_in(client: aiohttp.ClientSession, url: str, name: str = "ada") -> None:
    async with client.get(f"{url}/login") as page:
        token = FORM_TOKEN.search(await page.text())
    assert token is not None
    async with client.post(f"{url}/login", allow_redirects=False,
                           data={"name": name, "password": PASSWORD, "csrf": token.group(1)}) as done:
        assert done.status == 303


async def chat_form(client: aiohttp.ClientSession, url: str) -> tuple[str, str, str]:
    """The chat page's HTML, its CSRF token and its message id for the next post."""
    async with client.get(f"{url}/chat") as page:
        assert page.status == 200
        html = await page.text()
    csrf, nonce = FORM_TOKEN.search(html), NONCE.search(html)
    assert csrf is not None and nonce is not None
    return html, csrf.group(1), nonce.group(1)


async def post(client: aiohttp.ClientSession, url: str, text: str) -> tuple[int, dict[str, Any]]:
    """Post a message as the page's script does; (status, the JSON answer)."""
    _, csrf, nonce = await chat_form(client, url)
    async with client.post(f"{url}/chat", data={"csrf": csrf, "nonce": nonce, "text": text},
                           headers={"Accept": "application/json"}) as response:
        return response.status, await response.json()


async def stored(db: Path, key: str = ADA_KEY) -> list[tuple[str, str]]:
    """The session's stored messages, (role, text), read through a connection of the test's own."""
    async with Store.open(db) as store:
        return [(m.role, m.text) for m in await store.history(key, 50)]


async def events(stream: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """Server-sent events as (kind, data), as a browser's EventSource parses them."""
    kind, data = "message", ""
    async for raw in stream.content:
        line = raw.decode().rstrip("\n")
        if not line:
            if data:
                yield kind, json.loads(data)
            kind, data = "message", ""
        elif line.startswith("event: "):
            kind = line[len("event: "):]
        elif line.startswith("data: "):
            data += line[len("data: "):]


async def test_a_posted_message_is_stored_before_it_is_answered_then_replied_through_the_outbox(
    make_config: Any, api: AnthropicStandIn, db: Path
) -> None:
    """The POST is answered once the message is in the store (read there at once by another
    connection), in the account's own session; the reply is stored, delivered through the outbox
    (nothing left in it) and shown on the chat page."""
    await with_accounts(db, ada="admin")
    config = chat_config(make_config, api, free_port())
    async with chat_daemon(config) as (daemon, url), browser() as client:
        await log_in(client, url)
        status, answer = await post(client, url, "why are there tides?")
        assert (status, answer) == (200, {"stored": True, "refusal": None, "shown": "why are there tides?",
                                      "notice": None})
        assert ("user", "why are there tides?") in await stored(db)
        await router_of(daemon).idle()
        html, _, _ = await chat_form(client, url)
    assert await stored(db) == [("user", "why are there tides?"), ("assistant", "re: why are there tides?")]
    async with Store.open(db) as store:
        assert await store.pending_deliveries() == []
        reply = (await store.history(ADA_KEY, 1))[0]
    assert f'data-key="{delivery_key(reply.id)}"' in html and "re: why are there tides?" in html


async def test_the_reply_streams_into_the_page_before_the_model_finishes(
    make_config: Any, api: AnthropicStandIn, db: Path
) -> None:
    """With the model held after its first words, the open stream already carries them as a
    preview while no reply is stored; once the model goes on, the stored reply follows, named by
    its delivery key, in the preview's place."""
    await with_accounts(db, ada="admin")
    hold = asyncio.Event()
    api.script(Text(ANSWER, parts=6, hold=hold), model=MODEL)
    config = chat_config(make_config, api, free_port())
    async with chat_daemon(config) as (daemon, url), browser() as client:
        await log_in(client, url)
        async with client.get(f"{url}/chat/events?after=0") as stream:
            assert stream.headers["Content-Type"].startswith("text/event-stream")
            seen = events(stream)
            assert (await post(client, url, "why are there tides?"))[0] == 200
            kind, data = await anext(seen)
            while kind != "preview":
                kind, data = await anext(seen)
            assert data["text"] and ANSWER.startswith(data["text"]) and data["text"] != ANSWER
            assert [role for role, _ in await stored(db)] == ["user"]  # the model is still writing
            hold.set()
            while kind != "reply":
                kind, data = await anext(seen)
        await router_of(daemon).idle()
    async with Store.open(db) as store:
        reply = (await store.history(ADA_KEY, 1))[0]
    assert (reply.role, reply.text) == ("assistant", ANSWER)
    assert data["text"] == ANSWER and data["key"] == delivery_key(reply.id)


async def test_the_history_survives_a_restart_and_a_late_stream_catches_up(
    make_config: Any, api: AnthropicStandIn, db: Path
) -> None:
    """After a daemon restart the same browser (its session is in the store) sees its chat as it
    was; a stream opened after a message the page already showed replays what came after it."""
    await with_accounts(db, ada="admin")
    config = chat_config(make_config, api, free_port())
    async with browser() as client:
        async with chat_daemon(config) as (daemon, url):
            await log_in(client, url)
            assert (await post(client, url, "remember the tides"))[0] == 200
            await router_of(daemon).idle()
        async with chat_daemon(config) as (daemon, url):
            html, _, _ = await chat_form(client, url)
            first = int(re.findall(r'data-id="(\d+)"', html)[0])
            async with client.get(f"{url}/chat/events?after={first}") as stream:
                kind, data = await anext(events(stream))
    assert "remember the tides" in html and "re: remember the tides" in html
    assert (kind, data["role"], data["text"]) == ("stored", "assistant", "re: remember the tides")


async def test_accounts_that_may_not_chat_are_refused_and_chat_only_accounts_see_only_the_chat(
    make_config: Any, api: AnthropicStandIn, db: Path
) -> None:
    """Under `dm_policy = "allowlist"` a chat-only account not listed is refused (403, nothing
    stored) while an admin chats; a chat-only account is sent from the admin pages to the chat
    and may not post elsewhere."""
    await with_accounts(db, ada="admin", bob="chat")
    config = chat_config(make_config, api, free_port(), dm_policy="allowlist")
    async with chat_daemon(config) as (daemon, url), browser() as bob, browser() as ada:
        await log_in(bob, url, "bob")
        status, answer = await post(bob, url, "let me in")
        assert status == 403 and answer["stored"] is False and "ask an admin" in answer["refusal"]
        async with bob.get(f"{url}/sessions", allow_redirects=False) as page:
            assert page.status == 303 and page.headers["Location"] == "/chat"
        _, csrf, _ = await chat_form(bob, url)
        async with bob.post(f"{url}/logout", data={"csrf": csrf}, allow_redirects=False) as out:
            assert out.status == 303
        await log_in(ada, url)
        assert (await post(ada, url, "hello"))[0] == 200
        await router_of(daemon).idle()
    assert await stored(db, "agent:main:web:direct:bob") == []
    assert await stored(db) == [("user", "hello"), ("assistant", "re: hello")]


async def test_a_chat_account_is_approved_by_its_pairing_code(
    make_config: Any, api: AnthropicStandIn, db: Path
) -> None:
    """Under `dm_policy = "pairing"` a chat-only account's first message is refused and the page
    shows its pairing code; once an admin approves the code it is told so and its next message is
    answered."""
    await with_accounts(db, bob="chat")
    config = chat_config(make_config, api, free_port(), dm_policy="pairing")
    async with chat_daemon(config) as (daemon, url), browser() as bob:
        await log_in(bob, url, "bob")
        assert (await post(bob, url, "let me in"))[0] == 403
        code = None
        for _ in range(600):
            html, _, _ = await chat_form(bob, url)
            if found := re.search(r"Your pairing code is (\w+)", html):
                code = found.group(1)
                break
            await asyncio.sleep(0.05)
        assert code is not None
        async with Store.open(db) as store:
            await store.decide_pairing(code, True, now=2.0)
        assert (await post(bob, url, "hello again"))[0] == 200
        await router_of(daemon).idle()
    assert await stored(db, "agent:main:web:direct:bob") == [("user", "hello again"),
                                                            ("assistant", "re: hello again")]


async def test_the_form_works_without_javascript(make_config: Any, api: AnthropicStandIn, db: Path) -> None:
    """A plain form post is answered with a redirect to the chat once stored; sent twice with the
    same message id it is stored once; the page shows the reply once it is written."""
    await with_accounts(db, ada="admin")
    config = chat_config(make_config, api, free_port())
    async with chat_daemon(config) as (daemon, url), browser() as client:
        await log_in(client, url)
        _, csrf, nonce = await chat_form(client, url)
        for _ in range(2):
            async with client.post(f"{url}/chat", data={"csrf": csrf, "nonce": nonce, "text": "plain form"},
                                   allow_redirects=False) as response:
                assert response.status == 303 and response.headers["Location"] == "/chat"
        await router_of(daemon).idle()
        html, _, _ = await chat_form(client, url)
        async with client.post(f"{url}/chat", data={"nonce": nonce, "text": "no token"}) as forged:
            assert forged.status == 403
    assert "re: plain form" in html
    assert await stored(db) == [("user", "plain form"), ("assistant", "re: plain form")]


def test_who_may_chat() -> None:
    """Admins always; chat-only accounts as the policy says, the pairing ledger asked under "pairing"."""
    from bot.config import WebChatConfig

    assert access(WebChatConfig(dm_policy="disabled"), "ada", "admin") == "yes"
    assert access(WebChatConfig(dm_policy="open"), "bob", "chat") == "yes"
    assert access(WebChatConfig(dm_policy="allowlist", allow_from=["bob"]), "bob", "chat") == "yes"
    assert access(WebChatConfig(dm_policy="allowlist"), "bob", "chat") == "no"
    assert access(WebChatConfig(dm_policy="pairing"), "bob", "chat") == "ask"
    assert access(WebChatConfig(dm_policy="disabled"), "bob", "chat") == "no"


async def test_the_hub_keeps_only_the_newest_preview_and_drops_a_page_that_falls_behind() -> None:
    """Previews waiting for a slow page collapse into the newest; a page past its queue's limit is
    told to reload instead of holding the channel up; other accounts see nothing."""
    hub = ChatHub()
    with hub.subscribe("ada") as page, hub.subscribe("bob") as other:
        for text in ("Ti", "Tides", "Tides follow"):
            hub.publish("ada", "preview", text=text)
        hub.publish("ada", "reply", text="Tides follow the moon.", key="sb1")
        first, second = await page.next(0.01), await page.next(0.01)
        assert first is not None and (first.kind, first.data["text"]) == ("preview", "Tides follow")
        assert second is not None and second.kind == "reply"
        assert await other.next(0.01) is None
        for n in range(300):
            hub.publish("ada", "notice", text=str(n))
        assert page.lagged and await page.next(0.01) is None
    assert hub.open_pages() == 0


def test_a_channel_is_built_for_the_routed_agent(make_config: Any, api: AnthropicStandIn) -> None:
    """The web chat's session is the account's DM with the agent `[channels.web] agent` names."""
    config = make_config(config_data(api, web={"enabled": True}, agents=[{"id": "helper"}],  # type: ignore[arg-type]
                                     channels={"web": {"enabled": True, "agent": "helper"}}))
    channel = web_channel(config)
    assert isinstance(channel, WebChatChannel)
    assert str(channel.session_key("ada")) == "agent:helper:web:direct:ada"


def test_web_user_add_chat_only_makes_an_account_for_the_chat_alone(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """`web user add NAME --chat-only` stores an account with the "chat" role, and `list` says so."""
    import io

    import pytest

    from bot.cli import main

    config = tmp_path / "config.toml"
    config.write_text(f'[database]\npath = "{tmp_path / "bot.db"}"\n', encoding="utf-8")
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    for args in (["web", "user", "add", "bob", "--chat-only"], ["web", "user", "list"]):
        with pytest.raises(SystemExit) as done:
            main([*args, "--config", str(config)])
        assert done.value.code == 0
    out = capsys.readouterr().out
    assert "chat-only account bob added" in out and re.search(r"^bob  added .* chat only$", out, re.M)

    async def role() -> str:
        async with Store.open(tmp_path / "bot.db") as store:
            return (await store.web_accounts())[0].role

    assert asyncio.run(role()) == "chat"
