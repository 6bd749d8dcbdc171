"""MCP servers: a real SDK server over stdio, its tools offered with a prefix, called, restarted, stopped."""

from __future__ import annotations

import asyncio
import io
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog

from bot.config import Config, parse_config
from bot.core.log import configure_logging
from bot.core.messages import ChatRef
from bot.core.session_key import parse as parse_key
from bot.testing.mcp_calc import server_entry as calc
from bot.tools.base import Tool, ToolContext, ToolResult
from bot.tools.mcp import McpManager
from bot.tools.mcp_server import McpServer
from bot.tools.mcp_tools import offered_name
from tests.harness import wait_until

CONTEXT = ToolContext(
    session_key=parse_key("agent:main:console:direct:local"), chat=ChatRef("console", "local"),
    user_id="local", request_id=1, is_admin=True, shared=False, now=0.0, timezone="UTC",
)


def config_of(*servers: dict[str, Any]) -> Config:
    return parse_config({"mcp_servers": list(servers)}, "<test>")


@asynccontextmanager
async def manager_of(*servers: dict[str, Any], restart_delay: float = 0.05) -> AsyncIterator[McpManager]:
    async with McpManager(config_of(*servers), restart_delay=restart_delay) as manager:
        yield manager


def named(manager: McpManager) -> dict[str, Tool]:
    return {tool.name: tool for tool in manager.tools()}


async def running(manager: McpManager, *names: str) -> None:
    """Wait until every named server offers its tools."""
    await wait_until(lambda: all(s["state"] == "running" for s in manager.status() if s["name"] in names)
                     and {s["name"] for s in manager.status()} >= set(names), timeout=20)


async def call(manager: McpManager, tool: str, /, **arguments: Any) -> ToolResult:
    return await named(manager)[tool].run(arguments, CONTEXT)


def pids(pidfile: Path) -> list[int]:
    return [int(line) for line in pidfile.read_text().split()] if pidfile.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def definitions(manager: McpManager) -> str:
    """The tool definitions as the API request carries them, as bytes would be compared."""
    return json.dumps([{"name": t.name, "description": t.description, "input_schema": t.input_schema}
                       for t in manager.tools()])


# -- offering and calling ------------------------------------------------------------------------


async def test_tools_are_offered_under_the_server_prefix_in_a_stable_order() -> None:
    """Every tool is `calc__<tool>`, a valid Anthropic name (the dotted one made so), sorted; each
    counts as writing unless read-only."""
    async with manager_of(calc()) as manager:
        await running(manager, "calc")
        tools = manager.tools()
    assert [t.name for t in tools] == [
        "calc__add", "calc__crash", "calc__echo", "calc__env", "calc__fail", "calc__grow",
        "calc__hang", "calc__notes_read", "calc__pid", "calc__slow",
    ]
    add = tools[0]
    assert add.description == "Add two integers."
    assert add.input_schema["type"] == "object"
    assert add.input_schema["required"] == ["a", "b"]
    assert all(t.writes for t in tools)


async def test_a_call_returns_the_servers_answer() -> None:
    """The model's arguments reach the server and its answer comes back as the result and summary."""
    async with manager_of(calc()) as manager:
        await running(manager, "calc")
        added = await call(manager, "calc__add", a=2, b=3)
        echoed = await call(manager, "calc__echo", text="hello there")
        dotted = await call(manager, "calc__notes_read")
    assert added == ToolResult(content="5", summary="5")
    assert echoed == ToolResult(content="hello there", summary="hello there")
    assert dotted.content == "no notes"


async def test_a_tool_that_raises_or_gets_bad_arguments_yields_an_error_result() -> None:
    """A tool raising on the server, bad arguments and an unknown tool are error results, not crashes."""
    async with manager_of(calc()) as manager:
        await running(manager, "calc")
        raised = await call(manager, "calc__fail", reason="the abacus is broken")
        bad = await call(manager, "calc__add", a="two")
        still = await call(manager, "calc__add", a=1, b=1)
    assert raised.is_error and "fail" in raised.content and raised.content.startswith("error:")
    assert bad.is_error and "b" in bad.content and "Field required" in bad.content
    assert still == ToolResult(content="2", summary="2")


