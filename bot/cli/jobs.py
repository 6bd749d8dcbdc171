"""The scheduled-job commands: list the jobs, and ask the running daemon to run one now."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from bot.cli.base import EXIT_NOT_RUNNING, control_path, load_config_file, on_database, utc_time
from bot.core.errors import BotError

if TYPE_CHECKING:
    from bot.store import Reminder, ScheduleRun


def list_jobs(args: argparse.Namespace) -> int:
    from bot.schedule.scheduler import failing
    from bot.schedule.triggers import job_trigger
    from bot.store.opening import open_store

    config = load_config_file(args)
    path = config.database_path()

    async def show() -> None:
        async with AsyncExitStack() as stack:
            exists = config.database.url is not None or path.exists()
            store = await stack.enter_async_context(open_store(config)) if exists else None
            now = datetime.now(UTC)
            if not config.schedules:
                print(f"no [[schedules]] in {config.source}")
            for job in config.schedules:
                when = f'cron "{job.cron}"' if job.cron else f"every {job.every}"
                zone = job.timezone or config.for_agent(config.job_key(job).agent_id).agent.timezone
                runs = await store.schedule_runs(job.id, 1) if store else []
                paused = store is not None and await failing(store, job.id, config.scheduler.max_failures)
                if not job.enabled:
                    upcoming = "disabled"
                elif paused:
                    upcoming = "paused (failing)"
                else:
                    at = job_trigger(job, config).get_next_fire_time(None, now)
                    upcoming = f"next {at.strftime('%Y-%m-%d %H:%M %Z')}" if at else "no next run"
                print(f"{job.id}  {when} {zone}  to {job.deliver_to}  {upcoming}  {_last(runs)}")
            if store is not None:
                for reminder in await store.pending_reminders():
                    runs = await store.schedule_runs(reminder.job_id, 1)
                    print(_reminder_line(reminder, runs, now.timestamp()))

    asyncio.run(show())
    return 0


def _last(runs: list[ScheduleRun]) -> str:
    if not runs:
        return "never run"
    run = runs[0]
    last = f"last {run.status} for {utc_time(run.scheduled_for)}"
    return f"{last} ({run.error})" if run.error else last


def _reminder_line(reminder: Reminder, runs: list[ScheduleRun], now: float) -> str:
    """A pending reminder beside the configured jobs: when, where, whose, and what it says."""
    from bot.schedule.reminders import next_time

    zone = ZoneInfo(reminder.timezone)
    when = f'cron "{reminder.repeat}"' if reminder.repeat else "once"
    at = next_time(reminder, now)
    upcoming = "no next run"
    if at is not None:
        upcoming = f"next {datetime.fromtimestamp(at, zone).strftime('%Y-%m-%d %H:%M %Z')}"
    chat = reminder.chat.chat_id + (f" thread {reminder.chat.thread_id}" if reminder.chat.thread_id else "")
    owner = f"{reminder.chat.provider} user {reminder.user_id}" + (
        f" ({reminder.user_name})" if reminder.user_name else "")
    return (f"{reminder.job_id}  {when} {reminder.timezone}  to {reminder.session_key} (chat {chat})  "
            f"{upcoming}  {_last(runs)}  reminder set by {owner}: {reminder.text!r}")


def run_job(args: argparse.Namespace) -> int:
    from bot.daemon.control import NotRunningError, request
    from bot.store.opening import open_store

    config = load_config_file(args)
    ids = [job.id for job in config.schedules]
    if args.job_id not in ids:
        raise BotError(f"no job {args.job_id!r} in {config.source}; jobs: {', '.join(ids) or 'none'}")
    # The daemon is asked first: a request nobody takes up would run whenever it next starts.
    try:
        reply = request(control_path(config), "status", timeout=10.0)
    except NotRunningError as exc:
        print(f"switchboard: {exc}; start it with `switchboard run`, then ask again", file=sys.stderr)
        return EXIT_NOT_RUNNING
    if not reply.get("ok"):
        raise BotError(f"the daemon could not answer: {reply.get('error')}")
    job = next((j for j in reply.get("schedules", []) if j.get("id") == args.job_id), None)
    if job is None:
        raise BotError(f"the running daemon has no job {args.job_id!r}: it runs {reply.get('config')}; "
                       "after editing the file, `switchboard reload`")
    if not job.get("runnable", True):
        raise BotError(f"job {args.job_id!r} cannot run now: its channel is not running in the daemon")

    async def ask() -> int:
        async with open_store(config) as store:
            waiting = [run for run in await store.pending_runs("requested") if run.job_id == args.job_id]
            if waiting:  # asked twice before the daemon took it up: still one run
                run = waiting[0]
                print(f"run #{run.id} of {args.job_id} was already requested; the daemon picks it up "
                      f"within {config.scheduler.request_poll:g}s")
            else:
                run = await store.request_run(args.job_id, time.time())
                print(f"requested run #{run.id} of {args.job_id}; the daemon picks it up within "
                      f"{config.scheduler.request_poll:g}s")
            deadline = time.monotonic() + args.wait
            status = run.status
            while args.wait > 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                current = await store.schedule_run_by_id(run.id)
                if current is None:  # the database was replaced or edited meanwhile
                    raise BotError(f"run #{run.id} is no longer in the database")
                status = current.status
                if status in ("delivered", "quiet", "failed", "stale"):
                    detail = f": {current.error}" if current.error else ""
                    print(f"run #{run.id}: {status}{detail}")
                    return 0 if status in ("delivered", "quiet") else 1
            if args.wait > 0:
                print(f"run #{run.id} is still {status} after {args.wait:g}s; `switchboard jobs` shows "
                      "its outcome later", file=sys.stderr)
                return 1
            return 0

    code: int = on_database(config, ask)
    return code
