"""Agents writing to agents: a message to another agent is answered by that agent's own turn, in its
session with the writer, through the same path as a person's message; exchanges stop at the hop
limit, and one agent writing too often to another is refused."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.config import Config, load_config
from bot.core.agent_chat import origin_thread
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, Text, ToolUse
from bot.testing.fake_channel import FakeChannel
from tests.harness import MODEL, config_data, daemon_with, last_user_line, reply_requests, router_of, say
from tests.test_agents_daemon import FAMILY_AND_WORK, souls, write_config
from tests.test_tool_loop import results, tool_names

MakeConfig = Callable[[dict[str, Any]], Config]
WORK_SIDE = "agent:work:agent:direct:main"  # what main writes to work, answered by work
MAIN_SIDE = "agent:main:agent:direct:work"  # what work writes to main, answered by main
DM = "agent:main:fake:direct:42"
# What main writes to work from the user's private chat: a conversation of that chat's own.
WORK_SIDE_OF_DM = f"{WORK_SIDE}:thread:{origin_thread(DM)}"


def two_agents(api: AnthropicStandIn, make_config: MakeConfig, tmp_path: Path, **sections: Any) -> Config:
    """The default agent `main` (Main) and `work` (Desk), each with its own soul file."""
    for name in ("main", "work"):
        (tmp_path / f"{name}.md").write_text(f"I am the {name} soul.", encoding="utf-8")
    return make_config(config_data(
        api, agent={"name": "Main", "soul_file": "main.md"},
        agents=[{"id": "work", "name": "Desk", "soul_file": "work.md"}], **sections))


def ask_work(text: str) -> ToolUse:
    return ToolUse((("message_agent", {"agent": "work", "text": text}),))


async def test_an_agent_asks_another_and_answers_the_user_with_its_answer(
    api: AnthropicStandIn, make_config: MakeConfig, tmp_path: Path, view: Store
) -> None:
    """main's model calls message_agent("work", …): work answers in its own session with main, as
    itself (its soul, its name), with a snapshot of the turn; main reads the answer as the tool
    result and answers the user, and work's answer is not passed back to main as a new message."""
    api.script(ask_work("Which tickets are open?"), Text("Tickets 17 and 18."),
               Text("Work says tickets 17 and 18 are open."), model=MODEL)
    channel = FakeChannel()
    async with daemon_with(two_agents(api, make_config, tmp_path), channel) as daemon:
        await say(daemon, channel, "what is open at work?")
        assert router_of(daemon).pending == 0

    asked, answered, final = reply_requests(api)
    assert "message_agent" in tool_names(asked)
    assert "I am the work soul." in answered.system_text and "Desk" in answered.system_text
    assert "I am the main soul." not in answered.system_text
    assert last_user_line(answered) == "Which tickets are open?"
    (result,) = results(final)
    assert result["content"] == "Tickets 17 and 18." and "is_error" not in result
    assert [m.text for m in channel.sent] == ["Work says tickets 17 and 18 are open."]

    assert await view.history(WORK_SIDE, 10) == []
    request, reply = await view.history(WORK_SIDE_OF_DM, 10)
    assert (request.role, request.sender_id, request.sender_name) == ("user", "main", "Main")
    assert request.provider_message_id is not None and request.provider_message_id.startswith("h1-")
    assert (reply.role, reply.text) == ("assistant", "Tickets 17 and 18.")
    (snapshot,) = await view.snapshots(WORK_SIDE_OF_DM)
    assert snapshot.snapshot["reply_call"]["request"]["provider_message_id"] == request.provider_message_id
    assert await view.history(MAIN_SIDE, 10) == []


async def test_another_agent_never_answers_a_group_from_what_it_was_told_in_a_private_chat(
    api: AnthropicStandIn, make_config: MakeConfig, tmp_path: Path, view: Store
) -> None:
    """main passes Ada's pin to work from her private chat; asked from a group later, work answers
    in a conversation of that group's own: the pin is nowhere in what its model is sent."""
    api.script(ask_work("Keep this: Ada's bank pin is 4921."), Text("Kept."), Text("Passed on."),
               ask_work("What is Ada's pin?"), Text("I was not told one here."), Text("No idea."),
               model=MODEL)
    channel = FakeChannel()
    config = two_agents(api, make_config, tmp_path, tools={"shared_writes": "everyone"})
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "tell work my pin is 4921")
        await say(daemon, channel, "@main what is my pin?", kind="group", peer="-100")

    answered_in_group = reply_requests(api)[4]
    assert last_user_line(answered_in_group) == "What is Ada's pin?"
    assert "4921" not in json.dumps(answered_in_group.body)
    group_side = f"{WORK_SIDE}:thread:{origin_thread('agent:main:fake:group:-100')}"
    assert [m.text for m in await view.history(group_side, 10)] == [
        "What is Ada's pin?", "I was not told one here."]
    assert [m.text for m in await view.history(WORK_SIDE_OF_DM, 10)] == [
        "Keep this: Ada's bank pin is 4921.", "Kept."]


