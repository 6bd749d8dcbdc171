"""Reminders: set through the tool, fired on time exactly once, recurring, listed, cancelled, kept."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from bot.config import Config
from bot.core.messages import ChatRef
from bot.core.session_key import parse
from bot.schedule.reminder_time import parse_when
from bot.schedule.reminder_tools import ReminderTools
from bot.schedule.reminders import ReminderSchedule
from bot.store import Store
from bot.testing.fake_channel import FakeChannel
from bot.tools.base import ToolContext, ToolResult
from tests.harness import wait_until

MakeConfig = Callable[[dict[str, Any]], Config]
BERLIN = ZoneInfo("Europe/Berlin")
DM = "agent:main:telegram:direct:42"
GROUP = "agent:main:telegram:group:-100123"
# Monday 2025-03-31 09:00 in Berlin (CEST, UTC+2).
NINE = datetime(2025, 3, 31, 9, 0, tzinfo=BERLIN).timestamp()


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def no_sleep(delay: float) -> None:
    """Retries wait on nothing."""


def asking(key: str = DM, user: str = "42", *, now: float = NINE, request_id: int = 0,
           timezone: str = "Europe/Berlin") -> ToolContext:
    """Who sets or reads reminders: user `user` in session `key`."""
    session = parse(key)
    chat = ChatRef(session.provider, session.peer, session.suffix_id)
    return ToolContext(session_key=session, chat=chat, user_id=user, request_id=request_id,
                       is_admin=False, shared=not session.is_direct, now=now, timezone=timezone)


class Bench:
    """The reminder tools and schedule over one store and a telegram FakeChannel, on a test clock."""

    def __init__(self, config: Config, store: Store, clock: Clock) -> None:
        self.clock = clock
        self.channel = FakeChannel("telegram")
        self.schedule = ReminderSchedule(lambda: config, store, {"telegram": self.channel}, clock=clock,
                                         sleep=no_sleep)
        self.tools = ReminderTools(store, lambda: config.reminders, self.schedule)
        self.store = store

    async def call(self, name: str, context: ToolContext | None = None, **arguments: Any) -> ToolResult:
        (tool,) = [t for t in self.tools.tools() if t.name == name]
        result = await tool.run(arguments, context or asking(now=self.clock.now))
        await self.schedule.wait_idle()
        return result

    async def at(self, when: float, reminder_id: int) -> None:
        """Move the clock and wake the reminder as APScheduler would."""
        self.clock.now = when
        await self.schedule.fire(reminder_id)
        await self.schedule.wait_idle()

    def texts(self) -> list[str]:
        return [m.text for m in self.channel.sent]


def number(result: ToolResult) -> int:
    assert not result.is_error, result.content
    return int(result.content.split("#", 1)[1].split()[0])


@pytest.fixture
async def bench(make_config: MakeConfig, store: Store) -> Any:
    bench = Bench(make_config({"scheduler": {"retry_delay": 0.0}}), store, Clock(NINE))
    await bench.schedule.start()
    yield bench
    await bench.schedule.close(1)


# -- reading `when` ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("2025-04-01T09:00", "2025-04-01 09:00"),
    ("2025-04-01 18:30", "2025-04-01 18:30"),
    ("2025-04-01T07:00Z", "2025-04-01 09:00"),
    ("2025-04-01T09:00+02:00", "2025-04-01 09:00"),
    ("in 2 hours", "2025-03-31 11:00"),
    ("+90m", "2025-03-31 10:30"),
    ("in 1 hour and 30 minutes", "2025-03-31 10:30"),
    ("in 2h30m", "2025-03-31 11:30"),
    ("in a day", "2025-04-01 09:00"),
    ("tomorrow 09:00", "2025-04-01 09:00"),
    ("tomorrow at 9", "2025-04-01 09:00"),
    ("today at 6pm", "2025-03-31 18:00"),
    ("friday 18:30", "2025-04-04 18:30"),
    ("monday 10:00", "2025-03-31 10:00"),
    ("monday 8am", "2025-04-07 08:00"),
    ("next monday 10:00", "2025-04-07 10:00"),
    ("18:30", "2025-03-31 18:30"),
    ("8:00", "2025-04-01 08:00"),
])
def test_when_reads_absolute_relative_and_day_times_in_the_users_zone(text: str, expected: str) -> None:
    """Absolute, relative and day-and-time forms name the moment a person means, in their zone."""
    at = parse_when(text, NINE, BERLIN)
    assert at.astimezone(BERLIN).strftime("%Y-%m-%d %H:%M") == expected


def test_relative_times_count_real_hours_across_a_clock_change() -> None:
    """"in 2 hours" the night clocks go forward is two real hours later (a wall clock shows three)."""
    one_am = datetime(2025, 3, 30, 1, 0, tzinfo=BERLIN).timestamp()
    at = parse_when("in 2 hours", one_am, BERLIN)
    assert at.timestamp() - one_am == 7200 and at.strftime("%H:%M %Z") == "04:00 CEST"


async def test_a_bad_or_past_when_is_an_error_the_model_can_read(bench: Bench) -> None:
    """Unreadable, dateless, past or malformed times and cron lines come back as readable errors."""
    cases = {
        "soon": "cannot read 'soon' as a time",
        "tomorrow": "has no time of day",
        "2025-04-01": "a date without a time",
        "2025-03-30T09:00": "in the past (it is now Mon 31 Mar 2025 09:00 CEST)",
        "in 5 parsecs": "unknown unit 'parsecs'",
        "25:00": "not a time of day",
    }
    for when, expected in cases.items():
        result = await bench.call("set_reminder", text="x", when=when)
        assert result.is_error and expected in result.content, (when, result.content)
    bad_cron = await bench.call("set_reminder", text="x", repeat="every weekday")
    assert bad_cron.is_error and "five-field cron line" in bad_cron.content
    too_often = await bench.call("set_reminder", text="x", repeat="*/5 * * * *")
    assert too_often.is_error and "more often than every 15 minutes" in too_often.content
    neither = await bench.call("set_reminder", text="x")
    assert neither.is_error and "give `when`" in neither.content
    assert await bench.store.pending_reminders() == []


# -- one firing, exactly once -------------------------------------------------------------------------


async def test_a_reminder_set_through_the_tool_is_delivered_at_its_time_exactly_once(bench: Bench) -> None:
    """Nothing before its time; at its time the text is sent to the chat once, stored as scheduled
    output with its run record, and the reminder is done."""
    result = await bench.call("set_reminder", text="Call the bank", when="in 2 hours")
    assert "set for Mon 31 Mar 2025 11:00 CEST (Europe/Berlin)" in result.content
    reminder_id = number(result)
    assert result.summary == f"reminder #{reminder_id} at 11:00 Mon 31 Mar"

    await bench.at(NINE + 7199, reminder_id)
    assert bench.texts() == []
    await bench.at(NINE + 7200, reminder_id)
    await bench.at(NINE + 7260, reminder_id)
    await bench.at(NINE + 86400, reminder_id)
    assert bench.texts() == ["⏰ Reminder: Call the bank"]
    assert bench.channel.sent[0].chat == ChatRef("telegram", "42")

    (run,) = await bench.store.schedule_runs(f"reminder:{reminder_id}", 10)
    assert (run.status, run.scheduled_for, run.delivered_ids) == ("delivered", NINE + 7200, ("out-1001",))
    stored = await bench.store.message_by_id(run.reply_message_id or 0)
    assert stored is not None
    assert (stored.session_key, stored.origin, stored.role, stored.job_id) == (
        DM, "scheduled", "assistant", f"reminder:{reminder_id}")
    reminder = await bench.store.reminder_by_id(reminder_id)
    assert reminder is not None and reminder.status == "done"
    assert (await bench.call("list_reminders")).content == "no pending reminders of this user in this chat"


async def test_a_reminder_in_a_thread_goes_to_that_thread_naming_its_owner(bench: Bench) -> None:
    """A reminder set in a forum topic is sent to that topic, saying whom it is for."""
    topic = "agent:main:telegram:group:-100777:topic:5"
    await bench.store.append_inbound(FakeChannel("telegram").message("remind me", kind="group",
                                                                     peer="-100777", name="Ada"))
    (request,) = await bench.store.history("agent:main:telegram:group:-100777", 1)
    context = asking(topic, request_id=request.id)
    reminder_id = number(await bench.call("set_reminder", context, text="Stand-up", when="+10m"))
    await bench.at(NINE + 600, reminder_id)
    (sent,) = bench.channel.sent
    assert (sent.chat, sent.text) == (ChatRef("telegram", "-100777", "5"), "⏰ Reminder for Ada: Stand-up")


async def test_a_recurring_reminder_fires_on_each_occurrence(bench: Bench) -> None:
    """"0 8 * * 1-5" fires at 08:00 Berlin on each weekday and on no weekend day, once each."""
    result = await bench.call("set_reminder", text="Pills", repeat="0 8 * * 1-5")
    assert "first on Tue 01 Apr 2025 08:00 CEST" in result.content
    reminder_id = number(result)
    fired: list[str] = []
    for hour in range(7 * 24):  # a week, each hour and half hour
        for minute in (0, 30):
            before = len(bench.channel.sent)
            await bench.at(NINE + hour * 3600 + minute * 60, reminder_id)
            if len(bench.channel.sent) > before:
                fired.append(datetime.fromtimestamp(bench.clock.now, BERLIN).strftime("%a %H:%M"))
    assert fired == ["Tue 08:00", "Wed 08:00", "Thu 08:00", "Fri 08:00", "Mon 08:00"]
    assert set(bench.texts()) == {"⏰ Reminder: Pills"}
    runs = await bench.store.schedule_runs(f"reminder:{reminder_id}", 20)
    assert [r.status for r in runs] == ["delivered"] * 5
    reminder = await bench.store.reminder_by_id(reminder_id)
    assert reminder is not None and reminder.status == "pending"
    listed = await bench.call("list_reminders", asking(now=bench.clock.now))
    assert listed.content == (f"#{reminder_id} repeats '0 8 * * 1-5' (Europe/Berlin), "
                              "next Tue 08 Apr 2025 08:00 CEST: Pills")


# -- list and cancel ------------------------------------------------------------------------------------


async def test_list_and_cancel_touch_only_the_users_own_reminders_in_this_chat(bench: Bench) -> None:
    """Each user lists only their own reminders in this chat and cannot cancel anyone else's."""
    ada, bea = asking(GROUP, "42"), asking(GROUP, "7")
    ada_id = number(await bench.call("set_reminder", ada, text="Ada's", when="tomorrow 10:00"))
    bea_id = number(await bench.call("set_reminder", bea, text="Bea's", when="tomorrow 11:00"))
    dm_id = number(await bench.call("set_reminder", asking(DM, "42"), text="Ada's private", when="+1h"))

    assert (await bench.call("list_reminders", ada)).content == (
        f"#{ada_id} Tue 01 Apr 2025 10:00 CEST: Ada's")
    assert (await bench.call("list_reminders", bea)).content == (
        f"#{bea_id} Tue 01 Apr 2025 11:00 CEST: Bea's")
    refused = await bench.call("cancel_reminder", ada, id=bea_id)
    assert refused.is_error and f"no pending reminder #{bea_id} of this user in this chat" in refused.content
    elsewhere = await bench.call("cancel_reminder", ada, id=dm_id)
    assert elsewhere.is_error
    cancelled = await bench.call("cancel_reminder", ada, id=str(ada_id))
    assert not cancelled.is_error and cancelled.summary == f"reminder #{ada_id} cancelled"
    again = await bench.call("cancel_reminder", ada, id=ada_id)
    assert again.is_error

    await bench.at(NINE + 3600, dm_id)
    await bench.at(NINE + 86400 + 3600, ada_id)
    await bench.at(NINE + 86400 + 7200, bea_id)
    assert bench.texts() == ["⏰ Reminder: Ada's private", "⏰ Reminder: Bea's"]
    assert await bench.store.schedule_runs(f"reminder:{ada_id}", 5) == []


