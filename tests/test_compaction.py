"""Compaction: planning and chunking, and long sessions summarised end to end against the API stand-in."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bot.config import Config
from bot.context.builder import ContextBuilder
from bot.context.compaction import (
    MERGE_SYSTEM,
    NOTICE,
    SUMMARY_MAX_TOKENS,
    SUMMARY_SYSTEM,
    Compactor,
    plan,
    render_chunk,
    split_chunks,
)
from bot.core.messages import StoredMessage
from bot.daemon.assembly import Daemon
from bot.models.brain import AnthropicBrain
from bot.ranking.budget import message_cost
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, Error, RecordedRequest, Response, Text
from bot.testing.fake_channel import FakeChannel
from bot.testing.postgres import database_toml
from bot.testing.preloaded import Preloaded
from bot.turn.runner import FALLBACK_REPLY
from tests.harness import (
    API_KEY,
    FAST,
    MODEL,
    config_data,
    daemon_with,
    echo,
    reply_requests,
    request_text,
    say,
    wait_until,
)

MakeConfig = Callable[[dict[str, Any]], Config]
CLI_ENV = {"ANTHROPIC_API_KEY": API_KEY}  # `switchboard compact` calls the model
SESSION = "agent:main:fake:direct:42"
T0 = datetime(2024, 5, 1, 9, 30, tzinfo=UTC).timestamp()


# -- helpers --------------------------------------------------------------------------------


def stored(
    id_: int, text: str, role: str = "user", *, name: str | None = "Ada",
    actions: tuple[str, ...] = (),
) -> StoredMessage:
    return StoredMessage(
        id=id_, session_key=SESSION, role=role,  # type: ignore[arg-type]
        origin="interactive", text=text, created_at=T0 + id_ * 60,
        sender_id="42" if role == "user" else None,
        sender_name=name if role == "user" else None, actions=actions,
    )


def sized(id_: int, chars: int) -> StoredMessage:
    return stored(id_, f"m{id_:03d} " + "x" * (chars - 5))


def note(n: int) -> str:
    """A user message of about 90 tokens, recognisable by its `note-NN` tag."""
    return f"note-{n:02d} " + "lorem ipsum " * 29


def summaries(request: RecordedRequest) -> Response:
    """Summary calls name the first and last note they were shown; merges join the parts;
    everything else gets the usual echo."""
    if request.system_text == SUMMARY_SYSTEM:
        notes = re.findall(r"note-\d\d", request_text(request))
        return Text(f"SUMMARY of {notes[0]}..{notes[-1]}: Ada chose plan B, invoice INV-7731.")
    if request.system_text == MERGE_SYSTEM:
        parts = re.findall(r"SUMMARY of note-\d\d\.\.note-\d\d", request_text(request))
        return Text("MERGED: " + " | ".join(parts))
    return echo(request)


def summary_requests(api: AnthropicStandIn) -> list[RecordedRequest]:
    return [r for r in api.requests if r.system_text == SUMMARY_SYSTEM]


def merge_requests(api: AnthropicStandIn) -> list[RecordedRequest]:
    return [r for r in api.requests if r.system_text == MERGE_SYSTEM]


def long_config(api: AnthropicStandIn, make_config: MakeConfig, **compaction: Any) -> Config:
    """A 1000-token history budget: five exchanges of `note`s outgrow it."""
    return make_config(config_data(
        api,
        conversation={"context_window": 2000, "reserve_tokens": 0, "history_share": 0.5,
                      "use_selection": False, "lookback_count": 100},
        compaction={"keep_recent": 4, "flush_shares": [], **compaction},  # flushes: test_memory_flush.py
    ))


async def seed(store: Store, first: int, count: int) -> list[StoredMessage]:
    """Store `count` exchanges (a note and its echo) of the default DM, notes numbered from `first`."""
    channel = FakeChannel()
    messages: list[StoredMessage] = []
    for n in range(first, first + count):
        inbound = await store.append_inbound(channel.message(note(n)))
        assert inbound is not None
        messages.append(inbound)
        messages.append(await store.append_reply(SESSION, f"re: {note(n)}", request_id=inbound.id))
    return messages


@asynccontextmanager
async def compactor_for(config: Config, store: Store) -> AsyncIterator[Compactor]:
    """The compactor the daemon would build, with the real SDK brain against the stand-in."""
    brain = AnthropicBrain(config.anthropic, API_KEY)
    try:
        yield Compactor(config, store, brain, ContextBuilder(config, store, brain).budget)
    finally:
        await brain.aclose()


async def talk_until_compacted(daemon: Daemon, channel: FakeChannel, view: Store) -> int:
    """Say numbered notes until the session has a compaction record; how many turns that took."""
    turns = 0
    while await view.latest_compaction(str(channel.key())) is None:
        turns += 1
        assert turns <= 10, "the session was never compacted"
        await say(daemon, channel, note(turns))
    return turns


async def command(channel: FakeChannel, name: str, **kwargs: Any) -> str:
    """Send a chat command and return the text the bot answered with."""
    before = len(channel.sent)
    await channel.inject(channel.message(f"/{name}", command=name, **kwargs))
    await wait_until(lambda: len(channel.sent) > before)
    return channel.sent[-1].text


# -- plan, split_chunks, render_chunk -------------------------------------------------------


def test_plan_keeps_the_newest_messages_and_summarises_the_rest() -> None:
    """The newest `keep_recent` messages stay verbatim; everything older is to be summarised."""
    messages = [stored(i, f"m{i}") for i in range(1, 8)]
    work = plan(None, messages, 3)
    assert [m.id for m in work.summarise] == [1, 2, 3, 4]
    assert [m.id for m in work.keep] == [5, 6, 7]
    assert plan(None, messages, 10).summarise == []


def test_chunks_split_by_token_share() -> None:
    """Ten equal messages over three chunks get about a third of the tokens each, none over the cap."""
    messages = [sized(i, 400) for i in range(1, 11)]
    size = message_cost(messages[0])
    chunks = split_chunks(messages, 500)
    totals = [sum(message_cost(m) for m in chunk) for chunk in chunks]
    assert len(chunks) == 3
    assert max(totals) <= 500
    assert max(totals) - min(totals) <= size


def test_a_short_history_is_one_chunk() -> None:
    """History under the chunk size is summarised in one call."""
    messages = [sized(i, 100) for i in range(1, 6)]
    assert split_chunks(messages, 500) == [messages]
    assert split_chunks([], 500) == []


def test_an_oversized_message_is_a_chunk_of_its_own() -> None:
    """A message bigger than a whole chunk is summarised alone, its neighbours around it."""
    small = [sized(i, 200) for i in (1, 2)]
    huge = sized(3, 5000)
    after = sized(4, 200)
    assert split_chunks([*small, huge, after], 500) == [small, [huge], [after]]


def test_chunks_keep_the_conversation_order() -> None:
    """Chunks are consecutive runs: read one after another they give back the conversation."""
    messages = [sized(i, 80 + (i * 37) % 900) for i in range(1, 40)]
    chunks = split_chunks(messages, 500)
    assert len(chunks) > 3
    assert [m for chunk in chunks for m in chunk] == messages


def test_render_chunk_shows_dated_speakers_and_actions() -> None:
    """A chunk is rendered as dated lines naming the speaker, with a reply's actions under it."""
    text = render_chunk(
        [stored(1, "book the 9:40 train", name="Ada"),
         stored(2, "Booked.", role="assistant", actions=("booked train ICE 577",)),
         stored(3, "thanks", name=None)],
        500,
    )
    assert text.startswith("Summarise this part of the chat:")
    assert "[2024-05-01 09:31] Ada: book the 9:40 train" in text
    assert "[2024-05-01 09:32] assistant: Booked." in text
    assert "    actions: booked train ICE 577" in text
    assert "[2024-05-01 09:33] user: thanks" in text


