"""Pairing: a stranger gets a code, the admin approves it from the shell, and the running daemon
lets them in at once and for good; through the real Telegram and Discord libraries and stand-ins."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.cli import main as cli_main
from bot.config import Config
from bot.intake.access import APPROVED_REPLY, refused_dm_reply
from bot.store import PairingError, Store
from bot.store.pairings import CODE_ALPHABET
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.discord_api import DiscordStandIn
from bot.testing.telegram_api import TelegramStandIn, private_chat, user
from tests.harness import config_data, reply_requests
from tests.test_discord import (
    DM_STRANGER,
    STRANGER,
    MakeConfig,
    discord_daemon,
)
from tests.test_discord import (
    settled as discord_settled,
)
from tests.test_discord import texts_to as discord_texts
from tests.test_telegram import settled, telegram_daemon, texts_to

MALLORY = user(666, "Mallory")
CODE = re.compile(r"pairing code is ([A-Z0-9]{8})")



@pytest.fixture(autouse=True)
def quick_welcomes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon looks for approvals to announce every 50 ms instead of every 5 s."""
    monkeypatch.setattr("bot.intake.pairing.WELCOME_EVERY", 0.05)


@pytest.fixture
def telegram_config(
    api: AnthropicStandIn, tg: TelegramStandIn, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Config]:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)

    def make(**telegram: Any) -> Config:
        section = {"enabled": True, "base_url": tg.base_url, "allow_from": [42], **telegram}
        return make_config(config_data(api, channels={"telegram": section}))

    return make




async def cli(config: Config, *args: str, toml: str = "") -> int:
    """Run `switchboard ARGS` in-process (another thread, its own event loop), as an admin would,
    with a config file naming the test's database (and `toml` after it)."""
    path = Path(config.source)

    def call() -> int:
        where = (f'url = "{config.database.url}"' if config.database.url
                 else f'path = "{config.database_path()}"')
        path.write_text(f'[database]\n{where}\n{toml}', encoding="utf-8")
        try:
            cli_main([*args, "--config", str(path)])
        except SystemExit as exc:
            return int(exc.code or 0)
        return 0

    return await asyncio.to_thread(call)


def code_in(notice: str) -> str:
    found = CODE.search(notice)
    assert found is not None, notice
    return found.group(1)


async def test_a_stranger_pairs_by_code_and_is_answered_after_approval_and_after_a_restart(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A stranger's first message gets one notice with a code and their id (a second message within
    the hour gets none); the admin approves the code with the CLI while the daemon runs, and the
    daemon tells the user they are in (once, not again after a restart); the next message is
    answered, and so is one after a restart. Nothing sent before approval is stored."""
    config = telegram_config(dm_policy="pairing")
    async with telegram_daemon(config) as daemon:
        tg.push_message(private_chat(MALLORY), MALLORY, "hello, may I?")
        again = tg.push_message(private_chat(MALLORY), MALLORY, "hello??")
        await settled(tg, daemon, again)
        (notice,) = texts_to(tg, 666)
        code = code_in(notice)
        assert "user id is 666" in notice
        assert api.count == 0

        capsys.readouterr()
        assert await cli(config, "pairing", "list") == 0
        listed = capsys.readouterr().out
        assert f"telegram:666 (Mallory)  pending  code {code}" in listed
        assert await cli(config, "pairing", "approve", code.lower()) == 0
        assert "approved telegram:666 (Mallory)" in capsys.readouterr().out
        # The running daemon tells them, once, without their writing first.
        await tg.wait_for(lambda: texts_to(tg, 666) == [notice, APPROVED_REPLY])

        thanks = tg.push_message(private_chat(MALLORY), MALLORY, "thanks!")
        await settled(tg, daemon, thanks)
        assert texts_to(tg, 666) == [notice, APPROVED_REPLY, "re: thanks!"]

    async with telegram_daemon(config) as daemon:
        later = tg.push_message(private_chat(MALLORY), MALLORY, "still me")
        await settled(tg, daemon, later)

    assert texts_to(tg, 666) == [notice, APPROVED_REPLY, "re: thanks!", "re: still me"]
    async with Store.open(config.database_path()) as store:
        history = await store.history("agent:main:telegram:direct:666", 10)
    assert [m.text for m in history if m.role == "user"] == ["thanks!", "still me"]
    assert len(reply_requests(api)) == 2


async def test_allowlisted_users_and_groups_are_untouched_by_pairing(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """Under the pairing policy, users in allow_from are answered without any code."""
    config = telegram_config(dm_policy="pairing")
    ada = user(42, "Ada")
    async with telegram_daemon(config) as daemon:
        last = tg.push_message(private_chat(ada), ada, "hi")
        await settled(tg, daemon, last)

    assert texts_to(tg, 42) == ["re: hi"]
    async with Store.open(config.database_path()) as store:
        assert await store.pairings() == []


async def test_a_denied_stranger_is_told_their_id_and_approval_by_id_lets_them_in(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On Discord: a DM from a stranger gets the code; once denied, their next DM gets the refusal
    naming their id (and no code); `approve --user discord:ID` lets them in, tells them so in that
    DM, and their next DM is answered."""
    config = discord_config(dm_policy="pairing")
    stranger_id = str(STRANGER["id"])
    async with discord_daemon(config) as daemon:
        dc.message_create(DM_STRANGER, STRANGER, "let me in")
        await dc.wait_for(lambda: discord_texts(dc, DM_STRANGER))
        (notice,) = discord_texts(dc, DM_STRANGER)
        assert notice is not None and f"user id is {stranger_id}" in notice

        assert await cli(config, "pairing", "deny", code_in(notice)) == 0
        dc.message_create(DM_STRANGER, STRANGER, "please?")
        await dc.wait_for(lambda: len(discord_texts(dc, DM_STRANGER)) == 2)
        assert discord_texts(dc, DM_STRANGER)[1] == refused_dm_reply(stranger_id)

        assert await cli(config, "pairing", "approve", "--user", f"discord:{stranger_id}") == 0
        await dc.wait_for(lambda: len(discord_texts(dc, DM_STRANGER)) == 3)
        assert discord_texts(dc, DM_STRANGER)[2] == APPROVED_REPLY  # told in the DM they wrote from
        dc.message_create(DM_STRANGER, STRANGER, "thank you")
        await dc.wait_for(lambda: len(discord_texts(dc, DM_STRANGER)) == 4)
        await discord_settled(dc, daemon)

    assert discord_texts(dc, DM_STRANGER)[3] == "re: thank you"
    assert len(reply_requests(api)) == 1
    assert "denied discord:" in capsys.readouterr().out