async def test_a_call_past_its_timeout_is_an_error_result_and_the_server_keeps_serving() -> None:
    """A call slower than `timeout` is answered with an error naming the limit; a server that still
    answers pings is not restarted, and the next call works."""
    # The ping that follows a timeout gets the same limit: 1 s, which a loaded machine still meets.
    async with manager_of(calc(timeout=1.0)) as manager:
        await running(manager, "calc")
        slow = await call(manager, "calc__slow", seconds=3)
        # The ping that follows a timeout has ended: a slow server answers it.
        await asyncio.gather(*(t for t in asyncio.all_tasks() if t.get_name() == "mcp calc ping"))
        after = await call(manager, "calc__add", a=1, b=2)
        (state,) = manager.status()
    assert slow.is_error and "did not answer within 1 s" in slow.content
    assert after.content == "3" and state["restarts"] == 0


async def test_a_server_that_stops_answering_is_started_again(tmp_path: Path) -> None:
    """A call that times out on a server that then does not answer a ping either (hung, not just
    slow) gets the server started again instead of every later call timing out."""
    pidfile = tmp_path / "pids"
    async with manager_of(calc("calc", "--pidfile", str(pidfile), timeout=0.5)) as manager:
        await running(manager, "calc")
        hung = await call(manager, "calc__hang", seconds=60)
        await wait_until(lambda: manager.status()[0]["restarts"] == 1, timeout=20)
        await running(manager, "calc")
        after = await call(manager, "calc__add", a=1, b=2)
        (state,) = manager.status()
    assert hung.is_error and "did not answer within 0.5 s" in hung.content
    assert after.content == "3"
    assert "stopped answering" in state["error"]
    first, _ = pids(pidfile)
    assert not alive(first)


async def test_allowed_and_read_only_tools_follow_the_config() -> None:
    """Only the tools listed in `tools` are offered; those in `read_only_tools` do not count as writing."""
    async with manager_of(calc(tools=["add", "echo", "missing"], read_only_tools=["add"])) as manager:
        await running(manager, "calc")
        tools = named(manager)
    assert sorted(tools) == ["calc__add", "calc__echo"]
    assert tools["calc__add"].writes is False and tools["calc__echo"].writes is True


async def test_two_servers_offer_their_tools_side_by_side_in_config_order() -> None:
    """Two servers with the same tools keep them apart by prefix; the order follows the config."""
    async with manager_of(calc("zeta", tools=["add"]), calc("alpha", tools=["add"])) as manager:
        await running(manager, "zeta", "alpha")
        names = [t.name for t in manager.tools()]
        result = await call(manager, "alpha__add", a=20, b=22)
    assert names == ["zeta__add", "alpha__add"]
    assert result.content == "42"


async def test_a_call_cancelled_by_its_caller_leaves_the_server_serving() -> None:
    """A caller giving up on a call (the turn's own deadline) does not break the session."""
    async with manager_of(calc(timeout=30)) as manager:
        await running(manager, "calc")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(call(manager, "calc__slow", seconds=1), 0.2)
        after = await call(manager, "calc__add", a=1, b=2)
        (state,) = manager.status()
    assert after.content == "3" and state["restarts"] == 0


async def test_a_server_announcing_new_tools_has_them_offered() -> None:
    """When a server says its tool list changed, the new list is read and offered, within the
    allowed tools."""
    with structlog.testing.capture_logs() as logs:
        async with manager_of(calc(), calc("limited", tools=["grow"])) as manager:
            await running(manager, "calc", "limited")
            await call(manager, "calc__grow")
            await call(manager, "limited__grow")
            await wait_until(lambda: {e.get("server") for e in logs
                                      if e["event"] == "mcp server's tools changed"} == {"calc", "limited"})
            squared = await call(manager, "calc__square", x=7)
            limited = [name for name in named(manager) if name.startswith("limited__")]
    assert squared.content == "49"
    assert limited == ["limited__grow"]


