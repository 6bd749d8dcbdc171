"""Several agents in one config: [[agents]] overrides, channel accounts, bindings and their order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.config import parse_config
from bot.core.errors import ConfigError
from tests.test_cli import _one_line, switchboard

TWO_BOTS: dict[str, Any] = {
    "agents": [{"id": "work", "name": "Worker", "soul_file": "work.md", "timezone": "Europe/Berlin",
                "conversation": {"history_limit": 7}, "tools": {"allow": ["current_time"]}}],
    "channels": {"telegram": {"enabled": True, "agent": "main",
                              "accounts": {"work": {"token_env": "WORK_BOT_TOKEN", "agent": "work",
                                                    "allow_from": [42]}}}},
    "bindings": [{"agent": "work", "chat": -100123},
                 {"agent": "main", "user": 42, "channel": "telegram.work"}],
}


def test_an_agent_entry_overrides_only_what_it_writes() -> None:
    """The second agent has its own name, files, zone and limits; the rest is the top level's."""
    config = parse_config(TWO_BOTS, "cfg.toml")
    work = config.for_agent("work")
    assert (work.agent.id, work.agent.name, work.agent.soul_file, work.agent.timezone) == \
        ("work", "Worker", "work.md", "Europe/Berlin")
    assert work.conversation.history_limit == 7
    assert work.conversation.lookback_count == config.conversation.lookback_count
    assert work.tools.allow == ["current_time"] and work.tools.max_tool_rounds == config.tools.max_tool_rounds
    assert config.for_agent("main") is config
    assert config.agent_ids() == ["main", "work"]


def test_an_account_is_its_platforms_section_with_its_own_keys() -> None:
    """An extra bot is enabled, has its own token and lists, and keeps the rest of the platform's."""
    config = parse_config(TWO_BOTS, "cfg.toml")
    work = config.channel("telegram.work")
    assert work is not None and work.enabled and work.token_env == "WORK_BOT_TOKEN"
    assert work.allow_from == ["42"] and work.require_mention == config.channels.telegram.require_mention
    assert "WORK_BOT_TOKEN" in config.secret_env_names()


@pytest.mark.parametrize(
    ("channel", "chats", "user", "agent"),
    [
        ("telegram", ["-100123"], "7", "work"),  # the group binding, on the default bot
        ("telegram.work", ["42"], "42", "main"),  # user 42 on the work bot: the user binding
        ("telegram.work", ["-100123"], "42", "main"),  # user beats chat
        ("telegram.work", ["9"], "9", "work"),  # the work bot's own agent
        ("telegram", ["9"], "9", "main"),  # the default bot's
        ("console", ["local"], "local", "main"),
    ],
)
def test_the_most_specific_binding_wins(channel: str, chats: list[str], user: str, agent: str) -> None:
    routing = parse_config(TWO_BOTS, "cfg.toml").routing()
    assert routing.agent_for(channel, chats, user) == agent


def test_a_guild_binding_routes_every_channel_of_the_guild() -> None:
    config = parse_config({"agents": [{"id": "family"}],
                           "bindings": [{"agent": "family", "guild": 111}]}, "cfg.toml")
    assert config.routing().agent_for("discord", ["555"], "9", guild="111") == "family"
    assert config.routing().agent_for("discord", ["555"], "9", guild="222") == "main"


@pytest.mark.parametrize(
    ("change", "key", "expected"),
    [
        ({"bindings": [{"agent": "nobody", "chat": 1}]}, "bindings[0].agent", "there is no agent 'nobody'"),
        ({"bindings": [{"agent": "work"}]}, "bindings[0]", "at least one of channel"),
        ({"bindings": [{"agent": "work", "chat": 1}, {"agent": "main", "chat": 1}]}, "bindings[1]",
         "names exactly what bindings[0] names"),
        ({"bindings": [{"agent": "work", "channel": "telegram.home"}]}, "bindings[0].channel",
         "there is no 'telegram.home'"),
        ({"bindings": [{"agent": "work", "channel": "telegram", "guild": 5}]}, "bindings[0].guild",
         "only on Discord"),
        ({"agents": [{"id": "work"}, {"id": "work"}]}, 'agents[1] (id "work").id', "a unique agent id"),
        ({"channels": {"telegram": {"enabled": True, "accounts": {"b": {}}}}},
         "channels.telegram.accounts.b.token_env", "a variable of its own"),
        ({"channels": {"discord": {"agent": "ghost"}}}, "channels.discord.agent", "no agent 'ghost'"),
        ({"agents": [{"id": "work", "roles": {"main": "nowhere:model"}}]},
         'agents[0] (id "work").roles.main', "a provider defined as"),
        ({"schedules": [{"id": "d", "cron": "0 8 * * *", "prompt": "p",
                         "deliver_to": "telegram.home:42"}]},
         'schedules[0] (id "d").deliver_to', "there is no 'telegram.home'"),
        ({"schedules": [{"id": "d", "cron": "0 8 * * *", "prompt": "p",
                         "deliver_to": "agent:main:agent:direct:nobody"}]},
         'schedules[0] (id "d").deliver_to', "there is no agent 'nobody'"),
        ({"schedules": [{"id": "d", "cron": "0 8 * * *", "prompt": "p",
                         "deliver_to": "agent:work:agent:direct:work"}]},
         'schedules[0] (id "d").deliver_to', "two different agents"),
    ],
)
def test_a_bad_agent_or_binding_names_its_key(change: dict[str, Any], key: str, expected: str) -> None:
    data = {**TWO_BOTS, **change}
    with pytest.raises(ConfigError) as caught:
        parse_config(data, "cfg.toml")
    assert caught.value.key == key
    assert expected in str(caught.value)


def test_check_config_prints_the_routing_table_and_a_bad_binding_in_one_line(tmp_path: Path) -> None:
    """check-config prints the bindings in match order and each enabled channel's agent, never a
    disabled channel's; a binding to an unknown agent is one line naming it."""
    path = tmp_path / "config.toml"
    path.write_text(
        '[[agents]]\nid = "family"\n'
        '[[bindings]]\nagent = "family"\nchat = "-100123"\n'
        '[[bindings]]\nagent = "main"\nuser = "42"\nchannel = "telegram"\n', encoding="utf-8")
    result = switchboard(tmp_path, "check-config", str(path))
    assert result.returncode == 0, result.stderr
    table = result.stdout.split("routing (first match wins, most specific first):\n")[1].splitlines()
    assert table[:2] == ["  user 42, on telegram -> main   (bindings[1])",
                         "  chat -100123 -> family   (bindings[0])"]
    # No route through a disabled bot: only the console is on here.
    assert [line for line in table if line.startswith("  anything else on")] == [
        "  anything else on console -> main"]
    path.write_text('[[agents]]\nid = "family"\n[[bindings]]\nagent = "famliy"\nchat = "-100123"\n',
                    encoding="utf-8")
    result = switchboard(tmp_path, "check-config", str(path))
    assert result.returncode == 2
    assert _one_line(result.stderr) == (f"switchboard: {path}: bindings[0].agent: one of the agents "
                                        "(family, main); there is no agent 'famliy'")
