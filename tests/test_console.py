"""The console channel: lines in, replies out, one local session; and a daemon that ends with input."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from typing import Any

from bot.config import Config
from bot.core.messages import InboundMessage, OutboundMessage
from bot.daemon.assembly import Daemon
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.recording_intake import RecordingIntake
from channels.console.channel import ConsoleChannel
from tests.harness import API_KEY, config_data, echo, last_user_line

MakeConfig = Callable[[dict[str, Any]], Config]


def console(output: io.StringIO, **kwargs: Any) -> tuple[ConsoleChannel, asyncio.StreamReader]:
    reader = asyncio.StreamReader()
    return ConsoleChannel("main", reader=reader, output=output, **kwargs), reader


async def test_lines_become_messages_of_the_local_console_session() -> None:
    """Each non-blank line typed is one inbound message of agent:main:console:direct:local."""
    channel, reader = console(io.StringIO(), user_name="Grace")
    received: list[InboundMessage] = []

    async def submit(message: InboundMessage) -> None:
        received.append(message)

    reader.feed_data(b"hello\n\n   \n  how are you?  \nno newline at the end")
    reader.feed_eof()
    await asyncio.wait_for(channel.run(RecordingIntake(submit)), timeout=2)

    assert [m.text for m in received] == ["hello", "how are you?", "no newline at the end"]
    assert {str(m.session_key) for m in received} == {"agent:main:console:direct:local"}
    assert all(m.sender_name == "Grace" and m.starts_turn for m in received)


async def test_replies_print_with_the_agent_name() -> None:
    """A reply is printed as '<agent name>> text' on the console's output."""
    output = io.StringIO()
    channel, _ = console(output, agent_name="Penny")
    await channel.send(OutboundMessage(channel.chat, "hi there"))
    assert output.getvalue() == "Penny> hi there\n"


async def test_a_shown_reply_counts_as_delivered_once() -> None:
    """Showing a reply reports one delivered chunk (so the turn's log line says delivered=1), and a
    reply a restart resumes after that chunk is not shown again."""
    output = io.StringIO()
    channel, _ = console(output)
    recorded: list[tuple[int, str]] = []

    async def record(index: int, shown: str) -> None:
        recorded.append((index, shown))

    ids = await channel.send(OutboundMessage(channel.chat, "hi there"), record)
    assert len(ids) == 1 and recorded == [(0, ids[0])]
    assert await channel.send(OutboundMessage(channel.chat, "hi there", skip_chunks=1), record) == []
    assert output.getvalue().count("hi there") == 1


async def test_end_of_input_ends_run() -> None:
    """Closing the input (EOF) makes the channel's run return."""
    channel, reader = console(io.StringIO())

    async def submit(message: InboundMessage) -> None:
        raise AssertionError("nothing was typed")

    reader.feed_eof()
    await asyncio.wait_for(channel.run(RecordingIntake(submit)), timeout=2)


async def test_stop_ends_run_while_waiting_for_input() -> None:
    """Stopping the channel ends run() even though no more input arrives."""
    channel, _ = console(io.StringIO())

    async def submit(message: InboundMessage) -> None:
        raise AssertionError("nothing was typed")

    running = asyncio.create_task(channel.run(RecordingIntake(submit)))
    await asyncio.sleep(0)
    await channel.stop()
    await asyncio.wait_for(running, timeout=2)


async def test_chat_daemon_answers_each_line_and_returns_after_eof(make_config: MakeConfig) -> None:
    """`switchboard chat`'s daemon answers every typed line in order and returns once input ends."""
    output = io.StringIO()
    async with AnthropicStandIn() as api:
        api.default = echo
        config = make_config(config_data(api, agent={"name": "Penny"}))
        channel, reader = console(output, agent_name=config.agent.name)
        brain = AnthropicBrain(config.anthropic, API_KEY)
        reader.feed_data(b"first line\nsecond line\n")
        reader.feed_eof()
        try:
            await asyncio.wait_for(
                Daemon(config, [channel], brain=brain, until_input_ends=True).run(), timeout=5
            )
        finally:
            await brain.aclose()

    assert output.getvalue() == "Penny> re: first line\nPenny> re: second line\n"
    assert [last_user_line(r) for r in api.requests] == ["first line", "second line"]
    async with Store.open(config.database_path()) as store:
        history = await store.history("agent:main:console:direct:local", 10)
    # both lines are stored as they are typed; the replies follow in order
    assert [m.text for m in history if m.role == "user"] == ["first line", "second line"]
    assert [m.text for m in history if m.role == "assistant"] == ["re: first line", "re: second line"]


async def test_a_line_over_the_limit_gets_one_notice_and_the_console_goes_on() -> None:
    """A line over 64 KiB is not sent: one notice line, and the lines after it are read as usual."""
    output = io.StringIO()
    channel, reader = console(output)
    received: list[str] = []

    async def submit(message: InboundMessage) -> None:
        received.append(message.text)

    reader.feed_data(b"before\n" + b"x" * (70 * 1024) + b"\nafter\n")
    reader.feed_eof()
    await asyncio.wait_for(channel.run(RecordingIntake(submit)), timeout=2)

    assert received == ["before", "after"]
    assert output.getvalue() == (
        "Not sent: that message is 70 KiB; the console takes up to 64 KiB. Send it in parts.\n"
    )


async def test_off_a_terminal_typing_prints_nothing() -> None:
    """Off a terminal, "thinking…" is not shown: the output stays exactly the replies."""
    output = io.StringIO()
    channel, _ = console(output, agent_name="Penny")
    async with channel.typing(channel.chat):
        await channel.send(OutboundMessage(channel.chat, "**hi**"))
    assert output.getvalue() == "Penny> **hi**\n"
