"""A pairing code approved in a real browser (headless Chromium, as in `test_web_browser`) lets a
stranger on Telegram in: the daemon with the Telegram and Messages API stand-ins, the code read
from what Telegram was sent, the pairing page's own Approve button; a screenshot of the page
before and after in the test's temporary folder."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from bot.intake.access import APPROVED_REPLY
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.telegram_api import TelegramStandIn, private_chat, user
from tests.harness import config_data
from tests.test_pairing import code_in
from tests.test_telegram import settled, telegram_daemon, texts_to
from tests.test_web import PASSWORD, free_port, with_account
from tests.test_web_browser import chromium
from tests.test_web_browser_guard import log_in

MALLORY = user(666, "Mallory")
ROW = 'tr[data-user="telegram:666"]'
# The page's width, the pairing table's (what it shows and what it holds) and how far right the
# row's farthest part and its Approve button reach, in CSS pixels.
PHONE_LAYOUT = """
const table = document.querySelector('table.pairings'), row = document.querySelector(arguments[0]);
const right = (e) => Math.ceil(e.getBoundingClientRect().right);
return {viewport: window.innerWidth, page: document.documentElement.scrollWidth,
        table: [table.scrollWidth, table.clientWidth],
        row: Math.max(...[...row.querySelectorAll('td, td *')].map(right)),
        approve: right(row.querySelector('button[value="approve"]'))};
"""


def approve_in_the_browser(url: str, shots: Path) -> dict[str, Any]:
    """Log in, open the pairing page and read Mallory's row; approve it with the row's own button;
    what the page says then (the notice and the row), and the browser's console."""
    browser = chromium()
    try:
        wait = WebDriverWait(browser, 30)
        browser.get(f"{url}/login")
        log_in(browser, PASSWORD)
        browser.get(f"{url}/pairing")
        seen: dict[str, Any] = {"row": browser.find_element(By.CSS_SELECTOR, ROW).text,
                                "code": browser.find_element(By.CSS_SELECTOR, f"{ROW} code").text}
        browser.save_screenshot(str(shots / "pairing-telegram.png"))
        browser.set_window_size(375, 812)  # a small phone: the row read without scrolling sideways
        seen["phone"] = browser.execute_script(PHONE_LAYOUT, ROW)  # type: ignore[no-untyped-call]
        browser.save_screenshot(str(shots / "pairing-telegram-375px.png"))
        browser.find_element(By.CSS_SELECTOR, f'{ROW} button[value="approve"]').click()
        notice = wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "p.notice")))
        seen["notice"] = notice.text
        seen["row_after"] = browser.find_element(By.CSS_SELECTOR, ROW).text
        browser.save_screenshot(str(shots / "pairing-telegram-approved.png"))
        seen["log"] = browser.get_log("browser")  # type: ignore[no-untyped-call]  # selenium leaves it untyped
        return seen
    finally:
        browser.quit()


async def test_a_code_approved_in_the_browser_lets_the_telegram_stranger_in(
    make_config: Any, api: AnthropicStandIn, tg: TelegramStandIn, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under `dm_policy = "pairing"` a stranger's message gets a code on Telegram and nothing from
    the model; the pairing page lists that code with their name; its Approve button approves it
    (the page says so), Telegram tells them they are in, and their next message is answered."""
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)
    monkeypatch.setattr("bot.intake.pairing.WELCOME_EVERY", 0.05)
    port = free_port()
    section = {"enabled": True, "base_url": tg.base_url, "allow_from": [42], "dm_policy": "pairing"}
    config = make_config(config_data(api, channels={"telegram": section},
                                     web={"enabled": True, "listen": f"127.0.0.1:{port}"}))
    await with_account(config.database_path())
    async with telegram_daemon(config) as daemon:
        asked = tg.push_message(private_chat(MALLORY), MALLORY, "hello, may I?")
        await settled(tg, daemon, asked)
        (notice,) = texts_to(tg, 666)
        code = code_in(notice)
        asked_model = len(api.requests)
        seen = await asyncio.to_thread(approve_in_the_browser, f"http://127.0.0.1:{port}", tmp_path)
        await tg.wait_for(lambda: APPROVED_REPLY in texts_to(tg, 666))
        tg.push_message(private_chat(MALLORY), MALLORY, "thanks!")
        await tg.wait_for(lambda: "re: thanks!" in texts_to(tg, 666))
    assert asked_model == 0  # the stranger's first message never reached the model
    assert seen["code"] == code
    assert "telegram:666" in seen["row"] and "Mallory" in seen["row"] and "pending" in seen["row"]
    assert seen["notice"] == "Approved telegram:666: their next message is answered."
    assert "approved" in seen["row_after"] and code not in seen["row_after"]
    assert texts_to(tg, 666) == [notice, APPROVED_REPLY, "re: thanks!"]
    assert [entry for entry in seen["log"] if entry.get("level") == "SEVERE"] == []
    phone = seen["phone"]
    assert phone["viewport"] <= 375 and phone["page"] <= phone["viewport"], phone
    assert phone["table"][0] <= phone["table"][1], phone  # nothing hidden to scroll to
    assert phone["row"] <= phone["viewport"] and phone["approve"] <= phone["viewport"], phone
    for name in ("pairing-telegram", "pairing-telegram-375px", "pairing-telegram-approved"):
        assert (tmp_path / f"{name}.png").read_bytes().startswith(b"\x89PNG")