async def test_a_user_cannot_hold_more_pending_reminders_than_the_cap(
    make_config: MakeConfig, store: Store
) -> None:
    """`max_pending` reminders per user: the next is refused with a reason; others are not counted."""
    config = make_config({"reminders": {"max_pending": 2}})
    bench = Bench(config, store, Clock(NINE))
    for n in range(2):
        assert not (await bench.call("set_reminder", text=f"r{n}", when=f"+{n + 1}h")).is_error
    refused = await bench.call("set_reminder", text="r3", when="+3h")
    assert refused.is_error and "already have 2 pending reminders" in refused.content
    other = await bench.call("set_reminder", asking(user="7", key="agent:main:telegram:direct:7"),
                             text="hers", when="+3h")
    assert not other.is_error


# -- the schedule: APScheduler, restarts ------------------------------------------------------------


async def test_apscheduler_holds_each_reminder_and_its_wake_up_delivers_it(
    make_config: MakeConfig, store: Store
) -> None:
    """A reminder just set is an APScheduler job at its time (no reload); when it rings, it is sent."""
    clock = Clock(time.time())
    bench = Bench(make_config({}), store, clock)
    await bench.schedule.start()
    set_now = asking(now=clock.now)
    reminder_id = number(await bench.call("set_reminder", set_now, text="Tea", when="in 1 hour"))
    aps = bench.schedule._aps
    assert aps is not None
    job = aps.get_job(f"reminder:{reminder_id}")
    assert abs(job.next_run_time.timestamp() - (clock.now + 3600)) < 1
    assert (job.misfire_grace_time, job.coalesce, job.max_instances) == (None, True, 1)
    clock.now += 3601
    job.modify(next_run_time=datetime.now(UTC))
    aps.wakeup()
    await wait_until(lambda: bool(bench.channel.sent))
    await bench.schedule.close(5)
    assert bench.texts() == ["⏰ Reminder: Tea"]
    assert aps.get_job(f"reminder:{reminder_id}") is None


