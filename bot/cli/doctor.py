"""`switchboard doctor`: every check a person would otherwise debug by hand, one line each with what
to do about a failure.

The config first (a file that does not load ends it: exit 2); then the running daemon's own view
when one answers on the control socket (its channels' states and last errors, its MCP servers);
then, all at once with a timeout each, the database, each provider's key and models, each bot's
token, MCP servers the daemon does not run, the browser console (`[web]`, when enabled), the
semantic weights, the systemd unit and the clock.
Exit 0 when nothing failed, 1 when a check failed, 2 for the config. No secret is ever printed:
each line is scrubbed of the values of every variable the config names for a secret.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.cli.base import DEFAULT_CONFIG, control_path, format_duration
from bot.cli.finding import Finding, failed, passed, plural, skipped
from bot.core.errors import BotError, ConfigError, describe

if TYPE_CHECKING:
    from bot.config import Config

DEFAULT_TIMEOUT = 10.0
# Starting an MCP server may first install it (`npx`): it gets this many times the timeout.
MCP_TIMEOUT_FACTOR = 3.0


@dataclass(frozen=True, slots=True)
class Check:
    """One check to run: its label (for a timeout's line), the coroutine, its time limit."""

    label: str
    run: Callable[[], Awaitable[Finding]]
    timeout: float


def doctor(args: argparse.Namespace) -> int:
    config, findings, config_failed = _config(args)
    if config is None:
        _print(findings, [])
        return 2
    from bot.core.log import configure_logging

    secrets = [value for name in config.secret_env_names() if (value := os.environ.get(name))]
    # The lines below say everything; library log lines would only interleave with them.
    configure_logging("CRITICAL", config.logging.format, secrets)
    daemon, daemon_findings = _daemon_view(config)
    findings += daemon_findings
    findings += asyncio.run(_run_all(checks(config, daemon, args.timeout)))
    _print(findings, secrets)
    return 2 if config_failed else 1 if any(f.ok is False for f in findings) else 0


def _config(args: argparse.Namespace) -> tuple[Config | None, list[Finding], bool]:
    """The config and its line; None when it does not load. The third value: a config failure
    (a file that loads but that `run` would refuse, e.g. a bot token's variable unset)."""
    from bot.config import check_startable, load_config, parse_config

    if args.config == DEFAULT_CONFIG and not Path(args.config).exists():
        # As `run` on a terminal: without ./config.toml the built-in defaults apply.
        config = parse_config({}, "<defaults>")
        line = skipped("config", f"no {DEFAULT_CONFIG} here: checking the built-in defaults (the console, "
                                 f"database {config.database_path()})",
                       "`switchboard init` writes one to edit")
    else:
        try:
            if not Path(args.config).exists():
                raise ConfigError(args.config, None, "not found; create one with `switchboard init`")
            config = load_config(args.config)
        except ConfigError as exc:
            return None, [Finding(False, "config", str(exc))], True
        line = passed("config", f"{config.source} is valid")
    try:
        check_startable(config)
    except ConfigError as exc:
        return config, [Finding(False, "config", str(exc))], True
    return config, [line], False


def _daemon_view(config: Config) -> tuple[dict[str, Any] | None, list[Finding]]:
    """The running daemon's `status`, as lines: itself, each channel, its last error logged."""
    from bot.daemon.control import NotRunningError, request

    try:
        reply = request(control_path(config), "status", timeout=5.0)
    except NotRunningError:
        return None, [skipped("daemon", "not running (nothing answers on its control socket); "
                                        "the checks below ran from here")]
    except (BotError, OSError, ValueError) as exc:
        return None, [failed("daemon", f"its control socket did not answer ({exc})",
                             "run doctor as the daemon's user, or restart the daemon")]
    if not reply.get("ok"):
        return None, [failed("daemon", f"could not answer: {reply.get('error')}", "see the daemon's log")]
    other = f", running with {reply['config']}" if reply.get("config") != config.source else ""
    up = f"pid {reply['pid']}, up {format_duration(reply['uptime_s'])}{other}"
    lines = [passed("daemon", f"running ({up})") if reply.get("ready")
             else skipped("daemon", f"starting ({up}): channels are still connecting")]
    for channel in reply.get("channels", []):
        lines.append(_channel_line(channel))
    failure = reply.get("last_error")
    if failure:
        text = f"{failure.get('timestamp', '')} {failure.get('event')}".strip()
        text += f": {failure['error']}" if failure.get("error") else ""
        lines.append(skipped("daemon's last error", text, "`switchboard status` and the log show more"))
    return reply, lines


def _channel_line(channel: dict[str, Any]) -> Finding:
    label = f"daemon's {channel['provider']}"
    state, error = channel["state"], channel.get("error")
    restarts = channel.get("restarts", 0)
    detail = state + (f", restarted {plural(restarts, 'time')}" if restarts else "")
    if state in ("error", "restarting"):
        return failed(label, detail + (f" (last error: {error})" if error else ""),
                      "the line for its token below, the log and `switchboard status` say why")
    if state == "connected":
        return passed(label, detail + (f" (last error: {error})" if error else ""))
    if state == "reconnecting":  # running, but the platform stopped answering: the channel retries
        return skipped(label, detail + f" ({error or 'the platform does not answer'})",
                       "it retries by itself; if it stays so, the line for its token below and the log "
                       "say why")
    return skipped(label, detail)


def checks(config: Config, daemon: dict[str, Any] | None, timeout: float) -> list[Check]:
    """Every check of this config, in the order their lines are printed."""
    from bot.cli.doctor_host import check_clock, check_database, check_mcp, check_semantic, check_service
    from bot.cli.doctor_models import check_provider, model_uses
    from bot.cli.doctor_platforms import check_discord, check_matrix, check_slack, check_telegram
    from bot.cli.doctor_web import web_checks
    from bot.config import DiscordConfig, MatrixConfig, SlackConfig, TelegramConfig

    running = daemon is not None
    found = [Check("database", partial(check_database, config, daemon_running=running), timeout * 3)]
    for name, models in model_uses(config).items():
        provider = partial(check_provider, config, name, models, timeout)
        found.append(Check(f"provider {name}", provider, timeout))
    for name, section in config.chat_sections.items():
        if not section.enabled:
            continue
        if isinstance(section, TelegramConfig):
            found.append(Check(name, partial(check_telegram, name, section, daemon_running=running), timeout))
        elif isinstance(section, DiscordConfig):
            found.append(Check(name, partial(check_discord, name, section), timeout))
        elif isinstance(section, SlackConfig):
            found.append(Check(name, partial(check_slack, name, section), timeout))
        elif isinstance(section, MatrixConfig):
            found.append(Check(name, partial(check_matrix, name, section), timeout))
    reported = {server["name"]: server for server in (daemon or {}).get("mcp_servers", [])}
    for server in config.mcp_servers:
        if not server.enabled:
            continue
        if server.name in reported:
            seen = partial(_now, _daemon_mcp, reported[server.name])
            found.append(Check(f"mcp {server.name}", seen, timeout))
        else:
            limit = timeout * MCP_TIMEOUT_FACTOR
            # The server gets the limit; the check a little more, to stop it cleanly after.
            found.append(Check(f"mcp {server.name}", partial(check_mcp, config, server, limit), limit + 10))
    found += [Check(label, run, timeout) for label, run in web_checks(config, daemon)]
    found.append(Check("semantic recall", partial(_now, check_semantic, config), timeout))
    found.append(Check("service", check_service, timeout))
    found.append(Check("clock", partial(check_clock, _clock_url(config), timeout), timeout + 1))
    return found


async def _now(check: Callable[[Any], Finding], subject: Any) -> Finding:
    """A check that needs no waiting, run as the others are (its crash is caught the same way)."""
    return check(subject)


def _daemon_mcp(server: dict[str, Any]) -> Finding:
    """An MCP server as the running daemon reports it (doctor does not start a second copy)."""
    label = f"mcp {server['name']}"
    tools = server.get("tools", [])
    if server["state"] == "running":
        return passed(label, f"running in the daemon; {plural(len(tools), 'tool')}"
                             + (f": {', '.join(tools)}" if tools else ""))
    error = f" (last error: {server['error']})" if server.get("error") else ""
    return failed(label, f"{server['state']} in the daemon{error}",
                  "check its command, args and env; `switchboard status` shows its restarts")


def _clock_url(config: Config) -> str:
    """The main model's server: an answer from it carries a Date to compare this clock with."""
    chain = config.role_chain("main")
    settings = config.all_providers().get(chain[0][0]) if chain else None
    url = (settings.url() if settings is not None else None) or "https://api.anthropic.com"
    return url.rstrip("/") + "/"


async def _run_all(found: list[Check]) -> list[Finding]:
    return list(await asyncio.gather(*(_guarded(check) for check in found)))


async def _guarded(check: Check) -> Finding:
    """A check's finding; a timeout or the check's own crash becomes a failed line, not a traceback."""
    try:
        return await asyncio.wait_for(check.run(), check.timeout)
    except TimeoutError:
        return failed(check.label, f"no answer within {check.timeout:g} s",
                      "check the network (or allow longer: --timeout)")
    except Exception as exc:
        logging.getLogger("switchboard.doctor").debug("check crashed: %s", check.label, exc_info=True)
        return failed(check.label, f"the check failed: {describe(exc)}",
                      "this is doctor's own fault: please report it")


def _print(findings: list[Finding], secrets: list[str]) -> None:
    unicode = _can_print("✓✗–—")
    for finding in findings:
        line = finding.line(unicode=unicode)
        for secret in secrets:
            if len(secret) >= 6:  # a short value would blank out ordinary words
                line = line.replace(secret, "[redacted]")
        print(line)
    problems = sum(1 for f in findings if f.ok is False)
    print(f"{plural(problems, 'problem')} found" if problems else "all checks passed")


def _can_print(text: str) -> bool:
    """Whether stdout can show these marks (a C locale's terminal cannot; a StringIO has no encoding)."""
    encoding = getattr(sys.stdout, "encoding", None)
    try:
        text.encode(encoding or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return False
    return True
