"""The console's admin pages through a real socket: usage charts, pairing decisions, jobs and
reminders, notes, the config, the live overview and a turn's replay; a real SQLite store in tmp,
real turns from the daemon against the Messages API (and Telegram) stand-ins."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.config import Config
from bot.core.messages import ChatRef
from bot.daemon.assembly import Daemon
from bot.intake.access import APPROVED_REPLY
from bot.store import Store, UsageRecord
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.fake_channel import FakeChannel
from bot.testing.telegram_api import TelegramStandIn, private_chat, user
from tests.harness import config_data, say
from tests.test_pairing import code_in
from tests.test_telegram import settled, telegram_daemon, texts_to
from tests.test_web import FORM_TOKEN, browser, console, free_port, log_in, with_account

MALLORY = user(666, "Mallory")
BAR = re.compile(r'<rect class="bar" data-label="([^"]+)" data-value="([^"]+)"[^>]*height="([\d.]+)"')


async def form_token(client: aiohttp.ClientSession, url: str) -> str:
    async with client.get(url) as page:
        found = FORM_TOKEN.search(await page.text())
    assert found is not None
    return found.group(1)


async def record_usage_days(db: Path, days: list[int]) -> None:
    """One reply call per given day back from now (0: today), straight into the store."""
    async with Store.open(db) as store:
        now = time.time()
        for back in days:
            await store.record_usage(UsageRecord("agent:main:fake:direct:42", "42", "reply", "test-model",
                                                 1000 * (back + 1), 10, created_at=now - back * 86400))


async def test_the_usage_page_draws_one_bar_per_day_with_the_table_beside(
    make_config: Any, api: AnthropicStandIn, channel: FakeChannel, db: Path
) -> None:
    """Over the last 7 days the per-day chart has one bar per day, oldest first ending today, tall
    only on the days with calls (a real turn today, stored calls 2 and 4 days ago); the tables sum
    the same calls per model, agent and user; the page holds no script."""
    await record_usage_days(db, [2, 4])
    async with console(make_config, api, channel, db) as (daemon, url), browser() as client:
        await say(daemon, channel, "hello there")
        await log_in(client, url)
        async with client.get(f"{url}/usage", params={"days": "7"}) as page:
            assert page.status == 200
            html = await page.text()
        async with client.get(f"{url}/usage", params={"metric": "cost"}) as page:
            assert page.status == 200
    by_day = html[html.index('id="by-day"'):html.index('id="by-model"')]
    bars = BAR.findall(by_day)
    today = datetime.now(UTC).date()
    def day(back: int) -> str:
        return (today - timedelta(days=back)).isoformat()

    assert [label for label, _, _ in bars] == [day(n) for n in range(6, -1, -1)]
    assert {label for label, _, height in bars if float(height) > 0} == {day(0), day(2), day(4)}
    by_model = html[html.index('id="by-model"'):html.index('id="by-agent"')]
    assert [label for label, _, _ in BAR.findall(by_model)] == ["test-model"]
    assert '<td class="key">main</td>' in html[html.index('id="by-agent"'):]
    assert "fake:42" in html[html.index('id="by-user"'):]
    assert "<svg" in by_day and "<script" not in html


@pytest.fixture
def telegram_console(
    api: AnthropicStandIn, tg: TelegramStandIn, make_config: Any, monkeypatch: pytest.MonkeyPatch
) -> Callable[[], Config]:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)
    monkeypatch.setattr("bot.intake.pairing.WELCOME_EVERY", 0.05)
    port = free_port()

    def make() -> Config:
        section = {"enabled": True, "base_url": tg.base_url, "allow_from": [42], "dm_policy": "pairing"}
        return make_config(config_data(api, channels={"telegram": section},
                                       web={"enabled": True, "listen": f"127.0.0.1:{port}"}))

    return make


async def test_approving_a_pairing_code_in_the_console_lets_the_telegram_user_in(
    tg: TelegramStandIn, telegram_console: Callable[[], Config]
) -> None:
    """A stranger's code is listed on the pairing page; approving it there (a POST with the form's
    token) tells them they are in and answers their next message; a POST without the token is
    refused and decides nothing; an unknown code is named as such."""
    config = telegram_console()
    await with_account(config.database_path())
    url = f"http://{config.web.listen}"
    async with telegram_daemon(config) as daemon, browser() as client:
        asked = tg.push_message(private_chat(MALLORY), MALLORY, "hello, may I?")
        await settled(tg, daemon, asked)
        code = code_in(texts_to(tg, 666)[0])
        await log_in(client, url)
        async with client.get(f"{url}/pairing") as page:
            listed = await page.text()
        row = rf'data-user="telegram:666">.*?Mallory.*?pending.*?<code>{code}</code>'
        assert re.search(row, listed, re.S)
        async with client.post(f"{url}/pairing", data={"code": code, "decision": "approve"}) as refused:
            assert refused.status == 403
        token = FORM_TOKEN.search(listed)
        assert token is not None
        async with client.post(f"{url}/pairing", data={"csrf": token.group(1), "code": "NOSUCHCO",
                                                       "decision": "approve"}) as unknown:
            assert unknown.status == 400 and "no pending request has the code" in await unknown.text()
        async with client.post(f"{url}/pairing", allow_redirects=False, data={
                "csrf": token.group(1), "code": code.lower(), "decision": "approve"}) as done:
            assert done.status == 303
        async with client.get(f"{url}{done.headers['Location']}") as page:
            shown = await page.text()
        assert "Approved telegram:666: their next message is answered." in shown
        await tg.wait_for(lambda: APPROVED_REPLY in texts_to(tg, 666))
        thanks = tg.push_message(private_chat(MALLORY), MALLORY, "thanks!")
        await settled(tg, daemon, thanks)
    assert texts_to(tg, 666)[-1] == "re: thanks!"


@asynccontextmanager
async def telegram_named_console(
    make_config: Any, api: AnthropicStandIn, db: Path, **sections: Any
) -> AsyncIterator[tuple[Daemon, str, FakeChannel]]:
    """The console over a daemon whose fake channel is named telegram (jobs deliver to it)."""
    channel = FakeChannel("telegram")

    def with_sections(data: dict[str, Any]) -> Config:
        return make_config({**data, **sections})

    async with console(with_sections, api, channel, db) as (daemon, url):
        yield daemon, url, channel


async def test_jobs_run_now_and_a_reminder_is_cancelled(
    make_config: Any, api: AnthropicStandIn, db: Path
) -> None:
    """The jobs page lists a configured job and a pending reminder; "Run now" runs the job at once
    in this daemon and delivers it (the page then shows the run); "Cancel" cancels the reminder
    for its owner; both forms are refused without their token."""
    job = {"id": "daily", "cron": "0 9 * * *", "prompt": "Brief me.",
           "deliver_to": "agent:main:telegram:direct:42"}
    async with Store.open(db) as store:
        reminder = await store.add_reminder(
            session_key="agent:main:telegram:direct:42", chat=ChatRef("telegram", "42"), user_id="42",
            user_name="Ada", text="water the <plants>", at=time.time() + 3600, repeat=None, timezone="UTC",
            request_message_id=None, max_pending=10)
    async with telegram_named_console(make_config, api, db, schedules=[job]) as (daemon, url, channel), \
            browser() as client:
        await log_in(client, url)
        async with client.get(f"{url}/jobs") as page:
            listed = await page.text()
        assert 'data-job="daily"' in listed and "water the &lt;plants&gt;" in listed
        forms = (("/jobs/run", {"job": "daily"}), ("/reminders/cancel", {"reminder": str(reminder.id)}))
        for path, data in forms:
            async with client.post(f"{url}{path}", data=data) as refused:
                assert refused.status == 403
        token = await form_token(client, f"{url}/jobs")
        async with client.post(f"{url}/jobs/run", data={"csrf": token, "job": "daily"}) as ran:
            assert ran.status == 200
            assert re.search(r"Requested run #\d+ of daily", await ran.text())
        assert daemon.scheduler is not None
        await daemon.scheduler.wait_idle()
        async with client.post(f"{url}/reminders/cancel", data={"csrf": token,
                                                                 "reminder": str(reminder.id)}) as gone:
            assert f"Reminder #{reminder.id} cancelled." in await gone.text()
        async with Store.open(db) as store:
            runs = await store.schedule_runs("daily", 1)
            cancelled = await store.reminder_by_id(reminder.id)
    assert runs[0].status == "delivered" and runs[0].trigger == "manual"
    assert len(channel.sent) == 1
    assert cancelled is not None and cancelled.status == "cancelled"


async def test_notes_and_config_pages(
    make_config: Any, api: AnthropicStandIn, channel: FakeChannel, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notes page lists each user's notes as text; the config page names the secret variables
    without their values, shows check-config's result for the file, and its Reload button reloads
    the daemon (refused without the form's token)."""
    secret = "sk-ant-api03-not-a-real-key-but-long-enough"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    async with Store.open(db) as store:
        await store.add_note("fake", "42", "likes <b>tea</b>", session_key=None, max_notes=10)
    async with console(make_config, api, channel, db) as (daemon, url), browser() as client:
        # The file a reload reads (the test's config came from a dict): the database, the rest defaults.
        await asyncio.to_thread(Path(daemon.config.source).write_text, f'[database]\npath = "{db}"\n')
        await log_in(client, url)
        async with client.get(f"{url}/notes") as page:
            notes = await page.text()
        async with client.get(f"{url}/config") as page:
            shown = await page.text()
        async with client.post(f"{url}/config/reload", data={}) as refused:
            assert refused.status == 403
        token = FORM_TOKEN.search(shown)
        assert token is not None
        async with client.post(f"{url}/config/reload", data={"csrf": token.group(1)}) as reloaded:
            after = await reloaded.text()
        assert daemon.reloads and daemon.reloads[-1]["reloaded"]
    assert "fake:42" in notes and "likes &lt;b&gt;tea&lt;/b&gt;" in notes
    assert "<code>ANTHROPIC_API_KEY</code>" in shown and secret not in shown
    assert f"{daemon.config.source}: OK" in shown
    assert "<code>web.listen</code>" in shown
    assert "Reload applied" in after


