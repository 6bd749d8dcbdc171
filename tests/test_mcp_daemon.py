"""MCP servers in the daemon: started and stopped with it, changed by a reload, shown by
`switchboard status`; and the `[[mcp_servers]]` config, refused clearly when wrong."""

from __future__ import annotations

import asyncio
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from bot.config import McpServerConfig, load_config, parse_config
from bot.core.errors import ConfigError
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.fake_channel import FakeChannel
from bot.testing.mcp_calc import ARGS, COMMAND
from bot.tools.base import Tool
from bot.tools.mcp_plan import McpPlan, plan_mcp_servers
from tests.harness import config_data, daemon_with, switchboard_cli, wait_until
from tests.test_mcp import CONTEXT, alive, pids

EXAMPLE = Path(__file__).resolve().parents[1] / "config.toml.example"


def server_toml(name: str, *args: str, **keys: Any) -> str:
    lines = ["[[mcp_servers]]", f'name = "{name}"', f"command = {json.dumps(COMMAND)}",
             f"args = {json.dumps([*ARGS, *args])}"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


def write_config(path: Path, api: AnthropicStandIn, *servers: str) -> Path:
    data = config_data(api)
    head = "\n".join(
        f"[{section}]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in body.items())
        for section, body in data.items()
    )
    path.write_text(f'{head}\n[database]\npath = "bot.db"\n' + "".join(servers), encoding="utf-8")
    return path


def by_name(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {server["name"]: server for server in status["mcp_servers"]}


def tool_names(tools: list[Tool] | tuple[Tool, ...] | Any) -> list[str]:
    return [tool.name for tool in tools]


async def test_the_daemon_runs_its_servers_shows_them_in_status_and_stops_them(
    api: AnthropicStandIn, tmp_path: Path,
) -> None:
    """Servers start with the daemon and offer their tools; `switchboard status` (and --json) lists
    each with its state and tools; a stop leaves none of their processes behind."""
    pidfile = tmp_path / "pids"
    path = write_config(tmp_path / "config.toml", api,
                        server_toml("calc", "--pidfile", str(pidfile), tools=["add", "echo"]),
                        server_toml("broken", "--exit-at-start", "--pidfile", str(pidfile)))
    config = load_config(path)
    async with daemon_with(config, FakeChannel()) as daemon:
        await wait_until(lambda: bool(daemon.mcp.tools())
                         and by_name({"mcp_servers": daemon.mcp.status()})["broken"]["restarts"] >= 1,
                         timeout=20)
        added = await daemon.mcp.tools()[0].run({"a": 5, "b": 6}, CONTEXT)
        (code, text, err), (json_code, raw, _) = await asyncio.gather(  # two reads, side by side
            switchboard_cli(tmp_path, "status", "--config", str(path)),
            switchboard_cli(tmp_path, "status", "--json", "--config", str(path)))
    assert added.content == "11"
    assert code == 0, err
    assert "mcp calc: running; 2 tools: calc__add, calc__echo" in text
    broken_line = next(line for line in text.splitlines() if line.startswith("mcp broken:"))
    assert broken_line.startswith("mcp broken: restarting, restarted")
    assert "cannot open the abacus" in broken_line
    assert json_code == 0
    listed = by_name(json.loads(raw))
    assert listed["calc"] == {"name": "calc", "state": "running", "error": None, "restarts": 0,
                              "tools": ["calc__add", "calc__echo"]}
    assert listed["broken"]["tools"] == []
    assert pids(pidfile) and not any(alive(pid) for pid in pids(pidfile))


async def test_a_reload_starts_stops_restarts_and_updates_only_what_changed(
    api: AnthropicStandIn, tmp_path: Path,
) -> None:
    """A reload starts a new server, stops a removed one, starts again one whose args changed and
    applies a new tool list to a running one without restarting its process."""
    path = tmp_path / "config.toml"
    files = {name: tmp_path / f"{name}.pids" for name in ("keep", "relaunch", "gone", "new")}
    write_config(path, api,
                 server_toml("keep", "--pidfile", str(files["keep"])),
                 server_toml("relaunch", "--pidfile", str(files["relaunch"])),
                 server_toml("gone", "--pidfile", str(files["gone"])))
    async with daemon_with(load_config(path), FakeChannel()) as daemon:
        await wait_until(lambda: all(s["state"] == "running" for s in daemon.mcp.status()), timeout=20)
        write_config(path, api,
                     server_toml("keep", "--pidfile", str(files["keep"]), tools=["add"]),
                     server_toml("relaunch", "--pidfile", str(files["relaunch"]), "--say-env", "HOME"),
                     server_toml("new", "--pidfile", str(files["new"]), tools=["echo"]))
        outcome = await daemon.reload()
        await wait_until(lambda: all(s["state"] == "running" for s in daemon.mcp.status()), timeout=20)
        status = by_name(await daemon.status())
        names = tool_names(daemon.mcp.tools())
    assert outcome["reloaded"] and "mcp_servers" in outcome["changed"]
    assert outcome["restart_required"] == []
    assert list(status) == ["keep", "relaunch", "new"]
    assert status["keep"]["tools"] == ["keep__add"]
    assert names[0] == "keep__add" and names[-1] == "new__echo"
    assert len(pids(files["keep"])) == 1  # updated in place
    assert len(pids(files["relaunch"])) == 2  # started again with its new args
    assert len(pids(files["gone"])) == 1
    assert not any(alive(pid) for name in files for pid in pids(files[name]))


def test_plan_for_mcp_servers_names_what_to_start_stop_and_update() -> None:
    """Only the launch (command, args, env, enabled) restarts a process; tools and timeout update it."""
    def config(*servers: dict[str, Any]) -> Any:
        return parse_config({"mcp_servers": list(servers)}, "<test>")

    old = config({"name": "a", "command": "x"}, {"name": "b", "command": "x"},
                 {"name": "c", "command": "x"}, {"name": "d", "command": "x", "enabled": False})
    new = config({"name": "a", "command": "x", "tools": ["t"], "timeout": 5.0},
                 {"name": "b", "command": "x", "args": ["--v"]},
                 {"name": "d", "command": "x"}, {"name": "e", "command": "y", "enabled": False})
    assert plan_mcp_servers(old, new) == McpPlan(start=["b", "d"], stop=["b", "c"], update=["a"])
    assert plan_mcp_servers(new, new) == McpPlan(start=[], stop=[], update=[])


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([{"name": "a", "command": "x"}, {"name": "a", "command": "y"}],
         "mcp_servers[1] (name \"a\").name: a unique name; another [[mcp_servers]] entry is 'a'"),
        ([{"name": "my__files", "command": "x"}],
         "mcp_servers[0] (name \"my__files\").name: expected a name without '__'"),
        ([{"name": "files", "command": "x", "env": {"GITHUB_TOKEN": "ghp_secretvalue"}}],
         'mcp_servers[0] (name "files").env: expected a list of environment variable names such as '
         '["GITHUB_TOKEN"]'),
        ([{"name": "files", "command": "x", "timeout": 0}],
         'mcp_servers[0] (name "files").timeout: expected a value greater than 0'),
        ([{"name": "files"}], 'mcp_servers[0] (name "files").command: required key is missing'),
        ([{"name": "files", "command": "x", "tool": ["read"]}],
         'mcp_servers[0] (name "files").tool: unknown key; expected one of: name, command, args, env, '
         "tools, read_only_tools, timeout, enabled"),
        ([{"name": "a name", "command": "x"}], 'mcp_servers[0] (name "a name").name: expected a string'),
    ],
)
def test_a_wrong_mcp_servers_entry_is_one_line_naming_file_and_key(
    entries: list[dict[str, Any]], message: str,
) -> None:
    """Each mistake names the file, the entry and the key, and says what was expected; a value put
    in `env` is not repeated in the error."""
    with pytest.raises(ConfigError) as caught:
        parse_config({"mcp_servers": entries}, "config.toml")
    text = str(caught.value)
    assert text.startswith(f"config.toml: {message}"), text
    assert "\n" not in text and "ghp_secretvalue" not in text


