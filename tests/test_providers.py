"""Providers and roles end to end: a daemon built from config alone (no brain handed in) answering
through a local OpenAI-compatible server, triage and compaction on it, tools through the loop on
it, a fallback chain, and old configs and bad ones."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from bot.config import Config, parse_config
from bot.core.errors import ConfigError
from bot.daemon.assembly import Daemon
from bot.models.brain import AnthropicBrain
from bot.models.providers import RoleBrain, build_brain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.anthropic_api import Error as AnthropicError
from bot.testing.fake_channel import FakeChannel
from bot.testing.openai_api import OpenAIStandIn, Recorded, Reply, ToolCalls
from tests.harness import API_KEY, MODEL, STAMP, config_data, reply_requests, running, say

MakeConfig = Callable[[dict[str, Any]], Config]
DM = "agent:main:fake:direct:42"
MAIN, FAST = "qwen-main", "qwen-fast"


@pytest.fixture
async def local() -> AsyncIterator[OpenAIStandIn]:
    async with OpenAIStandIn() as standin:
        standin.default = _local_echo
        yield standin


def _local_echo(rec: Recorded) -> Reply:
    """Triage on the fast model picks nothing; summaries say so; the main model echoes."""
    if rec.model == FAST:
        system = rec.body["messages"][0]["content"]
        return Reply("SUMMARY of the early chat" if "summarise" in system else '{"relevant": []}')
    last = str(rec.body["messages"][-1]["content"]).strip().splitlines()[-1]
    return Reply(f"local: {STAMP.sub('', last)}")


def _local_sections(local: OpenAIStandIn, **roles: Any) -> dict[str, Any]:
    return {"providers": {"local": {"kind": "openai", "base_url": local.base_url, "timeout": 2.0,
                                    "max_retries": 1}},
            "roles": {"main": f"local:{MAIN}", "fast": f"local:{FAST}", **roles}}


def assembled(config: Config, channel: FakeChannel) -> AbstractAsyncContextManager[Daemon]:
    """The daemon as `switchboard run` builds it: its brain from [providers] and [roles]."""
    return running(config, [channel], None)


async def _reply_call(view: Store) -> dict[str, Any]:
    record = (await view.snapshots(DM))[-1]
    snapshot = record.snapshot if isinstance(record.snapshot, dict) else json.loads(record.snapshot)
    facts: dict[str, Any] = snapshot["reply_call"]
    return facts


async def test_a_local_model_answers_and_triages_with_no_anthropic_key(
    api: AnthropicStandIn, local: OpenAIStandIn, make_config: MakeConfig, view: Store
) -> None:
    """With main and fast on a local server, chats are answered (and older messages triaged)
    by it alone; the snapshot and usage name what answered."""
    channel = FakeChannel()
    config = make_config({**config_data(api, conversation={"skip_selection_threshold": 0,
                                                           "always_include_recent": 1}),
                          **_local_sections(local)})
    async with assembled(config, channel) as daemon:
        for text in ("first", "second", "third"):
            await say(daemon, channel, text)
    assert [m.text for m in channel.sent] == ["local: first", "local: second", "local: third"]
    assert api.count == 0
    models = [r.model for r in local.chats()]
    assert FAST in models and models.count(MAIN) == 3  # triage ran on the local fast model
    facts = await _reply_call(view)
    assert facts["provider"] == "local" and facts["model"] == MAIN
    usage = await view.usage_since(0, DM)
    assert {(u.kind, u.model) for u in usage} >= {("reply", MAIN), ("triage", FAST)}
    assert all(u.input_tokens for u in usage)


async def test_compaction_summarises_with_the_local_summary_role(
    api: AnthropicStandIn, local: OpenAIStandIn, make_config: MakeConfig, view: Store
) -> None:
    """/compact writes its summary with the summary role's model on the local server."""
    channel = FakeChannel()
    data = {**config_data(api, conversation={"use_selection": False}),
            "compaction": {"keep_recent": 2}, **_local_sections(local)}
    async with assembled(make_config(data), channel) as daemon:
        for text in ("one", "two", "three", "four"):
            await say(daemon, channel, text)
        await say(daemon, channel, "/compact", command="compact")
    assert "Summarised" in channel.sent[-1].text
    record = await view.latest_compaction(DM)
    assert record is not None and record.summary == "SUMMARY of the early chat"
    assert record.model == f"local:{FAST}" and api.count == 0