def test_render_chunk_clips_a_message_too_big_for_one_call() -> None:
    """An oversized message keeps its head, with a note of how much was cut."""
    text = render_chunk([stored(1, "HEAD" + "y" * 3000 + "TAIL")], 500)
    assert "HEAD" in text
    assert "TAIL" not in text
    assert "the rest of this message (1008 characters) is cut" in text


# -- compaction end to end ------------------------------------------------------------------


async def test_a_long_session_is_compacted_and_later_turns_start_from_the_summary(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig
) -> None:
    """Once history outgrows the budget it is summarised: the next request holds the summary and
    only the kept messages, the full history stays stored, and the user is told exactly once."""
    api.default = summaries
    channel = FakeChannel()
    key = str(channel.key())
    async with daemon_with(long_config(api, make_config), channel) as daemon:
        turns = await talk_until_compacted(daemon, channel, view)
        record = await view.latest_compaction(key)
        await say(daemon, channel, note(turns + 1))
        await say(daemon, channel, note(turns + 2))

    assert record is not None
    assert record.summary == f"SUMMARY of note-01..note-{turns - 2:02d}: Ada chose plan B, invoice INV-7731."
    assert record.tokens_before > record.tokens_after
    assert record.model == FAST
    history = await view.history(key, 100)
    assert len(history) == 2 * (turns + 2)  # nothing was deleted
    at_compaction = history[: 2 * turns]
    assert record.first_kept_message_id == at_compaction[-4].id
    assert record.last_summarised_id == at_compaction[-5].id

    after = reply_requests(api)[turns]  # the first reply request after the compaction
    sent = request_text(after)
    assert after.messages[0]["content"].startswith(
        "[Summary of the earlier part of this conversation"
    )
    assert record.summary in after.messages[0]["content"]
    for message in at_compaction:
        if message.id < record.first_kept_message_id:
            assert message.text not in sent
        else:
            assert message.text in sent

    notices = [m.text.endswith(NOTICE) for m in channel.sent]
    assert notices == [False] * turns + [True, False]
    assert channel.sent[turns].text == f"re: {note(turns + 1).strip()}\n\n{NOTICE}"
    assert all(NOTICE not in m.text for m in history)  # the note is not part of the conversation
    (summary_call,) = summary_requests(api)
    assert summary_call.model == FAST
    assert "Ada: note-01" in request_text(summary_call)