async def test_a_pending_code_stays_the_same_is_noticed_once_an_hour_and_expires(store: Store) -> None:
    """Asking again gets the same code (a notice at most once an hour); after the code's lifetime a
    new one is made, and the expired one can no longer be approved."""
    ask = {"now": 1000.0, "ttl": 7200.0, "notice_interval": 3600.0}
    first = await store.request_pairing("telegram", "666", "Mallory", **ask)
    assert first.status == "pending" and first.notify
    assert first.code is not None and len(first.code) == 8 and set(first.code) <= set(CODE_ALPHABET)

    soon = await store.request_pairing("telegram", "666", "Mallory", **{**ask, "now": 1100.0})
    next_hour = await store.request_pairing("telegram", "666", "Mallory", **{**ask, "now": 4600.0})
    assert (soon.code, soon.notify) == (first.code, False)
    assert (next_hour.code, next_hour.notify) == (first.code, True)

    with pytest.raises(PairingError, match="expired"):
        await store.decide_pairing(first.code, True, now=8200.0)
    renewed = await store.request_pairing("telegram", "666", "Mallory", **{**ask, "now": 8200.0})
    assert renewed.status == "pending" and renewed.notify and renewed.code != first.code
    with pytest.raises(PairingError, match="no pending request"):
        await store.decide_pairing(first.code, True, now=8300.0)
    approved = await store.decide_pairing(renewed.code or "", True, now=8300.0)
    assert (approved.provider, approved.user_id, approved.status) == ("telegram", "666", "approved")
    assert (await store.request_pairing("telegram", "666", None, **ask)).status == "approved"


async def test_the_cli_names_what_it_cannot_decide(
    make_config: Callable[..., Config], store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown code is a one-line error (exit 1); a malformed --user and neither argument are
    usage errors in one line (exit 2)."""
    config = make_config({})
    assert await cli(config, "pairing", "approve", "ABCDEFGH") == 1
    assert await cli(config, "pairing", "approve", "--user", "telegram:ada") == 2
    assert await cli(config, "pairing", "deny") == 2
    errors = capsys.readouterr().err.splitlines()
    assert "no pending request has the code ABCDEFGH" in errors[0]
    assert "--user takes PROVIDER:ID" in errors[1]
    assert "name a pairing code" in errors[2]
