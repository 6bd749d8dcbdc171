"""Reminders through the running daemon: scheduled as set, delivered by the real channel path once,
kept across restarts, out of later context, listed by `switchboard jobs`, and their config checked."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.config import Config, load_config
from bot.core.errors import ConfigError
from bot.core.messages import ChatRef
from bot.core.session_key import parse
from bot.daemon.assembly import Daemon, build_channels
from bot.intake.channel import Channel
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.fake_channel import FakeChannel
from bot.testing.telegram_api import TelegramStandIn, group_chat, user
from bot.tools.base import ToolContext, ToolResult
from channels.telegram.channel import TelegramChannel
from tests.harness import API_KEY, config_data, reply_requests, request_text, running, say, switchboard_cli

MakeConfig = Callable[[dict[str, Any]], Config]
DM = "agent:main:telegram:direct:42"
NEW_YEAR_2100 = datetime(2100, 1, 1, 6, 0, tzinfo=UTC).timestamp()


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def daemon_on(config: Config, channels: Sequence[Channel], clock: Clock) -> AsyncIterator[Daemon]:
    """The daemon as `switchboard run` assembles it, its reminders on the test's clock."""
    async with running(config, channels, AnthropicBrain(config.anthropic, API_KEY), clock=clock) as daemon:
        assert daemon.reminders is not None
        await daemon.reminders.wait_idle()
        yield daemon


async def set_reminder(daemon: Daemon, context: ToolContext, **arguments: Any) -> int:
    """Call set_reminder as the tool loop would, on the daemon's own tool source."""
    assert daemon.reminder_tools is not None
    (tool,) = [t for t in daemon.reminder_tools.tools() if t.name == "set_reminder"]
    assert tool.writes
    result: ToolResult = await tool.run(arguments, context)
    assert not result.is_error, result.content
    return int(result.content.split("#", 1)[1].split()[0])


def context_of(key: str, chat: ChatRef, request_id: int, now: float) -> ToolContext:
    session = parse(key)
    return ToolContext(session_key=session, chat=chat, user_id="42", request_id=request_id,
                       is_admin=False, shared=not session.is_direct, now=now, timezone="Europe/Berlin")


async def test_a_reminder_is_delivered_by_the_daemon_once_across_restarts_and_stays_out_of_context(
    api: AnthropicStandIn, make_config: MakeConfig, view: Store
) -> None:
    """Set in a chat, scheduled at once; after a restart past its time it is sent once; a second,
    due while running, is sent at its time; a third start sends nothing again. Later turns see a
    reminder only in the block right after it and when replying to it, never in the history."""
    config = make_config(config_data(api))
    clock = Clock(time.time())
    first = FakeChannel("telegram")
    async with daemon_on(config, [first], clock) as daemon:
        await say(daemon, first, "remind me to stretch in an hour, and to eat later", message_id="u1")
        (request,) = [m for m in await view.history(DM, 5) if m.role == "user"]
        context = context_of(DM, ChatRef("telegram", "42"), request.id, clock.now)
        stretch = await set_reminder(daemon, context, text="Stretch", when="in 1 hour")
        eat = await set_reminder(daemon, context, text="Eat", when="in 3 hours")
        assert daemon.reminders is not None and daemon.reminders._aps is not None
        assert {j.id for j in daemon.reminders._aps.get_jobs()} == {f"reminder:{stretch}", f"reminder:{eat}"}
    assert [m.text for m in first.sent] == ["re: remind me to stretch in an hour, and to eat later"]

    clock.now += 3600 + 5
    second = FakeChannel("telegram")
    second._next_id = 2000  # a new process's platform ids never repeat the first one's
    async with daemon_on(config, [second], clock) as daemon:
        assert [m.text for m in second.sent] == ["⏰ Reminder: Stretch"]
        await say(daemon, second, "done, thanks", message_id="u2")
        right_after = reply_requests(api)[-1]
        await say(daemon, second, "what else is on today?", message_id="u3")
        moved_past = reply_requests(api)[-1]
        await say(daemon, second, "why did you send this?", message_id="u4", reply_to="out-2001")
        replying = reply_requests(api)[-1]
        clock.now += 2 * 3600
        assert daemon.reminders is not None
        await daemon.reminders.fire(eat)
        await daemon.reminders.fire(stretch)
    reminders_sent = [m.text for m in second.sent if m.text.startswith("⏰")]
    assert reminders_sent == ["⏰ Reminder: Stretch", "⏰ Reminder: Eat"]

    third = FakeChannel("telegram")
    third._next_id = 3000
    async with daemon_on(config, [third], clock):
        pass
    assert third.sent == []

    stretch_run, = await view.schedule_runs(f"reminder:{stretch}", 5)
    eat_run, = await view.schedule_runs(f"reminder:{eat}", 5)
    assert (stretch_run.status, eat_run.status) == ("delivered", "delivered")
    reminder_id = stretch_run.reply_message_id
    stored = await view.message_by_id(reminder_id or 0)
    assert stored is not None and (stored.origin, stored.session_key) == ("scheduled", DM)

    assert "⏰ Reminder: Stretch" in request_text(right_after)
    assert "Stretch" not in request_text(moved_past)
    assert "⏰ Reminder: Stretch" in request_text(replying)
    turns = [record.snapshot for record in await view.snapshots(DM)]
    assert [t["scheduled_block"] for t in turns[1:]] == [[reminder_id], [], []]
    assert [t["reply_to"] for t in turns[1:]] == [None, None, reminder_id]
    # In the history only as the reply's target, never as conversation.
    reasons = [[e["reason"] for e in t["entries"] if e["id"] == reminder_id] for t in turns]
    assert reasons == [[], [], [], ["reply_to"]]


