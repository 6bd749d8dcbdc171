"""The daemon's commands: run, chat, init, check-config, and status and reload of a running one."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.cli.base import (
    DEFAULT_CONFIG,
    EXIT_NOT_RUNNING,
    control_path,
    format_duration,
    load_config_file,
    setup_logging,
    utc_time,
)
from bot.core.errors import BotError

if TYPE_CHECKING:
    from bot.config import Config


def run(args: argparse.Namespace) -> int:
    config = _load_or_defaults(args)
    # Everything `run` can refuse is refused before the daemon (the SDKs, the platform libraries)
    # is imported: a bad file costs what check-config costs.
    _check_startable(config, terminal=sys.stdin.isatty())

    from bot.daemon.assembly import Daemon, build_channels, console_attached
    from bot.daemon.heap import serve_settled
    from bot.models.providers import model_sdks_of

    console = config.channels.console.enabled and console_attached()
    setup_logging(config, console=console)
    channels = build_channels(config, console=console)
    sdks = {sdk for agent in config.agent_ids() for sdk in model_sdks_of(config.for_agent(agent))}
    # A long-running process: start-up's objects are frozen out of the collector's walks.
    asyncio.run(serve_settled(Daemon(config, channels), sorted(sdks)))
    return 0


def _load_or_defaults(args: argparse.Namespace) -> Config:
    """The config file; on a terminal with no ./config.toml, the built-in defaults (and one line
    saying so). Headless, a missing file stays an error: nothing would be there to talk to."""
    from bot.config import parse_config

    if args.config != DEFAULT_CONFIG or Path(args.config).exists() or not sys.stdin.isatty():
        return load_config_file(args)
    config = parse_config({}, "<defaults>")
    print(f"switchboard: no {DEFAULT_CONFIG} here, so running on the built-in defaults (the console; "
          f"database {config.database_path()}); `make init` (or `switchboard init`) writes one to edit",
          file=sys.stderr)
    return config


def _check_startable(config: Config, *, terminal: bool) -> None:
    from bot.context.config_check import check_startable

    check_startable(config, terminal=terminal)


def chat(args: argparse.Namespace) -> int:
    from bot.config import parse_config
    from bot.daemon.assembly import Daemon, build_channels, serve

    # A newcomer with only an API key can chat before writing any config.
    explicit = args.config != DEFAULT_CONFIG
    config = (load_config_file(args) if explicit or Path(args.config).exists()
              else parse_config({}, "<defaults>"))
    setup_logging(config, quiet=True, console=sys.stdin.isatty())
    channels = build_channels(config, console=True, platforms=False)
    agent = config.for_agent(config.channel_agent("console")).agent
    print(f"Chatting with {agent.name} as {config.channels.console.user_name}; Ctrl-D to leave.",
          file=sys.stderr)
    asyncio.run(serve(Daemon(config, channels, until_input_ends=True)))
    return 0


def example_config_text() -> str:
    """The documented example config, from the installed package or the source tree."""
    packaged = resources.files("bot").joinpath("config.toml.example")
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    return (Path(__file__).resolve().parents[2] / "config.toml.example").read_text("utf-8")


def init(args: argparse.Namespace) -> int:
    from bot.config import load_config

    target = Path(args.config)
    if args.upgrade:
        from bot.cli.config_upgrade import upgrade

        return upgrade(target, example_config_text())
    if target.exists():
        print(f"switchboard: {target} already exists; leaving it as it is (`switchboard init --upgrade` "
              "adds the keys this version brings)", file=sys.stderr)
        return 1
    if sys.stdin.isatty() and sys.stdout.isatty():
        from bot.cli.guided_setup import guided_setup

        return guided_setup(target, example_config_text())
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(example_config_text(), encoding="utf-8")
    except OSError as exc:
        raise BotError(f"cannot write {target}: {exc.strerror or exc}") from exc
    config = load_config(target)
    print(f"Wrote {target}. Set these environment variables (secrets never go in the file):")
    print(f"  {config.anthropic.api_key_env}  your Anthropic API key (required)")
    print(f"  {config.channels.telegram.token_env}  Telegram bot token (if [channels.telegram] is enabled)")
    print(f"  {config.channels.discord.token_env}  Discord bot token (if [channels.discord] is enabled)")
    slack = config.channels.slack
    print(f"  {slack.bot_token_env}, {slack.app_token_env}  Slack bot and app-level tokens "
          "(if [channels.slack] is enabled)")
    print(f"  {config.channels.matrix.access_token_env}  Matrix account's access token "
          "(if [channels.matrix] is enabled)")
    return 0


def check_config(args: argparse.Namespace) -> int:
    from bot.config import load_config
    from bot.context.config_check import findings

    path = args.path or args.config
    config = load_config(path)
    # What `run` checks, in this shell's environment; whether a terminal is attached is not
    # known here, so a console-only config passes with a note.
    _check_startable(config, terminal=True)
    print("\n".join(findings(config, str(path))))
    return 0


def show_status(args: argparse.Namespace) -> int:
    import json

    from bot.daemon.control import NotRunningError, request

    config = load_config_file(args)
    try:
        reply = request(control_path(config), "status", timeout=10.0)
    except NotRunningError as exc:
        print(f"switchboard: {exc}")
        return EXIT_NOT_RUNNING
    if args.json:
        print(json.dumps(reply, indent=2, sort_keys=True))
        return 0 if reply.get("ok") else 1
    if not reply.get("ok"):
        raise BotError(f"the daemon could not answer: {reply.get('error')}")
    print(f"running: pid {reply['pid']}, up {format_duration(reply['uptime_s'])}, agent {reply['agent']}, "
          f"{'ready' if reply['ready'] else 'starting'}")
    print(f"config {reply['config']}  database {reply['database']}")
    for instance in reply.get("instances", []):  # several daemons on one shared store
        print(f"instance {instance['id']}: up since {utc_time(instance['started_at'])}, "
              f"seen {format_duration(max(0.0, time.time() - instance['seen_at']))} ago")
    for agent in reply.get("agents", []):
        count = agent["bindings"]
        bindings = f", {count} binding{'s' if count != 1 else ''}" if count else ""
        channels = ", ".join(agent["channels"]) or "none"
        print(f"agent {agent['id']} ({agent['name']}): channels {channels}{bindings}; "
              f"{agent['running']} running, {agent['waiting']} waiting")
    for channel in reply["channels"]:
        fix = f"; fix: {channel['fix']}" if channel.get("fix") else ""  # a refused token says what to do
        error = f"  (last error: {channel['error']}{fix})" if channel["error"] else ""
        restarts = channel.get("restarts", 0)
        restarted = f", restarted {restarts} time{'s' if restarts != 1 else ''}" if restarts else ""
        shards = channel.get("shards")  # a Discord bot split over several daemons
        runs = (f", shards {', '.join(map(str, shards['ids']))} of {shards['count']}" if shards else "")
        print(f"channel {channel['provider']}: {channel['state']}{runs}{restarted}{error}")
    for provider in reply.get("providers", []):  # a refused key, an unknown model, no credit
        print(f"provider {provider['name']}: last error {utc_time(provider['at'])}: {provider['error']}; "
              f"fix: {provider['fix']}")
    queue = reply["queue"]
    print(f"queue: {queue['pending']} message(s) in {len(queue['sessions'])} session(s)")
    for key, state in sorted(queue["sessions"].items()):
        print(f"  {key}  {'running' if state['running'] else 'idle'}, {state['waiting']} waiting")
    for job in reply["schedules"]:
        upcoming = ("paused (failing)" if job["paused"] else "disabled" if not job["enabled"]
                    else "not here: its channel is not running" if not job["runnable"]
                    else f"next {job['next_run']}")
        last = f"last {job['last_status']}" if job["last_status"] else "never run"
        if job["last_error"]:
            last += f" ({job['last_error']})"
        print(f"job {job['id']}: {upcoming}; {last}")
    for server in reply.get("mcp_servers", []):
        print(mcp_status_line(server))
    if reply.get("quarantined"):
        print(f"quarantined updates: {reply['quarantined']} (could not be parsed or stored; kept raw "
              "in the database's quarantine table)")
    failure = reply.get("last_error")
    print(f"last error: {failure.get('timestamp', '')} {failure.get('event')}"
          + (f": {failure['error']}" if failure.get("error") else "") if failure else "last error: none")
    reload = reply.get("last_reload")
    if reload:
        outcome = "applied" if reload["reloaded"] else f"rejected: {reload['error']}"
        print(f"last reload: {utc_time(reload['at'])} {outcome}")
    return 0


def mcp_status_line(server: dict[str, Any]) -> str:
    """One MCP server for `status`: its state, restarts, last error and the tools it offers now."""
    restarts = server["restarts"]
    line = f"mcp {server['name']}: {server['state']}"
    if restarts:
        line += f", restarted {restarts} time{'s' if restarts != 1 else ''}"
    if server["error"]:
        line += f" (last error: {server['error']})"
    tools = server["tools"]
    if tools:
        line += f"; {len(tools)} tool{'s' if len(tools) != 1 else ''}: {', '.join(tools)}"
    return line


def reload(args: argparse.Namespace) -> int:
    from bot.daemon.control import NotRunningError, request

    config = load_config_file(args)  # a broken file is reported here (exit 2), before the daemon is asked
    try:
        reply = request(control_path(config), "reload")
    except NotRunningError as exc:
        print(f"switchboard: {exc}", file=sys.stderr)
        return EXIT_NOT_RUNNING
    if not reply.get("ok"):
        raise BotError(f"the daemon could not reload: {reply.get('error')}")
    if not reply["reloaded"]:
        print(f"switchboard: reload rejected, the old config stays in force: {reply['error']}",
              file=sys.stderr)
        return 1
    changed, later = reply["changed"], reply["restart_required"]
    if changed:
        print(f"reloaded {config.source}: applied {', '.join(changed)}")
    else:
        print(f"reloaded {config.source}: {'nothing applied now' if later else 'nothing changed'}")
    if later:
        print(f"changed, but applied only by a restart of the daemon: {', '.join(later)}")
    return 0
