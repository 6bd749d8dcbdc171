"""The browser console in a real browser: headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by Selenium) against the daemon's own server; screenshots are kept in the
test's temporary folder for a reviewer to look at."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from bot.testing.anthropic_api import AnthropicStandIn, Text
from bot.testing.fake_channel import FakeChannel
from tests.harness import MODEL, say
from tests.test_web import PASSWORD, console, free_port

INSTALL = "apt-get install chromium chromium-driver (.ci/run does it when they are missing)"


def chromium() -> webdriver.Chrome:
    """Headless Chromium at a phone's width, its console messages kept (CSP reports among them)."""
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert binary and driver, f"no chromium or chromedriver on PATH: {INSTALL}"
    options = Options()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=412,915", "--no-first-run", "--disable-extensions"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


def log_in_and_look(url: str, session_key: str, shots: Path) -> dict[str, Any]:
    """Open the console, get sent to the login, log in, land on the overview, open the session and
    its turn explained; a screenshot of each page. What the pages showed, and the browser's console
    messages."""
    browser = chromium()
    try:
        wait = WebDriverWait(browser, 30)
        browser.get(f"{url}/")
        wait.until(expected_conditions.title_contains("Log in"))
        login_url = browser.current_url
        browser.save_screenshot(str(shots / "login.png"))
        browser.find_element(By.NAME, "name").send_keys("ada")
        browser.find_element(By.NAME, "password").send_keys(PASSWORD)
        browser.find_element(By.CSS_SELECTOR, "form.login button").click()
        wait.until(expected_conditions.title_contains("Overview"))
        overview = browser.find_element(By.TAG_NAME, "main").text
        channel_state = browser.find_element(By.CSS_SELECTOR, 'tr[data-channel="fake"] .state').text
        browser.save_screenshot(str(shots / "overview.png"))
        browser.get(f"{url}/sessions/{session_key}")
        wait.until(expected_conditions.title_contains(session_key))
        history = browser.find_element(By.CSS_SELECTOR, "ol.history").text
        browser.save_screenshot(str(shots / "session.png"))
        browser.get(f"{url}/sessions/{session_key}/turns/-1")
        wait.until(expected_conditions.title_contains("Turn 1"))
        turn = browser.find_element(By.TAG_NAME, "main").text
        browser.save_screenshot(str(shots / "turn.png"))
        return {"turn": turn, "login_url": login_url, "overview": overview, "channel_state": channel_state,
                "history": history, "log": browser.get_log("browser")}
    finally:
        browser.quit()


async def test_a_browser_logs_in_and_sees_the_overview(
    make_config: Any, api: AnthropicStandIn, channel: FakeChannel, db: Path, tmp_path: Path
) -> None:
    """Chromium is sent to the login, logs in with the account's password, and sees the overview
    (the fake channel connected) and a session's history with a message holding markup shown as
    text, and its turn explained; the browser reports no blocked content or failed load (the CSP
    allows what the pages use)."""
    async with console(make_config, api, channel, db) as (daemon, url):
        await say(daemon, channel, "<script>document.title = 'owned'</script> hello")
        # Selenium blocks: it runs in a thread while the daemon answers the browser on this loop.
        seen = await asyncio.to_thread(log_in_and_look, url, str(channel.key()), tmp_path)
    assert "/login?next=" in seen["login_url"]
    assert "Overview" in seen["overview"] and "Channels" in seen["overview"]
    assert seen["channel_state"] == "connected"
    assert "<script>document.title = 'owned'</script> hello" in seen["history"]
    assert [entry for entry in seen["log"] if entry.get("level") == "SEVERE"] == []
    assert "In the context" in seen["turn"] and "test-model" in seen["turn"]
    for name in ("login.png", "overview.png", "session.png", "turn.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")


def chat_and_watch(
    browser: webdriver.Chrome, url: str, release: Callable[[], None], shots: Path
) -> dict[str, Any]:
    """Log in, open the chat, send a message with the keyboard; while the model is held after its
    first words, the page shows them as a preview (screenshot); then the model goes on and the
    reply takes the preview's place; after a reload it is still there (screenshots)."""
    wait = WebDriverWait(browser, 30)
    browser.get(f"{url}/chat")
    wait.until(expected_conditions.title_contains("Log in"))
    browser.find_element(By.NAME, "name").send_keys("ada")
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "form.login button").click()
    wait.until(expected_conditions.title_contains("Chat"))
    browser.find_element(By.NAME, "text").send_keys("why are there tides?\n")
    preview = wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "li.message.preview .text").text or None)
    browser.save_screenshot(str(shots / "chat-streaming.png"))
    release()
    final = "li.message.assistant[data-key] .text"
    reply = wait.until(lambda b: b.find_element(By.CSS_SELECTOR, final).text or None)
    browser.save_screenshot(str(shots / "chat-replied.png"))
    browser.refresh()
    wait.until(expected_conditions.title_contains("Chat"))
    reloaded = browser.find_element(By.CSS_SELECTOR, "ol.chat").text
    return {"preview": preview, "reply": reply, "reloaded": reloaded, "log": browser.get_log("browser")}


def look_again(browser: webdriver.Chrome, url: str, shots: Path) -> str:
    """The chat page opened again (the same browser, after a restart)."""
    browser.get(f"{url}/chat")
    WebDriverWait(browser, 30).until(expected_conditions.title_contains("Chat"))
    browser.save_screenshot(str(shots / "chat-restarted.png"))
    text: str = browser.find_element(By.CSS_SELECTOR, "ol.chat").text
    return text


async def test_a_web_chat_streams_the_reply_and_keeps_it_across_a_reload_and_a_restart(
    make_config: Any, api: AnthropicStandIn, db: Path, tmp_path: Path
) -> None:
    """In Chromium, the reply's first words appear in the page while the model is still writing
    (it is held there), the finished reply replaces them, and it is still there after a reload and
    after the daemon restarts; the browser reports no blocked script or failed load."""
    from tests.test_web_chat import ANSWER, chat_config, chat_daemon, with_accounts

    await with_accounts(db, ada="admin")
    hold = asyncio.Event()
    api.script(Text(ANSWER, parts=6, hold=hold), model=MODEL)
    config = chat_config(make_config, api, free_port())
    loop = asyncio.get_running_loop()
    browser = await asyncio.to_thread(chromium)
    try:
        async with chat_daemon(config) as (_, url):
            seen = await asyncio.to_thread(chat_and_watch, browser, url,
                                           lambda: loop.call_soon_threadsafe(hold.set), tmp_path)
        async with chat_daemon(config) as (_, url):
            after_restart = await asyncio.to_thread(look_again, browser, url, tmp_path)
    finally:
        await asyncio.to_thread(browser.quit)
    assert seen["preview"] and ANSWER.startswith(seen["preview"]) and seen["preview"] != ANSWER
    assert seen["reply"] == ANSWER
    assert "why are there tides?" in seen["reloaded"] and ANSWER in seen["reloaded"]
    assert "why are there tides?" in after_restart and ANSWER in after_restart
    assert [entry for entry in seen["log"] if entry.get("level") == "SEVERE"] == []
    for name in ("chat-streaming.png", "chat-replied.png", "chat-restarted.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")
