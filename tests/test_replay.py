"""Snapshots and replay: a turn's context rebuilt from the log, `context`/`replay` commands, bad data."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from bot.cli import main
from bot.config import Config, load_config
from bot.context.builder import ContextBuilder, Pin
from bot.context.replay import replay
from bot.core.messages import ChatRef, StoredMessage
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.store.schema import migrations
from bot.testing.anthropic_api import AnthropicStandIn, Text
from bot.testing.fake_channel import FakeChannel
from bot.turn.runner import FALLBACK_REPLY
from tests.harness import FAST, config_data, daemon_with, last_user_line, reply_requests, request_text, say

ROOT = Path(__file__).resolve().parents[1]
MakeConfig = Callable[[dict[str, Any]], Config]
FACT = "my locker combination is 4711"


# -- helpers: a config file on disk, the CLI in-process and as a subprocess ---------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value)  # a TOML basic string for the plain strings used here


def write_config(path: Path, data: dict[str, dict[str, Any]]) -> None:
    """Write one-level TOML sections (what `config_data` builds) to `path`."""
    lines = []
    for section, values in data.items():
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in values.items())
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def keep_logging() -> Iterator[None]:
    """The CLI configures logging for its process; put ours back after running it in-process."""
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quiet = {name: logging.getLogger(name).level for name in ("httpx", "httpx2", "httpcore", "aiosqlite")}
    yield
    structlog.configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, value in quiet.items():
        logging.getLogger(name).setLevel(value)


def _run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
        else:
            code = 0
    return code, out.getvalue(), err.getvalue()


async def cli(*argv: str) -> tuple[int, str, str]:
    """`switchboard ARGV` in-process (its own event loop, in a thread): exit code, stdout, stderr."""
    return await asyncio.to_thread(_run_cli, list(argv))


def switchboard(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`switchboard ARGS` as a real subprocess."""
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], cwd=cwd, env=environ, capture_output=True, text=True,
        timeout=120, check=False,
    )


def raw_sql(db: Path, sql: str, *params: Any) -> None:
    """Change the database behind the store's back, as a damaged file or a careless hand would."""
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        if params:
            conn.execute(sql, params)
        else:
            conn.executescript(sql)


async def seed(view: Store, channel: FakeChannel, exchanges: int, *, peer: str = "42") -> list[StoredMessage]:
    """`exchanges` question/answer pairs of 80 characters each (24 tokens each with the margin)."""
    key = str(channel.key(peer=peer))
    stored: list[StoredMessage] = []
    for n in range(exchanges):
        inbound = await view.append_inbound(
            channel.message(f"chatter question {n} ".ljust(80, "."), peer=peer, message_id=f"{peer}-{n}")
        )
        assert inbound is not None
        stored.append(inbound)
        stored.append(await view.append_reply(key, f"chatter answer {n} ".ljust(80, "."),
                                              request_id=inbound.id))
    return stored


def scenario_config(api: AnthropicStandIn, db: Path, **conversation: Any) -> dict[str, dict[str, Any]]:
    """Recall on, triage on, and a history budget of 250 tokens, so turns recall, triage and trim."""
    settings = {"lookback_count": 20, "always_include_recent": 4, "recall_count": 2,
                "context_window": 500, "reserve_tokens": 0, "history_share": 0.5}
    settings.update(conversation)
    return config_data(api, conversation=settings, compaction={"enabled": False},
                       database={"path": str(db)})


async def written_config(path: Path, data: dict[str, dict[str, Any]]) -> Config:
    await asyncio.to_thread(write_config, path, data)
    return load_config(path)


# -- the same log and config give the same context -------------------------------------------------------


