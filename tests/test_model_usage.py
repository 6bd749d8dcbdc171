"""/model, /new and /usage: a chat's model switched and remembered, its spending summed; through the
real anthropic SDK against the Messages API stand-in, with real SQLite."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from bot.config import Config
from bot.models.brain import AnthropicBrain
from bot.ranking.stages import REPLY_CALL
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, Text
from bot.testing.fake_channel import FakeChannel
from tests.harness import API_KEY, FAST, MODEL, config_data, daemon_with, reply_requests, say, wait_until
from tests.test_pairing import cli

MakeConfig = Callable[[dict[str, Any]], Config]
HAIKU = "test-haiku"


async def command(channel: FakeChannel, name: str, text: str | None = None, **kwargs: Any) -> str:
    """Send a command (with its arguments in `text`) and return the text the bot answered with."""
    before = len(channel.sent)
    await channel.inject(channel.message(text or f"/{name}", command=name, **kwargs))
    await wait_until(lambda: len(channel.sent) > before)
    return channel.sent[-1].text


def model_config(api: AnthropicStandIn, make_config: MakeConfig, **sections: Any) -> Config:
    anthropic = {"models": {"haiku": HAIKU, "main": MODEL}}
    return make_config(config_data(api, anthropic=anthropic, **sections))


async def test_model_switches_the_next_request_and_survives_a_restart(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig
) -> None:
    """/model shows the default; /model haiku makes the next request use haiku's id (snapshot and turn
    log name it), a new daemon on the same database still uses it, and /model default goes back."""
    channel = FakeChannel()
    config = model_config(api, make_config)
    key = str(channel.key())
    async with daemon_with(config, channel) as daemon:
        shown = await command(channel, "model")
        switched = await command(channel, "model", text="/model Haiku")
        with capture_logs() as logs:
            await say(daemon, channel, "hello")

    assert shown.startswith(f"This chat's model: {MODEL} (the default).")
    assert "haiku (test-haiku)" in shown
    assert switched == "Switched this chat to haiku (test-haiku). The next reply uses it."
    assert [r.model for r in reply_requests(api)] == []
    assert [r.model for r in api.requests][-1] == HAIKU
    (turn_line,) = [line for line in logs if line["event"] == "turn"]
    assert turn_line["model"] == HAIKU
    (snapshot,) = await view.snapshots(key)
    assert snapshot.snapshot[REPLY_CALL]["model"] == HAIKU

    channel = FakeChannel()
    async with daemon_with(config, channel) as daemon:
        assert (await command(channel, "model")).startswith(f"This chat's model: {HAIKU} (haiku).")
        await say(daemon, channel, "after the restart")
        back = await command(channel, "model", text="/model default")
        await say(daemon, channel, "and back")

    assert [r.model for r in api.requests] == [HAIKU, HAIKU, MODEL]
    assert back == f"Back to the default model, {MODEL}. The next reply uses it."


async def test_model_names_the_allowed_ones_and_is_for_admins_in_groups(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig
) -> None:
    """An unknown name gets the allowed list; in a group only an admin may switch (anyone may look),
    and nothing changes on a refusal."""
    channel = FakeChannel(provider="telegram")
    config = model_config(api, make_config, channels={"telegram": {"admins": [1]}})
    group = {"kind": "group", "peer": "-100"}
    async with daemon_with(config, channel):
        unknown = await command(channel, "model", text="/model gpt-9")
        refused = await command(channel, "model", text="/model haiku", sender="2", **group)
        looked = await command(channel, "model", sender="2", **group)
        allowed = await command(channel, "model", text="/model test-haiku", sender="1", **group)

    assert unknown == "I can't switch to 'gpt-9'. Allowed: haiku (test-haiku), main (test-model), or default."
    assert refused == "Only an admin can switch the model in a shared chat."
    assert looked.startswith(f"This chat's model: {MODEL} (the default).")
    assert allowed.startswith("Switched this chat to haiku")
    assert await view.session_model("agent:main:telegram:group:-100") == "haiku"
    assert await view.session_model("agent:main:telegram:direct:42") is None


async def test_model_without_an_allowed_list_says_switching_is_off(
    api: AnthropicStandIn, make_config: MakeConfig
) -> None:
    """With no [anthropic].models, /model shows the model and refuses to switch."""
    channel = FakeChannel()
    async with daemon_with(make_config(config_data(api)), channel):
        shown = await command(channel, "model")
        refused = await command(channel, "model", text="/model haiku")

    assert shown == f"This chat's model: {MODEL} (the default)."
    assert refused == "Switching models is not enabled here: the admin has not allowed any."


async def test_new_starts_a_fresh_context_like_reset(
    api: AnthropicStandIn, make_config: MakeConfig
) -> None:
    """/new is /reset: the next request no longer carries what was said before it."""
    channel = FakeChannel()
    async with daemon_with(make_config(config_data(api)), channel) as daemon:
        await say(daemon, channel, "my cat is called Miso")
        answer = await command(channel, "new")
        await say(daemon, channel, "what is my cat called?")

    assert answer.startswith("Started a fresh context.")
    assert "Miso" not in str(reply_requests(api)[-1].messages)


async def test_usage_sums_the_turns_with_cache_tokens_and_the_cli_views_agree(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two replies (one writing the prompt cache, one reading it) and the triage call between them are
    summed by /usage with the estimate from [prices]; `switchboard usage --by user|session|day|kind`
    each show the same total."""
    prices = {MODEL: {"input": 3.0, "output": 15.0, "cache_write": 3.75, "cache_read": 0.3},
              FAST: {"input": 1.0, "output": 5.0}}
    config = make_config(config_data(
        api, prices=prices, conversation={"skip_selection_threshold": 0, "always_include_recent": 0},
    ))
    api.script(Text("first", input_tokens=100, output_tokens=20, cache_write_tokens=1000), model=MODEL)
    api.script(Text("second", input_tokens=50, output_tokens=10, cache_read_tokens=1000), model=MODEL)
    channel = FakeChannel()
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "one")
        await say(daemon, channel, "two")
        usage = await command(channel, "usage")

    assert len(api.requests_for(FAST)) == 1  # the second turn was triaged: 10 in, 5 out
    # 150*3 + 30*15 + 1000*3.75 + 1000*0.3 (replies) + 10*1 + 5*5 (triage), per million tokens
    summed = ("160 in, 35 out (cache: 1,000 written, 1,000 read; 46% of input from cache, hit on 1 call), "
              "3 calls, about 0.0050")
    assert usage.splitlines()[1:] == [f"Today: {summed}", f"This month: {summed}"]
    kinds = [(r.kind, r.model, r.cache_write_tokens, r.cache_read_tokens)
             for r in await view.usage_since(0)]
    assert kinds == [("reply", MODEL, 1000, 0), ("triage", FAST, 0, 0), ("reply", MODEL, 0, 1000)]
    calls = [snap.snapshot[REPLY_CALL] for snap in await view.snapshots(str(channel.key()))]
    assert [(c["cache_write_tokens"], c["cache_read_tokens"]) for c in calls] == [(1000, 0), (0, 1000)]

    toml = "".join(f'[prices."{model}"]\n' + "".join(f"{k} = {v}\n" for k, v in price.items())
                   for model, price in prices.items())
    for by, group in (("user", "fake:42"), ("session", str(channel.key())),
                      ("day", time.strftime("%Y-%m-%d", time.gmtime()))):
        capsys.readouterr()
        assert await cli(config, "usage", "--by", by, toml=toml) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[1:] == [f"{group}  {summed}", f"total  {summed}"], by
    assert await cli(config, "usage", "--by", "kind", "--days", "1", toml=toml) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"total  {summed}"
    assert lines[1].startswith("reply  150 in, 30 out") and lines[2].startswith("triage  10 in, 5 out")


