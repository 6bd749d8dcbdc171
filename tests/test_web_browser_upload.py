"""A picture sent from the web chat in Chromium: picked in the form's file input, posted by the
page's script, seen by the model as an image block, and shown in the history; a file over the
caps is refused in the page before anything is sent, the words kept in the box."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from bot.testing.anthropic_api import AnthropicStandIn
from tests.harness import reply_requests
from tests.test_media_discord import PNG, blocks
from tests.test_web import PASSWORD, free_port
from tests.test_web_browser import chromium
from tests.test_web_chat import chat_config, chat_daemon, with_accounts


def send_files(browser: webdriver.Chrome, url: str, picture: Path, big: Path, shots: Path) -> dict[str, Any]:
    """Log in, send a picture with a question (the reply comes), then try a file over the caps."""
    wait = WebDriverWait(browser, 30)
    browser.get(f"{url}/chat")
    wait.until(expected_conditions.title_contains("Log in"))
    browser.find_element(By.NAME, "name").send_keys("ada")
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "form.login button").click()
    wait.until(expected_conditions.title_contains("Chat"))
    browser.find_element(By.NAME, "file").send_keys(str(picture))
    browser.find_element(By.NAME, "text").send_keys("what is in my fridge?\n")
    wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "li.message.assistant[data-key] .text").text or None)
    sent = browser.find_element(By.CSS_SELECTOR, "li.message.user .text").text
    browser.save_screenshot(str(shots / "chat-upload.png"))
    browser.find_element(By.NAME, "file").send_keys(str(big))
    browser.find_element(By.NAME, "text").send_keys("and this?\n")
    refused = wait.until(lambda b: b.find_element(By.ID, "chat-status").text
                         if "over the" in b.find_element(By.ID, "chat-status").text else None)
    kept = browser.find_element(By.NAME, "text").get_attribute("value")
    browser.refresh()
    wait.until(expected_conditions.title_contains("Chat"))
    return {"sent": sent, "refused": refused, "kept": kept, "log": browser.get_log("browser"),
            "reloaded": browser.find_element(By.CSS_SELECTOR, "ol.chat").text}


async def test_a_picture_is_sent_from_the_browser_and_a_file_over_the_caps_is_refused_in_the_page(
    make_config: Any, api: AnthropicStandIn, db: Path, tmp_path: Path
) -> None:
    """The picture picked in the form reaches the model as an image block and shows as a photo in
    the page and after a reload; a file over every cap is refused before posting, the text kept."""
    await with_accounts(db, ada="admin")
    config = chat_config(make_config, api, free_port())
    caps = {"max_photo_bytes": 1000, "max_file_bytes": 1000, "max_text_bytes": 1000}
    config = config.model_copy(update={"media": config.media.model_copy(update=caps)})
    picture, big = tmp_path / "fridge.png", tmp_path / "big.txt"
    picture.write_bytes(PNG)
    big.write_bytes(b"notes\n" * 500)
    browser = await asyncio.to_thread(chromium)
    try:
        async with chat_daemon(config) as (_, url):
            seen = await asyncio.to_thread(send_files, browser, url, picture, big, tmp_path)
    finally:
        await asyncio.to_thread(browser.quit)
    (request,) = reply_requests(api)
    (image,) = blocks(request, "image")
    assert image["source"]["media_type"] == "image/png"
    assert seen["sent"] == "[photo]\nwhat is in my fridge?"
    assert seen["refused"] == "That file is 3 KB, over the 1 KB limit; nothing was sent."
    assert seen["kept"] == "and this?"
    assert "[photo]\nwhat is in my fridge?" in seen["reloaded"] and "and this?" not in seen["reloaded"]
    assert [entry for entry in seen["log"] if entry.get("level") == "SEVERE"] == []
    assert (tmp_path / "chat-upload.png").read_bytes().startswith(b"\x89PNG")
