"""Who may talk to the bot, and what talking cost: `switchboard pairing` and `switchboard usage`.

Pairing decisions are written to the database the running daemon reads, so they apply to the
user's next message with no reload; usage is summed from the calls the daemon recorded.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from zoneinfo import ZoneInfo

from bot.cli.base import UsageError, load_config_file, on_database, open_store, utc_time
from bot.core.errors import BotError


def pairing_usage(args: argparse.Namespace) -> int:
    print("usage: switchboard pairing list | approve CODE | approve --user PROVIDER:ID | deny CODE | "
          "deny --user PROVIDER:ID", file=sys.stderr)
    return 2


def list_pairings(args: argparse.Namespace) -> int:
    config = load_config_file(args)

    async def show() -> None:
        async with open_store(config) as store:
            found = await store.pairings()
        if not found:
            print("no pairing requests yet")
            return
        now = time.time()
        for pairing in found:
            status: str = pairing.status
            if status == "pending":
                expired = pairing.expires_at is not None and pairing.expires_at <= now
                status = "expired" if expired else f"pending  code {pairing.code}"
            when = utc_time(pairing.decided_at or pairing.requested_at)
            name = f" ({pairing.user_name})" if pairing.user_name else ""
            print(f"{pairing.provider}:{pairing.user_id}{name}  {status}  {when}")

    on_database(config, show)
    return 0


def approve(args: argparse.Namespace) -> int:
    return _decide(args, approve=True)


def deny(args: argparse.Namespace) -> int:
    return _decide(args, approve=False)


def _decide(args: argparse.Namespace, *, approve: bool) -> int:
    from bot.store import PairingError

    if (args.code is None) == (args.user is None):
        raise UsageError("name a pairing code, or a user with --user PROVIDER:ID (not both)")
    config = load_config_file(args)
    target = _user(args.user, list(config.chat_sections)) if args.user is not None else None

    async def decide() -> None:
        async with open_store(config) as store:
            try:
                if target is not None:
                    pairing = await store.decide_user(*target, approve, now=time.time())
                else:
                    pairing = await store.decide_pairing(args.code, approve, now=time.time())
            except PairingError as exc:
                raise BotError(str(exc)) from exc
        who = f"{pairing.provider}:{pairing.user_id}"
        if pairing.user_name:
            who += f" ({pairing.user_name})"
        if approve:
            print(f"approved {who}: their next message is answered")
        else:
            print(f"denied {who}: they stay out until approved with --user")

    on_database(config, decide)
    return 0


def _user(text: str, channels: list[str]) -> tuple[str, str]:
    """A user of one bot: pairing is per bot, so an extra account's users are "telegram.work:ID"."""
    provider, _, user_id = text.partition(":")
    # Slack's member ids are capitals and digits (U0123ABCD), Matrix's "@name:server"; the other
    # platforms' are numbers.
    platform = provider.partition(".")[0]
    slack = platform == "slack" and user_id.isascii() and user_id.isalnum() and user_id.isupper()
    matrix = platform == "matrix" and re.fullmatch(r"@[^:\s]+:\S+", user_id) is not None
    if provider not in channels or not (slack or matrix or user_id.lstrip("-").isdigit()):
        raise UsageError(f"--user takes PROVIDER:ID, e.g. telegram:123456789 (provider one of "
                         f"{', '.join(channels)}), not {text!r}")
    return provider, user_id


def show_usage(args: argparse.Namespace) -> int:
    from bot.models.usage import describe, usage_report, window

    config = load_config_file(args)
    zone = ZoneInfo(config.agent.timezone)
    since, period = window(time.time(), zone, args.days)

    async def show() -> None:
        async with open_store(config) as store:
            report = await usage_report(store, since, zone, (args.by,), config.prices)
        groups = report.groups[args.by]
        print(f"model use {period} ({config.agent.timezone}), by {args.by}; cost estimated from [prices]")
        for name in sorted(groups):
            print(f"{name}  {describe(groups[name])}")
        print(f"total  {describe(report.total)}")

    on_database(config, show)
    return 0