async def test_tools_run_through_the_loop_on_the_local_provider(
    api: AnthropicStandIn, local: OpenAIStandIn, make_config: MakeConfig, view: Store
) -> None:
    """The local model calls a built-in tool; the loop runs it and sends the result back as a
    tool message; the reply keeps the call as an action."""
    local.default = lambda rec: Reply("fallback")
    local.script(ToolCalls((("current_time", {}),)), Reply("It is late."))
    channel = FakeChannel()
    config = make_config({**config_data(api, conversation={"use_selection": False}),
                          **_local_sections(local)})
    async with assembled(config, channel) as daemon:
        await say(daemon, channel, "what time is it?")
    assert [m.text for m in channel.sent] == ["It is late."]
    first, second = local.chats()
    assert "current_time" in [t["function"]["name"] for t in first.body["tools"]]
    assistant, tool_message = second.body["messages"][-2:]
    (call,) = assistant["tool_calls"]
    assert call["function"]["name"] == "current_time"
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == call["id"]
    assert tool_message["content"] and not tool_message["content"].startswith("error")
    reply = (await view.history(DM, 5))[-1]
    assert reply.actions and reply.actions[0].startswith("current_time(")


async def test_the_fallback_provider_answers_when_the_first_fails(
    api: AnthropicStandIn, local: OpenAIStandIn, make_config: MakeConfig, view: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """main = [anthropic, local]: Anthropic failing after its retries, the local model answers;
    the snapshot names the provider that did."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    api.script(*[AnthropicError(529, "overloaded_error")] * 2, model=MODEL)
    channel = FakeChannel()
    data = {**config_data(api, conversation={"use_selection": False}),
            **_local_sections(local, main=[f"anthropic:{MODEL}", f"local:{MAIN}"])}
    async with assembled(make_config(data), channel) as daemon:
        await say(daemon, channel, "hello there")
    assert len(reply_requests(api)) == 2  # the first provider's own retries came first
    assert [m.text for m in channel.sent] == ["local: hello there"]
    facts = await _reply_call(view)
    assert facts["provider"] == "local" and not facts["fallback"]


async def test_an_old_style_config_still_answers_through_anthropic(
    api: AnthropicStandIn, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A config with only [anthropic] builds the one Anthropic brain, as before providers."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    config = make_config(config_data(api))
    brain, _ = build_brain(config)
    assert isinstance(brain, AnthropicBrain) and not config.uses_providers()
    await brain.aclose()  # type: ignore[attr-defined]
    channel = FakeChannel()
    async with assembled(config, channel) as daemon:
        await say(daemon, channel, "still here?")
    assert [m.text for m in channel.sent] == ["re: still here?"]


def test_roles_default_to_the_anthropic_section() -> None:
    """Unset roles are the [anthropic] section's models; summary follows fast; transcribe is off."""
    config = parse_config({"anthropic": {"model": "m1", "fast_model": "f1"},
                           "providers": {"local": {"kind": "openai"}}}, "c.toml")
    brain = RoleBrain(config)
    assert brain.chain("main") == [("anthropic", "m1")] and brain.chain("summary") == [("anthropic", "f1")]
    assert config.role_chain("transcribe") == []
    assert brain.route("local:llama3:8b") == [("local", "llama3:8b")]
    assert brain.route("claude-other") == [("anthropic", "claude-other")]


@pytest.mark.parametrize(("data", "expected"), [
    ({"roles": {"fast": "lcoal:qwen3"}},
     "/c.toml: roles.fast: a provider defined as [providers.<name>] or 'anthropic'; known: anthropic "
     "(got 'lcoal:qwen3')"),
    ({"roles": {"main": "qwen3"}}, "/c.toml: roles.main: expected a provider:model pair"),
    ({"roles": {"main": ["anthropic:a", "nowhere:b"]}}, "/c.toml: roles.main[1]: a provider defined"),
    ({"roles": {"transcribe": "anthropic:whisper"}},
     "/c.toml: roles.transcribe: a provider of kind \"openai\""),
    ({"providers": {"local": {"kind": "ollama"}}}, "/c.toml: providers.local.kind: expected 'anthropic' or"),
    ({"providers": {"local": {"kind": "openai", "base_url": "localhost:11434"}}},
     "/c.toml: providers.local.base_url: expected an http:// or https:// URL"),
    ({"providers": {"Local": {"kind": "openai"}}}, "/c.toml: providers.Local: expected a string matching"),
    ({"providers": {"local": {"kind": "openai", "api_key": "sk"}}},
     "/c.toml: providers.local.api_key: unknown key; expected one of: kind, base_url, api_key_env"),
])
def test_a_bad_provider_or_role_is_one_clear_line(data: dict[str, Any], expected: str) -> None:
    """A wrong provider or role names the key and what was expected, in one line."""
    with pytest.raises(ConfigError) as info:
        parse_config(data, "/c.toml")
    message = str(info.value)
    assert message.startswith(expected) and "\n" not in message


def test_a_provider_models_price_counts_in_usage_estimates() -> None:
    """A price given under a provider's model is used by /usage like a [prices] entry."""
    config = parse_config({"providers": {"local": {"kind": "openai", "models": {
        "qwen3:8b": {"context_window": 32768, "price": {"input": 0.5, "output": 1.0}}}}}}, "c.toml")
    assert config.prices["qwen3:8b"].cost(1_000_000, 1_000_000, 0, 0) == 1.5


async def test_model_lists_every_providers_models_and_switches_across_them(
    api: AnthropicStandIn, local: OpenAIStandIn, make_config: MakeConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """/model names each provider's models with their roles and /model names; switching to a
    local model sends the chat's next reply there."""
    from tests.test_model_usage import command

    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    channel = FakeChannel()
    data = {**config_data(api, conversation={"use_selection": False},
                          anthropic={"models": {"qwen": f"local:{MAIN}", "haiku": "test-haiku"}}),
            **_local_sections(local, main=f"anthropic:{MODEL}")}
    async with assembled(make_config(data), channel) as daemon:
        shown = await command(channel, "model")
        switched = await command(channel, "model", text="/model qwen")
        await say(daemon, channel, "hi local")
    assert shown.splitlines() == [
        f"This chat's model: anthropic:{MODEL} (the default).",
        f"Switch with /model NAME: qwen (local:{MAIN}), haiku (test-haiku); /model default goes back.",
        "Models by provider:",
        f"anthropic: {MODEL} (main); test-haiku (/model haiku)",
        f"local: {FAST} (fast, summary); {MAIN} (/model qwen)",
    ]
    assert switched.startswith("Switched this chat to qwen")
    assert channel.sent[-1].text == "local: hi local" and api.count == 0


async def test_the_main_models_window_from_its_provider_bounds_the_budget(store: Store) -> None:
    """A local model's configured context window sizes the token budget (not Claude's 200 000)."""
    from bot.context.builder import ContextBuilder

    config = parse_config({"providers": {"local": {"kind": "openai", "models": {
        MAIN: {"context_window": 8000}}}}, "roles": {"main": f"local:{MAIN}"}}, "c.toml")
    brain = RoleBrain(config)
    assert ContextBuilder(config, store, brain).budget.window == 8000
    unknown = parse_config({"providers": {"local": {"kind": "openai"}}, "roles": {"main": "local:x"}}, "c")
    assert ContextBuilder(unknown, store, RoleBrain(unknown)).budget.window == 200_000


def test_a_reload_keeps_the_running_providers_and_roles_and_says_a_restart_applies_them() -> None:
    """The brain is built at start: changed [providers] or [roles] wait for a restart, said so."""
    from bot.daemon.reload_plan import reloadable

    old = parse_config({"providers": {"local": {"kind": "openai"}}, "roles": {"fast": "local:a"}}, "c")
    new = parse_config({"providers": {"local": {"kind": "openai", "timeout": 5.0}},
                        "roles": {"fast": "local:b"}}, "c")
    kept, restart = reloadable(old, new)
    assert {"providers", "roles"} <= set(restart)
    assert kept.role_chain("fast") == [("local", "a")] and kept.providers == old.providers


def _check_config(path: Any, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from bot.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["check-config", str(path)])
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def test_check_config_explains_a_wrong_role_in_one_line_and_shows_good_chains(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """check-config names the role and the known providers in one line (exit 2); on a good file
    it prints each role's chain and notes a provider whose key variable is unset."""
    bad = tmp_path / "bad.toml"
    bad.write_text('[providers.local]\nkind = "openai"\n[roles]\nfast = "lcoal:qwen3"\n', encoding="utf-8")
    code, _, err = _check_config(bad, capsys)
    assert code == 2 and err.strip().count("\n") == 0
    assert err.startswith(f"switchboard: {bad}: roles.fast: a provider defined as [providers.<name>]")
    good = tmp_path / "good.toml"
    good.write_text('[providers.router]\nkind = "openai"\napi_key_env = "ROUTER_KEY"\n'
                    '[roles]\nmain = ["anthropic:m1", "router:gpt-x"]\n', encoding="utf-8")
    code, out, _ = _check_config(good, capsys)
    assert code == 0
    assert "role main: anthropic:m1 -> router:gpt-x" in out and "role transcribe: off" in out
    assert "ROUTER_KEY for provider 'router' is not set" in out


async def test_a_stalled_first_provider_leaves_the_fallback_its_time(
    api: AnthropicStandIn, local: OpenAIStandIn, make_config: MakeConfig, view: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """main = [local, anthropic]: a local model that sends no first token within its timeout is
    given up, and Anthropic still answers within the turn (each link has its own time)."""
    from bot.testing.openai_api import Slow

    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    local.script(Slow(5.0, Reply("too late")))
    channel = FakeChannel()
    sections = _local_sections(local, main=[f"local:{MAIN}", f"anthropic:{MODEL}"])
    sections["providers"]["local"].update(timeout=0.5, max_retries=0)
    data = {**config_data(api, conversation={"use_selection": False}), **sections}
    async with assembled(make_config(data), channel) as daemon:
        await say(daemon, channel, "anyone there?")
    assert [m.text for m in channel.sent] == ["re: anyone there?"]
    assert (await _reply_call(view))["provider"] == "anthropic"


async def test_a_scheduled_jobs_model_names_a_role_or_a_provider_model(local: OpenAIStandIn) -> None:
    """A job's `model` ("fast", "local:…") picks that role's chain or that provider's model."""
    import time

    from bot.models.brain import ReplyRequest
    from bot.models.providers import brains_by_model

    config = parse_config(_local_sections(local), "c.toml")
    brain, closing = build_brain(config)
    request = ReplyRequest("s", "t", [{"role": "user", "content": "brief me"}], time.monotonic() + 2)
    try:
        async with brains_by_model(brain, config) as brain_for:
            await brain_for("fast").reply(request)
            await brain_for("local:other-model").reply(request)
            await brain_for(None).reply(request)
    finally:
        await closing.aclose()
    assert [r.model for r in local.chats()] == [FAST, "other-model", MAIN]
