"""The tool loop end to end: the real SDK against the Messages API stand-in scripting tool_use,
the daemon running the tools, storing each round and showing what they did."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.config import Config
from bot.daemon.assembly import Daemon
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, Error, RecordedRequest, Slow, Text, ToolUse
from bot.testing.fake_channel import FakeChannel
from bot.tools.base import FunctionTool, Tool, ToolContext, ToolResult, ToolSource
from bot.turn.tool_loop import LIMIT_NOTE
from tests.harness import (
    API_KEY,
    MODEL,
    config_data,
    reply_requests,
    router_of,
    switchboard_cli,
    wait_until,
)
from tests.test_replay import written_config

MakeConfig = Callable[[dict[str, Any]], Config]


class Errands:
    """A tool source of the test's own: a writing tool that counts its runs (and can be held),
    and a tool that raises."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.hold: asyncio.Event | None = None

    def tools(self) -> list[Tool]:
        return [
            FunctionTool("book_table", "Book a table.", {
                "type": "object", "properties": {"time": {"type": "string"}}, "required": ["time"],
            }, self._book, writes=True),
            FunctionTool("explode", "Always fails.", {"type": "object", "properties": {}}, self._explode),
            FunctionTool("dawdle", "Never finishes.", {"type": "object", "properties": {}}, self._dawdle),
        ]

    async def _book(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        self.runs.append(dict(arguments))
        if self.hold is not None:
            await self.hold.wait()
        return ToolResult(f"booked for {arguments['time']}", f"table #7 at {arguments['time']}")

    async def _explode(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        raise RuntimeError("the kitchen is on fire")

    async def _dawdle(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


@asynccontextmanager
async def daemon(config: Config, channel: FakeChannel, *sources: ToolSource,
                 grace: float | None = None) -> AsyncIterator[Daemon]:
    """A daemon with extra tool sources (before the built-ins); `grace` cuts turns short at stop."""
    if grace is not None:
        router = config.router.model_copy(update={"shutdown_grace": grace})
        config = config.model_copy(update={"router": router})
    brain = AnthropicBrain(config.anthropic, API_KEY)
    made = Daemon(config, [channel], brain=brain)
    made.tool_sources.extend(sources)
    task = asyncio.create_task(made.run())
    try:
        await asyncio.wait_for(made.started.wait(), 10)
        yield made
    finally:
        made.request_stop()
        try:
            await asyncio.wait_for(task, 10)
        finally:
            await brain.aclose()


async def say(made: Daemon, channel: FakeChannel, text: str, **kwargs: Any) -> None:
    await channel.inject(channel.message(text, **kwargs))
    await router_of(made).idle()


def results(request: RecordedRequest) -> list[dict[str, Any]]:
    """The tool_result blocks of a request's last user turn."""
    content = request.messages[-1]["content"]
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def tool_names(request: RecordedRequest) -> list[str]:
    return [tool["name"] for tool in request.body.get("tools") or []]


async def test_a_tool_is_called_and_its_result_reaches_the_next_request(
    api: AnthropicStandIn, make_config: MakeConfig, view: Store, channel: FakeChannel
) -> None:
    """The model's tool call is run and its result sent back paired with it; the model's next
    answer is the reply, and the reply keeps the call as an action."""
    api.script(ToolUse((("current_time", {}),)), Text("It is late."), model=MODEL)
    async with daemon(make_config(config_data(api)), channel) as made:
        await say(made, channel, "what time is it?")

    first, second = reply_requests(api)
    assert "current_time" in tool_names(first)
    assert tool_names(first) == sorted(tool_names(first))
    assert first.body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert [t for t in first.body["tools"] if "cache_control" in t] == [first.body["tools"][-1]]
    assert second.body["tools"] == first.body["tools"]  # byte-stable definitions
    use = second.messages[-2]["content"][0]
    assert use["type"] == "tool_use" and use["name"] == "current_time"
    (result,) = results(second)
    assert result["tool_use_id"] == use["id"] and "UTC" in result["content"]
    assert "is_error" not in result
    assert [m.text for m in channel.sent] == ["It is late."]
    reply = (await view.history("agent:main:fake:direct:42", 5))[-1]
    assert len(reply.actions) == 1 and reply.actions[0].startswith("current_time() → ")


async def test_a_failing_tool_an_unknown_one_and_bad_arguments_come_back_as_errors(
    api: AnthropicStandIn, make_config: MakeConfig, channel: FakeChannel
) -> None:
    """A tool that raises, a tool that does not exist, arguments that break the schema and a tool
    that runs past its timeout each come back as a tool_result with is_error the model can read;
    the turn still gets its reply."""
    errands = Errands()
    api.script(ToolUse((("explode", {}), ("no_such_tool", {}), ("book_table", {"when": 9}), ("dawdle", {}))),
               Text("Sorry, that did not work."), model=MODEL)
    config = make_config(config_data(api, tools={"tool_timeout": 0.2}))
    async with daemon(config, channel, errands) as made:
        await say(made, channel, "book me a table")

    found = results(reply_requests(api)[1])
    assert [r.get("is_error") for r in found] == [True, True, True, True]
    assert "the kitchen is on fire" in found[0]["content"]
    assert "unknown tool 'no_such_tool'" in found[1]["content"]
    assert "bad arguments" in found[2]["content"] and "'time' is a required property" in found[2]["content"]
    assert "dawdle took longer than 0.2 s" in found[3]["content"]
    assert errands.runs == []
    assert [m.text for m in channel.sent] == ["Sorry, that did not work."]


async def test_the_round_limit_holds_and_the_model_answers_after_it(
    api: AnthropicStandIn, make_config: MakeConfig, view: Store, channel: FakeChannel
) -> None:
    """After max_tool_rounds rounds the model is asked once more with tools it cannot call and a
    note saying so; its answer is the reply and the snapshot says the limit was reached."""
    api.script(ToolUse((("current_time", {}),)), ToolUse((("current_time", {}),)), Text("Done."), model=MODEL)
    config = make_config(config_data(api, tools={"max_tool_rounds": 2}))
    async with daemon(config, channel) as made:
        await say(made, channel, "keep checking the time")

    sent = reply_requests(api)
    assert len(sent) == 3
    assert [r.body.get("tool_choice") for r in sent] == [None, None, {"type": "none"}]
    assert sent[2].body["tools"] == sent[0].body["tools"]
    assert sent[2].messages[-1]["content"][-1] == {"type": "text", "text": LIMIT_NOTE}
    assert [m.text for m in channel.sent] == ["Done."]
    (record,) = await view.snapshots("agent:main:fake:direct:42")
    tools = record.snapshot["reply_call"]["tools"]
    assert tools["rounds"] == 2 and tools["limit_reached"] is True and len(tools["calls"]) == 2


async def test_notes_reach_the_next_system_prompt_of_their_user_only(
    api: AnthropicStandIn, make_config: MakeConfig, tmp_path: Path, channel: FakeChannel
) -> None:
    """A note kept with `remember` is in the per-turn system prompt of that user's next request,
    never in another user's; `switchboard notes` lists it for the admin."""
    api.script(ToolUse((("remember", {"note": "Ada is vegetarian"}),)), Text("Noted."), model=MODEL)
    config = await written_config(tmp_path / "config.toml", {
        **config_data(api), "database": {"path": str(tmp_path / "switchboard.db")}})
    async with daemon(config, channel) as made:
        await say(made, channel, "remember that I'm vegetarian")
        await say(made, channel, "what should I cook?")
        await say(made, channel, "what should I cook?", peer="7", sender="7", name="Bea")

    sent = reply_requests(api)
    ada_next, bea = sent[2], sent[3]
    assert "Ada is vegetarian" in ada_next.body["system"][1]["text"]
    assert "Ada is vegetarian" not in ada_next.body["system"][0]["text"]  # the cached part is unchanged
    assert ada_next.body["system"][0] == sent[0].body["system"][0]
    assert "vegetarian" not in json.dumps(bea.body["system"])
    where = ("--config", str(tmp_path / "config.toml"))
    code, out, err = await switchboard_cli(tmp_path, "notes", "fake:42", *where)
    assert code == 0, err
    assert "Ada is vegetarian" in out and "fake:42" in out
    code, out, _ = await switchboard_cli(tmp_path, "notes", "fake:7", *where)
    assert code == 0 and "vegetarian" not in out


@pytest.mark.parametrize("scope", ["session", "user"])
async def test_history_search_never_returns_another_users_messages(
    api: AnthropicStandIn, make_config: MakeConfig, channel: FakeChannel, scope: str
) -> None:
    """In a group both users spoke of their flat; Ada's search in her private chat finds her own
    words there only where `search_scope = "user"` lets it, and never Bea's."""
    api.script(ToolUse((("search_history", {"query": "flat"}),)), Text("Found it."), model=MODEL)
    async with daemon(make_config(config_data(api, tools={"search_scope": scope})), channel) as made:
        group = {"kind": "group", "peer": "-100", "starts_turn": False}
        await say(made, channel, "my flat has a red door", sender="42", name="Ada", **group)
        await say(made, channel, "my flat in Berlin is secret", sender="7", name="Bea", **group)
        await say(made, channel, "what did I say about the flat?")

    (result,) = results(reply_requests(api)[-1])
    assert ("red door" in result["content"]) == (scope == "user")
    assert "Berlin" not in result["content"] and "secret" not in result["content"]


async def test_writing_tools_are_not_offered_to_a_non_admin_in_a_group(
    api: AnthropicStandIn, make_config: MakeConfig, channel: FakeChannel
) -> None:
    """In a shared chat a writing tool is not offered to someone who is not an admin (a rule can
    let a user have them); a denied tool is not offered anywhere."""
    config = make_config(config_data(api, tools={
        "deny": ["explode"],
        "rules": [{"sessions": "agent:main:fake:group:*", "users": ["fake:7"], "shared_writes": "everyone"}],
    }))
    async with daemon(config, channel, Errands()) as made:
        await say(made, channel, "hi all", kind="group", peer="-100", sender="42")
        await say(made, channel, "hi all", kind="group", peer="-100", sender="7", name="Bea")
        await say(made, channel, "hi", sender="42")

    ada_group, bea_group, ada_dm = (tool_names(r) for r in reply_requests(api))
    assert "book_table" not in ada_group and "remember" not in ada_group
    assert "current_time" in ada_group and "search_history" in ada_group
    assert "book_table" in bea_group and "remember" in bea_group
    assert "book_table" in ada_dm and "remember" in ada_dm
    assert all("explode" not in names for names in (ada_group, bea_group, ada_dm))


async def test_a_round_cut_short_after_a_writing_tool_ran_is_not_run_again(
    api: AnthropicStandIn, make_config: MakeConfig, view: Store, channel: FakeChannel
) -> None:
    """A turn stopped after its writing tool ran (the next model call never came back) is answered
    after the restart from the stored round: the tool ran once and its result is what is sent."""
    errands = Errands()
    api.script(ToolUse((("book_table", {"time": "19:00"}),)), Slow(30, Text("never")), model=MODEL)
    config = make_config(config_data(api))
    async with daemon(config, channel, errands, grace=0.2):
        await channel.inject(channel.message("book a table at 7"))
        await wait_until(lambda: len(reply_requests(api)) == 2)
    assert errands.runs == [{"time": "19:00"}] and channel.sent == []

    api.script(Text("Booked for 19:00."), model=MODEL)
    async with daemon(config, channel, errands) as made:
        await router_of(made).idle()

    assert errands.runs == [{"time": "19:00"}]
    resumed = reply_requests(api)[-1]
    (result,) = results(resumed)
    assert result["content"] == "booked for 19:00" and "is_error" not in result
    assert [m.text for m in channel.sent] == ["Booked for 19:00."]
    reply = (await view.history("agent:main:fake:direct:42", 5))[-1]
    assert reply.actions == ('book_table(time="19:00") → table #7 at 19:00',)


async def test_a_call_cut_short_mid_run_is_closed_as_interrupted_and_the_snapshot_says_so(
    api: AnthropicStandIn, make_config: MakeConfig, view: Store, channel: FakeChannel
) -> None:
    """A crash while a writing tool runs leaves its tool_use without a result: after the restart
    the call is not run again, the pair is closed with an 'interrupted' error result before
    anything is sent, and the snapshot records the repair."""
    errands = Errands()
    errands.hold = asyncio.Event()  # never set: the tool is cut off mid-run
    api.script(ToolUse((("book_table", {"time": "20:00"}),), text="Booking."), model=MODEL)
    config = make_config(config_data(api))
    async with daemon(config, channel, errands, grace=0.2):
        await channel.inject(channel.message("book a table at 8"))
        await wait_until(lambda: bool(errands.runs))

    errands.hold = None
    api.script(Text("I may have booked it; please check."), model=MODEL)
    async with daemon(config, channel, errands) as made:
        await router_of(made).idle()

    assert len(errands.runs) == 1
    resumed = reply_requests(api)[-1]
    assert resumed.messages[-2]["content"][0] == {"type": "text", "text": "Booking."}
    (result,) = results(resumed)
    assert result["is_error"] is True and "interrupted" in result["content"]
    (record,) = await view.snapshots("agent:main:fake:direct:42")
    tools = record.snapshot["reply_call"]["tools"]
    assert [r["kind"] for r in tools["repairs"]] == ["closed_call"]
    assert tools["calls"][0]["resumed"] is True


async def test_actions_follow_the_reply_in_later_context_and_in_switchboard_context(
    api: AnthropicStandIn, tmp_path: Path, channel: FakeChannel
) -> None:
    """The next turn sees the reply with its actions line (not the tool transcript), and
    `switchboard context` shows the call."""
    errands = Errands()
    api.script(ToolUse((("book_table", {"time": "19:00"}),)), Text("Booked."), model=MODEL)
    config = await written_config(tmp_path / "config.toml", {
        **config_data(api), "database": {"path": str(tmp_path / "switchboard.db")}})
    async with daemon(config, channel, errands) as made:
        await say(made, channel, "book a table at 7")
        await say(made, channel, "thanks")

    later = reply_requests(api)[-1]
    assert len(later.messages) == 3  # the earlier turn is text again, the tool blocks are not re-sent
    assert 'Booked.\n[actions: book_table(time="19:00") → table #7 at 19:00]' in later.messages[1]["content"]
    assert "tool_use" not in json.dumps(later.messages)
    code, out, err = await switchboard_cli(tmp_path, "context", "agent:main:fake:direct:42", "--turn", "1",
                                           "--config", str(tmp_path / "config.toml"))
    assert code == 0, err
    assert 'round 1: book_table(time="19:00") → table #7 at 19:00' in out
    assert "1 call in 1 round" in out
    code, out, err = await switchboard_cli(tmp_path, "replay", "agent:main:fake:direct:42",
                                           "--config", str(tmp_path / "config.toml"))
    assert code == 0 and "match" in out, out + err


async def test_a_users_own_timezone_is_kept_and_used_by_their_next_turn(
    api: AnthropicStandIn, make_config: MakeConfig, channel: FakeChannel
) -> None:
    """`set_timezone` refuses a zone that does not exist and keeps a real one: the user's next
    turn tells the model their zone, and `current_time` answers in it; another user keeps the
    agent's."""
    zones = (("set_timezone", {"zone": "Mars/Olympus"}), ("set_timezone", {"zone": "Asia/Tokyo"}))
    api.script(ToolUse(zones),
               Text("Done."), ToolUse((("current_time", {}),)), Text("Late here."), model=MODEL)
    async with daemon(make_config(config_data(api)), channel) as made:
        await say(made, channel, "I live in Tokyo")
        await say(made, channel, "what time is it?")
        await say(made, channel, "hello", peer="7", sender="7", name="Bea")

    sent = reply_requests(api)
    refused, kept = results(sent[1])
    assert refused["is_error"] is True and "not an IANA timezone" in refused["content"]
    assert "is_error" not in kept
    assert "Asia/Tokyo" in sent[2].body["system"][1]["text"]
    (now,) = results(sent[3])
    assert "Asia/Tokyo" in now["content"] and "JST" in now["content"]
    assert "Asia/Tokyo" not in sent[4].body["system"][1]["text"]


async def test_when_the_model_fails_after_a_tool_acted_the_reply_says_what_was_done(
    api: AnthropicStandIn, make_config: MakeConfig, channel: FakeChannel
) -> None:
    """A writing tool ran, then the model failed for good: instead of the bare apology the user is
    told what was done, and the next turn's model sees it (so it does not book twice)."""
    errands = Errands()
    failed = Error(500, "api_error")
    api.script(ToolUse((("book_table", {"time": "19:00"}),)), failed, failed, model=MODEL)
    async with daemon(make_config(config_data(api)), channel, errands) as made:
        await say(made, channel, "book a table at 7")
        await say(made, channel, "did it work?")

    first = channel.sent[0].text
    assert first.startswith("I couldn't finish my answer") and "table #7 at 19:00" in first
    assert errands.runs == [{"time": "19:00"}]
    later = reply_requests(api)[-1]
    assert "table #7 at 19:00]" in later.messages[1]["content"]  # its actions line, in context
