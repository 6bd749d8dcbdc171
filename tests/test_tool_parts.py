"""The tool loop's parts: transcript repair, stable definitions, permissions, the notes block, the
stand-in's tool checks, and what a streamed preview is shown across rounds."""

from __future__ import annotations

import time
from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Any

import anthropic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.config import AnthropicConfig, ToolsConfig, parse_config
from bot.core.errors import ConfigError
from bot.core.messages import ChatRef
from bot.core.session_key import build
from bot.models.brain import AnthropicBrain, ReplyRequest
from bot.store import Store, UserNote
from bot.testing.anthropic_api import AnthropicStandIn, Text, ToolUse
from bot.tools.base import FunctionTool, ToolContext, ToolResult
from bot.tools.notes import notes_block
from bot.tools.permissions import permitted
from bot.tools.toolbox import ToolBox, definitions
from bot.tools.transcript import INTERRUPTED, repair
from bot.turn.tool_loop import ToolLoop
from tests.harness import API_KEY, MODEL


def use(tool_id: str, name: str = "t") -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": {}}


def result(tool_id: str, text: str = "ok") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": text}


def test_a_call_without_its_result_is_closed_as_interrupted() -> None:
    """A tool_use at the end, or followed by a turn lacking its result, gets an interrupted error
    result (first in the next user turn); each repair is named."""
    turns = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [use("a"), use("b")]},
        {"role": "user", "content": [result("a")]},
        {"role": "assistant", "content": [{"type": "text", "text": "more"}, use("c")]},
    ]
    fixed, repairs = repair(turns)
    assert fixed[2]["content"][0] == {"type": "tool_result", "tool_use_id": "b", "content": INTERRUPTED,
                                      "is_error": True}
    assert fixed[2]["content"][1] == result("a")
    assert fixed[4] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "c", "content": INTERRUPTED, "is_error": True}]}
    assert [(r["kind"], r["tool_use_id"]) for r in repairs] == [("closed_call", "b"), ("closed_call", "c")]
    assert turns[2]["content"] == [result("a")]  # the input is left as it was


def test_a_result_without_its_call_is_dropped_and_the_turns_still_alternate() -> None:
    """A tool_result whose tool_use is not in the turn before (trimmed away) is dropped; a turn
    left empty goes, and the neighbours of the same role are merged."""
    turns = [
        {"role": "user", "content": [result("gone")]},
        {"role": "assistant", "content": "earlier answer"},
        {"role": "user", "content": [result("also-gone"), {"type": "text", "text": "question"}]},
    ]
    fixed, repairs = repair(turns)
    assert fixed == [{"role": "assistant", "content": "earlier answer"},
                     {"role": "user", "content": [{"type": "text", "text": "question"}]}]
    assert [r["kind"] for r in repairs] == ["dropped_result", "dropped_result"]
    healthy = [{"role": "user", "content": "q"}, {"role": "assistant", "content": [use("x")]},
               {"role": "user", "content": [result("x")]}]
    assert repair(healthy) == (healthy, [])


