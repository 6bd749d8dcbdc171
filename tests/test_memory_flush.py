"""Memory flush before compaction: at 50 %, 75 % and 90 % of the compaction trigger the agent gets
one silent turn to keep durable facts with `remember`, against the API stand-in over real sockets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bot.config import Config
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, Error, RecordedRequest, Response, Text, ToolUse
from bot.testing.fake_channel import FakeChannel
from bot.turn.flush import FLUSH_PROMPT, threshold_reached
from tests.harness import MODEL, config_data, daemon_with, reply_requests, say
from tests.sql import rows
from tests.test_compaction import NOTICE, merge_requests, note, summaries, talk_until_compacted
from tests.test_pairing import cli
from tests.test_tool_loop import results, tool_names

MakeConfig = Callable[[dict[str, Any]], Config]
KEPT = "Ada prefers plan B and pays by invoice"


def is_flush(request: RecordedRequest) -> bool:
    """A flush request: its last user turn is the flush prompt, or a tool result answering it."""
    return any(m["role"] == "user" and m["content"] == FLUSH_PROMPT for m in request.messages)


def flush_requests(api: AnthropicStandIn) -> list[RecordedRequest]:
    return [r for r in api.requests if is_flush(r)]


def remembering(request: RecordedRequest) -> Response:
    """A flush is answered with one `remember` call, then a short reply once its result is back;
    summaries and replies as in the compaction tests."""
    if is_flush(request):
        if results(request):
            return Text("FLUSH-REPLY: kept one note.")
        return ToolUse((("remember", {"note": KEPT}),))
    return summaries(request)


def flush_config(
    api: AnthropicStandIn, make_config: MakeConfig, *, compaction: dict[str, Any] | None = None,
    **sections: Any,
) -> Config:
    """A 1000-token history budget (as in the compaction tests): each note exchange is ~21 % of it."""
    conversation = {"context_window": 2000, "reserve_tokens": 0, "history_share": 0.5,
                    "use_selection": False, "lookback_count": 100}
    return make_config(config_data(api, conversation=conversation,
                                   compaction={"keep_recent": 4, **(compaction or {})}, **sections))


async def flushes(view: Store, key: str) -> list[tuple[Any, ...]]:
    """(cycle_start, threshold, status, notes, reply) of the session's flushes, oldest first."""
    return await rows(view, "SELECT cycle_start, threshold, status, notes, reply FROM memory_flushes "
                            "WHERE session_key = ? ORDER BY id", (key,))


# -- which threshold is due ---------------------------------------------------------------------


@pytest.mark.parametrize(("fill", "fired", "due"), [
    (0.3, None, None),     # below the first share
    (0.5, None, 0.5),      # reached exactly
    (0.6, 0.5, None),      # 50 % fired already, 75 % not reached
    (0.8, 0.5, 0.75),
    (0.95, None, 0.9),     # a jump past all three fires once, for the highest
    (1.2, 0.9, None),      # compaction due: the 90 % flush came before
])
def test_the_highest_share_reached_fires_once(fill: float, fired: float | None, due: float | None) -> None:
    """A flush is due for the highest share the fill reached, when the cycle fired none as high."""
    assert threshold_reached([0.5, 0.75, 0.9], fill, fired) == due


# -- the store's claims ---------------------------------------------------------------------------


async def test_a_flush_is_claimed_once_per_cycle_and_threshold(store: Store, channel: FakeChannel) -> None:
    """A claimed threshold cannot be claimed again (a restart, a second instance); the state names
    the cycle and the highest threshold it claimed, and what the flush did is kept."""
    request = await store.append_inbound(channel.message("hello"))
    assert request is not None
    key = request.session_key
    assert await store.memory_flush_state(key) == (0, None)
    claimed = await store.claim_memory_flush(key, cycle_start=0, threshold=0.5, share=0.55,
                                             request_id=request.id)
    assert claimed is not None
    assert await store.claim_memory_flush(key, cycle_start=0, threshold=0.5, share=0.6,
                                          request_id=request.id) is None
    await store.finish_memory_flush(claimed, model=MODEL, notes=1, actions=["remember(x)"], reply="ok")
    assert await store.memory_flush_state(key) == (0, 0.5)
    assert await rows(store, "SELECT status, notes, actions, reply FROM memory_flushes") == [
        ("done", 1, '["remember(x)"]', "ok")]


# -- end to end -------------------------------------------------------------------------------------


