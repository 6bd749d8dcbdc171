"""The console sums the usage page's windows in the background as it starts, and a first view of a
warmed window, after more calls arrive from another connection, shows every call: the warmed sums
plus the new ones, equal to the stored rows summed here one by one."""

from __future__ import annotations

import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from structlog.testing import capture_logs

from bot.models.usage import window
from bot.store import Store, UsageRecord
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.fake_channel import FakeChannel
from tests.harness import wait_until
from tests.test_web import browser, console, log_in

ROW = re.compile(r'<tr><td class="key">([^<]+)</td><td class="num">(\d+)</td><td class="num">([\d,]+)</td>')


def calls(now: float, first: int) -> list[UsageRecord]:
    """Calls of three users over the last five days (today's first), input tokens told apart."""
    return [UsageRecord(f"agent:main:fake:direct:{user}", str(user), "reply", "test-model",
                        first + 10 * n, 5, created_at=now - (n % 5) * 86_400 - 60)
            for n, user in enumerate([1, 2, 3, 1, 2, 1])]


def by_user(records: list[UsageRecord]) -> dict[str, tuple[int, int]]:
    summed: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for record in records:
        summed[f"fake:{record.user_id}"][0] += 1
        summed[f"fake:{record.user_id}"][1] += record.input_tokens
    return {user: (n, tokens) for user, (n, tokens) in summed.items()}


def user_table(html: str) -> dict[str, tuple[int, int]]:
    table = html[html.index('id="by-user"'):]
    return {key: (int(n), int(tokens.replace(",", ""))) for key, n, tokens in ROW.findall(table)}


async def test_a_warmed_window_shows_the_calls_stored_after_the_warm_up(
    make_config: Any, api: AnthropicStandIn, channel: FakeChannel, db: Path
) -> None:
    """The warm-up sums the offered windows once the console starts (logged); calls stored after
    it by another connection are in the first view of the last 7 days, which equals the stored
    rows summed one by one; a window not offered (`?days=3`) is right too."""
    now = time.time()
    before, after = calls(now, 1_000), calls(now, 5_000)
    async with Store.open(db) as store:
        for record in before:
            await store.record_usage(record)
    with capture_logs() as logs:
        async with console(make_config, api, channel, db) as (daemon, url), browser() as client:
            since, _ = window(now, ZoneInfo(daemon.config.agent.timezone), 3)
            await wait_until(lambda: any(entry["event"] == "usage page warmed" for entry in logs))
            async with Store.open(db) as other:
                for record in after:
                    await other.record_usage(record)
            await log_in(client, url)
            async with client.get(f"{url}/usage", params={"days": "7"}) as page:
                week = await page.text()
            async with client.get(f"{url}/usage", params={"days": "3"}) as page:
                three = await page.text()

    warmed = next(entry for entry in logs if entry["event"] == "usage page warmed")
    assert warmed["windows"] == 4
    assert user_table(week) == by_user(before + after)
    assert user_table(three) == by_user([r for r in before + after if r.created_at >= since])