def test_the_example_documents_every_mcp_servers_key_and_is_valid_uncommented() -> None:
    """config.toml.example's commented [[mcp_servers]] entry has every key, and parses once uncommented."""
    text = EXAMPLE.read_text(encoding="utf-8")
    start = text.index("# [[mcp_servers]]")
    block = text[start:text.index("\n\n", start)]
    documented = [name for name in McpServerConfig.model_fields if re.search(rf"^# {name} = ", block, re.M)]
    assert documented == list(McpServerConfig.model_fields)
    uncommented = "\n".join(line.removeprefix("# ") for line in block.splitlines()
                            if not line.startswith("#  "))
    (server,) = parse_config(tomllib.loads(uncommented), "config.toml.example").mcp_servers
    assert server.name == "files" and server.env == ["GITHUB_TOKEN"]


async def test_check_config_notes_an_unset_variable_a_server_needs(tmp_path: Path) -> None:
    """`check-config` accepts the file and notes which server will not start for want of a variable."""
    path = tmp_path / "config.toml"
    path.write_text('[[mcp_servers]]\nname = "gh"\ncommand = "npx"\nenv = ["GH_TOKEN_FOR_TEST"]\n',
                    encoding="utf-8")
    code, out, err = await switchboard_cli(tmp_path, "check-config", str(path))
    assert code == 0, err
    assert "note: environment variable GH_TOKEN_FOR_TEST for MCP server 'gh' is not set" in out