async def test_a_session_with_a_history_limit_is_never_compacted(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig
) -> None:
    """A history limit says the model sees only the last turns: such a chat is trimmed, never
    summarised, and /compact says why."""
    api.default = summaries
    channel = FakeChannel()
    config = make_config(config_data(
        api,
        conversation={"context_window": 2000, "reserve_tokens": 0, "history_share": 0.5,
                      "use_selection": False, "lookback_count": 100, "history_limit": 6},
        compaction={"keep_recent": 4},
    ))
    async with daemon_with(config, channel) as daemon:
        for n in range(1, 9):
            await say(daemon, channel, note(n))
        answer = await command(channel, "compact")

    assert await view.latest_compaction(str(channel.key())) is None
    assert summary_requests(api) == []
    assert answer.startswith("This chat has a history limit")
    assert "note-01" not in request_text(reply_requests(api)[-1])


async def test_no_notice_for_a_summary_dropped_by_reset(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig
) -> None:
    """A chat reset right after being compacted is not told about a summary it no longer uses."""
    api.default = summaries
    channel = FakeChannel()
    async with daemon_with(long_config(api, make_config), channel) as daemon:
        await talk_until_compacted(daemon, channel, view)
        assert "fresh context" in await command(channel, "reset")
        await say(daemon, channel, "start over")
        await say(daemon, channel, "and again")

    assert [m.text for m in channel.sent[-2:]] == ["re: start over", "re: and again"]
    assert all(NOTICE not in m.text for m in channel.sent)
    assert "[Summary of" not in request_text(reply_requests(api)[-1])


async def test_a_big_backlog_is_summarised_in_chunks_and_merged_in_order(
    api: AnthropicStandIn, store: Store, make_config: MakeConfig
) -> None:
    """History over one chunk is summarised chunk by chunk, then one merge call joins the parts
    oldest first."""
    api.default = summaries
    config = long_config(api, make_config, keep_recent=2, chunk_tokens=500)
    messages = await seed(store, 1, 6)
    async with compactor_for(config, store) as compactor:
        outcome = await compactor.compact(SESSION)

    chunks = split_chunks(messages[:-2], 500)
    assert len(chunks) >= 2
    assert len(summary_requests(api)) == len(chunks)
    (merge,) = merge_requests(api)
    assert api.requests[-1] is merge  # after every chunk
    parts = re.findall(r"Part (\d+):\nSUMMARY of (note-\d\d)", request_text(merge))
    assert [int(number) for number, _ in parts] == list(range(1, len(chunks) + 1))
    firsts = [name for _, name in parts]
    assert firsts[0] == "note-01"
    assert firsts == sorted(firsts)
    assert outcome.record is not None
    assert outcome.record.summary.startswith("MERGED: SUMMARY of note-01..")
    assert (outcome.summarised, outcome.calls) == (10, len(chunks) + 1)
    assert outcome.record.first_kept_message_id == messages[-2].id


async def test_a_later_compaction_builds_on_the_previous_summary(
    api: AnthropicStandIn, store: Store, make_config: MakeConfig
) -> None:
    """A second compaction merges the earlier summary with the newly summarised part, oldest first."""
    api.default = summaries
    config = long_config(api, make_config, keep_recent=2)
    await seed(store, 1, 3)
    async with compactor_for(config, store) as compactor:
        first = await compactor.compact(SESSION)
        await seed(store, 4, 3)
        second = await compactor.compact(SESSION)

    assert first.record is not None and second.record is not None
    (merge,) = merge_requests(api)
    assert re.search(r"Part 1:\nSUMMARY of note-01\.\.note-02.*Part 2:\nSUMMARY of note-03\.\.note-05",
                     request_text(merge), re.DOTALL)
    assert second.record.summary == "MERGED: SUMMARY of note-01..note-02 | SUMMARY of note-03..note-05"
    assert await store.latest_compaction(SESSION) == second.record


