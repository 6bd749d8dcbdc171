"""Scheduled briefings: one run end to end, records, restarts, failures, quiet runs and time."""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from bot.config import Config
from bot.core.errors import DeliveryError
from bot.core.messages import ChatRef, OutboundMessage
from bot.models.brain import AnthropicBrain, Brain
from bot.schedule.scheduler import Scheduler
from bot.schedule.triggers import crontab_trigger, delivery_chat, delivery_key, plan_runs
from bot.store import Instance, Store
from bot.testing.anthropic_api import AnthropicStandIn, Error, RecordedRequest, Text
from bot.testing.fake_channel import FakeChannel
from tests.harness import (
    API_KEY,
    MODEL,
    config_data,
    daemon_with,
    reply_requests,
    request_text,
    say,
    switchboard_cli,
)
from tests.sql import execute

MakeConfig = Callable[[dict[str, Any]], Config]
TARGET = "agent:main:telegram:direct:42"
# Monday 2025-03-31 09:00 in Berlin (CEST, UTC+2).
NINE = datetime(2025, 3, 31, 9, 0, tzinfo=ZoneInfo("Europe/Berlin")).timestamp()


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Sleeps:
    """Records the waits the scheduler asks for instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


class CrashingChannel(FakeChannel):
    """A channel whose send kills the process (as a crash between generate and deliver would)."""

    async def send(self, message: OutboundMessage, on_chunk: Any = None) -> list[str]:
        raise Crash


class Crash(BaseException):
    pass


class FlakyChannel(FakeChannel):
    """Fails its first sends with the given errors, then behaves."""

    def __init__(self, *errors: DeliveryError) -> None:
        super().__init__("telegram")
        self.errors = list(errors)
        self.attempts = 0

    async def send(self, message: OutboundMessage, on_chunk: Any = None) -> list[str]:
        self.attempts += 1
        if self.errors:
            raise self.errors.pop(0)
        return await super().send(message, on_chunk)


@pytest.fixture
async def api() -> AsyncIterator[AnthropicStandIn]:
    async with AnthropicStandIn() as standin:
        standin.default = lambda rec: Text("briefing text")
        yield standin


@pytest.fixture
def channel() -> FakeChannel:
    return FakeChannel("telegram")


def job(**overrides: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": "daily", "cron": "0 9 * * *", "timezone": "Europe/Berlin",
        "prompt": "Brief me.", "deliver_to": TARGET,
    }
    entry.update(overrides)
    return {key: value for key, value in entry.items() if value is not None}


def make(api: AnthropicStandIn, make_config: MakeConfig, *jobs: dict[str, Any], **scheduler: Any) -> Config:
    settings: dict[str, Any] = {"retry_delay": 1.0}
    settings.update(scheduler)
    return make_config(config_data(api, schedules=list(jobs) or [job()], scheduler=settings))


class Brains:
    """One SDK brain per test, closed at the end."""

    def __init__(self) -> None:
        self.made: list[AnthropicBrain] = []

    def __call__(self, config: Config) -> AnthropicBrain:
        brain = AnthropicBrain(config.anthropic, API_KEY)
        self.made.append(brain)
        return brain


_brains: list[Brains] = []


@pytest.fixture(autouse=True)
async def _close_brains() -> AsyncIterator[None]:
    brains = Brains()
    _brains.append(brains)
    yield
    _brains.remove(brains)
    for brain in brains.made:
        await brain.aclose()


def scheduler_for(
    config: Config, store: Store, channel: FakeChannel, clock: Clock, sleeps: Sleeps | None = None,
    brain: Brain | None = None,
) -> tuple[Scheduler, AnthropicBrain]:
    anthropic = _brains[-1](config)
    chosen: Brain = brain or anthropic
    scheduler = Scheduler(config, store, lambda model: chosen, {channel.provider: channel},
                          clock=clock, sleep=sleeps or Sleeps())
    return scheduler, anthropic


async def test_a_run_is_generated_stored_delivered_and_recorded(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store, channel: FakeChannel
) -> None:
    """A run calls the model once, stores the output as scheduled with its job id, sends it and records it."""
    config = make(api, make_config)
    scheduler, brain = scheduler_for(config, store, channel, Clock(NINE + 5))
    run = await scheduler.run_job(scheduler.jobs["daily"], NINE)
    await brain.aclose()

    assert [(m.chat, m.text) for m in channel.sent] == [(ChatRef("telegram", "42"), "briefing text")]
    assert run.status == "delivered" and run.attempts == 1 and run.error is None
    assert run.delivered_ids == ("out-1001",)
    assert run.scheduled_for == NINE and run.trigger == "schedule"
    stored = await store.message_by_provider_id(ChatRef("telegram", "42"), "out-1001")
    assert stored is not None and stored.id == run.reply_message_id
    assert (stored.session_key, stored.origin, stored.job_id, stored.role) == (
        TARGET, "scheduled", "daily", "assistant"
    )
    # Its tokens count in the target chat's usage (/usage), as nobody's in particular.
    assert [(r.session_key, r.user_id, r.kind) for r in await store.usage_since(0)] == [
        (TARGET, None, "scheduled")]


async def test_the_prompt_has_the_job_times_and_its_previous_outputs(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store, channel: FakeChannel
) -> None:
    """The model gets the job prompt, the time in the job's zone and UTC, and its last N outputs only."""
    config = make(api, make_config, job(history_runs=2))
    clock = Clock(NINE + 5)
    scheduler, brain = scheduler_for(config, store, channel, clock)
    await store.append_reply(TARGET, "an interactive answer")
    for day in range(3):
        api.script(Text(f"output of day {day}"))
        clock.now = NINE + day * 86400 + 5
        await scheduler.run_job(scheduler.jobs["daily"], NINE + day * 86400)
    clock.now = NINE + 3 * 86400 + 60
    await scheduler.run_job(scheduler.jobs["daily"], NINE + 3 * 86400)
    await brain.aclose()

    last = api.requests[-1]
    assert "scheduled for Thursday 2025-04-03 09:00 CEST (2025-04-03 07:00 UTC)" in last.system_text
    assert "Current time: Thursday 2025-04-03 09:01 CEST (2025-04-03 07:01 UTC)" in last.system_text
    text = request_text(last)
    assert text.endswith("Brief me.")
    assert re.findall(r"output of day \d", text) == ["output of day 1", "output of day 2"]
    assert "interactive answer" not in text
    first = api.requests[0]
    assert "previous outputs" not in request_text(first)


