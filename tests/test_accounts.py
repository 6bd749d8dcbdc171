"""Several bots of one platform in one daemon: two Telegram bot tokens served by one Bot API stand-in,
each an independent channel ("telegram", "telegram.work") whose sessions, pairings and polling are
its own; a reload adds or removes one without touching the other."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.config import Config, load_config
from bot.core.errors import ConfigError
from bot.core.messages import ChatRef
from bot.daemon.assembly import Daemon, build_channels
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.telegram_api import TelegramStandIn, private_chat, user
from channels.telegram.channel import TelegramChannel
from tests.harness import API_KEY, config_data, reply_requests, request_text, router_of, running
from tests.test_cli import _one_line, switchboard
from tests.test_operations import toml
from tests.test_pairing import cli
from tests.test_telegram import texts_to

ADA = user(42, "Ada", "ada")
MALLORY = user(666, "Mallory")
WORK_TOKEN = "654321:WORK"
CODE = re.compile(r"pairing code is ([A-Z0-9]{8})")
# What the admin's config.toml says about the account, for the CLI (which checks channel names).
ACCOUNT = '[channels.telegram.accounts.work]\ntoken_env = "WORK_BOT_TOKEN"\n'


@pytest.fixture
def work(tg: TelegramStandIn) -> TelegramStandIn:
    """A second bot, @work_bot, on the same Bot API server as the fixture's @switchboard_bot."""
    return tg.add_bot(token=WORK_TOKEN, bot_id=2000, bot_username="work_bot", bot_first_name="Work")


@pytest.fixture
def tokens(tg: TelegramStandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)
    monkeypatch.setenv("WORK_BOT_TOKEN", WORK_TOKEN)


def sections(tg: TelegramStandIn, *, work: bool = True, **telegram: Any) -> dict[str, Any]:
    """[channels.telegram] on the stand-in, Ada allowed; with `work`, the account "work" too."""
    section = {"enabled": True, "base_url": tg.base_url, "allow_from": [42], **telegram}
    if work:
        section["accounts"] = {"work": {"token_env": "WORK_BOT_TOKEN"}}
    return {"telegram": section}


@asynccontextmanager
async def daemon_of(config: Config) -> AsyncIterator[Daemon]:
    """The daemon as `switchboard run` assembles it, once every bot is polling."""
    channels = build_channels(config, console=False)
    async with running(config, channels, AnthropicBrain(config.anthropic, API_KEY)) as daemon:
        for channel in channels:
            assert isinstance(channel, TelegramChannel)
            await asyncio.wait_for(channel.ready.wait(), 5)
        yield daemon


async def answered(bot: TelegramStandIn, daemon: Daemon, text: str, sender: dict[str, Any] = ADA) -> None:
    """`sender` writes `text` to `bot` in private; returns once the daemon has handled it."""
    pushed = bot.push_message(private_chat(sender), sender, text)
    await bot.wait_for(lambda: bot.confirmed_offset > pushed["update_id"])
    await router_of(daemon).idle()


