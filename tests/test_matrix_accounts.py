"""Several Matrix accounts in one daemon, against the real Synapse: `[channels.matrix.accounts.<name>]`
is a bot of its own ("matrix.<name>"), with its own token, sessions, invite policy and sync token."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from bot.config import Config
from bot.daemon.assembly import Daemon, build_channels
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.matrix_user import MatrixUser
from bot.testing.synapse import MatrixAccount, SynapseServer
from channels.matrix.channel import MatrixChannel
from tests.harness import API_KEY, config_data, reply_requests, request_text, router_of, running
from tests.test_matrix import alice, bob, bot_account, joined, replies  # noqa: F401


@pytest.fixture
def work_account(synapse: SynapseServer) -> MatrixAccount:
    return synapse.register()


@asynccontextmanager
async def daemon_of(config: Config) -> AsyncIterator[Daemon]:
    """The daemon as `switchboard run` assembles it from the config, once every account synced."""
    channels = build_channels(config, console=False)
    async with running(config, channels, AnthropicBrain(config.anthropic, API_KEY)) as daemon:
        for channel in channels:
            assert isinstance(channel, MatrixChannel)
            await asyncio.wait_for(channel.ready.wait(), 30)
        yield daemon


async def test_each_account_answers_its_own_chats_apart_with_its_own_sync_token(
    synapse: SynapseServer, bot_account: MatrixAccount, work_account: MatrixAccount,  # noqa: F811
    alice: MatrixUser, bob: MatrixUser, api: AnthropicStandIn,  # noqa: F811
    make_config: Callable[[dict[str, Any]], Config], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Alice writes to two bots of one daemon: each answers in its own direct chat under its own
    session (matrix vs matrix.work), neither's history reaches the other's model request, each
    keeps its own sync token; the work bot takes Bob's invite (its own allow_from), the main bot
    declines it."""
    monkeypatch.setenv("MATRIX_ACCESS_TOKEN", bot_account.access_token)
    monkeypatch.setenv("WORK_MATRIX_TOKEN", work_account.access_token)
    section: dict[str, Any] = {
        "enabled": True, "homeserver": synapse.base_url, "user_id": bot_account.user_id,
        "allow_from": [alice.user_id],
        "accounts": {"work": {"user_id": work_account.user_id, "access_token_env": "WORK_MATRIX_TOKEN",
                              "allow_from": [alice.user_id, bob.user_id]}},
    }
    config = make_config(config_data(api, channels={"matrix": section}))
    async with daemon_of(config) as daemon:
        main_room = await alice.create_room(invite=(bot_account.user_id,), direct=True)
        work_room = await alice.create_room(invite=(work_account.user_id,), direct=True)
        await joined(alice, main_room, bot_account)
        await joined(alice, work_room, work_account)
        await alice.send(main_room, "my cat is called Tom")
        await replies(alice, main_room, bot_account, 1)
        await alice.send(work_room, "my dog is called Rex")
        await replies(alice, work_room, work_account, 1)
        bobs = await bob.create_room(invite=(bot_account.user_id, work_account.user_id))

        async def settled() -> bool:
            return (await bob.membership(bobs, bot_account.user_id) == "leave"
                    and await bob.membership(bobs, work_account.user_id) == "join")

        await bob.wait_for(settled)
        await router_of(daemon).idle()

    said_main = [e["content"]["body"] for e in await alice.messages(main_room, sender=bot_account.user_id)]
    said_work = [e["content"]["body"] for e in await alice.messages(work_room, sender=work_account.user_id)]
    assert said_main == ["re: my cat is called Tom"]
    assert said_work == ["re: my dog is called Rex"]
    assert await alice.messages(main_room, sender=work_account.user_id) == []
    to_main, to_work = reply_requests(api)
    assert "Tom" in request_text(to_main) and "Rex" not in request_text(to_main)
    assert "Rex" in request_text(to_work) and "Tom" not in request_text(to_work)
    async with Store.open(config.database_path()) as store:
        main_history = await store.history(f"agent:main:matrix:direct:{alice.user_id}", 10)
        work_history = await store.history(f"agent:main:matrix.work:direct:{alice.user_id}", 10)
        cursors = (await store.channel_cursor("matrix"), await store.channel_cursor("matrix.work"))
    assert [m.text for m in main_history] == ["my cat is called Tom", "re: my cat is called Tom"]
    assert [m.text for m in work_history] == ["my dog is called Rex", "re: my dog is called Rex"]
    assert all(cursors) and cursors[0] != cursors[1]