async def test_a_job_delivered_to_an_agent_goes_back_and_forth_until_the_hop_limit(
    api: AnthropicStandIn, make_config: MakeConfig, tmp_path: Path, view: Store
) -> None:
    """A job main writes for work: work answers, main answers work, work answers again, and that
    last answer (it would be the fourth message with hop_limit 3) is kept but not passed on."""
    job = {"id": "handover", "every": "1d", "prompt": "Hand over to work.", "deliver_to": MAIN_SIDE}
    config = two_agents(api, make_config, tmp_path, schedules=[job], agent_messages={"hop_limit": 3})
    channel = FakeChannel()
    async with daemon_with(config, channel) as daemon:
        assert daemon.scheduler is not None
        run = await daemon.scheduler.run_job(daemon.scheduler.jobs["handover"], time.time())
        await router_of(daemon).idle()

    assert run.status == "delivered"
    # The job, then work (hop 1), main (hop 2), work (hop 3): four model calls, no fifth.
    assert len(reply_requests(api)) == 4
    work_side = await view.history(WORK_SIDE, 10)
    main_side = await view.history(MAIN_SIDE, 10)
    assert [(m.role, m.text) for m in work_side] == [
        ("user", "re: Hand over to work."), ("assistant", "re: re: Hand over to work."),
        ("user", "re: re: re: Hand over to work."), ("assistant", "re: re: re: re: Hand over to work."),
    ]
    assert [(m.role, m.text) for m in main_side] == [
        ("assistant", "re: Hand over to work."), ("user", "re: re: Hand over to work."),
        ("assistant", "re: re: re: Hand over to work."),
    ]
    hops = [m.provider_message_id.split("-")[0] for m in [*work_side, *main_side]
            if m.role == "user" and m.provider_message_id]
    assert hops == ["h1", "h3", "h2"]
    assert len(await view.snapshots(WORK_SIDE)) == 2 and len(await view.snapshots(MAIN_SIDE)) == 1


async def test_writing_to_an_agent_too_often_or_to_no_agent_is_a_tool_error(
    api: AnthropicStandIn, make_config: MakeConfig, tmp_path: Path, view: Store
) -> None:
    """With per_pair_per_hour = 1 the second message from main to work within the hour is refused,
    and a message to an agent that does not exist is refused; the model reads why."""
    api.script(ask_work("first"), Text("work: first"), Text("done 1"),
               ask_work("second"), Text("done 2"),
               ToolUse((("message_agent", {"agent": "nobody", "text": "hi"}),)), Text("done 3"),
               model=MODEL)
    config = two_agents(api, make_config, tmp_path, agent_messages={"per_pair_per_hour": 1})
    channel = FakeChannel()
    async with daemon_with(config, channel) as daemon:
        for text in ("one", "two", "three"):
            await say(daemon, channel, text)

    requests = reply_requests(api)
    assert len(requests) == 7
    ((first,), (rate,), (unknown,)) = (results(requests[i]) for i in (2, 4, 6))
    assert first["content"] == "work: first"
    assert rate["is_error"] and "limit of 1 messages an hour to work" in str(rate["content"])
    assert unknown["is_error"] and "there is no agent 'nobody'" in str(unknown["content"])
    assert [m.text for m in await view.history(WORK_SIDE_OF_DM, 10)] == ["first", "work: first"]
    assert [m.text for m in channel.sent] == ["done 1", "done 2", "done 3"]


async def test_a_reload_that_adds_a_second_agent_lets_them_write_to_each_other(
    api: AnthropicStandIn, tmp_path: Path
) -> None:
    """A daemon started with one agent offers no message_agent; after a reload adds `work`, main's
    model may write to it and work answers in its session with main."""
    souls(tmp_path)
    path = write_config(tmp_path / "config.toml", api, agents="", bindings="")
    channel = FakeChannel()
    async with daemon_with(load_config(path), channel) as daemon:
        await say(daemon, channel, "alone")
        write_config(path, api, agents=FAMILY_AND_WORK, bindings="")
        assert (await daemon.reload())["reloaded"] is True
        api.script(ask_work("anything open?"), Text("Nothing."), Text("Work says nothing."), model=MODEL)
        await say(daemon, channel, "ask work")
        states = {c["provider"]: c["state"] for c in (await daemon.status())["channels"]}

    alone, asked, answered, _ = reply_requests(api)
    assert "message_agent" not in tool_names(alone) and "message_agent" in tool_names(asked)
    assert "I am the work soul." in answered.system_text
    assert states == {"fake": "connected", "agent": "connected"}
    assert [m.text for m in channel.sent][-1] == "Work says nothing."
