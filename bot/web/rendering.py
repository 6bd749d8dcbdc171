"""The console's pages as HTML: Jinja2 templates shipped in the package, every value escaped."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import jinja2
from aiohttp import web

from bot.core.media import size_text
from bot.store.web_accounts import WebSession


def when(timestamp: float | None) -> str:
    """A stored time as the pages show it (UTC, to the second)."""
    if timestamp is None:
        return "-"
    return datetime.fromtimestamp(float(timestamp), UTC).strftime("%Y-%m-%d %H:%M:%S")


def duration(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    return f"{days}d {hours}h" if days else f"{hours}h {minutes}m" if hours else f"{minutes}m {rest % 60}s"


def session_path(key: str) -> str:
    """A session key as a path segment (its colons kept: they read well and need no escaping)."""
    return quote(key, safe=":")


def templates() -> jinja2.Environment:
    """The template environment: autoescape on for every template, undefined names are errors."""
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("bot.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(when=when, duration=duration, session_path=session_path,
                               filesize=size_text)
    return environment


@dataclass(frozen=True, slots=True)
class Renderer:
    """Renders a page with what every page needs: the path prefix, who is logged in (and as what),
    the form token, whether the web chat runs."""

    environment: jinja2.Environment
    base: str
    chat: Callable[[], bool] = lambda: False

    def page(
        self, template: str, session: WebSession | None, *, status: int = 200, **values: Any
    ) -> web.Response:
        html = self.environment.get_template(template).render(
            base=self.base, account=session.account if session else None,
            role=session.role if session else None, chat_on=self.chat(),
            csrf=session.csrf_token if session else "", **values,
        )
        return web.Response(text=html, status=status, content_type="text/html")
