"""The console's door in a real browser (headless Chromium, as in `test_web_browser`): a refused
login and the login limit, a form posted without its CSRF token, and the overview following a
channel that goes down and comes back; a screenshot of each in the test's temporary folder."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.fake_channel import FakeChannel
from bot.testing.telegram_api import TelegramStandIn, private_chat, user
from bot.web.auth import ACCOUNT_LIMIT
from tests.harness import config_data
from tests.sql import execute
from tests.test_web import PASSWORD, console, free_port, with_account
from tests.test_web_browser import chromium

# Posts a form of the page (the fields changed or, when null, left out) with fetch; what came back.
POST_FORM = """
const [selector, fields, done] = arguments;
const form = new FormData(document.querySelector(selector));
for (const [name, value] of Object.entries(fields)) {
  if (value === null) { form.delete(name); } else { form.set(name, value); }
}
fetch(document.querySelector(selector).action, {method: "POST", body: form,
      redirect: "manual"})
  .then(async (r) => done({status: r.status, retry: r.headers.get("Retry-After"), text: await r.text()}))
  .catch((e) => done({error: String(e)}));
"""


def log_in(browser: webdriver.Chrome, password: str) -> str:
    """Fill the login form and send it; the page's alert (or the title when there is none)."""
    browser.find_element(By.NAME, "name").send_keys("ada")
    browser.find_element(By.NAME, "password").send_keys(password)
    # A mark on the old page's window: gone once the answer is a new document. (Chromium's
    # staleness check of an old element can fail with an inspector error mid-navigation.)
    browser.execute_script("window.leaving = true")
    browser.find_element(By.CSS_SELECTOR, "form.login button").click()
    wait = WebDriverWait(browser, 30, ignored_exceptions=(WebDriverException,))
    wait.until(lambda b: b.execute_script(
        "return window.leaving !== true && document.readyState === 'complete'"))
    alerts = browser.find_elements(By.CSS_SELECTOR, "p.error[role=alert]")
    return alerts[0].text if alerts else browser.title


def refused_then_limited(url: str, shots: Path) -> dict[str, Any]:
    """Wrong passwords up to the account's limit, each refused on the page; then the right one is
    refused too (the page says to wait; a fetch of the same form sees 429 and Retry-After)."""
    browser = chromium()
    try:
        browser.get(f"{url}/login")
        seen: dict[str, Any] = {"wrong": [log_in(browser, "not the password") for _ in range(ACCOUNT_LIMIT)]}
        browser.save_screenshot(str(shots / "login-refused.png"))
        seen["right"] = log_in(browser, PASSWORD)
        seen["title"] = browser.title
        browser.save_screenshot(str(shots / "login-limited.png"))
        browser.set_script_timeout(30)
        seen["fetched"] = browser.execute_async_script(POST_FORM, "form.login",
                                                       {"name": "ada", "password": PASSWORD})
        return seen
    finally:
        browser.quit()


def logs_in(url: str, shots: Path) -> str:
    browser = chromium()
    try:
        browser.get(f"{url}/login")
        title = log_in(browser, PASSWORD)
        browser.save_screenshot(str(shots / "login-after-wait.png"))
        return title
    finally:
        browser.quit()


async def test_a_wrong_password_is_refused_in_the_browser_and_the_limit_makes_it_wait(
    make_config: Any, api: AnthropicStandIn, channel: FakeChannel, db: Path, tmp_path: Path
) -> None:
    """Each wrong password shows the refusal; after the account's limit the right one shows the
    wait instead (429 with Retry-After), and logs in once the failures have aged out."""
    async with console(make_config, api, channel, db) as (_, url):
        seen = await asyncio.to_thread(refused_then_limited, url, tmp_path)
        async with Store.open(db) as store:  # the failures age out: as if the window had passed
            await execute(store, "UPDATE web_login_failures SET at = ?", (time.time() - 86400,))
        after = await asyncio.to_thread(logs_in, url, tmp_path)
    assert seen["wrong"] == ["Wrong name or password."] * ACCOUNT_LIMIT
    assert seen["right"].startswith("Too many failed logins: try again in")
    assert "Log in" in seen["title"]
    assert seen["fetched"]["status"] == 429 and int(seen["fetched"]["retry"]) > 0
    assert "Too many failed logins" in seen["fetched"]["text"]
    assert "Overview" in after
    for name in ("login-refused", "login-limited", "login-after-wait"):
        assert (tmp_path / f"{name}.png").read_bytes().startswith(b"\x89PNG")


def post_without_token(url: str, shots: Path, status: Callable[[], str]) -> dict[str, Any]:
    """On the pairing page, the approve form posted by fetch without its token, then as a form the
    page did not render (injected, no token); what `status` says of the request then; then the
    page's own button (with the token)."""
    browser = chromium()
    try:
        wait = WebDriverWait(browser, 30)
        browser.get(f"{url}/login")
        log_in(browser, PASSWORD)
        browser.get(f"{url}/pairing")
        form = 'tr[data-user="fake:666"] form'
        browser.set_script_timeout(30)
        seen: dict[str, Any] = {"fetched": browser.execute_async_script(
            POST_FORM, form, {"csrf": None, "decision": "approve"})}
        browser.execute_script("""
            const form = document.createElement("form");
            form.method = "post";
            form.action = document.querySelector(arguments[0]).action;
            for (const [name, value] of [["code", arguments[1]], ["decision", "approve"]]) {
              const input = document.createElement("input");
              input.type = "hidden"; input.name = name; input.value = value;
              form.append(input);
            }
            document.body.append(form);
            form.submit();
        """, form, browser.find_element(By.CSS_SELECTOR, f'{form} input[name="code"]').get_attribute("value"))
        wait.until(lambda b: "CSRF" in b.find_element(By.TAG_NAME, "body").text)
        seen["injected"] = browser.find_element(By.TAG_NAME, "body").text
        browser.save_screenshot(str(shots / "csrf-refused.png"))
        seen["after_refusals"] = status()
        browser.get(f"{url}/pairing")
        browser.find_element(By.CSS_SELECTOR, f'{form} button[value="approve"]').click()
        wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "p.notice")))
        browser.save_screenshot(str(shots / "csrf-with-token.png"))
        return seen
    finally:
        browser.quit()