async def test_each_bot_answers_what_was_sent_to_it_and_their_sessions_stay_apart(
    tg: TelegramStandIn, work: TelegramStandIn, api: AnthropicStandIn, tokens: None,
    make_config: Callable[[dict[str, Any]], Config],
) -> None:
    """The same user writes to two bots: each message is answered by the bot it went to, each bot's
    chat is its own session (telegram vs telegram.work), and neither's history reaches the other's
    model request."""
    config = make_config(config_data(api, channels=sections(tg)))
    async with daemon_of(config) as daemon:
        await answered(tg, daemon, "my cat is called Tom")
        await answered(work, daemon, "my dog is called Rex")
        await answered(tg, daemon, "which pet did I name?")
        await answered(work, daemon, "which pet did I name, again?")

    assert texts_to(tg, 42) == ["re: my cat is called Tom", "re: which pet did I name?"]
    assert texts_to(work, 42) == ["re: my dog is called Rex", "re: which pet did I name, again?"]
    # Each bot fetched only its own updates, each once.
    assert fetched(tg) == ["my cat is called Tom", "which pet did I name?"]
    assert fetched(work) == ["my dog is called Rex", "which pet did I name, again?"]

    *_, to_main, to_work = reply_requests(api)
    assert "Tom" in request_text(to_main) and "Rex" not in request_text(to_main)
    assert "Rex" in request_text(to_work) and "Tom" not in request_text(to_work)

    async with Store.open(config.database_path()) as store:
        main_history = await store.history("agent:main:telegram:direct:42", 10)
        work_history = await store.history("agent:main:telegram.work:direct:42", 10)
        reply = work.sent[0]
        stored = await store.message_by_provider_id(ChatRef("telegram.work", "42"), str(reply.message_id))
    assert [m.text for m in main_history if m.role == "user"] == fetched(tg)
    assert [m.text for m in work_history if m.role == "user"] == fetched(work)
    assert stored is not None and stored.text == "re: my dog is called Rex"


def fetched(bot: TelegramStandIn) -> list[str]:
    """The texts of the updates a bot's getUpdates calls handed out, in order."""
    return [u["message"]["text"] for c in bot.calls_of("getUpdates") for u in c.result or []]


