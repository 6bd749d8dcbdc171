"""The prompt cache: the stand-in bills requests as the Messages API does (prefixes up to each
breakpoint, a minimum length, five minutes), and the daemon's requests are cached and shown in
`/usage` and `switchboard usage`; through the real anthropic SDK, with real SQLite."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest

from bot.config import AnthropicConfig, Config
from bot.models.brain import AnthropicBrain, ReplyRequest
from bot.ranking.stages import REPLY_CALL
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, PromptCache
from bot.testing.fake_channel import FakeChannel
from bot.testing.prompt_cache import TOOL_PROMPT_TOKENS, estimate
from tests.harness import API_KEY, MODEL, config_data, daemon_with, reply_requests, say
from tests.test_model_usage import command
from tests.test_pairing import cli

MakeConfig = Callable[[dict[str, Any]], Config]
HAIKU = "test-haiku"
LONG = "Answer in the voice of a patient librarian. " * 120  # about 1 300 tokens: over Sonnet's minimum
SHORT = "Answer briefly."


class Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def system(stable: str, turn: str = "It is Monday.") -> list[Any]:
    return [{"type": "text", "text": stable, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": turn}]


def tool(name: str, description: str, *, last: bool = False) -> dict[str, Any]:
    defined: dict[str, Any] = {"name": name, "description": description,
                               "input_schema": {"type": "object", "properties": {}}}
    if last:
        defined["cache_control"] = {"type": "ephemeral"}
    return defined


async def usage_of(api: AnthropicStandIn, *, stream: bool = False, model: str = MODEL,
                   **body: Any) -> tuple[int, int, int]:
    """(input, cache written, cache read) as the SDK read them from one request's response."""
    client = anthropic.AsyncAnthropic(api_key=API_KEY, base_url=api.base_url, max_retries=0, timeout=5)
    try:
        request: dict[str, Any] = {"model": model, "max_tokens": 64,
                                   "messages": [{"role": "user", "content": "hi"}], **body}
        if stream:
            async with client.messages.stream(**request) as events:
                message = await events.get_final_message()
        else:
            message = await client.messages.create(**request)
    finally:
        await client.close()
    usage = message.usage
    return usage.input_tokens, usage.cache_creation_input_tokens or 0, usage.cache_read_input_tokens or 0


@pytest.fixture
def clock(api: AnthropicStandIn) -> Clock:
    """The stand-in metering every request with a prompt cache on a clock the test moves."""
    ticks = Clock()
    api.prompt_cache = PromptCache(clock=ticks)
    return ticks


async def test_a_prefix_under_the_model_minimum_is_never_cached(api: AnthropicStandIn, clock: Clock) -> None:
    """A short stable prompt is billed in full every time, with no error and no cache write; a long
    one is written once and read after; Haiku's larger minimum leaves the same long one uncached."""
    short = [await usage_of(api, system=system(SHORT)) for _ in range(2)]
    long = [await usage_of(api, system=system(LONG)) for _ in range(2)]
    haiku = [await usage_of(api, system=system(LONG), model=HAIKU) for _ in range(2)]

    assert short[0] == short[1] and short[0][1:] == (0, 0)
    whole = estimate(LONG) + estimate("It is Monday.") + estimate("hi")
    assert long == [(whole - estimate(LONG), estimate(LONG), 0), (whole - estimate(LONG), 0, estimate(LONG))]
    assert haiku[0] == haiku[1] == (whole, 0, 0)


async def test_streamed_and_plain_responses_report_the_same_split(
    api: AnthropicStandIn, clock: Clock
) -> None:
    """The per-turn part after the breakpoint is never cached; a streamed request reads what a plain
    one wrote, and reports it in the final message's usage."""
    plain = await usage_of(api, system=system(LONG, "It is 09:00."))
    streamed = await usage_of(api, system=system(LONG, "It is 09:01, a new minute."), stream=True)

    assert plain[1] == streamed[2] == estimate(LONG)
    assert streamed[0] == estimate("It is 09:01, a new minute.") + estimate("hi")


async def test_a_changed_tool_writes_everything_again_and_a_changed_system_only_its_part(
    api: AnthropicStandIn, clock: Clock
) -> None:
    """Tools come first: a changed system prompt still reads the tools' prefix and writes its own
    part; a changed tool writes everything and reads nothing; tool_choice keeps both entries."""
    tools = [tool("look_up", "Find a word. " * 300), tool("spell", "Spell a word.", last=True)]
    tools_tokens = sum(estimate(str(t)) for t in tools)  # roughly: only the order of size matters
    first = await usage_of(api, tools=tools, system=system(SHORT))
    warm = await usage_of(api, tools=tools, system=system(SHORT), tool_choice={"type": "none"})
    other_system = await usage_of(api, tools=tools, system=system(SHORT + " Be kind."))
    changed = [tool("look_up", "Find a word. " * 300), tool("spell", "Spell any word.", last=True)]
    other_tool = await usage_of(api, tools=changed, system=system(SHORT))

    assert first[1] > tools_tokens * 0.9 and first[2] == 0
    assert warm == (first[0], 0, first[1])
    tools_prefix = warm[2] - estimate(SHORT)
    assert other_system[2] == tools_prefix > TOOL_PROMPT_TOKENS
    assert other_system[1] == estimate(SHORT + " Be kind.")
    assert other_tool[2] == 0 and other_tool[1] >= first[1]