async def test_a_briefing_sees_memory_edits_without_a_restart(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store, channel: FakeChannel, tmp_path: Path
) -> None:
    """MEMORY.md edited between two runs reaches the second run's system prompt, as it does chats."""
    memory = tmp_path / "MEMORY.md"
    memory.write_text("Ada likes tea.", encoding="utf-8")
    config = make_config(config_data(api, agent={"memory_file": "MEMORY.md"}, schedules=[job()],
                                     scheduler={"retry_delay": 1.0}))
    clock = Clock(NINE + 5)
    scheduler, brain = scheduler_for(config, store, channel, clock)
    await scheduler.run_job(scheduler.jobs["daily"], NINE)
    memory.write_text("Ada switched to coffee in May.", encoding="utf-8")
    clock.now = NINE + 86400 + 5
    await scheduler.run_job(scheduler.jobs["daily"], NINE + 86400)
    await brain.aclose()

    first, second = api.requests
    assert "Ada likes tea." in first.system_text
    assert "Ada switched to coffee in May." in second.system_text and "tea" not in second.system_text


async def test_a_time_already_delivered_is_not_run_again(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store, channel: FakeChannel
) -> None:
    """Running the same scheduled time twice calls the model and delivers once."""
    config = make(api, make_config)
    scheduler, brain = scheduler_for(config, store, channel, Clock(NINE + 5))
    first = await scheduler.run_job(scheduler.jobs["daily"], NINE)
    again = await scheduler.run_job(scheduler.jobs["daily"], NINE)
    await brain.aclose()
    assert api.count == 1 and len(channel.sent) == 1
    assert again == first


async def test_a_crash_between_generating_and_delivering_delivers_once_after_restart(
    api: AnthropicStandIn, make_config: MakeConfig, tmp_path: Path
) -> None:
    """Output stored before a crash is delivered once on restart, without asking the model again."""
    config = make(api, make_config)
    clock = Clock(NINE + 5)
    async with Store.open(tmp_path / "switchboard.db") as store:
        scheduler, brain = scheduler_for(config, store, CrashingChannel("telegram"), clock)
        with pytest.raises(Crash):
            await scheduler.run_job(scheduler.jobs["daily"], NINE)
        await brain.aclose()
    assert api.count == 1

    clock.now = NINE + 60
    channel = FakeChannel("telegram")
    async with Store.open(tmp_path / "switchboard.db") as store:
        scheduler, brain = scheduler_for(config, store, channel, clock)
        await scheduler.start()
        await scheduler.wait_idle()
        await scheduler.close(1)
        await brain.aclose()
        runs = await store.schedule_runs("daily", 10)
    assert api.count == 1
    assert [m.text for m in channel.sent] == ["briefing text"]
    assert [(r.status, r.delivered_ids) for r in runs] == [("delivered", ("out-1001",))]