async def test_the_overview_streams_its_changes_and_lists_quarantined_updates(
    make_config: Any, api: AnthropicStandIn, channel: FakeChannel, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The overview loads its live module; its event stream sends the current parts at once and
    again when they change: a quarantined update appears with its reason and raw form, escaped."""
    monkeypatch.setattr("bot.web.live.LIVE_EVERY", 0.05)
    async with console(make_config, api, channel, db) as (daemon, url), browser() as client:
        await log_in(client, url)
        async with client.get(f"{url}/") as page:
            html = await page.text()
        assert '<script type="module" src="/static/overview.js"></script>' in html
        async with client.get(f"{url}/static/overview.js") as script:
            assert script.status == 200 and "javascript" in script.content_type
        async with client.get(f"{url}/events") as stream:
            assert stream.content_type == "text/event-stream"
            first = await next_event(stream)
            assert 'data-channel="fake"' in first and "Quarantined updates: 0" in first
            raw = '{"update_id": 77, "text": "<i>odd</i>"}'
            await daemon.quarantine("fake", "77", raw, "ValueError: bad")
            second = await next_event(stream)
    assert "Quarantined updates: 1" in second and "ValueError: bad" in second
    assert "&lt;i&gt;odd&lt;/i&gt;" in second


async def next_event(stream: aiohttp.ClientResponse) -> str:
    """The data of the next `overview` event on a server-sent event stream."""
    name, data = "", []
    async with asyncio.timeout(30):
        while True:
            line = (await stream.content.readline()).decode().rstrip("\n")
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data.append(line.removeprefix("data: "))
            elif line == "" and name == "overview" and data:
                return "\n".join(data)
            elif line == "":
                name, data = "", []


async def test_a_turn_replayed_shows_a_match_and_its_entries(
    make_config: Any, api: AnthropicStandIn, channel: FakeChannel, db: Path
) -> None:
    """The turn page has a Replay button; the replay of a real turn rebuilds the same context
    (match, both hashes) and lists each entry with its reason on both sides; a missing turn is a 404."""
    async with console(make_config, api, channel, db) as (daemon, url), browser() as client:
        await say(daemon, channel, "first words")
        await say(daemon, channel, "second words")
        await log_in(client, url)
        key = str(channel.key())
        async with client.get(f"{url}/sessions/{key}/turns/-1") as page:
            assert f'action="/sessions/{key}/turns/2/replay"' in await page.text()
        async with client.get(f"{url}/sessions/{key}/turns/2/replay") as page:
            assert page.status == 200
            html = await page.text()
        async with client.get(f"{url}/sessions/{key}/turns/9/replay") as page:
            assert page.status == 404
    assert '<span class="state ok">match</span>' in html
    assert '<tr class="diff both">' in html and "first words" in html


def test_chart_geometry_scales_to_a_round_top_and_keeps_empty_days() -> None:
    """Columns: one per point in order, the tallest reaching the axis' round top in proportion, an
    empty day a zero-height column; bars by name start at the names' edge; nothing goes negative."""
    from bot.web.charts import COLUMN_HEIGHT, NAME_ROOM, bars, columns, compact, nice_top

    assert [nice_top(v) for v in (0, 0.3, 7, 12, 240, 900)] == [1.0, 0.5, 10.0, 20.0, 250.0, 1000.0]
    chart = columns("tokens per day", [("d1", 0.0), ("d2", 120.0), ("d3", -5.0)], compact)
    heights = [bar.height for bar in chart.bars]
    assert [bar.label for bar in chart.bars] == ["d1", "d2", "d3"]
    assert heights[0] == 0 == heights[2] and 0 < heights[1] < COLUMN_HEIGHT
    assert chart.bars[0].x < chart.bars[1].x < chart.bars[2].x
    assert [tick.text for tick in chart.ticks] == ["0", "100", "200"]
    named = bars("cost per model", [("a", 2.0), ("b", 1.0)], str)
    assert all(bar.x == NAME_ROOM for bar in named.bars) and named.bars[0].width == 2 * named.bars[1].width
