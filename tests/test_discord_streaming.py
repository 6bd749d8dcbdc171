"""Streamed replies on Discord: the real discord.py against the gateway + REST stand-in, with a model
stand-in that writes slowly. The reply grows in one message edited in place, at most 5 edits per
5 seconds per channel, and that message becomes the reply's first chunk."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from bot.config import Config
from bot.core.messages import ChatRef
from bot.daemon.assembly import Daemon
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, Error, Text
from bot.testing.discord_api import DiscordStandIn, user
from bot.turn.runner import FALLBACK_REPLY
from channels.discord.channel import DiscordChannel
from tests.harness import API_KEY, config_data, router_of, running

MakeConfig = Callable[[dict[str, Any]], Config]
TOKEN = "TEST.TOKEN"
BOT_ID = 900_000_000_000_000_000
ALICE_ID = 100_000_000_000_000_001
ALICE = user(ALICE_ID, "alice", global_name="Alice")
GUILD, GENERAL = 100, 101
MENTION = f"<@{BOT_ID}>"
KEY = f"agent:main:discord:channel:{GENERAL}"
ANSWER = ("Tides follow the moon. The moon pulls the sea toward it, and the earth turning under "
          "that bulge gives two high tides a day. The sun adds a smaller pull of its own.")


def slowly(text: str, seconds: float, parts: int = 25) -> Text:
    return Text(text, parts=parts, delta_delay=seconds / parts)


@pytest.fixture
async def dc(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[DiscordStandIn]:
    async with DiscordStandIn(token=TOKEN, bot_id=BOT_ID, bot_name="switchboard") as standin:
        standin.add_guild(GUILD, "Test Guild", channels=[(GENERAL, "general")], members=[ALICE])
        standin.patch(monkeypatch)
        yield standin


@pytest.fixture
def discord_config(
    api: AnthropicStandIn, dc: DiscordStandIn, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Config]:
    monkeypatch.setenv("DISCORD_BOT_TOKEN", dc.token)

    def make(**discord: Any) -> Config:
        section = {"enabled": True, "allow_from": [ALICE_ID], "guilds": {str(GUILD): {}}, **discord}
        anthropic = {"timeout": 20.0, "max_retries": 1}
        return make_config(config_data(api, channels={"discord": section}, anthropic=anthropic))

    return make


@asynccontextmanager
async def discord_daemon(config: Config) -> AsyncIterator[Daemon]:
    channel = DiscordChannel(config.channels.discord, agent_id=config.agent.id, token=TOKEN,
                             guild_ready_timeout=0.05, retry_delay=0.05)
    async with running(config, [channel], AnthropicBrain(config.anthropic, API_KEY)) as daemon:
        await asyncio.wait_for(channel.ready.wait(), 5)
        yield daemon


async def answered(dc: DiscordStandIn, daemon: Daemon, text: str, api: AnthropicStandIn) -> None:
    """Post a mention and wait until its turn is over (reply stored and delivered)."""
    asked = api.count
    dc.message_create(GENERAL, ALICE, f"{MENTION} {text}", mentions=[BOT_ID])
    await dc.wait_for(lambda: api.count > asked, timeout=5)
    await router_of(daemon).idle()


def shown(dc: DiscordStandIn, message_id: int) -> list[str | None]:
    """Every text a bot message showed: as posted, then after each edit."""
    (posted,) = [m for m in dc.sent if m.id == message_id]
    return [posted.content] + [e.content for e in dc.edits if e.id == message_id]


async def stored_reply(config: Config, message_ids: list[int]) -> str:
    async with Store.open(config.database_path()) as store:
        assert await store.pending_deliveries() == []
        reply = (await store.history(KEY, 10))[-1]
        for message_id in message_ids:
            found = await store.message_by_provider_id(ChatRef("discord", str(GENERAL)), str(message_id))
            assert found is not None and found.id == reply.id
    return reply.text


async def test_a_reply_grows_in_one_message_edited_at_most_5_times_in_5_seconds(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """The reply is posted at its first sentence, as a reply to the mention, and edited as it grows:
    several edits, each longer, never more than 5 in any 5 s (Discord never had to say 429), the
    last one the whole reply; nothing posted twice, typing stopped at the first text."""
    config = discord_config()
    api.script(slowly(ANSWER, 6.0, parts=30))
    async with discord_daemon(config) as daemon:
        await answered(dc, daemon, "why are there tides?", api)

    (posted,) = dc.sent
    assert posted.message_reference is not None
    # The final edit may repeat the last preview when that already showed everything.
    texts = list(dict.fromkeys(shown(dc, posted.id)))
    assert len(texts) >= 4
    assert all(len(a or "") < len(b or "") for a, b in itertools.pairwise(texts))
    assert texts[-1] == ANSWER
    edit_times = [e.time for e in dc.edits]
    assert max(sum(1 for t in edit_times if start <= t < start + 5) for start in edit_times) <= 5
    assert [r for r in dc.requests if r.status == 429] == []
    assert [t for t in dc.typing_calls if t.time > posted.time] == []
    assert await stored_reply(config, [posted.id]) == ANSWER


async def test_a_model_failure_mid_stream_leaves_the_fallback_not_half_an_answer(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """The half answer shown while the model wrote is replaced by the apology when it fails (and
    fails again on the retry); no other message is posted."""
    half = "Tides follow the moon. The moon pulls the sea toward it, and"
    failing = Error(200, "overloaded_error", mid_stream=True, partial=half, parts=10, delta_delay=0.25)
    config = discord_config()
    api.script(failing, failing)
    async with discord_daemon(config) as daemon:
        await answered(dc, daemon, "why are there tides?", api)

    (posted,) = dc.sent
    texts = shown(dc, posted.id)
    assert (texts[0] or "").startswith("Tides follow")
    assert texts[-1] == FALLBACK_REPLY
    assert await stored_reply(config, [posted.id]) == FALLBACK_REPLY


async def test_a_long_reply_keeps_its_preview_as_the_first_chunk_and_posts_the_rest(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """A reply longer than one message: the preview message ends as the first chunk, only the other
    chunks are posted, each once, and all of them are the stored reply's."""
    long_answer = "\n\n".join(f"Paragraph {n}." + " The sea rises and falls." * 10 for n in range(12))
    config = discord_config()
    api.script(slowly(long_answer, 4.0, parts=20))
    async with discord_daemon(config) as daemon:
        await answered(dc, daemon, "tell me at length", api)

    first, *rest = dc.sent
    assert rest
    last_text = shown(dc, first.id)[-1] or ""
    assert " ".join([last_text, *(m.content or "" for m in rest)]).split() == long_answer.split()
    assert await stored_reply(config, [m.id for m in dc.sent]) == long_answer


