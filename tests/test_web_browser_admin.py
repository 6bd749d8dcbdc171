"""The console's admin pages in a real browser (headless Chromium, as in `test_web_browser`):
usage, pairing, jobs, notes, config, the live overview and a turn's replay, a screenshot of each in
the test's temporary folder for a reviewer to look at."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from bot.store import Store, UsageRecord
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.fake_channel import FakeChannel
from tests.harness import say
from tests.test_web import PASSWORD, console
from tests.test_web_browser import chromium


def admin_pages(url: str, session_key: str, shots: Path, on_overview: Callable[[], None]) -> dict[str, Any]:
    """Log in and open each admin page: usage (its chart's bars counted), pairing (a code approved),
    jobs (a job run now), notes, config, the overview updated live (`on_overview` changes what it
    shows), a turn's replay; a screenshot of each. What the pages showed, and the browser's console."""
    browser = chromium()
    try:
        wait = WebDriverWait(browser, 30)
        browser.get(f"{url}/login")
        browser.find_element(By.NAME, "name").send_keys("ada")
        browser.find_element(By.NAME, "password").send_keys(PASSWORD)
        browser.find_element(By.CSS_SELECTOR, "form.login button").click()
        wait.until(expected_conditions.title_contains("Overview"))
        seen: dict[str, Any] = {}

        def shot(name: str) -> str:
            browser.save_screenshot(str(shots / f"{name}.png"))
            return browser.find_element(By.TAG_NAME, "main").text

        browser.get(f"{url}/usage?days=7")
        seen["day_bars"] = [bar.get_attribute("data-label") for bar in
                            browser.find_elements(By.CSS_SELECTOR, "#by-day svg rect.bar")]
        seen["usage"] = shot("usage")
        browser.get(f"{url}/pairing")
        shot("pairing")
        browser.find_element(By.CSS_SELECTOR, 'tr[data-user="fake:666"] button[value="approve"]').click()
        wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "p.notice")))
        seen["pairing"] = shot("pairing-approved")
        browser.get(f"{url}/jobs")
        shot("jobs")
        browser.find_element(By.CSS_SELECTOR, 'tr[data-job="daily"] button').click()
        wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "p.notice")))
        seen["jobs"] = shot("jobs-run")
        browser.get(f"{url}/notes")
        seen["notes"] = shot("notes")
        browser.get(f"{url}/config")
        seen["config"] = shot("config")
        browser.get(f"{url}/")
        # The module swaps the live parts in when the stream's first event comes, and marks it.
        wait.until(lambda b: b.find_element(By.ID, "live").get_attribute("data-updated"))
        on_overview()
        wait.until(lambda b: "ValueError: bad update" in b.find_element(By.ID, "live").text)
        seen["overview"] = shot("overview-live")
        browser.get(f"{url}/sessions/{session_key}/turns/-1")
        browser.find_element(By.CSS_SELECTOR, "form.replay button").click()
        wait.until(expected_conditions.title_contains("Replay"))
        seen["replay"] = shot("replay")
        seen["log"] = browser.get_log("browser")
        return seen
    finally:
        browser.quit()


async def test_a_browser_opens_each_admin_page(
    make_config: Any, api: AnthropicStandIn, db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chromium opens usage (one bar per day of the week), approves a pairing code, runs a job now,
    reads the notes and the redacted config, watches the overview list a quarantined update as it
    happens (the live module under the CSP), and replays a turn; no console errors, a screenshot each."""
    monkeypatch.setattr("bot.web.live.LIVE_EVERY", 0.2)
    now = time.time()
    async with Store.open(db) as store:
        for back in (1, 3):
            await store.record_usage(UsageRecord("agent:main:telegram:direct:42", "42", "reply", "test-model",
                                                 500, 20, created_at=now - back * 86400))
        await store.request_pairing("fake", "666", "Mallory", now=now, ttl=3600, notice_interval=3600)
        await store.add_note("telegram", "42", "prefers tea", session_key=None, max_notes=10)
    channel = FakeChannel("telegram")
    job = {"id": "daily", "cron": "0 9 * * *", "prompt": "Brief me.",
           "deliver_to": "agent:main:telegram:direct:42"}

    def configured(data: dict[str, Any]) -> Any:
        return make_config({**data, "schedules": [job]})

    async with console(configured, api, channel, db) as (daemon, url):
        await say(daemon, channel, "hello from the browser test")
        loop = asyncio.get_running_loop()

        def quarantine() -> None:
            kept = daemon.quarantine("telegram", "9", '{"update_id": 9}', "ValueError: bad update")
            asyncio.run_coroutine_threadsafe(kept, loop).result(30)

        seen = await asyncio.to_thread(admin_pages, url, str(channel.key()), tmp_path, quarantine)
    today = datetime.now(UTC).date()
    assert seen["day_bars"] == [(today - timedelta(days=n)).isoformat() for n in range(6, -1, -1)]
    assert "Approved fake:666" in seen["pairing"]
    assert "Requested run #" in seen["jobs"]
    assert "prefers tea" in seen["notes"]
    assert "ANTHROPIC_API_KEY" in seen["config"]
    assert "ValueError: bad update" in seen["overview"]
    assert "match" in seen["replay"]
    assert [entry for entry in seen["log"] if entry.get("level") == "SEVERE"] == []
    for name in ("usage", "pairing", "pairing-approved", "jobs", "jobs-run", "notes", "config",
                 "overview-live", "replay"):
        assert (tmp_path / f"{name}.png").read_bytes().startswith(b"\x89PNG")
