"""`switchboard matrix login`: the bot's Matrix password, typed once, traded for an access token.

The homeserver and the user come from `[channels.matrix]` (or one of its accounts); the password is
asked once without echo (or read from standard input with `--password-stdin`) and never kept.
The token is printed once, as the line that sets the section's `access_token_env`, on standard
output alone (what goes with it is on standard error), and never logged.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from typing import TYPE_CHECKING

from bot.cli.base import UsageError, load_config_file
from bot.core.errors import BotError, ConfigError

if TYPE_CHECKING:
    from mautrix.types import LoginResponse

DEVICE_NAME = "Switchboard"
TIMEOUT = 30.0


def matrix_usage(args: argparse.Namespace) -> int:
    print("usage: switchboard matrix login [--account NAME] [--password-stdin]", file=sys.stderr)
    return 2


def login(args: argparse.Namespace) -> int:
    config = load_config_file(args)
    key = "channels.matrix" + (f".accounts.{args.account}" if args.account else "")
    sections = config.channels.chat_sections()
    section = sections.get("matrix" + (f".{args.account}" if args.account else ""))
    if section is None:
        known = ", ".join(sorted(config.channels.matrix.accounts)) or "none"
        raise UsageError(f"no Matrix account {args.account!r} in {args.config} (its accounts: {known})")
    from bot.config.channel_sections import MatrixConfig

    assert isinstance(section, MatrixConfig)  # every "matrix…" section is Matrix's
    matrix = section
    for name in ("homeserver", "user_id"):
        if not getattr(matrix, name):
            raise ConfigError(args.config, f"{key}.{name}", "not set; `matrix login` needs it to log in")
    homeserver = str(matrix.homeserver).rstrip("/")
    user_id = str(matrix.user_id)
    password = _read_password(args.password_stdin, user_id)
    answer = asyncio.run(_login(homeserver, user_id, password, key))
    print(f"logged in as {answer.user_id} (a new device, {answer.device_id}, named {DEVICE_NAME!r}); "
          f"the access token, shown this once: put this line in the daemon's environment "
          f"(switchboard.env), then `switchboard doctor` checks it", file=sys.stderr)
    print(f"{matrix.access_token_env}={answer.access_token}")
    return 0


def _read_password(from_stdin: bool, user_id: str) -> str:
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        password = getpass.getpass(f"{user_id}'s password: ")
    else:
        raise UsageError("no terminal to ask the password on; give it on standard input with "
                         "--password-stdin")
    if not password:
        raise UsageError("the password is empty; nothing was sent")
    return password


async def _login(homeserver: str, user_id: str, password: str, key: str) -> LoginResponse:
    """`POST /_matrix/client/v3/login` with `m.login.password` and an `m.id.user` identifier (mautrix
    makes one of the user id; it marks the request sensitive:
    neither the password nor the answer is logged)."""
    import aiohttp
    from mautrix import errors
    from mautrix.api import HTTPAPI
    from mautrix.client import ClientAPI
    from mautrix.types import LoginType, UserID

    timeout = aiohttp.ClientTimeout(total=TIMEOUT)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        client = ClientAPI(api=HTTPAPI(base_url=homeserver, token="", client_session=session))
        try:
            return await client.login(
                identifier=UserID(user_id), login_type=LoginType.PASSWORD,
                password=password, device_name=DEVICE_NAME, store_access_token=False)
        except errors.MForbidden as exc:
            raise BotError(f"{homeserver} refused the password for {user_id} "
                           f"({exc.errcode}); nothing was changed") from None
        except errors.MatrixRequestError as exc:
            raise BotError(f"{homeserver} refused the login for {user_id}: "
                           f"{exc.errcode} {exc.message or ''}".rstrip()) from None
        except (errors.MatrixConnectionError, errors.MatrixResponseError, aiohttp.ClientError,
                OSError, TimeoutError, ValueError) as exc:
            what = str(exc) or type(exc).__name__
            raise BotError(f"the homeserver {homeserver} does not answer ({what}); check "
                           f"{key}.homeserver, the network or a proxy") from None