async def test_reminders_survive_a_restart_and_a_missed_one_fires_once_saying_it_is_late(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    """Set, stop; down past its time: the next start sends it once, marked late; a later start
    sends nothing more. A recurring one missed while down resumes at its next time."""
    config = make_config({})
    clock = Clock(NINE)
    async with Store.open(tmp_path / "switchboard.db") as store:
        bench = Bench(config, store, clock)
        await bench.schedule.start()
        once = number(await bench.call("set_reminder", text="Bank", when="10:00"))
        daily = number(await bench.call("set_reminder", text="Walk", repeat="30 9 * * *"))
        await bench.schedule.close(1)
    assert bench.texts() == []

    clock.now = NINE + 3 * 3600  # 12:00: down across 09:30 and 10:00
    for _ in range(2):
        async with Store.open(tmp_path / "switchboard.db") as store:
            bench = Bench(config, store, clock)
            await bench.schedule.start()
            await bench.schedule.wait_idle()
            await bench.schedule.close(1)
            sent = bench.texts()
            daily_runs = await store.schedule_runs(f"reminder:{daily}", 5)
        clock.now += 60
        if _ == 0:
            assert sent == ["⏰ Reminder (due Mon 31 Mar 2025 10:00 CEST; sent late, the bot was not "
                            "running then): Bank"]
        else:
            assert sent == []
    assert [(r.status, r.scheduled_for - NINE) for r in daily_runs] == [("missed", 1800)]

    async with Store.open(tmp_path / "switchboard.db") as store:
        bench = Bench(config, store, clock)
        await bench.schedule.start()
        await bench.at(NINE + 86400 + 1800, daily)
        await bench.schedule.close(1)
        assert bench.texts() == ["⏰ Reminder: Walk"]
        finished = await store.reminder_by_id(once)
        assert finished is not None and finished.status == "done"


async def test_a_reminder_stored_but_not_sent_before_a_crash_is_sent_once_after_restart(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    """Text stored, then the process died before sending: the restart sends that stored text once."""
    config = make_config({})
    clock = Clock(NINE)

    class Dying(FakeChannel):
        async def send(self, message: Any, on_chunk: Any = None) -> list[str]:
            raise SystemExit  # the process dies mid-send

    async with Store.open(tmp_path / "switchboard.db") as store:
        bench = Bench(config, store, clock)
        bench.schedule = ReminderSchedule(lambda: config, store, {"telegram": Dying("telegram")},
                                          clock=clock, sleep=no_sleep)
        bench.tools = ReminderTools(store, lambda: config.reminders, None)
        reminder_id = number(await bench.call("set_reminder", text="Oven", when="+5m"))
        clock.now = NINE + 300
        with pytest.raises(SystemExit):
            await bench.schedule.fire(reminder_id)
        (run,) = await store.schedule_runs(f"reminder:{reminder_id}", 5)
        assert run.status == "generated"

    async with Store.open(tmp_path / "switchboard.db") as store:
        bench = Bench(config, store, clock)
        await bench.schedule.start()
        await bench.schedule.wait_idle()
        await bench.schedule.close(1)
        (run,) = await store.schedule_runs(f"reminder:{reminder_id}", 5)
        scheduled = [m for m in await store.history(DM, 10) if m.origin == "scheduled"]
    assert bench.texts() == ["⏰ Reminder: Oven"]
    assert run.status == "delivered" and len(scheduled) == 1


async def test_a_recurring_reminder_with_when_starts_then(bench: Bench) -> None:
    """`when` with `repeat` says when it starts: no time before it fires; a start in the past is now."""
    later = await bench.call("set_reminder", text="Gym", repeat="0 8 * * 1-5", when="next monday 00:00")
    assert "first on Mon 07 Apr 2025 08:00 CEST" in later.content
    reminder_id = number(later)
    await bench.at(NINE + 86400 - 3600, reminder_id)  # Tuesday 08:00: before its start
    assert bench.texts() == []
    past = await bench.call("set_reminder", text="Water", repeat="0 10 * * *", when="2025-03-01T00:00")
    assert "first on Tue 01 Apr 2025 10:00 CEST" in past.content  # asked on Tuesday at 08:00
    await bench.at(NINE + 86400 + 3600, number(past))
    assert bench.texts() == ["⏰ Reminder: Water"]
    runs = await bench.store.schedule_runs(f"reminder:{number(past)}", 50)
    assert [r.status for r in runs] == ["delivered"]


async def test_a_stored_reminder_that_cannot_be_read_is_given_up_and_the_others_still_fire(
    make_config: MakeConfig, store: Store
) -> None:
    """A reminder whose cron line no longer reads is marked failed at start; the daemon goes on."""
    common: dict[str, Any] = {"session_key": DM, "chat": ChatRef("telegram", "42"), "user_id": "42",
                              "user_name": None, "timezone": "Europe/Berlin", "request_message_id": None,
                              "max_pending": 5}
    broken = await store.add_reminder(text="?", at=NINE, repeat="0 8 * *", **common)
    fine = await store.add_reminder(text="Fine", at=NINE + 60, repeat=None, **common)
    bench = Bench(make_config({}), store, Clock(NINE + 60))
    await bench.schedule.start()
    await bench.schedule.wait_idle()
    await bench.schedule.close(1)
    assert bench.texts() == ["⏰ Reminder: Fine"]
    given_up = await store.reminder_by_id(broken.id)
    done = await store.reminder_by_id(fine.id)
    assert given_up is not None and done is not None and (given_up.status, done.status) == ("failed", "done")


def test_the_tools_are_byte_stable_and_only_set_and_cancel_write(make_config: MakeConfig) -> None:
    """Two sources (two starts) offer the same three definitions, byte for byte; set and cancel write."""
    import json

    config = make_config({})

    def definitions() -> str:
        source = ReminderTools(None, lambda: config.reminders)  # type: ignore[arg-type]
        return json.dumps([{"name": t.name, "description": t.description, "input_schema": t.input_schema}
                           for t in source.tools()])

    assert definitions() == definitions()
    tools = ReminderTools(None, lambda: config.reminders).tools()  # type: ignore[arg-type]
    assert {t.name: t.writes for t in tools} == {
        "set_reminder": True, "list_reminders": False, "cancel_reminder": True}
    assert all(len(t.name) <= 64 and t.input_schema["type"] == "object" for t in tools)


@pytest.mark.parametrize("when", ["in 99999999999 days", "in 600 weeks", "9999-12-31T23:59"])
async def test_a_time_absurdly_far_ahead_is_refused_not_crashed_on(bench: Bench, when: str) -> None:
    """Times more than ten years ahead (or past what a date can hold) are a readable error."""
    result = await bench.call("set_reminder", text="x", when=when)
    assert result.is_error and ("too far ahead" in result.content or "ten years ahead" in result.content)


async def test_the_briefing_scheduler_leaves_a_reminders_unsent_run_to_the_reminder_schedule(
    make_config: MakeConfig, store: Store
) -> None:
    """With [[schedules]] configured, the briefing scheduler's restart does not fail a reminder's
    stored-but-unsent run as "no longer in config": the reminder schedule sends it."""
    from bot.schedule.scheduler import Scheduler

    config = make_config({"schedules": [{"id": "daily", "cron": "0 9 * * *", "prompt": "Brief me.",
                                         "deliver_to": DM}]})
    clock = Clock(NINE)
    bench = Bench(config, store, clock)
    reminder_id = number(await bench.call("set_reminder", text="Oven", when="+5m"))
    reminder = await store.reminder_by_id(reminder_id)
    assert reminder is not None
    run, _ = await store.claim_run(reminder.job_id, reminder.at)
    await store.record_scheduled_output(run.id, DM, "⏰ Reminder: Oven", job_id=reminder.job_id, attempts=1)
    clock.now = NINE + 300

    def no_brain(model: str | None) -> Any:
        raise AssertionError("no briefing is due: no model is asked")

    briefings = Scheduler(config, store, no_brain, {"telegram": bench.channel}, clock=clock)
    await briefings.start()
    await briefings.wait_idle()
    await briefings.close(1)
    assert (await store.schedule_run_by_id(run.id)).status == "generated"  # type: ignore[union-attr]
    await bench.schedule.start()
    await bench.schedule.wait_idle()
    await bench.schedule.close(1)
    assert bench.texts() == ["⏰ Reminder: Oven"]
    assert (await store.schedule_run_by_id(run.id)).status == "delivered"  # type: ignore[union-attr]