async def test_a_generated_run_whose_stored_text_is_missing_is_recorded_failed_not_retried_forever(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store
) -> None:
    """A run left `generated` whose row lost its text (a database edited or restored) is recorded
    failed, saying so, on the next look: nothing is sent, the model is not asked again."""
    config = make(api, make_config)
    clock = Clock(NINE + 5)
    scheduler, brain = scheduler_for(config, store, CrashingChannel("telegram"), clock)
    with pytest.raises(Crash):
        await scheduler.run_job(scheduler.jobs["daily"], NINE)
    (run,) = await store.schedule_runs("daily", 10)
    await execute(store, "UPDATE schedule_runs SET reply_message_id = NULL WHERE id = ?", (run.id,))

    channel = FakeChannel("telegram")
    scheduler, brain = scheduler_for(config, store, channel, clock)
    again = await scheduler.run_job(scheduler.jobs["daily"], NINE)
    await brain.aclose()

    assert again.status == "failed" and again.error is not None and "stored text is missing" in again.error
    assert channel.sent == [] and api.count == 1


async def test_down_across_two_times_runs_the_newest_once_within_grace(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store, channel: FakeChannel
) -> None:
    """After downtime, the newest missed time within misfire_grace runs once; the earlier one is recorded."""
    config = make(api, make_config, job(cron="0 * * * *"), misfire_grace=4000)
    clock = Clock(NINE + 5)
    scheduler, brain = scheduler_for(config, store, channel, clock)
    await scheduler.run_job(scheduler.jobs["daily"], NINE)
    # Down from 09:00 to 11:04: 10:00 and 11:00 were missed, both within the grace.
    clock.now = NINE + 2 * 3600 + 240
    restarted, _ = scheduler_for(config, store, channel, clock)
    await restarted.start()
    await restarted.wait_idle()
    await restarted.close(1)
    await brain.aclose()

    runs = {r.scheduled_for - NINE: r for r in await store.schedule_runs("daily", 10)}
    assert {k: r.status for k, r in runs.items()} == {0: "delivered", 3600: "missed", 7200: "delivered"}
    assert "coalesced" in (runs[3600].error or "")
    assert len(channel.sent) == 2 and api.count == 2


async def test_down_longer_than_grace_skips_and_records_the_missed_times(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store, channel: FakeChannel
) -> None:
    """Times missed by more than misfire_grace are recorded as missed and nothing runs."""
    config = make(api, make_config, job(cron="0 * * * *"), misfire_grace=600)
    clock = Clock(NINE + 5)
    scheduler, brain = scheduler_for(config, store, channel, clock)
    await scheduler.run_job(scheduler.jobs["daily"], NINE)
    clock.now = NINE + 2 * 3600 + 1200
    restarted, _ = scheduler_for(config, store, channel, clock)
    await restarted.start()
    await restarted.wait_idle()
    await restarted.close(1)
    await brain.aclose()

    runs = {r.scheduled_for - NINE: r.status for r in await store.schedule_runs("daily", 10)}
    assert runs == {0: "delivered", 3600: "missed", 7200: "missed"}
    assert len(channel.sent) == 1 and api.count == 1


async def test_driving_the_clock_fires_each_time_once(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store, channel: FakeChannel
) -> None:
    """Waking the scheduler at, between and after scheduled times runs each time exactly once."""
    config = make(api, make_config, job(cron=None, every="30m"))
    clock = Clock(NINE - 60)
    scheduler, brain = scheduler_for(config, store, channel, clock)
    await scheduler.start()
    for offset in (0, 30, 600, 1800, 1801, 3600):
        clock.now = NINE + offset
        await scheduler.fire("daily")
    await scheduler.close(1)
    await brain.aclose()
    runs = sorted(r.scheduled_for - NINE for r in await store.schedule_runs("daily", 10))
    assert runs == [0, 1800, 3600]
    assert len(channel.sent) == 3


