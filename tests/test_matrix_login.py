"""`switchboard matrix login`, run as a real subprocess against a real Synapse: a password traded
for an access token the homeserver accepts, and a refused password or a silent homeserver as one
line and exit 1 with no token."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from bot.testing.synapse import MatrixAccount, SynapseServer, free_port
from tests.test_cli import switchboard

PASSWORD = "correct horse battery"


@pytest.fixture
def bot_account(synapse: SynapseServer) -> MatrixAccount:
    return synapse.register(password=PASSWORD)


def config_file(tmp_path: Path, homeserver: str, user_id: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f'[channels.matrix]\nhomeserver = "{homeserver}"\nuser_id = "{user_id}"\n'
                    f'access_token_env = "BOT_MATRIX_TOKEN"\n', encoding="utf-8")
    return path


def whoami(homeserver: str, token: str) -> str:
    request = urllib.request.Request(f"{homeserver}/_matrix/client/v3/account/whoami",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        user_id: str = json.loads(answer.read())["user_id"]
    return user_id


def test_the_password_gives_a_token_the_homeserver_accepts_printed_once(
    tmp_path: Path, synapse: SynapseServer, bot_account: MatrixAccount,
) -> None:
    config = config_file(tmp_path, synapse.base_url, bot_account.user_id)
    done = switchboard(tmp_path, "matrix", "login", "--password-stdin", "--config", str(config),
                       stdin=f"{PASSWORD}\n")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("BOT_MATRIX_TOKEN="), done.stdout
    token = lines[0].removeprefix("BOT_MATRIX_TOKEN=")
    assert token and token != bot_account.access_token
    assert token not in done.stderr and PASSWORD not in done.stderr + done.stdout
    assert whoami(synapse.base_url, token) == bot_account.user_id


def test_a_wrong_password_is_one_line_exit_1_and_no_token(
    tmp_path: Path, synapse: SynapseServer, bot_account: MatrixAccount,
) -> None:
    config = config_file(tmp_path, synapse.base_url, bot_account.user_id)
    done = switchboard(tmp_path, "matrix", "login", "--password-stdin", "--config", str(config),
                       stdin="not the password\n")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip() == (f"switchboard: {synapse.base_url} refused the password for "
                                   f"{bot_account.user_id} (M_FORBIDDEN); nothing was changed")


def test_a_homeserver_not_answering_is_named_exit_1(tmp_path: Path) -> None:
    homeserver = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config = config_file(tmp_path, homeserver, "@bot:localhost")
    done = switchboard(tmp_path, "matrix", "login", "--password-stdin", "--config", str(config),
                       stdin=f"{PASSWORD}\n")
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith(f"switchboard: the homeserver {homeserver} does not answer"), lines


def test_an_account_logs_in_with_its_own_user_and_prints_its_own_variable(
    tmp_path: Path, synapse: SynapseServer, bot_account: MatrixAccount,
) -> None:
    """`--account work` logs in as that account's user, on the homeserver it inherits from
    [channels.matrix], and prints the line for its own `access_token_env`; an account the config
    does not have is a usage error naming the ones it has."""
    work = synapse.register(password="work horse battery")
    config = config_file(tmp_path, synapse.base_url, bot_account.user_id)
    with config.open("a", encoding="utf-8") as toml:
        toml.write(f'[channels.matrix.accounts.work]\nuser_id = "{work.user_id}"\n'
                   f'access_token_env = "WORK_MATRIX_TOKEN"\n')
    done = switchboard(tmp_path, "matrix", "login", "--account", "work", "--password-stdin",
                       "--config", str(config), stdin="work horse battery\n")
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert line.startswith("WORK_MATRIX_TOKEN=")
    assert whoami(synapse.base_url, line.removeprefix("WORK_MATRIX_TOKEN=")) == work.user_id

    unknown = switchboard(tmp_path, "matrix", "login", "--account", "home", "--password-stdin",
                          "--config", str(config), stdin="work horse battery\n")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert "(its accounts: work)" in unknown.stderr
