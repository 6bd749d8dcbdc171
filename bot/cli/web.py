"""`switchboard web user add|list|passwd|remove`: the browser console's accounts (admins, and with
`--chat-only` accounts that may only use the web chat).

Accounts live in the database the daemon reads, so a new account can log in at once (no reload)
and a removed one is logged out everywhere, on every instance sharing the store.
"""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from typing import TYPE_CHECKING

from bot.cli.base import UsageError, load_config_file, on_database, open_store, utc_time
from bot.core.errors import BotError

if TYPE_CHECKING:
    from bot.config import Config
    from bot.store.web_accounts import Role


def web_usage(args: argparse.Namespace) -> int:
    print("usage: switchboard web user add NAME | user list | user passwd NAME | user remove NAME",
          file=sys.stderr)
    return 2


def read_password() -> str:
    """The new password: asked twice on a terminal, else the first line of standard input."""
    if sys.stdin.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            raise UsageError("the two passwords differ; nothing was changed")
    else:
        first = sys.stdin.readline().rstrip("\r\n")
    from bot.web.auth import password_problem

    problem = password_problem(first)
    if problem is not None:
        raise UsageError(problem)
    return first


def add_account(config: Config, name: str, password_hash: str, role: Role = "admin") -> str:
    """Add an account whose password is hashed already (`web user add`, and `init` on a terminal);
    returns the line to print. The database is made if missing: the first account may come before
    the daemon ever ran."""
    from bot.store.opening import open_store as opening

    async def add() -> bool:
        async with opening(config) as store:
            return await store.add_web_account(name, password_hash, now=time.time(), role=role)

    if not on_database(config, add):
        raise BotError(f"an account {name!r} exists already "
                       f"(`switchboard web user passwd {name}` sets a new password)")
    url = config.web.public_url or f"http://{config.web.listen}/"
    where = url if config.web.enabled else f"{url} once [web] enabled = true"
    what = "chat-only account" if role == "chat" else "account"
    return f"{what} {name} added; log in at {where}"


def name_checked(name: str) -> str:
    from bot.web.auth import account_name_problem

    problem = account_name_problem(name)
    if problem is not None:
        raise UsageError(f"{name!r} is not an account name: {problem}")
    return name


def add_user(args: argparse.Namespace) -> int:
    from bot.web.auth import hash_password

    name = name_checked(args.name)
    config = load_config_file(args)
    print(add_account(config, name, hash_password(read_password()), "chat" if args.chat_only else "admin"))
    return 0


def change_password(args: argparse.Namespace) -> int:
    from bot.web.auth import hash_password

    config = load_config_file(args)
    name = args.name

    async def exists() -> bool:
        async with open_store(config) as store:
            return any(account.name == name for account in await store.web_accounts())

    # Asked first, so nobody types a password twice for a name that is not there.
    if not on_database(config, exists):
        raise BotError(f"no account {name!r} (see `switchboard web user list`)")
    password_hash = hash_password(read_password())

    async def change() -> bool:
        async with open_store(config) as store:
            return await store.change_web_password(name, password_hash)

    if not on_database(config, change):
        raise BotError(f"no account {name!r} (see `switchboard web user list`)")
    print(f"password of {name} changed; its sessions have ended (log in again with the new one)")
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