async def test_each_threshold_gives_one_silent_flush_that_keeps_a_note(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """Crossing 50 %, 75 % and 90 % gives one flush each, before the compaction: the model is
    asked with `remember` alone after the reply it just gave, the note is kept and shown to later
    turns, and the user sees nothing of it; the next compaction cycle starts again at 50 %."""
    api.default = remembering
    channel = FakeChannel()
    key = str(channel.key())
    config = flush_config(api, make_config)
    async with daemon_with(config, channel) as daemon:
        turns = await talk_until_compacted(daemon, channel, view)
        at_compaction = await flushes(view, key)
        await say(daemon, channel, note(turns + 1))
        await say(daemon, channel, note(turns + 2))

    assert [(start, threshold) for start, threshold, *_ in at_compaction] == [(0, 0.5), (0, 0.75), (0, 0.9)]
    assert all(status == "done" and notes == 1 and reply == "FLUSH-REPLY: kept one note."
               for _, _, status, notes, reply in at_compaction)
    record = await view.latest_compaction(key)
    assert record is not None
    after = await flushes(view, key)
    cycle = record.first_kept_message_id - 1  # the next cycle, from its own 50 %
    assert [(start, threshold) for start, threshold, *_ in after[3:]] == [(cycle, 0.5), (cycle, 0.75)]

    asked = [r for r in flush_requests(api) if not results(r)]
    assert len(asked) == 5 and all(tool_names(r) == ["remember"] for r in asked)
    first = asked[0]
    assert first.model == MODEL
    assert first.messages[-1] == {"role": "user", "content": FLUSH_PROMPT}
    assert first.messages[-2]["role"] == "assistant"
    assert first.messages[-2]["content"] in [m.text for m in channel.sent]  # the reply just sent

    (kept,) = {n.note for n in await view.notes_of("fake", "42")}
    assert kept == KEPT
    replies = [r for r in reply_requests(api) if not is_flush(r)]
    assert KEPT in replies[-1].system_text  # later turns see the note

    # Nothing of the flush reached the chat or the conversation.
    assert len(channel.sent) == turns + 2
    assert not any("FLUSH-REPLY" in m.text or FLUSH_PROMPT in m.text for m in channel.sent)
    history = await view.history(key, 100)
    assert len(history) == 2 * (turns + 2)
    assert not any("FLUSH-REPLY" in m.text or FLUSH_PROMPT in m.text for m in history)
    assert not any(FLUSH_PROMPT in str(r.messages) for r in replies)
    assert sum(m.text.endswith(NOTICE) for m in channel.sent) == 1

    # Counted in usage, as its own kind, with the asker: one row a flush, summing its two calls
    # (the stand-in bills 10 tokens in and 5 out for each).
    usage = [u for u in await view.usage_since(0, key) if u.kind == "flush"]
    assert [(u.user_id, u.model, u.input_tokens, u.output_tokens) for u in usage] == [
        ("42", MODEL, 20, 10)] * 5
    capsys.readouterr()
    assert await cli(config, "usage", "--by", "kind", "--days", "1") == 0
    shown = capsys.readouterr().out.splitlines()
    assert any(line.startswith("flush  100 in, 50 out") for line in shown), shown


async def test_the_second_compaction_extends_the_first_summary(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig
) -> None:
    """Rolling summaries: the second compaction's merge request holds the first summary, and the
    summary written starts from it."""
    api.default = remembering
    channel = FakeChannel()
    key = str(channel.key())
    async with daemon_with(flush_config(api, make_config), channel) as daemon:
        turns = await talk_until_compacted(daemon, channel, view)
        first = await view.latest_compaction(key)
        assert first is not None
        for n in range(turns + 1, turns + 10):
            await say(daemon, channel, note(n))
            latest = await view.latest_compaction(key)
            if latest is not None and latest.id != first.id:
                break
    assert latest is not None and latest.id != first.id
    (merge,) = merge_requests(api)
    assert first.summary in str(merge.messages)
    assert latest.summary.startswith("MERGED: SUMMARY of note-01..")


@pytest.mark.parametrize("tools", [{"enabled": False}, {"deny": ["remember"]}])
async def test_no_flush_where_the_agent_has_no_tools(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig, tools: dict[str, Any]
) -> None:
    """With tools off, or `remember` denied, the session is compacted without any flush."""
    api.default = remembering
    channel = FakeChannel()
    async with daemon_with(flush_config(api, make_config, tools=tools), channel) as daemon:
        await talk_until_compacted(daemon, channel, view)
    assert flush_requests(api) == []
    assert await flushes(view, str(channel.key())) == []
    assert await view.notes_of("fake", "42") == []


async def test_no_flush_in_a_group(api: AnthropicStandIn, view: Store, make_config: MakeConfig) -> None:
    """Notes are a person's, shown in their private chats: a group is compacted without a flush."""
    api.default = remembering
    channel = FakeChannel()
    async with daemon_with(flush_config(api, make_config), channel) as daemon:
        for n in range(1, 7):
            await say(daemon, channel, note(n), kind="group", peer="-100")
    key = str(channel.key("group", "-100"))
    assert await view.latest_compaction(key) is not None
    assert flush_requests(api) == []
    assert await flushes(view, key) == []


async def test_a_restart_does_not_repeat_a_flush(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig
) -> None:
    """A threshold flushed before a restart is not flushed again after it."""
    api.default = remembering
    channel = FakeChannel()
    key = str(channel.key())
    config = flush_config(api, make_config, compaction={"keep_recent": 4, "flush_shares": [0.5]})
    async with daemon_with(config, channel) as daemon:
        turns = 0
        while not await flushes(view, key):
            turns += 1
            await say(daemon, channel, note(turns))
    assert len(flush_requests(api)) == 2
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "ok")
    assert len(flush_requests(api)) == 2
    assert len(await flushes(view, key)) == 1


async def test_a_failed_flush_is_recorded_and_costs_the_chat_nothing(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig
) -> None:
    """When the model fails the flush, the row says so, the user still gets every reply and
    nothing else, and the session is compacted as usual."""

    def failing(request: RecordedRequest) -> Response:
        if is_flush(request):
            return Error(400, "invalid_request_error", "flush refused")
        return summaries(request)

    api.default = failing
    channel = FakeChannel()
    key = str(channel.key())
    async with daemon_with(flush_config(api, make_config), channel) as daemon:
        turns = await talk_until_compacted(daemon, channel, view)
    found = await rows(view, "SELECT threshold, status, error FROM memory_flushes WHERE session_key = ? "
                             "ORDER BY id", (key,))
    assert [(threshold, status) for threshold, status, _ in found] == [
        (0.5, "failed"), (0.75, "failed"), (0.9, "failed")]
    assert all("HTTP 400 (invalid_request_error)" in error for *_, error in found)
    assert len(channel.sent) == turns
    said = [f"re: {note(n).strip()}" for n in range(1, turns + 1)]
    assert [m.text.split("\n")[0] for m in channel.sent] == said
    assert await view.notes_of("fake", "42") == []