async def test_apscheduler_wakes_the_job_and_shutdown_waits_for_it(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store, channel: FakeChannel
) -> None:
    """APScheduler holds one job per entry with its next time; when it fires, the due run completes."""
    config = make(api, make_config)
    next_nine = crontab_trigger("0 9 * * *", "Europe/Berlin").get_next_fire_time(None, datetime.now(UTC))
    clock = Clock(next_nine.timestamp() - 3600)
    scheduler, brain = scheduler_for(config, store, channel, clock)
    await scheduler.start()
    aps = scheduler._aps
    assert aps is not None
    aps_job = aps.get_job("daily")
    assert (aps_job.misfire_grace_time, aps_job.coalesce, aps_job.max_instances) == (None, True, 1)
    assert aps_job.next_run_time.astimezone(ZoneInfo("Europe/Berlin")).strftime("%H:%M") == "09:00"
    # Move our clock past 09:00 and ring APScheduler's bell now.
    clock.now = next_nine.timestamp() + 5
    aps_job.modify(next_run_time=datetime.now(UTC))
    aps.wakeup()
    for _ in range(400):
        if channel.sent:
            break
        await api_tick()
    await scheduler.close(5)
    await brain.aclose()
    assert [m.text for m in channel.sent] == ["briefing text"]


async def api_tick() -> None:
    import asyncio

    await asyncio.sleep(0.005)


async def test_a_model_outage_is_retried_then_recorded_as_failed(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store, channel: FakeChannel
) -> None:
    """A model outage is retried with the configured wait, then recorded as failed; nothing is posted."""
    config = make(api, make_config, retries=2, retry_delay=7.0)
    api.default = lambda rec: Error(529, "overloaded_error", "Overloaded")
    sleeps = Sleeps()
    scheduler, brain = scheduler_for(config, store, channel, Clock(NINE + 5), sleeps)
    run = await scheduler.run_job(scheduler.jobs["daily"], NINE)
    await brain.aclose()
    assert run.status == "failed" and run.attempts == 3
    assert "529" in (run.error or "") and "overloaded" in (run.error or "")
    assert sleeps.delays == [7.0, 7.0]
    assert channel.sent == []
    assert await store.history(TARGET, 10) == []


async def test_an_outage_that_ends_is_retried_into_a_delivery(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store, channel: FakeChannel
) -> None:
    """A run whose first attempt fails and second succeeds delivers once."""
    config = make(api, make_config, retries=2)
    api.script(Error(529, "overloaded_error"), Error(529, "overloaded_error"), Text("late but fine"))
    scheduler, brain = scheduler_for(config, store, channel, Clock(NINE + 5))
    run = await scheduler.run_job(scheduler.jobs["daily"], NINE)
    await brain.aclose()
    assert (run.status, run.attempts) == ("delivered", 2)
    assert [m.text for m in channel.sent] == ["late but fine"]


async def test_consecutive_failures_pause_the_job_and_a_success_resumes_it(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store, channel: FakeChannel
) -> None:
    """max_failures failed runs in a row pause the job (no more fires); a successful run resumes it."""
    config = make(api, make_config, job(cron="0 * * * *"), retries=0, max_failures=2, misfire_grace=600)
    api.default = lambda rec: Error(500, "api_error")
    clock = Clock(NINE - 60)
    scheduler, brain = scheduler_for(config, store, channel, clock)
    await scheduler.start()
    for hour in range(2):
        clock.now = NINE + hour * 3600 + 1
        await scheduler.fire("daily")
    assert scheduler.paused == {"daily"}
    aps = scheduler._aps
    assert aps is not None and aps.get_job("daily").next_run_time is None
    clock.now = NINE + 2 * 3600 + 1
    assert await scheduler.fire("daily") is None
    # Still paused after a restart: the records say so.
    again, _ = scheduler_for(config, store, channel, clock)
    await again.start()
    assert again.paused == {"daily"}
    api.default = lambda rec: Text("fixed")
    run = await again.run_job(again.jobs["daily"], clock.now, "manual")
    assert run.status == "delivered" and again.paused == set()
    await again.close(1)
    await scheduler.close(1)
    await brain.aclose()
    assert [m.text for m in channel.sent] == ["fixed"]