async def _noop(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    return ToolResult("ok", "ok")


def tool(name: str, *, writes: bool = False, schema: dict[str, Any] | None = None) -> FunctionTool:
    return FunctionTool(name, f"the {name} tool", schema or {"type": "object", "properties": {}}, _noop,
                        writes=writes)


def asking(*, shared: bool, admin: bool = False, user: str = "42", kind: str = "group") -> ToolContext:
    key = build("main", "telegram", kind if shared else "direct", "-100" if shared else user)
    return ToolContext(key, ChatRef("telegram", key.peer), user, 1, admin, shared, 0.0, "UTC")


def test_definitions_are_the_same_bytes_whatever_the_order_and_the_last_is_cached() -> None:
    """Sorted by name, schemas with sorted keys, the cache breakpoint on the last one only."""
    properties = {"z": {"type": "string"}, "a": {"type": "integer"}}
    one = tool("b", schema={"type": "object", "properties": properties})
    two = tool("a")
    first, second = definitions([one, two]), definitions([two, one])
    assert first == second and [d["name"] for d in first] == ["a", "b"]
    assert "cache_control" not in first[0] and first[1]["cache_control"] == {"type": "ephemeral"}
    assert list(first[1]["input_schema"]["properties"]) == ["a", "z"]


def test_permissions_globs_rules_and_writing_tools_in_shared_chats() -> None:
    """Writing tools reach admins only in shared chats (by default); deny globs win over allow;
    a rule for a user can allow again."""
    config = ToolsConfig(deny=["search_*"], rules=[{"users": ["telegram:9"], "allow": ["search_history"]}])
    writer, reader, search = tool("remember", writes=True), tool("current_time"), tool("search_history")
    assert not permitted(writer, asking(shared=True), config)
    assert permitted(writer, asking(shared=True, admin=True), config)
    assert permitted(writer, asking(shared=False), config)
    assert permitted(reader, asking(shared=True), config)
    assert not permitted(search, asking(shared=False), config)
    assert permitted(search, asking(shared=False, user="9"), config)
    nobody = ToolsConfig(shared_writes="nobody")
    assert not permitted(writer, asking(shared=True, admin=True), nobody)


_GLOB = st.text(alphabet="ab_*?[]!-", min_size=1, max_size=6)


@given(name=st.text(alphabet="ab_-", min_size=1, max_size=6), allow=st.lists(_GLOB, max_size=3),
       deny=st.lists(_GLOB, max_size=3))
def test_allow_and_deny_globs_match_as_fnmatch_does(name: str, allow: list[str], deny: list[str]) -> None:
    """"*" (the default allow) is taken as matching without a glob; every pattern decides as
    `fnmatchcase` does."""
    config = ToolsConfig(allow=allow, deny=deny)
    expected = (any(fnmatchcase(name, p) for p in allow) and not any(fnmatchcase(name, p) for p in deny))
    assert permitted(tool(name), asking(shared=False), config) == expected


def test_the_toolbox_skips_a_duplicate_name_and_a_broken_source() -> None:
    """The first source keeps a name; a source that raises offers nothing, the others still do."""
    class Broken:
        def tools(self) -> list[FunctionTool]:
            raise RuntimeError("down")

    first, again = tool("current_time"), tool("current_time")
    box = ToolBox(ToolsConfig(), [Broken(), type("S", (), {"tools": lambda self: [first, again]})()])
    assert box.offered(asking(shared=False)) == [first]
    assert ToolBox(ToolsConfig(enabled=False), [type("S", (), {"tools": lambda self: [first]})()]).offered(
        asking(shared=False)) == []


def test_the_notes_block_keeps_the_newest_under_its_cap() -> None:
    """Within the cap the newest notes are shown, oldest first, and what is left out is counted."""
    notes = [UserNote(i, "telegram", "42", f"note number {i}", 0.0) for i in range(1, 6)]
    block = notes_block(notes, "Ada", 120)
    assert block.startswith("Notes Ada asked you to keep")
    assert "#5 note number 5" in block and "#1 note number 1" not in block
    assert "older notes not shown" in block
    assert notes_block([], "Ada", 100) == ""


async def test_the_stand_in_refuses_a_call_without_its_result_as_the_api_does() -> None:
    """A tool_use with no tool_result right after it, a result with no call before it, or tool
    blocks without `tools`, is a 400; a scripted call comes back as the API's JSON."""
    async with AnthropicStandIn() as api:
        client = anthropic.AsyncAnthropic(api_key=API_KEY, base_url=api.base_url, max_retries=0)
        broken = [{"role": "user", "content": "hi"},
                  {"role": "assistant", "content": [use("toolu_1")]},
                  {"role": "user", "content": "go on"}]
        tools = [{"name": "t", "input_schema": {"type": "object"}}]
        with pytest.raises(anthropic.BadRequestError, match="without `tool_result` blocks immediately after"):
            await client.messages.create(model=MODEL, max_tokens=10, messages=broken, tools=tools)  # type: ignore[arg-type]
        paired = [*broken[:2], {"role": "user", "content": [result("toolu_1")]}]
        with pytest.raises(anthropic.BadRequestError, match="must define tools"):
            await client.messages.create(model=MODEL, max_tokens=10, messages=paired)  # type: ignore[arg-type]
        with pytest.raises(anthropic.BadRequestError, match="unexpected `tool_use_id`"):
            await client.messages.create(model=MODEL, max_tokens=10, tools=tools,  # type: ignore[arg-type]
                                         messages=[broken[0], {"role": "assistant", "content": "no call"},
                                                   {"role": "user", "content": [result("toolu_9")]}])
        api.script(ToolUse((("t", {"x": 1}),), text="Calling."))
        message = await client.messages.create(model=MODEL, max_tokens=10, messages=paired, tools=tools)  # type: ignore[arg-type]
        assert message.stop_reason == "tool_use"
        assert [block.type for block in message.content] == ["text", "tool_use"]
        assert message.content[1].input == {"x": 1}  # type: ignore[union-attr]
        await client.close()


async def test_a_streamed_preview_starts_over_after_a_tool_round_and_ends_with_the_final_text(
    store: Store,
) -> None:
    """What a round wrote before calling a tool is taken back from the preview ("" starts it over),
    and the reply's text is only the final round's."""
    shown: list[str] = []
    async with AnthropicStandIn() as api:
        api.script(ToolUse((("current_time", {}),), text="Let me look."), Text("It is noon somewhere."))
        brain = AnthropicBrain(AnthropicConfig(base_url=api.base_url, model=MODEL, timeout=2.0), API_KEY)
        loop = ToolLoop(brain, store, [tool("current_time")], asking(shared=False),
                        max_rounds=5, tool_timeout=1)
        outcome = await loop.run(ReplyRequest("stable", "turn", [{"role": "user", "content": "time?"}],
                                              time.monotonic() + 5), shown.append)
        await brain.aclose()
    reset = shown.index("")
    assert "Let me look." in shown[:reset]
    assert all("Let me look" not in text for text in shown[reset:])
    assert shown[-1] == "It is noon somewhere." == outcome.completion.text
    assert outcome.rounds == 1 and outcome.completion.input_tokens == 20


def test_a_rule_may_name_a_user_of_an_extra_bot() -> None:
    """`users` accepts "telegram.work:42", the user 42 as the account "telegram.work" sees them."""
    rules = parse_config({"tools": {"rules": [{"users": ["telegram.work:42", "discord.team:7"]}]}}, "c.toml")
    assert rules.tools.rules[0].users == ["telegram.work:42", "discord.team:7"]


@pytest.mark.parametrize(("data", "key", "expected"), [
    ({"rules": [{"users": ["42"]}]}, "tools.rules[0].users[0]", "a user as PROVIDER:ID"),
    ({"allow": ["bad name"]}, "tools.allow[0]", "a tool name or glob"),
    ({"shared_writes": "all"}, "tools.shared_writes", "'admins', 'everyone' or 'nobody'"),
    ({"max_tool_rounds": 0}, "tools.max_tool_rounds", "greater than or equal to 1"),
    ({"rules": [{"alow": ["x"]}]}, "tools.rules[0].alow", "unknown key; expected one of: sessions"),
])
def test_a_wrong_tools_key_names_the_key_and_what_was_expected(
    data: dict[str, Any], key: str, expected: str
) -> None:
    """Config errors in [tools] name the file, the key and what it should be."""
    with pytest.raises(ConfigError) as info:
        parse_config({"tools": data}, "/etc/switchboard/config.toml")
    assert str(info.value).startswith(f"/etc/switchboard/config.toml: {key}: ")
    assert expected in str(info.value)
