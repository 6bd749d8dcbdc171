"""Discord sharding: daemons that split one bot's gateway shards each receive, answer and catch up
only the guilds of their own shards (DMs: shard 0's daemon), against the gateway stand-in."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from bot.config import Config
from bot.core.errors import ConfigError
from bot.daemon.assembly import Daemon
from bot.daemon.reload_plan import plan_reload
from bot.models.brain import AnthropicBrain
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.discord_api import DiscordStandIn
from bot.testing.recording_intake import RecordingIntake
from channels.discord.channel import DiscordChannel
from channels.discord.client import shard_of
from tests.harness import API_KEY, config_data, running
from tests.test_discord import (
    ALICE,
    ALICE_ID,
    BOB,
    BOB_ID,
    BOT_ID,
    DM_ALICE,
    GENERAL,
    GUILD,
    MENTION,
    all_messages,
    make_channel,
    settled,
)

MakeConfig = Callable[[dict[str, Any]], Config]
# A guild on shard 1 of 2 (the test guild, 100, is on shard 0), and its channel.
FAR_GUILD, FAR_CHANNEL = 1_100_000_000_000_000_000, 1_100_000_000_000_000_001


@pytest.fixture
def sharded(
    api: AnthropicStandIn, dc: DiscordStandIn, make_config: MakeConfig, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., Config]:
    """Configs of daemons with Discord on, both guilds open to Alice and Bob, each daemon on the
    database named by `db` (its own unless two share one)."""
    monkeypatch.setenv("DISCORD_BOT_TOKEN", dc.token)
    dc.add_guild(FAR_GUILD, "Far Guild", channels=[(FAR_CHANNEL, "far")], members=[ALICE, BOB])
    assert (shard_of(GUILD, 2), shard_of(FAR_GUILD, 2)) == (0, 1)

    def make(db: str = "switchboard", **discord: Any) -> Config:
        section = {"enabled": True, "allow_from": [ALICE_ID, BOB_ID],
                   "guilds": {str(GUILD): {}, str(FAR_GUILD): {}}, **discord}
        data = config_data(api, channels={"discord": section}, database={"path": str(tmp_path / f"{db}.db")})
        return make_config(data)

    return make


@asynccontextmanager
async def daemons(*configs: Config) -> AsyncIterator[list[Daemon]]:
    """A daemon per config, each with its Discord channel connected."""
    async with AsyncExitStack() as stack:
        started = []
        for config in configs:
            channel = make_channel(config)
            brain = AnthropicBrain(config.anthropic, API_KEY)
            started.append(await stack.enter_async_context(running(config, [channel], brain)))
            await asyncio.wait_for(channel.ready.wait(), 5)
        yield started


def ask_everywhere(dc: DiscordStandIn) -> None:
    """A mention in a guild of each shard, and a DM."""
    dc.message_create(GENERAL, ALICE, f"{MENTION} near", mentions=[BOT_ID])
    dc.message_create(FAR_CHANNEL, BOB, f"{MENTION} far", mentions=[BOT_ID])
    dc.message_create(DM_ALICE, ALICE, "private")


async def user_texts(config: Config) -> list[str]:
    return sorted(m.text for m in await all_messages(config) if m.role == "user")


async def test_two_daemons_with_one_shard_each_answer_each_guild_once_and_dms_on_shard_zero(
    dc: DiscordStandIn, sharded: Callable[..., Config]
) -> None:
    """With shard_count 2 split over two daemons, each guild's message is received and answered by
    the daemon of its shard only, and a DM by shard 0's."""
    zero = sharded("zero", shard_count=2, shard_ids=[0])
    one = sharded("one", shard_count=2, shard_ids=[1])
    async with daemons(zero, one) as both:
        assert dc.live_shards == [(0, 2), (1, 2)]
        ask_everywhere(dc)
        await dc.wait_for(lambda: len(dc.sent) == 3)
        await settled(dc, *both)

    assert sorted((m.channel_id, m.content) for m in dc.sent) == sorted([
        (GENERAL, "re: [Alice]: @switchboard near"), (FAR_CHANNEL, "re: [bob]: @switchboard far"),
        (DM_ALICE, "re: private"),
    ])
    assert await user_texts(zero) == ["@switchboard near", "private"]
    assert await user_texts(one) == ["@switchboard far"]
    assert sorted(identify["shard"] for identify in dc.identifies) == [[0, 2], [1, 2]]


async def test_one_daemon_running_every_shard_answers_all_and_status_shows_its_shards(
    dc: DiscordStandIn, sharded: Callable[..., Config]
) -> None:
    """shard_count without shard_ids runs every shard in one daemon: all guilds and DMs are
    answered, `switchboard status` lists the shards, and no shard count is asked of Discord."""
    config = sharded(shard_count=2)
    async with daemons(config) as (daemon,):
        ask_everywhere(dc)
        await dc.wait_for(lambda: len(dc.sent) == 3)
        (channel,) = (await daemon.status())["channels"]

    assert channel["provider"] == "discord" and channel["shards"] == {"ids": [0, 1], "count": 2}
    assert await user_texts(config) == ["@switchboard far", "@switchboard near", "private"]
    assert sorted(identify["shard"] for identify in dc.identifies) == [[0, 2], [1, 2]]
    assert not any(request.path == "/gateway/bot" for request in dc.requests)