async def test_streaming_off_posts_the_reply_once_complete_as_before(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """With `streaming = "off"` the reply is posted once, complete, and never edited."""
    config = discord_config(streaming="off")
    api.script(slowly(ANSWER, 2.0, parts=10))
    async with discord_daemon(config) as daemon:
        await answered(dc, daemon, "why are there tides?", api)

    assert [m.content for m in dc.sent] == [ANSWER]
    assert dc.edits == []


async def test_a_reply_dropped_as_answered_elsewhere_deletes_its_preview_message(
    dc: DiscordStandIn, api: AnthropicStandIn, discord_config: Callable[..., Config]
) -> None:
    """Another instance answers the request while this one streams its reply into a preview
    message: the reply is dropped and the preview message deleted (DELETE on Discord's REST API),
    so the channel shows one answer."""
    config = discord_config()
    api.script(slowly(ANSWER, 4.0, parts=30))
    async with discord_daemon(config) as daemon:
        dc.message_create(GENERAL, ALICE, f"{MENTION} why are there tides?", mentions=[BOT_ID])
        (preview,) = await dc.wait_for(lambda: dc.sent, timeout=10)
        async with Store.open(config.database_path()) as other:
            (waiting,) = await other.awaiting_requests(KEY)
            await other.append_reply(KEY, "The moon (from the other instance).",
                                     request_id=waiting.message.id)
        await dc.wait_for(lambda: api.count == 1 and not router_of(daemon).sessions(), timeout=10)
        await router_of(daemon).idle()

    assert dc.sent == [preview]
    assert dc.deleted == [(GENERAL, preview.id)]
    assert [r.status for r in dc.requests if r.method == "DELETE"] == [204]