async def test_an_entry_lives_five_minutes_from_its_last_use(api: AnthropicStandIn, clock: Clock) -> None:
    """Each read keeps the entry five more minutes; five minutes without one and it is written anew."""
    seen = []
    for gap in (0, 299, 299, 301):
        clock.now += gap
        seen.append(await usage_of(api, system=system(LONG)))

    assert [(written > 0, read > 0) for _, written, read in seen] == [
        (True, False), (False, True), (False, True), (True, False)]


async def test_more_than_four_breakpoints_are_refused(api: AnthropicStandIn, clock: Clock) -> None:
    """The API takes at most four cache_control blocks, and says so."""
    five = [tool(f"t{i}", "x", last=True) for i in range(4)]
    with pytest.raises(anthropic.BadRequestError, match="A maximum of 4 blocks with cache_control"):
        await usage_of(api, tools=five, system=system(SHORT))


async def test_a_warm_turn_shows_cache_reads_in_usage_and_the_cli(
    api: AnthropicStandIn, clock: Clock, view: Store, make_config: MakeConfig,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The shipped tools and stable prompt are over the minimum: the first reply writes them, the
    next one a minute later reads them, which /usage and `switchboard usage` show with their share
    of the input and the calls that hit."""
    config = make_config(config_data(api))
    channel = FakeChannel()
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "hello")
        clock.now += 60
        await say(daemon, channel, "and again")
        usage = await command(channel, "usage")

    first, second = (request.metered for request in reply_requests(api))
    assert first is not None and second is not None
    assert (first.cache_write_tokens > 1024, first.cache_read_tokens) == (True, 0)
    assert (second.cache_write_tokens, second.cache_read_tokens) == (0, first.cache_write_tokens)
    calls = [snap.snapshot[REPLY_CALL] for snap in await view.snapshots(str(channel.key()))]
    assert [c["cache_read_tokens"] for c in calls] == [0, first.cache_write_tokens]
    inputs = first.input_tokens + second.input_tokens
    whole = first.total + second.total
    read = first.cache_write_tokens
    shown = (f"{inputs:,} in, 10 out (cache: {read:,} written, {read:,} read; "
             f"{read / whole:.0%} of input from cache, hit on 1 call), 2 calls")
    assert usage.splitlines()[1].startswith(f"Today: {shown}")
    capsys.readouterr()
    assert await cli(config, "usage", "--by", "kind") == 0
    assert capsys.readouterr().out.splitlines()[1].startswith(f"reply  {shown}")


async def test_without_tools_the_stable_prompt_is_under_the_minimum_and_usage_shows_no_cache(
    api: AnthropicStandIn, clock: Clock, make_config: MakeConfig
) -> None:
    """With tools off the stable prompt alone is far under 1 024 tokens: nothing is written or read
    and /usage says nothing of a cache."""
    channel = FakeChannel()
    async with daemon_with(make_config(config_data(api, tools={"enabled": False})), channel) as daemon:
        await say(daemon, channel, "hello")
        await say(daemon, channel, "and again")
        usage = await command(channel, "usage")

    assert all(r.metered is not None and r.metered.cache_read_tokens == r.metered.cache_write_tokens == 0
               for r in reply_requests(api))
    assert "cache" not in usage.split("\n", 1)[1]


async def test_a_changed_soul_file_is_written_again_not_read(
    api: AnthropicStandIn, clock: Clock, make_config: MakeConfig, tmp_path: Path
) -> None:
    """Editing the soul file changes the stable prompt: the next turn reads only the tools' prefix
    and writes the new prompt; the turn after reads it all again."""
    soul = tmp_path / "SOUL.md"
    soul.write_text("You like short answers.", encoding="utf-8")
    channel = FakeChannel()
    config = make_config(config_data(api, agent={"soul_file": str(soul)}))
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "one")
        await say(daemon, channel, "two")
        soul.write_text("You like short answers, and puns.", encoding="utf-8")
        await say(daemon, channel, "three")
        await say(daemon, channel, "four")

    metered = [r.metered for r in reply_requests(api)]
    assert all(m is not None for m in metered)
    split = [(m.cache_write_tokens, m.cache_read_tokens) for m in metered if m is not None]
    whole = split[0][0]
    assert split[1] == (0, whole)
    written, read = split[2]
    assert 0 < read < whole and 0 < written < whole and read + written > whole
    assert split[3] == (0, read + written)


async def test_a_changed_tool_definition_is_written_again_through_the_brain(
    api: AnthropicStandIn, clock: Clock
) -> None:
    """The brain's requests with the same tools read the cache; one tool's description changed
    makes the next request write it all, read nothing."""
    brain = AnthropicBrain(AnthropicConfig(base_url=api.base_url, model=MODEL), API_KEY)

    def request(tools: list[dict[str, Any]]) -> ReplyRequest:
        return ReplyRequest("You are a helper.", "It is Monday.", [{"role": "user", "content": "hi"}],
                            time.monotonic() + 5, tools=tools)

    tools = [tool("look_up", "Find a word in the dictionary. " * 120, last=True)]
    edited = [tool("look_up", "Find a term in the dictionary. " * 120, last=True)]
    try:
        replies = [await brain.reply(request(t)) for t in (tools, tools, edited)]
    finally:
        await brain.aclose()

    split = [(r.cache_write_tokens, r.cache_read_tokens) for r in replies]
    assert split[0][0] > 0 and split[1] == (0, split[0][0]) and split[2] == (split[0][0], 0)