async def test_pairing_is_per_bot_and_the_cli_approves_a_user_of_an_account(
    tg: TelegramStandIn, work: TelegramStandIn, api: AnthropicStandIn, tokens: None,
    make_config: Callable[[dict[str, Any]], Config], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stranger gets a pairing code from the bot they wrote to; `pairing approve --user
    telegram.work:666` lets them in on that bot only."""
    monkeypatch.setattr("bot.intake.pairing.WELCOME_EVERY", 0.05)  # approvals announced at once
    config = make_config(config_data(api, channels=sections(tg, dm_policy="pairing")))
    async with daemon_of(config) as daemon:
        await answered(work, daemon, "hello work bot", MALLORY)
        (notice,) = texts_to(work, 666)
        assert CODE.search(notice) and texts_to(tg, 666) == []

        capsys.readouterr()
        assert await cli(config, "pairing", "approve", "--user", "telegram.work:666", toml=ACCOUNT) == 0
        assert "approved telegram.work:666 (Mallory)" in capsys.readouterr().out
        await work.wait_for(lambda: len(texts_to(work, 666)) == 2)  # the welcome, from the work bot

        await answered(work, daemon, "thanks", MALLORY)
        await answered(tg, daemon, "and you, main bot?", MALLORY)

    assert texts_to(work, 666)[-1] == "re: thanks"
    (main_notice,) = texts_to(tg, 666)  # still a stranger to the other bot: a code of its own
    assert CODE.search(main_notice)
    async with Store.open(config.database_path()) as store:
        statuses = {(p.provider, p.user_id): p.status for p in await store.pairings()}
    assert statuses == {("telegram.work", "666"): "approved", ("telegram", "666"): "pending"}

    assert await cli(config, "pairing", "approve", "--user", "telegram.home:666", toml=ACCOUNT) == 2
    assert "provider one of telegram, telegram.work, discord" in capsys.readouterr().err


async def test_a_reload_starts_an_added_account_and_stops_only_a_removed_one(
    tg: TelegramStandIn, work: TelegramStandIn, api: AnthropicStandIn, tokens: None, tmp_path: Path,
) -> None:
    """Adding [channels.telegram.accounts.work] and reloading brings the work bot up (it answers);
    removing it and reloading stops that bot while the first one keeps its connection and answers."""
    path = tmp_path / "config.toml"

    def write(*, with_work: bool) -> None:
        data = config_data(api, channels=sections(tg, work=with_work),
                           database={"path": str(tmp_path / "switchboard.db")})
        path.write_text(toml(data), encoding="utf-8")

    write(with_work=False)
    async with daemon_of(load_config(path)) as daemon:
        await answered(tg, daemon, "before")

        write(with_work=True)
        outcome = await daemon.reload()
        assert outcome["reloaded"] is True, outcome
        await answered(work, daemon, "hello new bot")
        assert texts_to(work, 42) == ["re: hello new bot"]
        status = await daemon.status()
        assert [(c["provider"], c["state"]) for c in status["channels"]] == [
            ("telegram", "connected"), ("telegram.work", "connected")]

        write(with_work=False)
        outcome = await daemon.reload()
        assert outcome["reloaded"] is True, outcome
        polls = len(work.calls_of("getUpdates"))
        work.push_message(private_chat(ADA), ADA, "anyone there?")
        await answered(tg, daemon, "after")
        status = await daemon.status()
        assert [c["provider"] for c in status["channels"]] == ["telegram"]

    assert texts_to(tg, 42) == ["re: before", "re: after"]
    assert len(tg.calls_of("getMe")) == 1  # the first bot was never reconnected
    assert texts_to(work, 42) == ["re: hello new bot"]
    assert len(work.calls_of("getUpdates")) == polls  # the removed bot polls no more


async def test_a_reload_that_edits_an_account_applies_it_in_place(
    tg: TelegramStandIn, work: TelegramStandIn, api: AnthropicStandIn, tokens: None, tmp_path: Path,
) -> None:
    """An account's access list changed by a reload applies to its next message, no reconnect."""
    path = tmp_path / "config.toml"

    def write(work_allows: list[int]) -> None:
        channels = sections(tg)
        channels["telegram"]["accounts"]["work"]["allow_from"] = work_allows
        data = config_data(api, channels=channels, database={"path": str(tmp_path / "switchboard.db")})
        path.write_text(toml(data), encoding="utf-8")

    write([42])
    async with daemon_of(load_config(path)) as daemon:
        write([42, 666])
        outcome = await daemon.reload()
        assert outcome["reloaded"] is True, outcome
        await answered(work, daemon, "let me in", MALLORY)

    assert texts_to(work, 666) == ["re: let me in"]
    assert len(work.calls_of("getMe")) == 1


def test_an_account_without_its_token_is_one_line_naming_its_key(tmp_path: Path) -> None:
    """An account whose token variable is unset fails check-config and run alike, in one line
    naming channels.telegram.accounts.<name>.token_env and the variable."""
    (tmp_path / "config.toml").write_text(
        '[database]\npath = "data/bot.db"\n[channels.telegram]\nenabled = true\n'
        '[channels.telegram.accounts.work]\ntoken_env = "WORK_BOT_TOKEN"\n', encoding="utf-8")
    env = {"TELEGRAM_BOT_TOKEN": "123:abc"}
    check = switchboard(tmp_path, "check-config", env=env)
    run = switchboard(tmp_path, "run", env=env)
    assert (check.returncode, run.returncode) == (2, 2), (check.stderr, run.stderr)
    line = _one_line(check.stderr)
    assert line == _one_line(run.stderr)
    key = "channels.telegram.accounts.work.token_env"
    assert line.startswith(f"switchboard: {tmp_path / 'config.toml'}: {key}: ")
    assert "WORK_BOT_TOKEN it names is not set" in line


def test_building_an_account_without_its_token_names_its_key(
    make_config: Callable[[dict[str, Any]], Config], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """build_channels (what a reload also runs) names the account's token_env when it is unset."""
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abc")
    config = make_config({"channels": {"telegram": {
        "enabled": True, "accounts": {"work": {"token_env": "WORK_BOT_TOKEN"}}}}})
    with pytest.raises(ConfigError) as info:
        build_channels(config, console=False)
    assert info.value.key == "channels.telegram.accounts.work.token_env"
    assert "WORK_BOT_TOKEN" in str(info.value)
