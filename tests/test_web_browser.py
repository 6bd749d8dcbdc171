"""The browser console in a real browser: headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by Selenium) against the daemon's own server; screenshots are kept in the
test's temporary folder for a reviewer to look at."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from tests.fakes import FakeChannel
from tests.harness import say
from tests.standins.anthropic_api import AnthropicStandIn
from tests.test_web import PASSWORD, console

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
    its turn explained; a screenshot of each page. What the pages showed, and the browser's console messages."""
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