async def test_a_chunk_that_fails_twice_is_tried_a_third_time(
    api: AnthropicStandIn, store: Store, make_config: MakeConfig
) -> None:
    """A summary call that errors, then answers empty, then answers still compacts the session."""
    api.default = summaries
    api.script(Error(400, "invalid_request_error"), Text(""), model=FAST)
    config = long_config(api, make_config, keep_recent=2)
    await seed(store, 1, 3)
    async with compactor_for(config, store) as compactor:
        outcome = await compactor.compact(SESSION)

    assert len(summary_requests(api)) == 3
    assert outcome.record is not None
    assert outcome.record.summary.startswith("SUMMARY of note-01..note-02")


async def test_a_summary_cut_at_the_token_limit_is_tried_again(
    api: AnthropicStandIn, store: Store, make_config: MakeConfig
) -> None:
    """Summaries may be far longer than triage's answers, and one the model cut short (its newest
    part missing) is not kept: the next, complete answer is."""
    api.default = summaries
    api.script(Text("SUMMARY of note-01 and then the answer stops mid", stop_reason="max_tokens"),
               model=FAST)
    config = long_config(api, make_config, keep_recent=2)
    await seed(store, 1, 3)
    async with compactor_for(config, store) as compactor:
        outcome = await compactor.compact(SESSION)

    cut, whole = summary_requests(api)
    assert cut.body["max_tokens"] == whole.body["max_tokens"] == SUMMARY_MAX_TOKENS > 256
    assert outcome.record is not None
    assert outcome.record.summary.startswith("SUMMARY of note-01..note-02")


async def test_compaction_works_again_after_a_reset(
    api: AnthropicStandIn, store: Store, make_config: MakeConfig
) -> None:
    """After /reset the old summary is out of use and the fresh context is compacted on its own."""
    api.default = summaries
    config = long_config(api, make_config, keep_recent=2)
    await seed(store, 1, 3)
    async with compactor_for(config, store) as compactor:
        assert (await compactor.compact(SESSION)).record is not None
        await store.reset_context(SESSION)
        assert await store.latest_compaction(SESSION) is None
        await seed(store, 4, 3)
        outcome = await compactor.compact(SESSION)

    assert outcome.record is not None, outcome.reason
    assert outcome.record.summary.startswith("SUMMARY of note-04..note-05")
    assert merge_requests(api) == []  # the pre-reset summary is not merged in
    assert await store.latest_compaction(SESSION) == outcome.record


async def test_a_failing_summary_loses_nothing_and_the_context_is_trimmed_instead(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig
) -> None:
    """When every summary call fails, every turn is still answered, nothing is lost or recorded,
    the oldest messages are trimmed from the context, and compaction is not retried every turn."""

    def failing(request: RecordedRequest) -> Response:
        if request.system_text in (SUMMARY_SYSTEM, MERGE_SYSTEM):
            return Error(400, "invalid_request_error")
        return echo(request)

    api.default = failing
    channel = FakeChannel()
    key = str(channel.key())
    async with daemon_with(long_config(api, make_config), channel) as daemon:
        turns = 0
        while not summary_requests(api):
            turns += 1
            assert turns <= 10, "compaction was never tried"
            await say(daemon, channel, note(turns))
        for n in range(turns + 1, turns + 4):
            await say(daemon, channel, note(n))

    assert len(summary_requests(api)) == 3  # one compaction, three tries, not one per turn
    assert await view.latest_compaction(key) is None
    total = turns + 3
    assert [m.text for m in channel.sent] == [f"re: {note(n).strip()}" for n in range(1, total + 1)]
    assert FALLBACK_REPLY not in [m.text for m in channel.sent]
    history = await view.history(key, 100)
    assert [m.text for m in history if m.role == "user"] == [note(n) for n in range(1, total + 1)]
    last = request_text(reply_requests(api)[-1])
    assert "note-01" not in last
    assert note(total - 1) in last
    snapshot = (await view.snapshots(key))[-1].snapshot
    assert snapshot["trimmed"] and snapshot["compaction"] is None


