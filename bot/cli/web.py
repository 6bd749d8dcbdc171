"""`switchboard web user add|list|remove`: the browser console's accounts (admins, and with
`--chat-only` accounts that may only use the web chat).

Accounts live in the database the daemon reads, so a new account can log in at once (no reload)
and a removed one is logged out everywhere, on every instance sharing the store.
"""

from __future__ import annotations

import argparse
import getpass
import sys
import time

from bot.cli.base import UsageError, load_config_file, on_database, open_store, utc_time
from bot.core.errors import BotError

MIN_PASSWORD = 10


def web_usage(args: argparse.Namespace) -> int:
    print("usage: switchboard web user add NAME | user list | user remove NAME", file=sys.stderr)
    return 2


def read_password() -> str:
    """The new password: asked twice on a terminal, else the first line of standard input."""
    if sys.stdin.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            raise UsageError("the two passwords differ; nothing was changed")
    else:
        first = sys.stdin.readline().rstrip("\r\n")
    if len(first) < MIN_PASSWORD:
        raise UsageError(f"a password of at least {MIN_PASSWORD} characters, please")
    return first


def add_user(args: argparse.Namespace) -> int:
    from bot.store.opening import open_store as opening
    from bot.store.web_accounts import Role
    from bot.web.auth import account_name_problem, hash_password

    problem = account_name_problem(args.name)
    if problem is not None:
        raise UsageError(f"{args.name!r} is not an account name: {problem}")
    config = load_config_file(args)
    password_hash = hash_password(read_password())

    role: Role = "chat" if args.chat_only else "admin"

    async def add() -> bool:
        # The first account may come before the daemon ever ran: the database is made if missing.
        async with opening(config) as store:
            return await store.add_web_account(args.name, password_hash, now=time.time(), role=role)

    if not on_database(config, add):
        raise BotError(f"an account {args.name!r} exists already (remove it first to set a new password)")
    url = config.web.public_url or f"http://{config.web.listen}/"
    where = url if config.web.enabled else f"{url} once [web] enabled = true"
    what = "chat-only account" if args.chat_only else "account"
    print(f"{what} {args.name} added; log in at {where}")
    return 0


def list_users(args: argparse.Namespace) -> int:
    config = load_config_file(args)

    async def read() -> None:
        async with open_store(config) as store:
            accounts = await store.web_accounts()
        if not accounts:
            print("no web console accounts yet (`switchboard web user add NAME`)")
        for account in accounts:
            last = utc_time(account.last_login_at) if account.last_login_at else "never"
            role = "  chat only" if account.role == "chat" else ""
            print(f"{account.name}  added {utc_time(account.created_at)}  last login {last}{role}")

    on_database(config, read)
    return 0


def remove_user(args: argparse.Namespace) -> int:
    config = load_config_file(args)

    async def remove() -> bool:
        async with open_store(config) as store:
            return await store.remove_web_account(args.name)

    if not on_database(config, remove):
        raise BotError(f"no account {args.name!r} (see `switchboard web user list`)")
    print(f"account {args.name} removed; its sessions have ended")
    return 0