async def test_the_same_log_and_config_build_the_same_context(
    make_config: MakeConfig, store: Store
) -> None:
    """Building a turn's context twice from the same log and config gives the same messages and hash, and
    replaying it still matches after other chats and later turns mention the same words."""
    config = make_config({"conversation": {
        "lookback_count": 4, "recall_count": 1, "context_window": 180, "reserve_tokens": 0,
    }})
    channel = FakeChannel()
    key = channel.key()
    alpha = await store.append_inbound(channel.message("the alpha plan is ready"))
    bravo = await store.append_inbound(channel.message("the bravo plan is ready"))
    assert alpha is not None and bravo is not None
    await seed(store, channel, 4)
    request = await store.append_inbound(channel.message("alpha or bravo?"))
    assert request is not None
    brain = AnthropicBrain(config.anthropic, None)  # no key: triage fails open, deterministically
    chat = ChatRef("fake", "42")
    builder = ContextBuilder(config, store, brain)
    first = await builder.build(key, request, chat)
    pin = Pin(first.as_of, first.built_at, first.compaction_id)
    second = await ContextBuilder(config, store, brain).build(key, request, chat, pin=pin)
    assert second.input_hash == first.input_hash != ""
    assert second.entries == first.entries
    assert (second.trimmed, second.recalled) == (first.trimmed, first.recalled)
    assert first.trimmed and first.recalled == [bravo.id]  # equally good: the newer one wins

    await store.record_snapshot(str(key), request.id, None, first.snapshot(), first.input_hash)
    # Later words of this chat and of another one change no earlier turn's recall.
    for n in range(5):
        await store.append_inbound(channel.message(f"bravo talk {n}", peer="43"))
        await store.append_inbound(channel.message(f"bravo later {n}"))
    result = await replay(config, store, brain, str(key), 1)
    assert result.matches
    assert result.rebuilt.recalled == [bravo.id]


# -- the replay command after real turns --------------------------------------------------------------


async def test_replay_matches_real_turns_and_reports_a_config_change(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, db: Path, tmp_path: Path,
    keep_logging: None,
) -> None:
    """`switchboard replay KEY --turn N` says match (exit 0) for real turns, one with a recalled fact picked
    by triage and one trimmed to the budget; after lookback_count changes it says MISMATCH (exit 1) and
    names the setting that changed."""
    config_path = tmp_path / "config.toml"
    config = await written_config(config_path, scenario_config(api, db))
    key = str(channel.key())
    fact = await view.append_inbound(channel.message(FACT, message_id="fact"))
    assert fact is not None
    await seed(view, channel, 30)
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "hello there")
        api.script(Text('{"relevant": [1]}'), model=FAST)
        await say(daemon, channel, "what was my locker combination?")
        api.script(Text('{"relevant": [1, 2, 3, 4, 5, 6, 7, 8]}'), model=FAST)
        await say(daemon, channel, "tell me everything")

    assert FACT in request_text(reply_requests(api)[1])
    records = await view.snapshots(key)
    assert [r.snapshot["triage"]["outcome"] for r in records] == ["selected"] * 3
    assert records[1].snapshot["recalled"] == [fact.id] and fact.id in records[1].snapshot["triaged"]
    trimmed = [t["id"] for t in records[2].snapshot["trimmed"]]
    assert trimmed, "the third turn should have been trimmed to the 250-token budget"

    for turn in ("1", "2", "3", "-1"):
        code, out, err = await cli("replay", key, "--turn", turn, "--config", str(config_path))
        assert (code, out.splitlines()[-1]) == (0, "match"), out + err
    assert f"hash recorded {records[2].hash}, rebuilt {records[2].hash}" in out

    code, out, _ = await cli("context", key, "--turn", "3", "--config", str(config_path))
    assert code == 0
    tokens = records[2].snapshot["tokens"]
    assert f"tokens ~{tokens['estimate']} of a 250 history budget (estimates x1.2)" in out
    rows = out.split(f"trimmed by the token budget ({len(trimmed)}, oldest first)\n")[1].splitlines()
    # Each trimmed row: id, date, time, role, why, then its text.
    assert [(row.split()[0], row.split()[4]) for row in rows[:len(trimmed)]] == [
        (f"#{message_id}", "budget") for message_id in trimmed
    ]

    # The real command, as a process: the exit code is what scripts see.
    process = await asyncio.to_thread(switchboard, tmp_path, "replay", key, "--turn", "2")
    assert process.returncode == 0, process.stderr
    assert process.stdout.splitlines()[-1] == "match"

    await written_config(config_path, scenario_config(api, db, lookback_count=10))
    code, out, _ = await cli("replay", key, "--turn", "3", "--config", str(config_path))
    assert code == 1
    assert "MISMATCH" in out.splitlines()
    assert "setting changed since: conversation.lookback_count: 20 then, 10 now" in out.splitlines()
    assert out.splitlines()[-2] != "only recorded: -"  # the shorter lookback leaves messages out