async def test_a_completion_carries_the_cache_tokens_the_api_reported(api: AnthropicStandIn) -> None:
    """Both the streamed reply and the plain completion read cache writes and reads from the usage."""
    from bot.config import AnthropicConfig
    from bot.models.brain import ReplyRequest

    brain = AnthropicBrain(AnthropicConfig(base_url=api.base_url, model=MODEL), API_KEY)
    api.script(Text("a", input_tokens=7, output_tokens=3, cache_write_tokens=11, cache_read_tokens=13),
               Text("b", input_tokens=5, output_tokens=2, cache_write_tokens=17, cache_read_tokens=19))
    try:
        streamed = await brain.reply(ReplyRequest("s", "t", [{"role": "user", "content": "hi"}],
                                                  time.monotonic() + 5, model=HAIKU))
        plain = await brain.complete("hi", system="s", model=FAST, deadline=time.monotonic() + 5)
    finally:
        await brain.aclose()

    assert (streamed.model, streamed.input_tokens, streamed.output_tokens,
            streamed.cache_write_tokens, streamed.cache_read_tokens) == (HAIKU, 7, 3, 11, 13)
    assert (plain.model, plain.cache_write_tokens, plain.cache_read_tokens) == (FAST, 17, 19)


async def test_a_chosen_model_the_admin_no_longer_allows_falls_back_to_the_default(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig
) -> None:
    """A session whose stored choice was taken out of [anthropic].models is answered by the default."""
    channel = FakeChannel()
    await view.set_session_model(str(channel.key()), "opus", "42")
    async with daemon_with(model_config(api, make_config), channel) as daemon:
        shown = await command(channel, "model")
        await say(daemon, channel, "hello")

    assert shown.startswith(f"This chat's model: {MODEL} (the default).")
    assert [r.model for r in api.requests] == [MODEL]


def test_the_default_models_are_priced_out_of_the_box() -> None:
    """With no [prices] in the file, usage of the default models shows a cost, not "no price";
    an entry for a model replaces its built-in price and adds others."""
    from bot.config import parse_config
    from bot.models.usage import describe, fold
    from bot.store import UsageSum

    config = parse_config({}, "<defaults>")
    main, fast = config.anthropic.model, config.anthropic.fast_model
    calls = [UsageSum("model", main, main, 1, 1_000_000, 100_000, 0, 0, 0),
             UsageSum("model", fast, fast, 1, 1_000_000, 0, 0, 0, 0)]
    assert describe(fold(calls, ("model",), config.prices).total).endswith("2 calls, about 5.5000")
    mine = parse_config({"prices": {main: {"input": 1.0, "output": 1.0}}}, "<file>")
    assert describe(fold(calls[:1], ("model",), mine.prices).total).endswith("1 call, about 1.1000")
