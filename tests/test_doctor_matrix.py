"""`switchboard doctor` on a Matrix account, against the real Synapse: the homeserver's versions
and the token's `/whoami` (the token must be `user_id`'s), each failure one line with its fix."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.testing.synapse import SynapseServer, free_port
from tests.test_doctor import api, database, doctor, line_of, write  # noqa: F401

Write = Callable[..., Path]


def matrix(homeserver: str, user_id: str) -> dict[str, Any]:
    return {"matrix": {"enabled": True, "homeserver": homeserver, "user_id": user_id}}


async def checked(write: Write, monkeypatch: pytest.MonkeyPatch, homeserver: str, user_id: str,  # noqa: F811
                  token: str) -> tuple[int, str]:
    """Doctor's exit status and its Matrix line, the token nowhere in what it printed."""
    monkeypatch.setenv("MATRIX_ACCESS_TOKEN", token)
    code, lines = await doctor(write(channels=matrix(homeserver, user_id)))
    assert not any(token in line for line in lines)
    return code, line_of(lines, "matrix")


async def test_a_good_token_and_homeserver_pass(
    synapse: SynapseServer, write: Write, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    """The homeserver's spec versions and the token's owner, in one ✓ line."""
    bot = synapse.register()
    code, line = await checked(write, monkeypatch, synapse.base_url, bot.user_id, bot.access_token)
    assert line.startswith(f"✓ matrix: {synapse.base_url} speaks Matrix v1.")
    assert line.endswith(f"(authenticated media); the token is {bot.user_id}'s (whoami)")
    assert code == 0


async def test_a_refused_token_is_one_line_with_the_fix(
    synapse: SynapseServer, write: Write, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    """A token the homeserver does not know (logged out) fails the check, saying where to get one."""
    bot = synapse.register()
    code, line = await checked(write, monkeypatch, synapse.base_url, bot.user_id, "syt_not_a_token")
    assert line.startswith(f"✗ matrix: {synapse.base_url} speaks Matrix v1.")
    assert "it refused the access token in MATRIX_ACCESS_TOKEN (logged out, or mistyped) — " in line
    assert code == 1


async def test_another_users_token_is_one_line_naming_both(
    synapse: SynapseServer, write: Write, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    """A token that works but is not `user_id`'s: the line names whose it is."""
    bot, other = synapse.register(), synapse.register()
    code, line = await checked(write, monkeypatch, synapse.base_url, bot.user_id, other.access_token)
    assert f"the token in MATRIX_ACCESS_TOKEN is {other.user_id}'s, not {bot.user_id}'s" in line
    assert line.startswith("✗ matrix: ")
    assert code == 1


async def test_a_homeserver_that_does_not_answer_is_named(
    write: Write, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    """Nothing listening at `homeserver`: the line says so and points at the key."""
    nowhere = f"http://127.0.0.1:{free_port()}"
    code, line = await checked(write, monkeypatch, nowhere, "@bot:localhost", "syt_whatever")
    assert line.startswith(f"✗ matrix: {nowhere} does not answer as a Matrix homeserver")
    assert "check channels.matrix.homeserver" in line
    assert code == 1