# -- corrupt data ----------------------------------------------------------------------------------------


async def test_a_malformed_row_is_skipped_and_the_turn_is_answered(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, db: Path, make_config: MakeConfig
) -> None:
    """A stored message with unreadable columns (bad actions JSON, a time that is not a number) is left
    out of the context with a warning, even when it is the message replied to; the user still gets a reply."""
    config = make_config(config_data(api, conversation={"use_selection": False}))
    seeded = await seed(view, channel, 3)
    bad_actions, bad_time, target = seeded[1], seeded[3], seeded[4]
    raw_sql(db, "UPDATE messages SET actions = '{not json' WHERE id = ?", bad_actions.id)
    raw_sql(db, "UPDATE messages SET created_at = 'yesterday' WHERE id = ?", bad_time.id)
    raw_sql(db, "UPDATE messages SET actions = '{\"a\": 1}' WHERE id = ?", target.id)
    with capture_logs() as logs:
        async with daemon_with(config, channel) as daemon:
            await say(daemon, channel, "still there?", reply_to=target.provider_message_id)

    assert channel.sent[-1].text == "re: still there?"
    sent = request_text(reply_requests(api)[0])
    assert all(m.text not in sent for m in (bad_actions, bad_time, target))
    assert all(m.text in sent for m in seeded if m not in (bad_actions, bad_time, target))
    skipped = {e["message_id"] for e in logs if e["event"] == "malformed message row skipped"}
    assert skipped >= {bad_actions.id, bad_time.id, target.id}
    (record,) = await view.snapshots(str(channel.key()))
    assert record.snapshot["status"] == "ok"
    assert record.snapshot["reply_to"] is None


async def test_an_unreadable_snapshot_is_skipped_by_context_and_replay(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, db: Path, tmp_path: Path,
    keep_logging: None,
) -> None:
    """A turn whose stored snapshot is not valid JSON (or not a snapshot's shape) is skipped with a
    warning: the other turns still show and replay, and asking for it says plainly it is unreadable."""
    config_path = tmp_path / "config.toml"
    config = await written_config(config_path, scenario_config(api, db, recall_count=0))
    key = str(channel.key())
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "first")
        await say(daemon, channel, "second")
    raw_sql(db, "UPDATE context_snapshots SET snapshot = '{not json' WHERE id = 1")
    config_arg = ("--config", str(config_path))

    code, out, err = await cli("context", key, *config_arg)
    assert code == 0, err
    assert out.splitlines()[0].startswith("turn 2 of 2  ")  # turn 1's snapshot is not even read

    for command in ("context", "replay"):
        code, out, err = await cli(command, key, "--turn", "1", *config_arg)
        assert code == 1
        assert "unreadable context snapshot skipped" in err
        assert f"switchboard: turn 1 of session {key} has an unreadable snapshot" in err
        assert "Traceback" not in err
    code, out, _ = await cli("replay", key, "--turn", "2", *config_arg)
    assert (code, out.splitlines()[-1]) == (0, "match")

    # Valid JSON of the wrong shape is just as unreadable: with both bad, nothing crashes.
    raw_sql(db, "UPDATE context_snapshots SET snapshot = ? WHERE id = 2", '{"entries": [{"id": "seven"}]}')
    assert await view.snapshots(key) == []
    code, out, err = await cli("context", key, *config_arg)
    assert code == 1
    assert f"turn 2 of session {key} has an unreadable snapshot" in err
    assert "Traceback" not in err


