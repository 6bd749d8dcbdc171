"""The console's config page: the config in force (no secret values: they live in environment
variables the config names, and anything secret-shaped is blanked), `switchboard check-config`'s
result for the file as it is now, and a Reload button (`switchboard reload`)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from bot.config import Config, load_config
from bot.context.config_check import check_startable, findings
from bot.core.errors import BotError
from bot.core.log import Redactor
from bot.web.guard import SESSION_KEY, see_other
from bot.web.rendering import Renderer
from bot.web.running import RunningDaemon

DEFAULTS = "<defaults>"


def flatten(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every leaf: tables open up, lists of tables are numbered."""
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            yield from flatten(inner, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        for index, item in enumerate(value):
            yield from flatten(item, f"{path}[{index}]")
    else:
        yield path, value


def redacted_view(config: Config) -> list[dict[str, Any]]:
    """The config in force as sections of `key = value` lines; values differing from the built-in
    defaults marked; known secret values and secret-shaped strings blanked (defence in depth: the
    file cannot hold a secret, it names the variable that does)."""
    secrets = [value for name in config.secret_env_names() if (value := os.environ.get(name))]
    redact = Redactor(secrets).redact
    defaults = dict(flatten(Config().model_dump(mode="json")))
    sections: dict[str, list[dict[str, Any]]] = {}
    for key, value in flatten(config.model_dump(mode="json")):
        top = key.split(".", 1)[0].split("[", 1)[0]
        sections.setdefault(top, []).append({
            "key": key, "value": redact(json.dumps(value, ensure_ascii=False)),
            "set": key not in defaults or defaults[key] != value,
        })
    return [{"name": name, "lines": lines, "set": any(line["set"] for line in lines)}
            for name, lines in sections.items()]


def secret_variables(config: Config) -> list[dict[str, Any]]:
    """The environment variables the config takes secrets from: their names and whether each is set."""
    return [{"name": name, "set": bool(os.environ.get(name))}
            for name in dict.fromkeys(config.secret_env_names())]


def checked(source: str) -> tuple[list[str], str | None]:
    """`check-config` on the file as it is now: its lines, or the error that would stop a reload."""
    try:
        config = load_config(source)
        check_startable(config, terminal=True)
    except BotError as exc:
        return [], str(exc)
    return findings(config), None


@dataclass(frozen=True, slots=True)
class ConfigPage:
    """GET /config, and POST /config/reload (behind the door: a session and the form's CSRF token)."""

    base: str
    daemon: RunningDaemon
    renderer: Renderer

    def routes(self, app: web.Application) -> None:
        app.router.add_get(f"{self.base}/config", self.config)
        app.router.add_post(f"{self.base}/config/reload", self.reload)

    async def config(self, request: web.Request) -> web.Response:
        config = self.daemon.config
        lines: list[str] = []
        error: str | None = None
        if config.source != DEFAULTS:  # reading the file, its env file, a model's files: off the loop
            lines, error = await asyncio.to_thread(checked, config.source)
        last_reload = (await self.daemon.status()).get("last_reload")
        return self.renderer.page(
            "config.html", request[SESSION_KEY], source=config.source, defaults=config.source == DEFAULTS,
            sections=redacted_view(config), variables=secret_variables(config), check=lines,
            check_error=error, last_reload=last_reload, reloaded=request.query.get("reloaded") == "1",
        )

    async def reload(self, request: web.Request) -> web.Response:
        """What `switchboard reload` does: the daemon re-reads its file, applies it or keeps the old."""
        await self.daemon.reload()
        return see_other(f"{self.base}/config?reloaded=1")