async def test_a_reminder_set_in_a_forum_topic_arrives_in_that_topic_on_telegram(
    api: AnthropicStandIn, tg: TelegramStandIn, make_config: MakeConfig, view: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through python-telegram-bot and the Bot API stand-in: sent to the topic it was set in, for Ada."""
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)
    section = {"enabled": True, "base_url": tg.base_url, "allow_from": [42], "groups": [-100777],
               "group_settings": {"-100777": {"require_mention": False}}}
    config = make_config(config_data(api, channels={"telegram": section}))
    clock = Clock(time.time())
    channels = build_channels(config, console=False)
    (channel,) = channels
    assert isinstance(channel, TelegramChannel)
    forum = group_chat(-100777, "Forum", forum=True)
    async with daemon_on(config, channels, clock) as daemon:
        await asyncio.wait_for(channel.ready.wait(), 5)
        tg.push_message(forum, user(42, "Ada", "ada"), "remind us of the stand-up", thread_id=5,
                        is_topic_message=True)
        await tg.wait_for(lambda: len(tg.sent) == 1)
        topic = "agent:main:telegram:group:-100777:topic:5"
        (request,) = [m for m in await view.history(topic, 5) if m.role == "user"]
        context = context_of(topic, ChatRef("telegram", "-100777", "5"), request.id, clock.now)
        reminder = await set_reminder(daemon, context, text="Stand-up", when="+10m")
        clock.now += 600
        assert daemon.reminders is not None
        await daemon.reminders.fire(reminder)
        await tg.wait_for(lambda: len(tg.sent) == 2)
    answer, sent = tg.sent
    assert answer.message_thread_id == 5
    assert (sent.chat_id, sent.message_thread_id, sent.visible_text) == (
        -100777, 5, "⏰ Reminder for Ada: Stand-up")
    (run,) = await view.schedule_runs(f"reminder:{reminder}", 5)
    assert run.delivered_ids == (str(sent.message_id),)


async def test_switchboard_jobs_lists_pending_reminders_beside_the_configured_jobs(
    api: AnthropicStandIn, tmp_path: Path
) -> None:
    """`switchboard jobs` shows each pending reminder, marked as one, with its chat, owner and times."""
    path = tmp_path / "config.toml"
    path.write_text(
        f'[database]\npath = "{tmp_path / "switchboard.db"}"\n'
        '[[schedules]]\nid = "daily"\ncron = "0 9 * * *"\ntimezone = "Europe/Berlin"\n'
        'prompt = "Brief me."\ndeliver_to = "agent:main:telegram:direct:42"\n',
        encoding="utf-8",
    )
    async with Store.open(tmp_path / "switchboard.db") as store:
        common: dict[str, Any] = {"user_id": "42", "user_name": "Ada", "timezone": "Europe/Berlin",
                                  "request_message_id": None, "max_pending": 5}
        await store.add_reminder(session_key=DM, chat=ChatRef("telegram", "42"), text="Call the bank",
                                 at=NEW_YEAR_2100, repeat=None, **common)
        await store.add_reminder(session_key="agent:main:telegram:group:-100777:topic:5",
                                 chat=ChatRef("telegram", "-100777", "5"), text="Stand-up",
                                 at=time.time(), repeat="30 9 * * 1-5", **common)
        gone = await store.add_reminder(session_key=DM, chat=ChatRef("telegram", "42"), text="Gone",
                                        at=NEW_YEAR_2100, repeat=None, **common)
        await store.cancel_reminder(gone.id, session_key=DM, user_id="42")

    code, out, err = await switchboard_cli(tmp_path, "jobs", "--config", str(path))
    assert code == 0, err
    daily, once, standup = out.strip().splitlines()
    assert daily.startswith('daily  cron "0 9 * * *" Europe/Berlin')
    assert once == ("reminder:1  once Europe/Berlin  to agent:main:telegram:direct:42 (chat 42)  "
                    "next 2100-01-01 07:00 CET  never run  reminder set by telegram user 42 (Ada): "
                    "'Call the bank'")
    assert standup.startswith('reminder:2  cron "30 9 * * 1-5" Europe/Berlin  to '
                              "agent:main:telegram:group:-100777:topic:5 (chat -100777 thread 5)  next ")
    assert " 09:30 CE" in standup and standup.endswith("never run  reminder set by telegram user 42 "
                                                        "(Ada): 'Stand-up'")


@pytest.mark.parametrize(("content", "key", "expected"), [
    ('[reminders]\nmin_repeat = "30s"\n', "reminders.min_repeat", "at least 1m"),
    ('[reminders]\nmin_repeat = "often"\n', "reminders.min_repeat", "a duration"),
    ("[reminders]\nmax_pending = 0\n", "reminders.max_pending", "greater than or equal to 1"),
    ("[reminders]\nmax_pendin = 3\n", "reminders.max_pendin", "max_pending"),
])
def test_reminder_settings_are_checked_naming_the_key(
    tmp_path: Path, content: str, key: str, expected: str
) -> None:
    """A wrong [reminders] value or key is refused naming the file, the key and what was expected."""
    path = tmp_path / "config.toml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key == key and expected in info.value.expected
    assert str(info.value).startswith(f"{path}: {key}: ")


async def test_a_reload_changes_the_reminder_limits_of_the_running_daemon(
    api: AnthropicStandIn, tmp_path: Path
) -> None:
    """`[reminders]` edited and reloaded applies to the next set_reminder, without a restart."""
    path = tmp_path / "config.toml"

    def write(max_pending: int) -> None:
        path.write_text(f'[database]\npath = "{tmp_path / "switchboard.db"}"\n'
                        f'[anthropic]\nbase_url = "{api.base_url}"\nmodel = "test-model"\n'
                        '[semantic]\nenabled = "off"\n'
                        f"[reminders]\nmax_pending = {max_pending}\n", encoding="utf-8")

    write(1)
    clock = Clock(time.time())
    async with daemon_on(load_config(path), [FakeChannel("telegram")], clock) as daemon:
        context = context_of(DM, ChatRef("telegram", "42"), 0, clock.now)
        await set_reminder(daemon, context, text="one", when="in 1 hour")
        assert daemon.reminder_tools is not None
        (tool,) = [t for t in daemon.reminder_tools.tools() if t.name == "set_reminder"]
        refused = await tool.run({"text": "two", "when": "in 2 hours"}, context)
        assert refused.is_error and "already have 1 pending reminder;" in refused.content
        write(2)
        assert (await daemon.reload())["reloaded"] is True
        await set_reminder(daemon, context, text="two", when="in 2 hours")