async def test_delivery_failures_are_retried_only_when_nothing_arrived(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store
) -> None:
    """A send that failed before anything arrived is retried; a partly sent one fails, never resent."""
    config = make(api, make_config, retries=2)
    flaky = FlakyChannel(DeliveryError("network down"))
    scheduler, brain = scheduler_for(config, store, flaky, Clock(NINE + 5))
    run = await scheduler.run_job(scheduler.jobs["daily"], NINE)
    assert (run.status, flaky.attempts, len(flaky.sent)) == ("delivered", 2, 1)

    partial = FlakyChannel(DeliveryError("chunk 2 refused", sent_ids=["p1"]))
    scheduler, _ = scheduler_for(config, store, partial, Clock(NINE + 86400 + 5))
    run = await scheduler.run_job(scheduler.jobs["daily"], NINE + 86400)
    await brain.aclose()
    assert (run.status, partial.attempts, run.delivered_ids) == ("failed", 1, ("p1",))
    assert "chunk 2 refused" in (run.error or "")


async def test_a_quiet_run_delivers_and_stores_nothing(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store, channel: FakeChannel
) -> None:
    """Output starting with the quiet marker is recorded as quiet; nothing is sent or stored in the chat."""
    config = make(api, make_config)
    api.script(Text("NO_REPLY nothing changed"))
    scheduler, brain = scheduler_for(config, store, channel, Clock(NINE + 5))
    run = await scheduler.run_job(scheduler.jobs["daily"], NINE)
    await brain.aclose()
    assert run.status == "quiet" and run.reply_message_id is None
    assert channel.sent == [] and await store.history(TARGET, 10) == []


async def test_a_run_too_late_is_not_delivered(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store, channel: FakeChannel
) -> None:
    """A run starting later than stale_after after its time is recorded stale without calling the model."""
    config = make(api, make_config, stale_after=900)
    scheduler, brain = scheduler_for(config, store, channel, Clock(NINE + 901))
    run = await scheduler.run_job(scheduler.jobs["daily"], NINE)
    await brain.aclose()
    assert run.status == "stale" and "901s after its time" in (run.error or "")
    assert api.count == 0 and channel.sent == []


async def test_a_job_for_a_channel_not_running_here_is_left_alone(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store
) -> None:
    """A job whose channel this process does not run is not scheduled and its requests are not taken."""
    config = make(api, make_config)
    console = FakeChannel("console")
    scheduler, brain = scheduler_for(config, store, console, Clock(NINE))
    request = await store.request_run("daily", NINE)
    await scheduler.start()
    await scheduler.poll_requests()
    await scheduler.wait_idle()
    await scheduler.close(1)
    await brain.aclose()
    assert scheduler._aps is not None and scheduler._aps.get_jobs() == []
    assert (await store.schedule_run_by_id(request.id)).status == "requested"  # type: ignore[union-attr]


async def test_a_requested_run_is_run_and_delivered(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store, channel: FakeChannel
) -> None:
    """A run requested through the store (switchboard jobs run) is run once and delivered."""
    config = make(api, make_config)
    scheduler, brain = scheduler_for(config, store, channel, Clock(NINE + 1))
    request = await store.request_run("daily", NINE)
    await scheduler.poll_requests()
    await scheduler.poll_requests()
    await scheduler.wait_idle()
    await brain.aclose()
    run = await store.schedule_run_by_id(request.id)
    assert run is not None and (run.status, run.trigger) == ("delivered", "manual")
    assert len(channel.sent) == 1 and api.count == 1


# -- time -----------------------------------------------------------------------------------------


