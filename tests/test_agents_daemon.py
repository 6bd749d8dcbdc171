"""Several agents in one daemon: each message goes to the agent its bindings name, in that agent's
own session, answered as that agent (its soul file, its limits); reload adds or removes an agent."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bot.config import load_config, parse_config
from bot.context.replay import replay
from bot.daemon.assembly import build_channels
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest
from bot.testing.fake_channel import FakeChannel
from bot.testing.telegram_api import TelegramStandIn, group_chat, mention_entities, private_chat
from channels.telegram.channel import TelegramChannel
from tests.harness import (
    API_KEY,
    config_data,
    daemon_with,
    last_user_line,
    reply_requests,
    request_text,
    router_of,
    running,
    say,
)
from tests.test_accounts import ADA
from tests.test_operations import toml
from tests.test_telegram import texts_to


def write_config(path: Path, api: AnthropicStandIn, *, agents: str, bindings: str) -> Path:
    """A config with the stand-in's sections, and the [[agents]] and [[bindings]] given as TOML."""
    data = config_data(api, database={"path": str(path.parent / "switchboard.db")},
                       agent={"name": "Main", "soul_file": "main.md"})
    path.write_text(toml(data) + agents + bindings, encoding="utf-8")
    return path


FAMILY_AND_WORK = (
    '[[agents]]\nid = "family"\nname = "Hearth"\nsoul_file = "family.md"\n'
    '[[agents]]\nid = "work"\nname = "Desk"\nsoul_file = "work.md"\n'
    "[agents.conversation]\nhistory_limit = 1\n"
)
BINDINGS = (
    '[[bindings]]\nagent = "family"\nchat = "-100"\n'
    '[[bindings]]\nagent = "work"\nuser = "7"\n'
)


def souls(tmp_path: Path) -> None:
    for name in ("main", "family", "work"):
        (tmp_path / f"{name}.md").write_text(f"I am the {name} soul.", encoding="utf-8")


async def test_each_message_goes_to_its_agents_session_and_prompt(
    api: AnthropicStandIn, tmp_path: Path
) -> None:
    """The group bound to `family` is answered by family, user 7 by work anywhere, the rest by the
    default agent; each in its own session, with its own soul, and no context crosses agents."""
    souls(tmp_path)
    config = load_config(write_config(tmp_path / "config.toml", api, agents=FAMILY_AND_WORK,
                                      bindings=BINDINGS))
    channel = FakeChannel()
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "secret plan in my DM", peer="42", sender="42")
        await say(daemon, channel, "hello family group", kind="group", peer="-100", sender="42")
        await say(daemon, channel, "ticket 17 is done", peer="7", sender="7")
        await say(daemon, channel, "and 18 too", peer="7", sender="7")
        await say(daemon, channel, "and 19", peer="7", sender="7")
        status = await daemon.status()

    def asking(text: str) -> RecordedRequest:
        return next(r for r in reply_requests(api) if last_user_line(r).endswith(text))

    dm, group, first, second = (asking(text) for text in (
        "secret plan in my DM", "hello family group", "ticket 17 is done", "and 18 too"))
    assert "I am the main soul." in dm.system_text and "Main" in dm.system_text
    assert "I am the family soul." in group.system_text and "Hearth" in group.system_text
    assert "I am the work soul." in second.system_text and "Desk" in second.system_text
    # The same user in two agents' chats: the family agent never sees the DM with the default one.
    assert "secret plan" not in request_text(group)
    # work's own [agents.conversation] history_limit = 1: one earlier turn, not two.
    assert "ticket 17" in request_text(second)
    assert "ticket 17" not in request_text(asking("and 19")) and "18" in request_text(asking("and 19"))
    assert "I am the main soul." not in first.system_text

    async with Store.open(config.database_path()) as store:
        keys = {s.key for s in await store.list_sessions()}
        assert keys == {"agent:main:fake:direct:42", "agent:family:fake:group:-100",
                        "agent:work:fake:direct:7"}
        assert [s.key for s in await store.list_sessions("family")] == ["agent:family:fake:group:-100"]
        # Replay builds the turn again as work built it (its history limit of 1, not the default).
        brain = AnthropicBrain(config.anthropic, None)
        try:
            result = await replay(config, store, brain, "agent:work:fake:direct:7", 3)
        finally:
            await brain.aclose()
        assert result.matches and result.rebuilt.history_limit == 1
    agents = {agent["id"]: agent for agent in status["agents"]}
    assert agents["family"]["name"] == "Hearth" and agents["family"]["bindings"] == 1
    assert agents["main"]["channels"] == ["console"]  # telegram and discord are not enabled here