async def test_status_of_an_unsharded_channel_names_no_shards(
    dc: DiscordStandIn, sharded: Callable[..., Config]
) -> None:
    """Without shard_count the bot makes one connection, which sends no shard, as before."""
    async with daemons(sharded()) as (daemon,):
        (channel,) = (await daemon.status())["channels"]
    assert "shards" not in channel and "shard" not in dc.identifies[0]


async def test_a_daemon_catches_up_only_the_chats_of_its_own_shards(
    dc: DiscordStandIn, sharded: Callable[..., Config]
) -> None:
    """On a store that lists every daemon's chats, each daemon reads after a restart only the
    history of its own shards' chats, so what was missed is answered once, by the right daemon."""
    unsharded = sharded()
    one, zero = sharded(shard_count=2, shard_ids=[1]), sharded(shard_count=2, shard_ids=[0])
    async with daemons(unsharded):  # the store learns all three chats
        ask_everywhere(dc)
        await dc.wait_for(lambda: len(dc.sent) == 3)
    ask_everywhere(dc)  # while no daemon listens: only history has these
    async with daemons(one) as started:
        await dc.wait_for(lambda: len(dc.sent) == 4)
        await settled(dc, *started)
    assert dc.sent[-1].channel_id == FAR_CHANNEL
    read = [r.path for r in dc.requests if r.method == "GET" and r.path.endswith("/messages")]
    assert read == [f"/channels/{FAR_CHANNEL}/messages"]

    async with daemons(zero) as started:
        await dc.wait_for(lambda: len(dc.sent) == 6)
        await settled(dc, *started)
    assert sorted(m.channel_id for m in dc.sent[4:]) == sorted([GENERAL, DM_ALICE])
    read = [r.path for r in dc.requests if r.method == "GET" and r.path.endswith("/messages")]
    assert sorted(read[1:]) == sorted([f"/channels/{GENERAL}/messages", f"/channels/{DM_ALICE}/messages"])


async def test_an_identify_with_a_shard_that_does_not_exist_is_closed_for_good(
    dc: DiscordStandIn, sharded: Callable[..., Config]
) -> None:
    """Discord closes an IDENTIFY naming shard 2 of 2 with 4010; the channel stays off, saying so."""
    section = sharded().channels.discord.model_copy(update={"shard_count": 2, "shard_ids": [2]})
    channel = DiscordChannel(section, agent_id="main", token=dc.token, guild_ready_timeout=0.05)
    with capture_logs() as logs:
        await asyncio.wait_for(channel.run(RecordingIntake()), 10)
    assert dc.identifies[0]["shard"] == [2, 2] and dc.live_shards == []
    closed = [e for e in logs if e["event"].startswith("Discord closed the gateway for good")]
    assert closed and closed[0]["code"] == 4010


@pytest.mark.parametrize(("discord", "key", "words"), [
    ({"shard_ids": [0]}, "channels.discord.shard_ids", "only with shard_count"),
    ({"shard_count": 2, "shard_ids": [0, 2]}, "channels.discord.shard_ids", "from 0 to 1"),
    ({"shard_count": 4, "shard_ids": [1, 3, 1]}, "channels.discord.shard_ids", "1 is listed twice"),
    ({"shard_count": 2, "shard_ids": []}, "channels.discord.shard_ids", "at least one shard"),
    ({"shard_count": 0}, "channels.discord.shard_count", ""),
    ({"shard_count": 2, "shard_ids": [-1]}, "channels.discord.shard_ids", ""),
    # An account inherits [channels.discord]'s ids; its own smaller count leaves shard 3 out.
    ({"shard_count": 4, "shard_ids": [3], "accounts": {"work": {"token_env": "WORK", "shard_count": 2}}},
     "channels.discord.accounts.work.shard_ids", "from 0 to 1"),
])
def test_shard_keys_that_cannot_be_run_are_refused_naming_the_key(
    sharded: Callable[..., Config], discord: dict[str, Any], key: str, words: str
) -> None:
    """Shard ids outside 0..shard_count-1, repeated, empty, or without shard_count are refused."""
    with pytest.raises(ConfigError) as refused:
        sharded(**discord)
    assert refused.value.key is not None and refused.value.key.startswith(key)
    assert words in refused.value.expected


def test_an_account_inherits_the_shard_split_and_a_changed_split_reconnects_on_reload(
    sharded: Callable[..., Config],
) -> None:
    """Accounts run the shards [channels.discord] names unless they say otherwise; changing a
    channel's shards reconnects it on reload."""
    config = sharded(shard_count=4, shard_ids=[1, 2], accounts={"work": {"token_env": "WORK"}})
    work = config.chat_sections["discord.work"]
    assert isinstance(work, type(config.channels.discord))
    assert (work.shard_count, work.shard_ids) == (4, [1, 2])
    narrower = sharded(shard_count=4, shard_ids=[1], accounts={"work": {"token_env": "WORK"}})
    plan = plan_reload(config, narrower, ["discord", "discord.work"])
    assert sorted(plan.start) == sorted(plan.stop) == ["discord", "discord.work"]