def test_offered_names_are_valid_unique_and_the_same_every_time() -> None:
    """Characters outside [A-Za-z0-9_-] become `_`; a name over 64 or already taken ends in a hash
    of the tool's own name, so the same listing always gives the same names."""
    assert offered_name("files", "read_file", set()) == "files__read_file"
    assert offered_name("files", "dir/list.all", set()) == "files__dir_list_all"
    taken = {"files__notes_read"}
    twin = offered_name("files", "notes_read", taken)
    assert twin.startswith("files__notes_read_") and twin != "files__notes_read"
    assert twin == offered_name("files", "notes_read", taken)
    long = offered_name("files", "x" * 100, set())
    assert len(long) == 64 and long == offered_name("files", "x" * 100, set())
    assert long != offered_name("files", "x" * 99, set())


# -- crashes and restarts ------------------------------------------------------------------------


async def test_a_crash_mid_call_is_an_error_result_its_tools_go_missing_and_come_back(tmp_path: Path) -> None:
    """A server that dies mid-call answers that call with an error, offers no tools until it has
    restarted, then serves again with the same tool definitions (byte for byte)."""
    pidfile = tmp_path / "pids"
    async with manager_of(calc("calc", "--pidfile", str(pidfile)), restart_delay=0.3) as manager:
        await running(manager, "calc")
        before = definitions(manager)
        crashed = await call(manager, "calc__crash")
        missing = manager.tools()
        (meanwhile,) = manager.status()
        await running(manager, "calc")
        after = await call(manager, "calc__add", a=40, b=2)
        (restarted,) = manager.status()
        again = definitions(manager)
    assert crashed.is_error and "stopped during the call" in crashed.content
    assert missing == ()
    assert meanwhile["state"] == "restarting" and meanwhile["tools"] == []
    assert after.content == "42"
    assert restarted["restarts"] == 1 and restarted["state"] == "running"
    assert restarted["error"].startswith("the server exited")  # why it restarted stays shown
    assert again == before
    first, second = pids(pidfile)
    assert not alive(first) and first != second


async def test_a_call_to_a_tool_of_a_server_that_is_down_is_an_error_result(tmp_path: Path) -> None:
    """A tool held from before a crash, called while its server is down, says so instead of failing."""
    async with manager_of(calc(), restart_delay=30) as manager:
        await running(manager, "calc")
        add = named(manager)["calc__add"]
        await call(manager, "calc__crash")
        result = await add.run({"a": 1, "b": 2}, CONTEXT)
    assert result.is_error and "not available now (restarting)" in result.content


async def test_a_server_that_exits_at_start_is_retried_with_its_last_words_in_status(tmp_path: Path) -> None:
    """A server failing before the handshake offers nothing, is started again and again with growing
    waits, and status shows what it said on stderr."""
    pidfile = tmp_path / "pids"
    async with manager_of(calc("calc", "--exit-at-start", "--pidfile", str(pidfile))) as manager:
        await wait_until(lambda: manager.status()[0]["restarts"] >= 2, timeout=20)
        (state,) = manager.status()
        tools = manager.tools()
    assert state["state"] == "restarting" and tools == ()
    assert "cannot open the abacus" in state["error"]
    assert len(pids(pidfile)) >= 2


async def test_a_command_that_does_not_exist_is_reported_and_retried(tmp_path: Path) -> None:
    """A missing program is an error in status (retried: it may be installed meanwhile), not a crash."""
    missing = str(tmp_path / "no-such-server")
    async with manager_of({"name": "ghost", "command": missing}) as manager:
        await wait_until(lambda: manager.status()[0]["restarts"] >= 1, timeout=20)
        (state,) = manager.status()
    assert state["state"] == "restarting"
    assert "could not start it: No such file or directory" in state["error"]


