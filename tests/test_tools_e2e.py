"""The tool sources together through the tool loop: the model (the Messages API stand-in scripting
tool_use) sets a reminder that the daemon later delivers, and calls an MCP server's tool."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bot.config import Config
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, Text, ToolUse
from bot.testing.fake_channel import FakeChannel
from bot.testing.mcp_calc import server_entry as calc
from tests.harness import MODEL, config_data, reply_requests, say, wait_until
from tests.test_reminders_daemon import Clock, daemon_on
from tests.test_tool_loop import results, tool_names

MakeConfig = Callable[[dict[str, Any]], Config]
DM = "agent:main:fake:direct:42"


async def test_a_reminder_the_model_sets_is_delivered_at_its_time_once(
    api: AnthropicStandIn, make_config: MakeConfig, view: Store
) -> None:
    """"Remind me in 2 hours": the model calls set_reminder, the reply keeps the call as an
    action, and at its time the reminder reaches the chat once, however often its time is run."""
    api.script(ToolUse((("set_reminder", {"text": "Call the bank", "when": "in 2 hours"}),)),
               Text("Done, I'll remind you."), model=MODEL)
    clock = Clock(time.time())
    channel = FakeChannel()
    async with daemon_on(make_config(config_data(api)), [channel], clock) as daemon:
        await say(daemon, channel, "remind me in 2 hours to call the bank")
        first, second = reply_requests(api)
        assert {"set_reminder", "list_reminders", "cancel_reminder"} <= set(tool_names(first))
        (result,) = results(second)
        assert "is_error" not in result and "#" in str(result["content"])
        reply = (await view.history(DM, 5))[-1]
        assert reply.text == "Done, I'll remind you." and reply.actions[0].startswith("set_reminder(")
        (pending,) = await view.pending_reminders()
        assert daemon.reminders is not None
        assert await daemon.reminders.fire(pending.id) is None  # not due yet: nothing sent
        clock.now += 2 * 3600 + 5
        await daemon.reminders.fire(pending.id)
        await daemon.reminders.fire(pending.id)
    assert [m.text for m in channel.sent] == ["Done, I'll remind you.", "⏰ Reminder: Call the bank"]


async def test_the_model_calls_an_mcp_servers_tool_and_reads_its_answer(
    api: AnthropicStandIn, make_config: MakeConfig
) -> None:
    """A tool of an [[mcp_servers]] entry is offered under its prefix once the server runs; the
    model's call reaches the server and its answer comes back as the tool result."""
    api.script(ToolUse((("calc__add", {"a": 2, "b": 40}),)), Text("2 + 40 is 42."), model=MODEL)
    servers = [calc("calc")]
    channel = FakeChannel()
    config = make_config({**config_data(api), "mcp_servers": servers})
    async with daemon_on(config, [channel], Clock(time.time())) as daemon:
        await wait_until(lambda: any(t.name == "calc__add" for t in daemon.mcp.tools()), timeout=20)
        await say(daemon, channel, "what is 2 + 40?")
    first, second = reply_requests(api)
    assert "calc__add" in tool_names(first)
    (result,) = results(second)
    assert "42" in str(result["content"]) and "is_error" not in result
    assert [m.text for m in channel.sent] == ["2 + 40 is 42."]