def fire_times(expr: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    trigger = crontab_trigger(expr, zone)
    plan_times: list[datetime] = []
    at = trigger.get_next_fire_time(None, start)
    while at is not None and at <= end:
        plan_times.append(at)
        at = trigger.get_next_fire_time(at, at)
    return plan_times


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York"])
def test_dst_transitions_neither_repeat_nor_skip_a_daily_job(zone: str) -> None:
    """A 02:30 daily job fires once a day across both clock changes (02:30 repeating or missing)."""
    tz = ZoneInfo(zone)
    for start in (datetime(2025, 3, 7, tzinfo=tz), datetime(2025, 10, 24, tzinfo=tz)):
        times = fire_times("30 2 * * *", zone, start, start + timedelta(days=14))
        days = [t.astimezone(tz).date() for t in times]
        assert len(times) == 14 and len(set(days)) == 14
        gaps = {round((b.timestamp() - a.timestamp()) / 3600) for a, b in itertools.pairwise(times)}
        assert gaps <= {23, 24, 25}


def test_fall_back_runs_the_repeated_hour_once() -> None:
    """When clocks go back, an every-15-minutes job does not run the repeated wall-clock hour again."""
    tz = ZoneInfo("Europe/Berlin")
    start = datetime(2025, 10, 26, 1, 50, tzinfo=tz)
    times = fire_times("*/15 * * * *", "Europe/Berlin", start, start + timedelta(hours=3))
    walls = [t.astimezone(tz).strftime("%H:%M") for t in times]
    assert len(walls) == len(set(walls))
    assert walls[:6] == ["02:00", "02:15", "02:30", "02:45", "03:00", "03:15"]


def test_plan_across_the_fall_back_night_runs_once() -> None:
    """A restart plan spanning the night clocks go back sees 02:30 once."""
    trigger = crontab_trigger("30 2 * * *", "Europe/Berlin")
    before = datetime(2025, 10, 25, 3, 0, tzinfo=UTC)
    plan = plan_runs(trigger, before, datetime(2025, 10, 26, 3, 0, tzinfo=UTC), grace=86400)
    assert plan.due is not None and plan.missed == [] and plan.coalesced == []
    assert plan.due.timestamp() == datetime(2025, 10, 26, 0, 30, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("expr", "weekdays"),
    [
        ("0 9 * * 0", {"Sun"}),
        ("0 9 * * 7", {"Sun"}),
        ("0 9 * * 1-5", {"Mon", "Tue", "Wed", "Thu", "Fri"}),
        ("0 9 * * sat,sun", {"Sat", "Sun"}),
        ("0 9 * * */2", {"Sun", "Tue", "Thu", "Sat"}),
        ("0 9 * * 5-7", {"Fri", "Sat", "Sun"}),
    ],
)
def test_weekdays_follow_cron_numbering(expr: str, weekdays: set[str]) -> None:
    """Weekday numbers mean what they mean in cron (0 and 7 are Sunday), not APScheduler's 0 = Monday."""
    start = datetime(2025, 6, 1, tzinfo=UTC)
    times = fire_times(expr, "UTC", start, start + timedelta(days=14))
    assert {t.strftime("%a") for t in times} == weekdays


def test_delivery_targets() -> None:
    """Session keys and short `<channel>:<chat>` forms map to the session and chat a channel sends to."""
    key = delivery_key("telegram:-1001", "main")
    assert str(key) == "agent:main:telegram:group:-1001"
    assert delivery_chat(key) == ChatRef("telegram", "-1001")
    topic = delivery_key("agent:main:telegram:group:-1001:topic:7", "main")
    assert delivery_chat(topic) == ChatRef("telegram", "-1001", "7")
    general = delivery_key("agent:main:telegram:group:-1001:topic:1", "main")
    assert delivery_chat(general) == ChatRef("telegram", "-1001")
    thread = delivery_key("agent:main:discord:channel:555:thread:777", "main")
    assert delivery_chat(thread) == ChatRef("discord", "777")
    dm = delivery_key("agent:main:discord:direct:9", "main")
    assert delivery_chat(dm, "4242") == ChatRef("discord", "4242")
    assert str(delivery_key("console:local", "main")) == "agent:main:console:direct:local"


# -- scheduled output and interactive context, through the real daemon -----------------------------


async def test_briefings_stay_out_of_context_unless_just_sent_or_replied_to(
    api: AnthropicStandIn, make_config: MakeConfig, tmp_path: Path
) -> None:
    """Real briefing runs stay out of context except the one just sent (block) and one replied to."""
    channel = FakeChannel("telegram")
    config = make(api, make_config, job(cron="0 9 * * *"))
    counter = iter(range(1, 100))

    def answer(rec: RecordedRequest) -> Text:
        if "Brief me." in request_text(rec):
            return Text(f"briefing-{next(counter):02d}: news")
        return Text("re: " + str(rec.messages[-1]["content"]).splitlines()[-1])

    api.default = answer

    def briefings_in(request: RecordedRequest) -> set[str]:
        return set(re.findall(r"briefing-\d\d", request_text(request)))

    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "good morning", message_id="u1")
        scheduler = daemon.scheduler
        assert scheduler is not None
        base = datetime.now(UTC).timestamp()
        for n in range(10):
            await scheduler.run_job(scheduler.jobs["daily"], base - 100 + n)
        await say(daemon, channel, "thanks", message_id="u2")
        await say(daemon, channel, "what's new?", message_id="u3")
        moved_past = reply_requests(api)[-1]
        await scheduler.run_job(scheduler.jobs["daily"], base - 50)
        await say(daemon, channel, "tell me more", message_id="u4")
        right_after = reply_requests(api)[-1]
        third = (await daemon_store_runs(tmp_path))[2]
        await say(daemon, channel, "why this one?", message_id="u5", reply_to=third.delivered_ids[0])
        replying = reply_requests(api)[-1]

    briefing_calls = [r for r in reply_requests(api) if "Brief me." in request_text(r)]
    assert len(briefing_calls) == 11 and all(r.model == MODEL for r in briefing_calls)
    assert briefings_in(moved_past) == set()
    assert briefings_in(right_after) == {"briefing-11"}
    assert "[Scheduled messages you sent in this chat since the user's previous message:]" in str(
        right_after.messages[-1]["content"]
    )
    assert briefings_in(replying) == {"briefing-03"}
    # No interactive turn ever saw a briefing in its history (only the block or the reply-to).
    assert len([m for m in channel.sent if m.text.startswith("briefing-")]) == 11