async def test_a_missing_environment_variable_stops_that_server_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A variable named in `env` but not set keeps that server from starting (named in status, not
    retried); the other server runs."""
    monkeypatch.delenv("CALC_TOKEN", raising=False)
    async with manager_of(calc("calc", env=["CALC_TOKEN"]), calc("other")) as manager:
        await running(manager, "other")
        await wait_until(lambda: manager.status()[0]["state"] == "error")
        broken, other = manager.status()
    assert "CALC_TOKEN" in broken["error"] and broken["restarts"] == 0
    assert other["state"] == "running" and other["tools"]


# -- stopping ------------------------------------------------------------------------------------


async def test_stop_leaves_no_server_process_behind_even_mid_call(tmp_path: Path) -> None:
    """Closing the manager ends every server process, one busy in a call included."""
    pidfile = tmp_path / "pids"
    async with manager_of(calc("calc", "--pidfile", str(pidfile)),
                          calc("busy", "--pidfile", str(pidfile), timeout=60)) as manager:
        await running(manager, "calc", "busy")
        busy = asyncio.create_task(call(manager, "busy__slow", seconds=30))
        await asyncio.sleep(0.2)
    result = await busy
    assert len(pids(pidfile)) == 2
    assert not any(alive(pid) for pid in pids(pidfile))
    assert result.is_error
    assert [s["state"] for s in manager.status()] == ["stopped", "stopped"]
    assert manager.tools() == ()


async def test_a_stop_while_a_server_is_still_starting_ends_it_cleanly(tmp_path: Path) -> None:
    """A server slow to answer the handshake is stopped at once when the daemon stops: its process
    ends and nothing has to be cancelled."""
    pidfile = tmp_path / "pids"
    with structlog.testing.capture_logs() as logs:
        async with manager_of(calc("calc", "--sleep-at-start", "60", "--pidfile", str(pidfile))) as manager:
            await wait_until(lambda: bool(pids(pidfile)), timeout=20)
            (starting,) = manager.status()
    assert starting["state"] == "starting" and starting["tools"] == []
    assert not alive(pids(pidfile)[0])
    assert manager.status()[0]["state"] == "stopped"
    assert [e for e in logs if e["log_level"] in ("warning", "error")] == []


# -- secrets -------------------------------------------------------------------------------------


async def test_env_values_reach_the_server_but_never_the_log(
    monkeypatch: pytest.MonkeyPatch, log_stream: io.StringIO,
) -> None:
    """A variable named in `env` is in the server's environment; its value appears in no log line,
    even when the server itself prints it on stderr (relayed and redacted)."""
    secret = "calc-secret-value-8d1f0e"
    monkeypatch.setenv("CALC_TOKEN", secret)
    monkeypatch.setenv("NOT_PASSED", "other-value")
    config = config_of(calc("calc", "--say-env", "CALC_TOKEN", env=["CALC_TOKEN"]))
    configure_logging("DEBUG", "json", secrets=[os.environ[n] for n in config.secret_env_names()
                                                  if n in os.environ], stream=log_stream)
    async with McpManager(config) as manager:
        await running(manager, "calc")
        passed = await call(manager, "calc__env", name="CALC_TOKEN")
        other = await call(manager, "calc__env", name="NOT_PASSED")
        await wait_until(lambda: "starting with CALC_TOKEN" in log_stream.getvalue())
    assert passed.content == secret
    assert other.content == "<unset>"
    logged = log_stream.getvalue()
    assert secret not in logged
    assert "starting with CALC_TOKEN=[redacted]" in logged
    assert '"env": ["CALC_TOKEN"]' in logged


async def test_a_server_cancelled_past_the_stop_timeout_is_reported_stopped(tmp_path: Path) -> None:
    """When a server does not end within the stop's timeout (a loaded machine, a server ignoring
    its stdin) and is cancelled, its status says "stopped", not the "starting" it was cut off in,
    and its process is gone."""
    pidfile = tmp_path / "pids"
    config = config_of(calc("calc", "--sleep-at-start", "60", "--pidfile", str(pidfile)))
    (entry,) = config.mcp_servers
    server = McpServer(entry, resolve=config.resolve, on_change=lambda: None)
    server.start()
    await wait_until(lambda: bool(pids(pidfile)), timeout=20)
    await server.stop(timeout=0.0)
    assert server.status()["state"] == "stopped"
    await wait_until(lambda: not alive(pids(pidfile)[0]), timeout=20)
