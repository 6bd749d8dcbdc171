"""A send in doubt is looked for before it is sent again: a reply Telegram created just before a
SIGKILL, whose id the daemon had not committed, is found by the restarted daemon and not posted a
second time; one Telegram never created is sent. The daemon is `switchboard run` in a process of
its own (bench/crash_loop.py's driver, forking it from the session's zygote), the Bot API and the
model are stand-ins in this process."""

from __future__ import annotations

import signal
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from bench.crash_loop import (
    CONNECT_TIMEOUT,
    TELEGRAM_TOKEN,
    Cycle,
    Driver,
    Plan,
    TelegramPlatform,
    slow_echo,
)
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.preloaded import Preloaded
from bot.testing.telegram_api import TelegramStandIn


def recorded_reply_ids(db: Path) -> list[str]:
    """The platform ids the store recorded for the bot's replies."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT pm.provider_message_id FROM provider_messages pm JOIN messages m "
                            "ON m.id = pm.message_id WHERE m.role = 'assistant' ORDER BY m.id").fetchall()
    return [str(row[0]) for row in rows]


class ForkedDriver(Driver):
    """The crash loop's driver, its daemons forked from the session's zygote (the same `switchboard
    run` in a process of its own, its imports done once: what is tested is what it does after)."""

    def __init__(self, preloaded: Preloaded, *args: Any) -> None:
        super().__init__(*args)
        self.preloaded = preloaded

    async def spawn(self, cycle: Cycle) -> Any:
        self.notify.ready()  # drop what an earlier process said
        argv = self.platform.command(self.config)[3:]  # [python, -m, bot, run, ...]
        return await self.preloaded.spawn(argv, cwd=self.workdir, env=self.env, log=cycle.log)


@asynccontextmanager
async def telegram_daemon_run(
    tmp_path: Path, preloaded: Preloaded
) -> AsyncIterator[tuple[TelegramStandIn, Driver]]:
    async with AnthropicStandIn() as api, TelegramStandIn(token=TELEGRAM_TOKEN) as tg:
        api.default = slow_echo(1)
        plan = Plan(signals=(), users=2, seed=1)
        driver = ForkedDriver(preloaded, TelegramPlatform(tg), tmp_path, plan, api)
        try:
            yield tg, driver
        finally:
            driver.notify.close()


async def start(driver: Driver, tg: TelegramStandIn, name: str) -> tuple[Cycle, object]:
    cycle = Cycle(name, driver.workdir / f"{name}.log")
    proc = await driver.spawn(cycle)
    contacts = sum(call.method == "getUpdates" for call in tg.calls)
    assert await driver.watch(proc, cycle, time.monotonic(), 0,
                              lambda: sum(c.method == "getUpdates" for c in tg.calls) > contacts,
                              CONNECT_TIMEOUT), cycle.log.read_text()
    return cycle, proc


async def test_a_reply_telegram_created_before_a_kill_is_found_and_not_sent_again(
    tmp_path: Path, preloaded: Preloaded
) -> None:
    """Telegram creates the reply and its answer is held until the daemon is SIGKILLed (so its id is
    never committed); the restarted daemon asks the ids after the request, finds its own message
    there without changing it, records it, and the chat shows the reply once. Another user's
    message arriving meanwhile is answered as usual."""
    async with telegram_daemon_run(tmp_path, preloaded) as (tg, driver):
        release = tg.hold_next("sendMessage")
        cycle, proc = await start(driver, tg, "first")
        driver.write(0)
        assert await driver.watch(proc, cycle, 0.0, 0, lambda: len(tg.sent) == 1, 20), cycle.log.read_text()
        await driver.stop(proc, cycle, signal.SIGKILL)  # Telegram has the message; the daemon had no id
        release.set()
        assert recorded_reply_ids(driver.db) == []
        driver.write(1)

        cycle, proc = await start(driver, tg, "again")
        assert await driver.watch(proc, cycle, 0.0, 0, lambda: len(recorded_reply_ids(driver.db)) == 2
                                  and len(tg.sent) >= 2, 20), cycle.log.read_text()
        await driver.stop(proc, cycle, signal.SIGTERM)

    texts = [m.visible_text for m in tg.sent]
    assert sorted(texts) == ["re: m0-0", "re: m1-0"], texts
    first = tg.sent[0]
    assert first.visible_text == "re: m0-0" and str(first.message_id) in recorded_reply_ids(driver.db)
    probes = [c for c in tg.calls if c.method == "editMessageReplyMarkup"]
    assert probes and all(c.failed for c in probes)  # "not modified" and the like: nothing changed
    assert not tg.edits
    assert "send in doubt found: not sent again" in (driver.workdir / "again.log").read_text()


async def test_a_reply_telegram_never_created_is_sent_after_the_restart(
    tmp_path: Path, preloaded: Preloaded
) -> None:
    """The reply's request to Telegram is still on its way (not created) when the daemon is
    SIGKILLed; the restarted daemon finds nothing of its own after the request and sends it once."""
    async with telegram_daemon_run(tmp_path, preloaded) as (tg, driver):
        tg.delay_next("sendMessage", 120)  # longer than the test: Telegram never creates it
        cycle, proc = await start(driver, tg, "first")
        driver.write(0)
        assert await driver.watch(proc, cycle, 0.0, 0,
                                  lambda: any(c.method == "sendMessage" for c in tg.calls), 20)
        await driver.stop(proc, cycle, signal.SIGKILL)
        assert tg.sent == []

        cycle, proc = await start(driver, tg, "again")
        assert await driver.watch(proc, cycle, 0.0, 0, lambda: len(tg.sent) == 1
                                  and len(recorded_reply_ids(driver.db)) == 1, 20), cycle.log.read_text()
        await driver.stop(proc, cycle, signal.SIGTERM)

    assert [m.visible_text for m in tg.sent] == ["re: m0-0"]
    assert "send in doubt found" not in (driver.workdir / "again.log").read_text()