async def test_reload_adds_and_removes_an_agent_without_stopping_the_others(
    api: AnthropicStandIn, tmp_path: Path
) -> None:
    souls(tmp_path)
    path = write_config(tmp_path / "config.toml", api, agents="", bindings="")
    channel = FakeChannel()
    async with daemon_with(load_config(path), channel) as daemon:
        await say(daemon, channel, "before", kind="group", peer="-100", sender="42")
        write_config(path, api, agents=FAMILY_AND_WORK, bindings=BINDINGS)
        outcome: dict[str, Any] = await daemon.reload()
        assert outcome["reloaded"] is True, outcome
        await say(daemon, channel, "after", kind="group", peer="-100", sender="42")
        write_config(path, api, agents="", bindings="")
        assert (await daemon.reload())["reloaded"] is True
        await say(daemon, channel, "removed", kind="group", peer="-100", sender="42")
        assert router_of(daemon).pending == 0
        texts = [m.text for m in channel.sent]

    assert texts == ["re: [Ada]: before", "re: [Ada]: after", "re: [Ada]: removed"]
    systems = [r.system_text for r in reply_requests(api)]
    assert ["family soul" in s for s in systems] == [False, True, False]
    async with Store.open(load_config(path).database_path()) as store:
        assert {s.key for s in await store.list_sessions()} == {
            "agent:main:fake:group:-100", "agent:family:fake:group:-100"}


async def test_two_agents_on_two_telegram_bots_and_a_group_bound_to_the_second(
    tg: TelegramStandIn, api: AnthropicStandIn, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """Ada writes privately to both bots and in a group the default bot sits in, which a binding
    gives to the work agent: each message lands in its agent's session and prompt files; the
    group is answered by the bot that is in it, as the work agent; nothing crosses agents."""
    souls(tmp_path)
    work = tg.add_bot(token="654321:WORK", bot_id=2000, bot_username="work_bot", bot_first_name="Work")
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)
    monkeypatch.setenv("WORK_BOT_TOKEN", "654321:WORK")
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)  # the daemon builds its own brains
    group = group_chat(-100555, "Team", supergroup=True)
    config = parse_config({
        **config_data(api),
        "database": {"path": str(tmp_path / "switchboard.db")},
        "agent": {"name": "Main", "soul_file": "main.md"},
        "agents": [{"id": "work", "name": "Desk", "soul_file": "work.md"}],
        "channels": {"telegram": {
            "enabled": True, "base_url": tg.base_url, "allow_from": [42], "groups": [-100555],
            "accounts": {"work": {"token_env": "WORK_BOT_TOKEN", "agent": "work"}},
        }},
        "bindings": [{"agent": "work", "chat": -100555}],
    }, str(tmp_path / "config.toml"))
    channels = build_channels(config, console=False)
    async with running(config, channels, None) as daemon:
        for channel in channels:
            assert isinstance(channel, TelegramChannel)
            await asyncio.wait_for(channel.ready.wait(), 5)
        for bot, text, chat, entities in (
            (tg, "my plan for the main agent", private_chat(ADA), None),
            (work, "the quarterly report is late", private_chat(ADA), None),
            (tg, "@switchboard_bot what is due?", group, mention_entities("@switchboard_bot what is due?",
                                                                         "switchboard_bot")),
        ):
            pushed = bot.push_message(chat, ADA, text, **({"entities": entities} if entities else {}))
            await bot.wait_for(lambda b=bot, p=pushed: b.confirmed_offset > p["update_id"])
            await router_of(daemon).idle()

    assert len(texts_to(tg, 42)) == 1 and len(texts_to(work, 42)) == 1
    assert len(texts_to(tg, -100555)) == 1  # the group's bot answered, as the work agent
    assert len(texts_to(work, -100555)) == 0

    def asking(text: str) -> RecordedRequest:
        return next(r for r in reply_requests(api) if text in last_user_line(r))

    assert "I am the main soul." in asking("my plan").system_text
    assert "I am the work soul." in asking("quarterly report").system_text
    in_group = asking("what is due?")
    assert "I am the work soul." in in_group.system_text and "Desk" in in_group.system_text
    # The group is work's session, not the DM with work: the report is not in its context...
    assert "quarterly" not in request_text(in_group) and "my plan" not in request_text(in_group)
    async with Store.open(config.database_path()) as store:
        assert {s.key for s in await store.list_sessions()} == {
            "agent:main:telegram:direct:42", "agent:work:telegram.work:direct:42",
            "agent:work:telegram:group:-100555"}