async def daemon_store_runs(tmp_path: Path) -> list[Any]:
    async with Store.open(tmp_path / "switchboard.db") as view:
        return sorted(await view.schedule_runs("daily", 50), key=lambda r: r.scheduled_for)


# -- the CLI ------------------------------------------------------------------------------------------



def write_config(tmp_path: Path, api: AnthropicStandIn, *, poll: float = 0.05) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        f'[database]\npath = "{tmp_path / "switchboard.db"}"\n'
        f'[anthropic]\nbase_url = "{api.base_url}"\nmodel = "{MODEL}"\n'
        f"[scheduler]\nrequest_poll = {poll}\n"
        '[[schedules]]\nid = "daily"\ncron = "0 9 * * *"\ntimezone = "Europe/Berlin"\n'
        f'prompt = "Brief me."\ndeliver_to = "{TARGET}"\n'
        '[[schedules]]\nid = "off"\nevery = "2h"\nprompt = "x"\ndeliver_to = "console:local"\n'
        "enabled = false\n",
        encoding="utf-8",
    )
    return path


async def test_jobs_run_is_delivered_by_the_running_daemon_and_jobs_lists_it(
    api: AnthropicStandIn, tmp_path: Path
) -> None:
    """`jobs run ID` has the running daemon deliver the job; `jobs` then shows its next and last run."""
    from bot.config import load_config

    path = write_config(tmp_path, api)
    config = load_config(path)
    channel = FakeChannel("telegram")
    async with daemon_with(config, channel):
        code, out, err = await switchboard_cli(tmp_path, "jobs", "run", "daily", "--config", str(path),
                                               "--wait", "20")
    assert (code, err) == (0, ""), err
    assert re.search(r"run #\d+: delivered", out)
    assert [m.text for m in channel.sent] == ["briefing text"]

    code, out, err = await switchboard_cli(tmp_path, "jobs", "--config", str(path))
    assert code == 0, err
    daily, off = out.strip().splitlines()
    assert re.match(r'daily  cron "0 9 \* \* \*" Europe/Berlin  to agent:main:telegram:direct:42  '
                    r"next \d{4}-\d\d-\d\d 09:00 CES?T  last delivered for .* UTC$", daily)
    assert off.startswith("off  every 2h UTC  to console:local  disabled  never run")


async def test_jobs_run_of_an_unknown_job_or_without_a_daemon_fails_clearly(
    api: AnthropicStandIn, tmp_path: Path
) -> None:
    """An unknown job id exits 1 naming the jobs; with no daemon running it fails at once (exit 3)
    and queues nothing."""
    path = write_config(tmp_path, api)
    code, _, err = await switchboard_cli(tmp_path, "jobs", "run", "nope", "--config", str(path))
    assert code == 1 and "no job 'nope'" in err and "daily, off" in err
    code, _, err = await switchboard_cli(tmp_path, "jobs", "run", "daily", "--config", str(path),
                                         "--wait", "0.5")
    assert code == 3 and "not running" in err