async def test_compact_command_summarises_on_request_and_says_when_there_is_nothing(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig
) -> None:
    """/compact summarises the chat's older part at once, says so plainly when the chat is too
    short, and the next reply is built on the summary without repeating the notice."""
    api.default = summaries
    channel = FakeChannel()
    key = str(channel.key())
    config = long_config(api, make_config, enabled=False)
    async with daemon_with(config, channel) as daemon:
        empty = await command(channel, "compact")
        for n in range(1, 5):
            await say(daemon, channel, note(n))
        done = await command(channel, "compact")
        again = await command(channel, "compact")
        await say(daemon, channel, note(5))

    assert empty == "Nothing to summarise yet: this chat is still short."
    assert done == ("Summarised 4 earlier messages; the newest 4 stay as they are. "
                    "The full history is still stored.")
    assert again == "Nothing to summarise yet: this chat is still short."
    record = await view.latest_compaction(key)
    assert record is not None and record.summary.startswith("SUMMARY of note-01..note-02")
    last = reply_requests(api)[-1]
    assert record.summary in request_text(last)
    assert "note-01" not in request_text(last).replace(record.summary, "")
    assert channel.sent[-1].text == f"re: {note(5).strip()}"  # the command already told them
    assert len(await view.history(key, 100)) == 10
    # The summary call counts in the chat's usage (/usage), as nobody's in particular.
    compactions = [r for r in await view.usage_since(0) if r.kind == "compaction"]
    assert [(r.session_key, r.user_id) for r in compactions] == [(key, None)]


async def test_compact_command_says_so_when_no_summary_can_be_made(
    api: AnthropicStandIn, view: Store, make_config: MakeConfig
) -> None:
    """/compact reports a failed summary in one sentence and keeps every message."""
    channel = FakeChannel()
    key = str(channel.key())
    async with daemon_with(long_config(api, make_config, enabled=False), channel) as daemon:
        for n in range(1, 5):
            await say(daemon, channel, note(n))
        api.default = lambda request: (
            Error(400, "invalid_request_error") if request.model == FAST else echo(request)
        )
        answer = await command(channel, "compact")

    assert answer.startswith("I couldn't summarise this chat now (")
    assert answer.endswith("Nothing was lost.")
    assert await view.latest_compaction(key) is None
    assert len(await view.history(key, 100)) == 8


# -- switchboard compact --------------------------------------------------------------------


async def compact_cli(preloaded: Preloaded, cwd: Path, *args: str) -> tuple[int, str, str]:
    """`switchboard compact ARGS` in a process of its own, forked from the session's zygote (as
    `switchboard_cli` runs it, minus the two seconds of imports); (exit code, stdout, stderr)."""
    return await preloaded.run(["compact", *args], cwd=cwd, env=dict(os.environ) | CLI_ENV)


async def test_compact_cli_summarises_a_session_and_says_when_there_is_nothing(
    api: AnthropicStandIn, store: Store, tmp_path: Path, preloaded: Preloaded
) -> None:
    """`switchboard compact KEY` writes a summary and prints it; run again it says nothing is left
    to compact; an unknown session is an error naming it."""
    api.default = summaries
    await seed(store, 1, 5)
    config = tmp_path / "config.toml"
    config.write_text(
        f'[database]\n{database_toml(store)}\n'
        f'[anthropic]\nbase_url = "{api.base_url}"\nmodel = "{MODEL}"\nfast_model = "{FAST}"\n'
        "timeout = 5.0\n[compaction]\nkeep_recent = 4\n",
        encoding="utf-8",
    )

    missing = "agent:main:fake:direct:999"
    (code, out, err), unknown = await asyncio.gather(
        compact_cli(preloaded, tmp_path, SESSION, "--config", str(config)),
        compact_cli(preloaded, tmp_path, missing, "--config", str(config)),
    )
    assert (code, err) == (0, ""), err
    record = await store.latest_compaction(SESSION)
    assert record is not None
    assert out.splitlines()[0] == (
        f"compaction #{record.id}: summarised 6 messages (up to #{record.last_summarised_id}) in 1 "
        f"calls; ~{record.tokens_before} -> ~{record.tokens_after} tokens; context now starts at "
        f"#{record.first_kept_message_id}"
    )
    assert "SUMMARY of note-01..note-03" in out

    code, out, err = await compact_cli(preloaded, tmp_path, SESSION, "--config", str(config))
    assert (code, err) == (0, ""), err
    assert out == ("nothing to compact: the session has 4 messages since the last summary, "
                   "and the newest 4 always stay as they are\n")
    assert len(summary_requests(api)) == 1

    code, out, err = unknown
    assert (code, out) == (1, "")
    assert missing in err and "Traceback" not in err