async def test_a_context_build_failure_gets_the_fallback_and_the_daemon_goes_on(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, db: Path, tmp_path: Path,
    keep_logging: None,
) -> None:
    """When the context cannot be read the user gets the fallback reply, the turn is recorded as failed
    with a `context_build_error`, and once the database is whole again the next message is answered."""
    config_path = tmp_path / "config.toml"
    config = await written_config(config_path, scenario_config(api, db))
    key = str(channel.key())
    await seed(view, channel, 2)
    with capture_logs() as logs:
        async with daemon_with(config, channel) as daemon:
            await say(daemon, channel, "before")
            # The previous-tasks block reads schedule_runs: without it, building the context fails.
            # On a thread: a blocking write on the event loop the daemon shares can wait out its
            # busy timeout behind a daemon write that needs that loop to commit.
            await asyncio.to_thread(raw_sql, db, "DROP TABLE schedule_runs")
            await say(daemon, channel, "during")
            await asyncio.to_thread(raw_sql, db, migrations("sqlite")[2])
            await say(daemon, channel, "after")

    assert [m.text for m in channel.sent] == ["re: before", FALLBACK_REPLY, "re: after"]
    assert [last_user_line(r) for r in reply_requests(api)] == ["before", "after"]
    failed = [e for e in logs if e["event"] == "context build failed"]
    assert len(failed) == 1 and failed[0]["error_class"] == "context_build_error"
    assert failed[0]["exc_info"]  # the cause's traceback goes to the log
    turn_lines = [e for e in logs if e["event"] == "turn"]
    assert [line["error"] for line in turn_lines][::2] == [None, None]

    records = await view.snapshots(key)
    assert [r.snapshot["status"] for r in records] == ["ok", "failed", "ok"]
    error = records[1].snapshot["error"]
    assert error.startswith("context_build_error: OperationalError: no such table: schedule_runs")
    assert turn_lines[1]["error"] == error
    history = await view.history(key, 3)
    assert [m.text for m in history] == [FALLBACK_REPLY, "after", "re: after"]

    code, out, _ = await cli("context", key, "--turn", "2", "--config", str(config_path))
    assert code == 0
    assert f"FAILED: {error}" in out.splitlines()
    code, out, _ = await cli("replay", key, "--turn", "2", "--config", str(config_path))
    assert code == 1
    assert f"the turn failed to build its context: {error}" in out.splitlines()


@pytest.mark.parametrize(("nudge", "matches"), [(1e-6, True), (1e-3, False)])
async def test_scores_that_moved_in_their_last_place_still_match(
    make_config: MakeConfig, store: Store, nudge: float, matches: bool
) -> None:
    """A turn recorded with scores computed in another float order (numpy's float32 sums, a BLAS
    upgrade; its hash differs for that alone) replays as a match when the picks, ranks and sources
    are the same and every score is within its last rounded place; a score that really moved is a
    mismatch."""
    config = make_config({"conversation": {
        "lookback_count": 4, "recall_count": 1, "context_window": 180, "reserve_tokens": 0,
    }})
    channel = FakeChannel()
    key = channel.key()
    await store.append_inbound(channel.message("the alpha plan is ready"))
    await store.append_inbound(channel.message("the bravo plan is ready"))
    await seed(store, channel, 4)
    request = await store.append_inbound(channel.message("alpha or bravo?"))
    assert request is not None
    brain = AnthropicBrain(config.anthropic, None)
    built = await ContextBuilder(config, store, brain).build(key, request, ChatRef("fake", "42"))
    snapshot = built.snapshot()
    assert snapshot["candidates"]
    for candidate in snapshot["candidates"]:
        candidate["score"] = round(candidate["score"] + nudge, 6)
        for hit in candidate["sources"].values():
            hit["score"] = round(hit["score"] + nudge, 6)
    await store.record_snapshot(str(key), request.id, None, snapshot, "0123456789abcdef")

    result = await replay(config, store, brain, str(key), 1)
    assert result.recorded_ids == result.rebuilt_ids
    assert result.matches is matches
