"""The console's admin pages: pairing requests (approve, deny), jobs and reminders (run now,
cancel), and the users' notes — what `switchboard pairing`, `jobs` and `notes` show and do.

Decisions go to the store the daemon reads, as the commands' do; a job's "Run now" is recorded as
`switchboard jobs run` records it, and the daemon serving the page takes it up at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlencode

from aiohttp import web

from bot.schedule.reminders import next_time
from bot.store import PairingError
from bot.store.pairings import Pairing
from bot.store.people import UserNote
from bot.store.records import RunStatus, ScheduleRun
from bot.store.reminders import Reminder
from bot.web.guard import SESSION_KEY, see_other
from bot.web.rendering import Renderer
from bot.web.running import RunningDaemon


class AdminStore(Protocol):
    """What the admin pages read and write: pairings, runs, reminders, notes."""

    async def pairings(self, *, provider: str | None = None, user_id: str | None = None) -> list[Pairing]: ...
    async def decide_pairing(self, code: str, approve: bool, *, now: float) -> Pairing: ...
    async def decide_user(self, provider: str, user_id: str, approve: bool, *, now: float) -> Pairing: ...
    async def schedule_runs(self, job_id: str, limit: int) -> list[ScheduleRun]: ...
    async def schedule_run_by_id(self, run_id: int) -> ScheduleRun | None: ...
    async def pending_runs(self, status: RunStatus) -> list[ScheduleRun]: ...
    async def request_run(self, job_id: str, at: float) -> ScheduleRun: ...
    async def pending_reminders(
        self, *, session_key: str | None = None, provider: str | None = None, user_id: str | None = None
    ) -> list[Reminder]: ...
    async def reminder_by_id(self, reminder_id: int) -> Reminder | None: ...
    async def cancel_reminder(
        self, reminder_id: int, *, session_key: str, user_id: str
    ) -> Reminder | None: ...
    async def all_notes(self) -> list[UserNote]: ...


def pairing_row(pairing: Pairing, now: float) -> dict[str, Any]:
    """A pairing as the list shows it: who, where it stands (an old code has expired), what can be done."""
    status: str = pairing.status
    if status == "pending" and pairing.expires_at is not None and pairing.expires_at <= now:
        status = "expired"
    return {"who": f"{pairing.provider}:{pairing.user_id}", "name": pairing.user_name, "status": status,
            "code": pairing.code if status == "pending" else None,
            "at": pairing.decided_at or pairing.requested_at, "expires_at": pairing.expires_at}


def _form(form: Any, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


@dataclass(frozen=True, slots=True)
class AdminPages:
    """Pairing, jobs and reminders, notes: every handler behind the door (a session, and CSRF on POST)."""

    base: str
    store: AdminStore
    daemon: RunningDaemon
    renderer: Renderer

    def routes(self, app: web.Application) -> None:
        app.router.add_get(f"{self.base}/pairing", self.pairing)
        app.router.add_post(f"{self.base}/pairing", self.decide)
        app.router.add_get(f"{self.base}/jobs", self.jobs)
        app.router.add_post(f"{self.base}/jobs/run", self.run_job)
        app.router.add_post(f"{self.base}/reminders/cancel", self.cancel_reminder)
        app.router.add_get(f"{self.base}/notes", self.notes)

    def _page(self, request: web.Request, template: str, *, status: int = 200, **values: Any) -> web.Response:
        return self.renderer.page(template, request[SESSION_KEY], status=status, **values)

    def _back(self, path: str, **outcome: str) -> web.Response:
        return see_other(f"{self.base}{path}?{urlencode(outcome)}")

    async def pairing(
        self, request: web.Request, *, error: str | None = None, status: int = 200
    ) -> web.Response:
        now = time.time()
        rows = [pairing_row(p, now) for p in await self.store.pairings()]
        return self._page(request, "pairing.html", status=status, rows=rows, error=error,
                          done=request.query.get("done", ""), who=request.query.get("who", ""),
                          channels=list(self.daemon.config.chat_sections))

    async def decide(self, request: web.Request) -> web.Response:
        """Approve or deny by code (a pending request) or by user (PROVIDER:ID), as the command does."""
        form = await request.post()
        approve = _form(form, "decision") == "approve"
        code, user = _form(form, "code"), _form(form, "user")
        now = time.time()
        try:
            if code:
                pairing = await self.store.decide_pairing(code, approve, now=now)
            else:
                provider, _, user_id = user.partition(":")
                if provider not in self.daemon.config.chat_sections or not user_id.lstrip("-").isdigit():
                    return await self.pairing(request, status=400, error=(
                        f"a user is PROVIDER:ID, e.g. telegram:123456789, not {user!r}"))
                pairing = await self.store.decide_user(provider, user_id, approve, now=now)
        except PairingError as exc:
            return await self.pairing(request, status=400, error=str(exc))
        return self._back("/pairing", done="approved" if approve else "denied",
                          who=f"{pairing.provider}:{pairing.user_id}")

    async def jobs(self, request: web.Request) -> web.Response:
        report = await self.daemon.status()
        now = time.time()
        reminders = []
        for reminder in await self.store.pending_reminders():
            runs = await self.store.schedule_runs(reminder.job_id, 1)
            reminders.append({"reminder": reminder, "next": next_time(reminder, now),
                              "last": runs[0] if runs else None})
        run_text = request.query.get("run", "")
        run = await self.store.schedule_run_by_id(int(run_text)) if run_text.isdigit() else None
        return self._page(request, "jobs.html", jobs=report.get("schedules") or [], reminders=reminders,
                          run=run, again=request.query.get("again") == "1",
                          cancelled=request.query.get("cancelled", ""), error=request.query.get("error", ""),
                          configured={job.id: job for job in self.daemon.config.schedules})

    async def run_job(self, request: web.Request) -> web.Response:
        """Run a job now: recorded as `switchboard jobs run` records it; this daemon takes it up at once
        when it runs the job's channel, else the instance that does within its poll."""
        job_id = _form(await request.post(), "job")
        jobs = (await self.daemon.status()).get("schedules") or []
        job = next((j for j in jobs if j.get("id") == job_id), None)
        if job is None:
            return self._back("/jobs", error=f"the running daemon has no job {job_id!r}")
        # Asked twice before it was taken up: still one run.
        waiting = [r for r in await self.store.pending_runs("requested") if r.job_id == job_id]
        run = waiting[0] if waiting else await self.store.request_run(job_id, time.time())
        scheduler = self.daemon.scheduler
        if scheduler is not None and job.get("runnable", True):
            await scheduler.poll_requests()
        return self._back("/jobs", run=str(run.id), again="1" if waiting else "0")

    async def cancel_reminder(self, request: web.Request) -> web.Response:
        """Cancel a pending reminder for its owner (the admin may), and forget its timer here."""
        text = _form(await request.post(), "reminder")
        reminder = await self.store.reminder_by_id(int(text)) if text.isdigit() else None
        cancelled = None
        if reminder is not None:
            cancelled = await self.store.cancel_reminder(reminder.id, session_key=reminder.session_key,
                                                         user_id=reminder.user_id)
        if cancelled is None:
            return self._back("/jobs", error=f"no pending reminder #{text}")
        timer = self.daemon.reminders
        if timer is not None:
            timer.remove(cancelled.id)
        return self._back("/jobs", cancelled=str(cancelled.id))

    async def notes(self, request: web.Request) -> web.Response:
        owners: dict[str, list[UserNote]] = {}
        for note in await self.store.all_notes():
            owners.setdefault(f"{note.provider}:{note.user_id}", []).append(note)
        return self._page(request, "notes.html", owners=owners)