async def test_a_job_model_chooses_the_brain(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store, channel: FakeChannel
) -> None:
    """A job's `model` is what the scheduler asks its brain factory for; no model means the agent's own."""
    config = make(api, make_config, job(model="fast"), job(id="plain"))
    asked: list[str | None] = []
    brain = _brains[-1](config)

    def brain_for(model: str | None) -> Brain:
        asked.append(model)
        return brain

    scheduler = Scheduler(config, store, brain_for, {"telegram": channel}, clock=Clock(NINE + 5),
                          sleep=Sleeps())
    await scheduler.run_job(scheduler.jobs["daily"], NINE)
    await scheduler.run_job(scheduler.jobs["plain"], NINE)
    assert asked == ["fast", None]


async def test_a_briefing_that_was_not_delivered_stays_out_of_the_scheduled_block(
    api: AnthropicStandIn, make_config: MakeConfig, store: Store
) -> None:
    """Output whose send failed is kept for the record but never offered as "sent since" context."""
    config = make(api, make_config, retries=0)
    failing = FlakyChannel(DeliveryError("bot blocked", permanent=True))
    scheduler, brain = scheduler_for(config, store, failing, Clock(NINE + 5))
    failed = await scheduler.run_job(scheduler.jobs["daily"], NINE)
    scheduler, _ = scheduler_for(config, store, FlakyChannel(), Clock(NINE + 86400 + 5))
    delivered = await scheduler.run_job(scheduler.jobs["daily"], NINE + 86400)
    await brain.aclose()

    assert (failed.status, delivered.status) == ("failed", "delivered")
    offered = await store.scheduled_between(TARGET, after_id=0, before_id=10**9, limit=5)
    assert [m.id for m in offered] == [delivered.reply_message_id]


async def test_two_daemons_on_a_shared_store_run_a_job_time_once(
    api: AnthropicStandIn, make_config: MakeConfig, pg_url: str, tmp_path: Path
) -> None:
    """Two instances on one PostgreSQL fire the same job time at once: one generates and delivers,
    the other sees a run another instance is at work on and leaves it (neither re-claims it)."""
    from bot.store.postgres import PostgresStore

    api.default = lambda request: Text("briefing text", delay=0.3)
    config = make(api, make_config)
    channels = [FakeChannel("telegram"), FakeChannel("telegram")]
    async with PostgresStore.connect(pg_url, state_path=tmp_path / "a.db", label="pg") as first, \
            PostgresStore.connect(pg_url, state_path=tmp_path / "b.db", label="pg") as second:
        for name, store in (("h:1:a", first), ("h:2:b", second)):  # two live instances
            store.instance = name
            await store.heartbeat(Instance(name, "h", 1, time.time(), time.time()))
        made = [scheduler_for(config, store, channel, Clock(NINE + 5))
                for store, channel in zip((first, second), channels, strict=True)]
        runs = await asyncio.gather(*(scheduler.run_job(scheduler.jobs["daily"], NINE)
                                      for scheduler, _ in made))
        # Once generated, a second look (a late trigger) still leaves it to its instance.
        again = await made[1][0].run_job(made[1][0].jobs["daily"], NINE)
        for _, brain in made:
            await brain.aclose()
        records = await first.schedule_runs("daily", 10)
    assert api.count == 1
    assert sum(len(channel.sent) for channel in channels) == 1
    assert [r.status for r in records] == ["delivered"] and len({r.id for r in runs}) == 1
    assert again.status == "delivered"


async def test_a_run_claimed_by_an_instance_that_stopped_beating_is_taken_over_once(
    api: AnthropicStandIn, make_config: MakeConfig, pg_url: str, tmp_path: Path
) -> None:
    """An instance claimed a job time and died (its heartbeat is old): a live one finishes it, once."""
    from bot.store.postgres import PostgresStore

    config = make(api, make_config)
    channel = FakeChannel("telegram")
    async with PostgresStore.connect(pg_url, state_path=tmp_path / "a.db", label="pg") as store:
        await store.heartbeat(Instance("h:1:dead", "h", 1, 0.0, time.time() - 60))
        _, claimed = await store.claim_run("daily", NINE, owner="h:1:dead")
        assert claimed
        store.instance = "h:2:live"
        await store.heartbeat(Instance("h:2:live", "h", 2, time.time(), time.time()))
        scheduler, brain = scheduler_for(config, store, channel, Clock(NINE + 5))
        await scheduler.resume_interrupted()
        await scheduler.resume_interrupted()  # a second sweep finds it done
        await brain.aclose()
        records = await store.schedule_runs("daily", 10)
    assert api.count == 1 and [m.text for m in channel.sent] == ["briefing text"]
    assert [(r.status, r.owner) for r in records] == [("delivered", "h:2:live")]

