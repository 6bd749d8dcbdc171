"""`switchboard context` after real turns: texts, the reply call (model, prompt, tokens), failures,
`--json` and `--full`, run as a subprocess against a daemon's database."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bot.testing.anthropic_api import AnthropicStandIn, Error
from bot.testing.fake_channel import FakeChannel
from bot.turn.runner import FALLBACK_REPLY
from tests.harness import MODEL, config_data, daemon_with, say, switchboard_cli
from tests.test_replay import written_config

LONG = "the long one: " + "a great many words about the weather " * 6 + "\nand a second line at the end"
ROW = r"  #{id}\s+\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d  {role}\s+{reason}\s+{text}"


async def _two_turns(api: AnthropicStandIn, channel: FakeChannel, db: Path, tmp_path: Path) -> Path:
    """A daemon with a soul file answers "hello there" and then "and now?"; the config's path."""
    (tmp_path / "SOUL.md").write_text("You like weather talk.", encoding="utf-8")
    path = tmp_path / "config.toml"
    data = config_data(api, agent={"soul_file": "SOUL.md"}, conversation={"use_selection": False},
                       database={"path": str(db)})
    config = await written_config(path, data)
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, LONG)
        await say(daemon, channel, "and now?")
    return path


async def test_context_shows_texts_reasons_and_the_reply_call(
    api: AnthropicStandIn, channel: FakeChannel, db: Path, tmp_path: Path
) -> None:
    """`context KEY` shows each included message's time, role, reason and text on one line, the model,
    tokens in and out, the system prompt's size and files, the request and the reply; counts as a table."""
    path = await _two_turns(api, channel, db, tmp_path)
    code, out, err = await switchboard_cli(tmp_path, "context", str(channel.key()), "--config", str(path))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1] == "request: Ada: and now?"
    assert re.fullmatch(rf"model {MODEL}  tokens 10 in, 5 out  1 model call  [\d.]+ ms", lines[2]), lines[2]
    assert re.fullmatch(r"system prompt \d+ chars; prompt files: soul SOUL.md \(22 chars\)", lines[3])
    assert "reply: re: and now?" in lines
    assert not any(line.startswith("FAILED") for line in lines)
    counts = lines.index("counts")
    assert re.fullmatch(r"  fetched\s+2", lines[counts + 1])
    assert re.fullmatch(r"  within_history_limit  2", lines[counts + 2])
    assert "{" not in out  # no Python dict
    first = lines.index("in the context (2, oldest first)")
    rows = lines[first + 1:]
    assert len(rows) == 2, out
    assert re.fullmatch(ROW.format(id=1, role="user", reason="all", text=r".*: the long one: a great.*…"),
                        rows[0]), rows[0]
    assert len(rows[0].split("  ")[-1]) <= 80  # cut to one line: the second line is not shown
    assert "and a second line at the end" not in out.replace("re: and a second line at the end", "")
    assert re.fullmatch(ROW.format(id=2, role="assistant", reason="all", text=r"agent: re: and a second line "
                                   r"at the end"), rows[1]), rows[1]


async def test_context_full_shows_whole_texts(
    api: AnthropicStandIn, channel: FakeChannel, db: Path, tmp_path: Path
) -> None:
    """`--full` prints a long message whole (every line of it), where the default cuts it to one line."""
    path = await _two_turns(api, channel, db, tmp_path)
    key = str(channel.key())
    code, out, err = await switchboard_cli(tmp_path, "context", key, "--full", "--config", str(path))
    assert code == 0, err
    lines = out.splitlines()
    row = next(index for index, line in enumerate(lines) if line.startswith("  #1 "))
    assert lines[row].endswith(f"Ada: {LONG.splitlines()[0]}")
    assert lines[row + 1].strip() == "and a second line at the end"
    code, short, _ = await switchboard_cli(tmp_path, "context", key, "--config", str(path))
    assert code == 0
    assert LONG.splitlines()[0] not in short
    assert "a second line at the end" not in short.split("in the context")[1].splitlines()[1]


async def test_context_json_is_the_whole_record(
    api: AnthropicStandIn, channel: FakeChannel, db: Path, tmp_path: Path
) -> None:
    """`--json` prints one JSON document: the snapshot, the reply call and every message with its time,
    role, reason and whole text; `replay` still says match for a turn recorded with the reply call."""
    path = await _two_turns(api, channel, db, tmp_path)
    key = str(channel.key())
    code, out, err = await switchboard_cli(tmp_path, "context", key, "--json", "--config", str(path))
    assert code == 0, err
    record = json.loads(out)
    assert (record["turn"], record["turns"], record["failed"], record["error"]) == (2, 2, False, None)
    call = record["reply_call"]
    assert (call["model"], call["tokens_in"], call["tokens_out"], call["attempts"]) == (MODEL, 10, 5, 1)
    assert call["fallback"] is False and call["system_prompt_chars"] > 22
    assert [f["name"] for f in call["prompt_files"]] == ["soul"]
    assert record["request"]["text"] == "and now?"
    assert record["reply"]["text"] == "re: and now?"
    entries = record["entries"]
    assert [(e["id"], e["role"], e["reason"]) for e in entries] == [(1, "user", "all"),
                                                                   (2, "assistant", "all")]
    assert entries[0]["text"] == LONG and entries[0]["time"].startswith("20")
    assert record["snapshot"]["reply_call"] == call
    assert record["snapshot"]["counts"]["included"] == 2

    code, out, err = await switchboard_cli(tmp_path, "replay", key, "--config", str(path))
    assert (code, out.splitlines()[-1]) == (0, "match"), out + err


