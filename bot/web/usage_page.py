"""The console's usage page: tokens and estimated cost per day, model, agent and user, as SVG bar
charts drawn on the server with the table beside each; summed by the store in one read and priced by
`bot.models.usage`, as `switchboard usage`."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo

import structlog
from aiohttp import web

from bot.models.usage import UsageSums, UsageTotal, usage_report, window
from bot.web.charts import Chart, bars, columns, compact, money
from bot.web.guard import SESSION_KEY
from bot.web.rendering import Renderer
from bot.web.running import RunningDaemon

PERIODS = (7, 30, 90)  # the windows offered besides this month
METRICS = ("tokens", "cost")
BY_NAME = ("model", "agent", "user")  # charts of bars by name, after the columns by day
MOST = 15  # names drawn in a chart; the table lists them all

log = structlog.get_logger("switchboard.web")


class UsageStore(UsageSums, Protocol):
    """The page's one read: the window's calls summed per group by the store."""


def tokens_of(summed: UsageTotal) -> float:
    """Every token a group's calls used: in and out, cache writes and reads included."""
    return float(summed.input_tokens + summed.output_tokens + summed.cache_write_tokens
                 + summed.cache_read_tokens)


def cost_of(summed: UsageTotal) -> float:
    return summed.cost or 0.0


def days_between(first: date, last: date) -> list[str]:
    """Every day from `first` to `last` as YYYY-MM-DD: a column for each, the quiet ones too."""
    return [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]


def day_chart(
    groups: dict[str, UsageTotal], since: float, now: float, zone: ZoneInfo, metric: str
) -> Chart:
    value, shown = (tokens_of, compact) if metric == "tokens" else (cost_of, money)
    days = days_between(datetime.fromtimestamp(since, zone).date(), datetime.fromtimestamp(now, zone).date())
    return columns(f"{metric} per day", [(day, value(groups[day]) if day in groups else 0.0) for day in days],
                   shown)


def name_chart(groups: dict[str, UsageTotal], by: str, metric: str) -> Chart:
    value, shown = (tokens_of, compact) if metric == "tokens" else (cost_of, money)
    ranked = sorted(groups.items(), key=lambda item: (-value(item[1]), item[0]))[:MOST]
    return bars(f"{metric} per {by}", [(name, value(summed)) for name, summed in ranked], shown)


@dataclass(frozen=True, slots=True)
class UsagePage:
    """GET /usage?days=N&metric=tokens|cost: the charts and tables of one window."""

    base: str
    store: UsageStore
    daemon: RunningDaemon
    renderer: Renderer
    clock: Callable[[], float] = time.time

    def routes(self, app: web.Application) -> None:
        app.router.add_get(f"{self.base}/usage", self.usage)
        app.cleanup_ctx.append(self._warming)

    async def _warming(self, app: web.Application) -> AsyncIterator[None]:
        """While the console runs: the windows the page offers summed once in the background as
        it starts (this month first, then 7, 30 and 90 days), so the store keeps their sums and an
        admin's first view of each adds in only the calls stored since. Start does not wait on it."""
        task = asyncio.create_task(self.warm(), name="usage page warm-up")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def warm(self) -> None:
        """Sum each window the page offers, as a view of it would (the same names and zone), and
        compile the page's templates (~10 ms each, once per process; the charts' is loaded by the
        page's first render otherwise)."""
        for template in ("usage.html", "_chart.html"):
            self.renderer.environment.get_template(template)
        zone = ZoneInfo(self.daemon.config.agent.timezone)
        now = self.clock()
        for days in (None, *PERIODS):
            since, _ = window(now, zone, days)
            try:
                await self.store.usage_summed(since, ("day", *BY_NAME), zone)
            except Exception as exc:  # a view sums it then; nothing is lost
                log.warning("usage page warm-up failed", error=str(exc))
                return
        log.info("usage page warmed", windows=1 + len(PERIODS), seconds=round(self.clock() - now, 3))

    async def usage(self, request: web.Request) -> web.Response:
        config = self.daemon.config
        zone = ZoneInfo(config.agent.timezone)
        days_text = request.query.get("days", "")
        days = int(days_text) if days_text.isdigit() and 0 < int(days_text) <= 366 else None
        metric = request.query.get("metric", "tokens")
        metric = metric if metric in METRICS else "tokens"
        now = self.clock()
        since, period = window(now, zone, days)
        report = await usage_report(self.store, since, zone, ("day", *BY_NAME), config.prices)
        by_day = report.groups["day"]
        sections: list[dict[str, Any]] = [{"by": "day", "chart": day_chart(by_day, since, now, zone, metric),
                                           "rows": sorted(by_day.items(), reverse=True)}]
        for by in BY_NAME:
            groups = report.groups[by]
            sections.append({"by": by, "chart": name_chart(groups, by, metric),
                             "rows": sorted(groups.items(), key=lambda item: (-tokens_of(item[1]), item[0]))})
        return self.renderer.page(
            "usage.html", request[SESSION_KEY], sections=sections, summed=report.total,
            period=period, days=days, periods=PERIODS, metric=metric, metrics=METRICS,
            zone=config.agent.timezone,
        )
