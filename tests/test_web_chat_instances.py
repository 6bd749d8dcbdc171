"""The web chat with two daemons on one PostgreSQL store: a chat page open on one instance gets
the reply to a message another instance took and answered, without a reload (the chat stream's
looks at the store), and each message once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from bot.config import Config
from bot.daemon.assembly import Daemon
from bot.daemon.supervisor import web_channel
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.store.postgres import PostgresStore
from bot.store.records import delivery_key
from bot.testing.anthropic_api import AnthropicStandIn
from bot.web.auth import hash_password
from bot.web.chat import chat_row
from bot.web.chat_feed import ChatFeed
from channels.web.hub import Subscription
from tests.harness import API_KEY, config_data, router_of, running
from tests.sql import traced
from tests.test_web import PASSWORD, browser, free_port
from tests.test_web_browser import chromium
from tests.test_web_chat import ADA_KEY, events, log_in, post


@asynccontextmanager
async def two_instances(
    make_config: Callable[[dict[str, Any]], Config], api: AnthropicStandIn, pg_url: str
) -> AsyncIterator[list[tuple[Daemon, str]]]:
    """Two daemons on the one PostgreSQL database, each serving the console and the web chat on
    its own port; (the daemon, its console's URL) each."""
    async with AsyncExitStack() as stack:
        started = []
        for _ in range(2):
            port = free_port()
            config = make_config(config_data(api, database={"url": pg_url},
                                             web={"enabled": True, "listen": f"127.0.0.1:{port}"},
                                             channels={"web": {"enabled": True}}))
            channels = [web_channel(config)]
            daemon = await stack.enter_async_context(
                running(config, channels, AnthropicBrain(config.anthropic, API_KEY)))
            started.append((daemon, f"http://127.0.0.1:{port}"))
        yield started


async def test_a_reply_another_instance_stored_reaches_the_page_open_here_once(
    make_config: Any, api: AnthropicStandIn, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With Ada's chat open on the first instance (its stream), she writes from another tab that
    the second instance serves: the second one stores the message, runs the turn and stores the
    reply; the open stream on the first gets her message and the reply as stored events, each
    once and in order, though the first instance ran nothing."""
    monkeypatch.setattr("bot.web.chat_feed.CHAT_EVERY", 0.1)
    async with PostgresStore.connect(pg_url, state_path=tmp_path / "view.db", label=pg_url) as view:
        assert await view.add_web_account("ada", hash_password(PASSWORD), now=1.0)
    async with two_instances(make_config, api, pg_url) as [(_, here_url), (there, there_url)], \
            browser() as page, browser() as other_tab:
        await log_in(page, here_url)
        await log_in(other_tab, there_url)
        async with page.get(f"{here_url}/chat/events?after=0") as stream:
            seen = events(stream)
            assert (await post(other_tab, there_url, "are you there?"))[0] == 200
            got: list[tuple[str, dict[str, Any]]] = []
            while not got or got[-1][1].get("role") != "assistant":
                got.append(await asyncio.wait_for(anext(seen), 30))
        await router_of(there).idle()
    async with PostgresStore.connect(pg_url, state_path=tmp_path / "view.db", label=pg_url) as view:
        question, reply = await view.history(ADA_KEY, 10)
    assert [(kind, data["role"], data["text"]) for kind, data in got] == [
        ("stored", "user", "are you there?"), ("stored", "assistant", "re: are you there?")]
    assert got[0][1]["id"] == question.id and got[1][1]["key"] == delivery_key(reply.id)


async def test_messages_after_reads_the_given_sessions_above_the_id_oldest_first(store: Store) -> None:
    """The feed's one read: the messages of the sessions asked for with a greater id, oldest first,
    at most `limit`; other sessions' never; no sessions, nothing."""
    ada, bea, other = "agent:main:web:direct:ada", "agent:main:web:direct:bea", "agent:main:web:direct:cy"
    first = await store.append_reply(ada, "a1")
    await store.append_reply(other, "c1")
    await store.append_reply(bea, "b1")
    await store.append_reply(ada, "a2")
    await store.append_reply(bea, "b2")
    after = await store.messages_after([ada, bea], first.id, 10)
    assert [(m.session_key, m.text) for m in after] == [(bea, "b1"), (ada, "a2"), (bea, "b2")]
    assert [m.text for m in await store.messages_after([ada, bea], first.id, 2)] == ["b1", "a2"]
    assert await store.messages_after([], 0, 10) == []


def chat_in_chromium(url: str, shots: Path, from_the_other: Callable[[], None]) -> dict[str, Any]:
    """Log in on the first instance and open the chat; send a message (this instance answers it,
    through its own push); then `from_the_other` sends one through the second instance; once its
    reply shows (no reload), what the chat shows, message by message."""
    browser = chromium()
    try:
        wait = WebDriverWait(browser, 30)
        browser.get(f"{url}/chat")
        wait.until(expected_conditions.title_contains("Log in"))
        browser.find_element(By.NAME, "name").send_keys("ada")
        browser.find_element(By.NAME, "password").send_keys(PASSWORD)
        browser.find_element(By.CSS_SELECTOR, "form.login button").click()
        wait.until(expected_conditions.title_contains("Chat"))
        page = browser.find_element(By.TAG_NAME, "html")
        browser.find_element(By.NAME, "text").send_keys("asked here\n")
        final = "li.message.assistant[data-key] .text"
        wait.until(lambda b: "re: asked here" in [e.text for e in b.find_elements(By.CSS_SELECTOR, final)])
        from_the_other()
        wait.until(lambda b: "re: asked there" in [e.text for e in b.find_elements(By.CSS_SELECTOR, final)])
        browser.save_screenshot(str(shots / "chat-two-instances.png"))
        shown: list[str] = browser.execute_script(
            "return [...document.querySelectorAll('#chat li.message .text')].map((e) => e.innerText);")
        return {"shown": shown, "same_page": page == browser.find_element(By.TAG_NAME, "html"),
                "log": browser.get_log("browser")}
    finally:
        browser.quit()


async def test_in_a_browser_a_chat_shows_the_replies_of_both_instances_once_without_a_reload(
    make_config: Any, api: AnthropicStandIn, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chromium on the first instance: its own message is answered there (pushed, and found again
    by the look at the store: shown once); a message Ada sends through the second instance and
    its reply appear in the open page too; every message once, in order, no reload."""
    monkeypatch.setattr("bot.web.chat_feed.CHAT_EVERY", 0.2)
    async with PostgresStore.connect(pg_url, state_path=tmp_path / "view.db", label=pg_url) as view:
        assert await view.add_web_account("ada", hash_password(PASSWORD), now=1.0)
    async with two_instances(make_config, api, pg_url) as [(_, here_url), (_, there_url)], \
            browser() as other_tab:
        await log_in(other_tab, there_url)
        loop = asyncio.get_running_loop()

        def from_the_other() -> None:
            sent = asyncio.run_coroutine_threadsafe(post(other_tab, there_url, "asked there"), loop)
            assert sent.result(30)[0] == 200

        seen = await asyncio.to_thread(chat_in_chromium, here_url, tmp_path, from_the_other)
    assert seen["shown"] == ["asked here", "re: asked here", "asked there", "re: asked there"]
    assert seen["same_page"]
    assert [entry for entry in seen["log"] if entry.get("level") == "SEVERE"] == []
    assert (tmp_path / "chat-two-instances.png").read_bytes().startswith(b"\x89PNG")


async def test_one_look_reads_once_for_every_open_stream_and_hands_each_only_what_is_new_to_it(
    db: Path,
) -> None:
    """Three open streams on two chats: one look is one read; each stream gets its own chat's
    messages newer than it had, once (a second look hands out nothing); a closed stream gets none."""
    ada, bea = "agent:main:web:direct:ada", "agent:main:web:direct:bea"
    async with Store.open(db) as store:
        seen_before = await store.append_reply(ada, "already shown")
        feed = ChatFeed(store, chat_row)
        pages = [Subscription("ada"), Subscription("ada"), Subscription("bea")]
        with feed.watching(ada, seen_before.id, pages[0]), feed.watching(ada, 0, pages[1]), \
                feed.watching(bea, 0, pages[2]):
            await store.append_reply(bea, "for bea")
            await store.append_reply(ada, "for ada")
            async with traced(store) as statements:
                await feed.look()
            await feed.look()
        got = [await texts(page) for page in pages]
        with feed.watching(ada, 0, closed := Subscription("ada")):
            closed.close()
            await feed.look()
    assert len([s for s in statements if "FROM messages" in s]) == 1
    assert got == [["for ada"], ["already shown", "for ada"], ["for bea"]]
    assert closed.ended and await texts(closed) == []


async def texts(page: Subscription) -> list[str]:
    """The texts of the events waiting for a page."""
    found = []
    while (event := await page.next(0)) is not None:
        found.append(event.data["text"])
    return found