async def test_context_says_failed_for_a_fallback_reply(
    api: AnthropicStandIn, channel: FakeChannel, db: Path, tmp_path: Path
) -> None:
    """A turn answered with the fallback reply because the model answered 500s shows FAILED with the
    error and marks the reply as the fallback, in text and JSON; replay still matches its context."""
    path = tmp_path / "config.toml"
    config = await written_config(path, config_data(api, conversation={"use_selection": False},
                                                    database={"path": str(db)}))
    api.script(Error(500, "api_error", "overloaded inside"), Error(500, "api_error", "overloaded inside"),
               model=MODEL)
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "are you there?")
    assert channel.sent[-1].text == FALLBACK_REPLY
    key = str(channel.key())

    code, out, err = await switchboard_cli(tmp_path, "context", key, "--config", str(path))
    assert code == 0, err
    lines = out.splitlines()
    failed = [line for line in lines if line.startswith("FAILED: ")]
    assert len(failed) == 1 and "reply failed" in failed[0], out
    assert f"reply (the fallback reply): {FALLBACK_REPLY}" in lines
    assert re.fullmatch(rf"model {MODEL}  tokens 0 in, 0 out  failed  [\d.]+ ms", lines[2]), lines[2]

    code, out, err = await switchboard_cli(tmp_path, "context", key, "--json", "--config", str(path))
    assert code == 0, err
    record = json.loads(out)
    assert record["failed"] is True and record["reply_call"]["fallback"] is True
    assert record["error"] == record["reply_call"]["error"] == failed[0].removeprefix("FAILED: ")
    assert record["reply"]["text"] == FALLBACK_REPLY

    code, out, err = await switchboard_cli(tmp_path, "replay", key, "--config", str(path))
    assert (code, out.splitlines()[-1]) == (0, "match"), out + err


async def test_context_shows_the_candidate_pool(
    api: AnthropicStandIn, channel: FakeChannel, db: Path, tmp_path: Path
) -> None:
    """The older turns triage chose from are listed best first: each source's rank and score, the
    fused score, and whether the turn went in."""
    path = tmp_path / "config.toml"
    data = config_data(api, conversation={"lookback_count": 6, "always_include_recent": 2},
                       database={"path": str(db)})
    config = await written_config(path, data)
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "my gym locker combination is 4711")
        for n in range(5):
            await say(daemon, channel, f"small talk number {n}")
        await say(daemon, channel, "what was the gym locker combination?")
    code, out, err = await switchboard_cli(tmp_path, "context", str(channel.key()), "--config", str(path))
    assert code == 0, err
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("candidates ("))
    assert re.fullmatch(r"candidates \(\d+ older turns, best first; per source: rank score\)", lines[header])
    assert lines[header + 1].split() == ["rank", "turn", "fused", "lookback", "lexical", "semantic", "in"]
    best = lines[header + 2]
    row = r"\s+1  #1\s+0\.\d{4}  -\s+1 \d+\.\d{3}\s+-\s+no\s+Ada: my gym locker combination is 4711"
    assert re.fullmatch(row, best), best


async def test_a_tool_loop_shows_as_model_calls_not_attempts(
    api: AnthropicStandIn, channel: FakeChannel, db: Path, tmp_path: Path
) -> None:
    """A reply that called a tool took two model calls: `context` says "2 model calls", not "2
    attempts" (which read as a call retried), and lists the call."""
    from bot.testing.anthropic_api import Text, ToolUse

    api.script(ToolUse((("current_time", {}),)), Text("It is late."), model=MODEL)
    path = tmp_path / "config.toml"
    config = await written_config(path, config_data(api, database={"path": str(db)}))
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "what time is it?")
    code, out, err = await switchboard_cli(tmp_path, "context", str(channel.key()), "--config", str(path))
    assert code == 0, err
    assert re.search(r"  2 model calls  [\d.]+ ms", out), out
    assert "attempt" not in out, out
    assert "  round 1: current_time" in out, out


async def test_context_names_every_part_of_the_system_prompt_with_its_size(
    api: AnthropicStandIn, channel: FakeChannel, db: Path, tmp_path: Path
) -> None:
    """Knowledge that came from the system prompt can be traced: `context` lists the agent's
    instructions, each prompt file, where and when, the asker's notes and the tool definitions,
    each with its size."""
    from bot.testing.anthropic_api import Text, ToolUse

    (tmp_path / "SOUL.md").write_text("You like weather talk.", encoding="utf-8")
    api.script(ToolUse((("remember", {"note": "Ada is vegetarian"}),)), Text("Noted."), Text("Soup."),
               model=MODEL)
    path = tmp_path / "config.toml"
    config = await written_config(path, config_data(api, agent={"soul_file": "SOUL.md"},
                                                    database={"path": str(db)}))
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "remember that I'm vegetarian")
        await say(daemon, channel, "what should I cook?")
    code, out, err = await switchboard_cli(tmp_path, "context", str(channel.key()), "--config", str(path))
    assert code == 0, err
    for part in (r"the agent's instructions", r"prompt file soul  \(SOUL\.md\)",
                 r"where and when \(this chat, the time\)", r"notes of fake:42 \(1, remember\)",
                 r"tool definitions \(\d+ offered\)"):
        assert re.search(rf"^\s+\d+ chars  {part}", out, re.M), (part, out)
    assert re.search(r"^\s+22 chars  prompt file soul", out, re.M), out