async def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(
    make_config: Any, api: AnthropicStandIn, channel: FakeChannel, db: Path, tmp_path: Path
) -> None:
    """From a logged-in browser, approving a pairing code without the session's CSRF token (by
    fetch, and by a form the page never rendered) is refused with 403 and leaves the request
    pending; the page's own form, token and all, approves it."""
    async with Store.open(db) as store:
        await store.request_pairing("fake", "666", "Mallory", now=time.time(), ttl=3600, notice_interval=3600)

    async def pairing_status() -> str:
        async with Store.open(db) as store:
            (pairing,) = await store.pairings(provider="fake", user_id="666")
        return pairing.status

    async with console(make_config, api, channel, db) as (_, url):
        loop = asyncio.get_running_loop()
        seen = await asyncio.to_thread(
            post_without_token, url, tmp_path,
            lambda: asyncio.run_coroutine_threadsafe(pairing_status(), loop).result(30))
    assert seen["fetched"]["status"] == 403 and "CSRF token is missing" in seen["fetched"]["text"]
    assert "CSRF token is missing" in seen["injected"]
    assert seen["after_refusals"] == "pending"
    assert await pairing_status() == "approved"
    for name in ("csrf-refused", "csrf-with-token"):
        assert (tmp_path / f"{name}.png").read_bytes().startswith(b"\x89PNG")


def watch_the_channel(
    url: str, shots: Path, go_down: Callable[[], None], come_back: Callable[[], None]
) -> dict[str, Any]:
    """Log in, and with the overview open (no reload), the Telegram channel's state as the live
    feed shows it: connected, then down (`go_down`), then connected again (`come_back`)."""
    browser = chromium()
    try:
        wait = WebDriverWait(browser, 30)
        browser.get(f"{url}/login")
        log_in(browser, PASSWORD)
        wait.until(lambda b: b.find_element(By.ID, "live").get_attribute("data-updated"))
        row = '#live tr[data-channel="telegram"]'

        def shown(b: webdriver.Chrome) -> dict[str, str]:
            # In one script: the stream may swap the row between two separate reads.
            found: dict[str, str] = b.execute_script(
                "const row = document.querySelector(arguments[0]);"
                "return {text: row.innerText, state: row.querySelector('.state').innerText,"
                "        class: row.querySelector('.state').className};", row)
            return found

        seen: dict[str, Any] = {"before": shown(browser)}
        page = browser.find_element(By.TAG_NAME, "html")
        go_down()
        seen["down"] = wait.until(lambda b: (found := shown(b))["state"] != "connected" and found)
        browser.save_screenshot(str(shots / "overview-channel-down.png"))
        come_back()
        seen["back"] = wait.until(lambda b: (found := shown(b))["state"] == "connected" and found)
        browser.save_screenshot(str(shots / "overview-channel-back.png"))
        seen["same_page"] = page == browser.find_element(By.TAG_NAME, "html")
        seen["log"] = browser.get_log("browser")
        return seen
    finally:
        browser.quit()


async def test_the_open_overview_shows_a_channel_going_down_and_coming_back(
    make_config: Any, api: AnthropicStandIn, tg: TelegramStandIn, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the overview open, Telegram stops answering getUpdates: the page (not reloaded, the
    event stream swaps the parts) shows the channel reconnecting and why; when Telegram answers
    again it shows it connected."""
    from tests.test_telegram import telegram_daemon

    monkeypatch.setattr("bot.web.live.LIVE_EVERY", 0.2)
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)
    port = free_port()
    config = make_config(config_data(api, channels={"telegram": {"enabled": True, "base_url": tg.base_url,
                                                                 "allow_from": [42]}},
                                     web={"enabled": True, "listen": f"127.0.0.1:{port}"}))
    await with_account(config.database_path())
    loop = asyncio.get_running_loop()

    def on_loop(step: Callable[[], None]) -> Callable[[], None]:
        def call() -> None:
            loop.call_soon_threadsafe(step)
        return call

    def go_down() -> None:
        tg.fail_next("getUpdates", status=502, description="Bad Gateway", times=10**6)
        ada = user(42, "Ada")
        tg.push_message(private_chat(ada), ada, "hello")  # ends the long poll in flight

    async with telegram_daemon(config):
        seen = await asyncio.to_thread(watch_the_channel, f"http://127.0.0.1:{port}", tmp_path,
                                       on_loop(go_down), on_loop(lambda: tg.heal("getUpdates")))
    assert seen["before"]["state"] == "connected"
    assert seen["down"]["state"] == "reconnecting" and "warn" in seen["down"]["class"]
    assert "Bad Gateway" in seen["down"]["text"]
    assert "Bad Gateway" not in seen["back"]["text"] and "ok" in seen["back"]["class"]
    assert seen["same_page"]
    assert [entry for entry in seen["log"] if entry.get("level") == "SEVERE"] == []
    for name in ("overview-channel-down", "overview-channel-back"):
        assert (tmp_path / f"{name}.png").read_bytes().startswith(b"\x89PNG")
