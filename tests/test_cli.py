"""The `switchboard` command, run as a real subprocess: config checks, init, admin reads and chat."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from bot.config import load_config
from bot.core.messages import ChatRef, InboundMessage
from bot.core.session_key import build
from bot.ranking.stages import Context, ContextEntry, Explanation, TriageReport
from bot.store import Store
from tests.harness import zygote

ROOT = Path(__file__).resolve().parents[1]
# On the console the admin is the user: without a key it says what to set (a chat gets an apology).
NO_KEY = "no Anthropic API key: set the ANTHROPIC_API_KEY environment variable"
KEY = build("main", "telegram", "group", -100123, topic=7)
OTHER = build("main", "telegram", "direct", 42)
AT = 1704164645.0  # 2024-01-02 03:04:05 UTC
TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"


def switchboard(
    tmp_path: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`switchboard ARGS` in a process of its own, forked from this worker's zygote (its imports done
    once: tests.harness.zygote), `stdin` its input; as `subprocess.run` answers."""
    environ = dict(os.environ)  # already cleaned of secrets, XDG_STATE_HOME in tmp_path
    environ.update(env or {})
    code, out, err = zygote().run_blocking(list(args), cwd=tmp_path, env=environ, stdin=stdin or "",
                                           timeout=120)
    return subprocess.CompletedProcess(["switchboard", *args], code, out, err)


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "cfg.toml"
    path.write_text('[agent]\nname = "Testbot"\n[database]\npath = "data/bot.db"\n', encoding="utf-8")
    return path


# -- check-config ---------------------------------------------------------------------------


def test_check_config_accepts_a_good_file(tmp_path: Path, config_file: Path) -> None:
    """check-config on a valid file exits 0 and says where the database is."""
    result = switchboard(tmp_path, "check-config", str(config_file))
    assert result.returncode == 0, result.stderr
    assert f"{config_file}: OK" in result.stdout
    assert str(tmp_path / "data" / "bot.db") in result.stdout
    assert "ANTHROPIC_API_KEY is not set" in result.stdout


def test_check_config_uses_config_option(tmp_path: Path, config_file: Path) -> None:
    """check-config without a path checks the file named by --config."""
    result = switchboard(tmp_path, "check-config", "--config", str(config_file))
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout


@pytest.mark.parametrize(
    ("content", "key", "expected"),
    [
        ("[conversation]\nlookbak_count = 3\n", "conversation.lookbak_count", "unknown key; expected one"),
        ("[conversation]\nlookback_count = \"many\"\n", "conversation.lookback_count", "a valid integer"),
        ("[conversation]\nhistory_limit = -2\n", "conversation.history_limit", "greater than or equal to 0"),
        ("[agent]\ntimezone = \"Nowhere/Special\"\n", "agent.timezone", "IANA timezone"),
    ],
)
def test_check_config_rejects_bad_file_in_one_line(
    tmp_path: Path, content: str, key: str, expected: str
) -> None:
    """A bad config exits 2 with one line naming the file, the key and what was expected; no traceback."""
    path = tmp_path / "config.toml"
    path.write_text(content, encoding="utf-8")
    result = switchboard(tmp_path, "check-config", str(path))
    assert result.returncode == 2
    line = _one_line(result.stderr)
    assert line.startswith(f"switchboard: {path}: {key}: ")
    assert expected in line
    assert result.stdout == ""


def test_check_config_rejects_invalid_toml(tmp_path: Path) -> None:
    """A file that is not TOML exits 2 naming the file."""
    path = tmp_path / "config.toml"
    path.write_text("[agent\n", encoding="utf-8")
    result = switchboard(tmp_path, "check-config", "config.toml")
    assert result.returncode == 2
    assert _one_line(result.stderr).startswith("switchboard: config.toml: is not valid TOML")


# -- run and init ---------------------------------------------------------------------------


def test_run_without_config_points_to_init(tmp_path: Path) -> None:
    """`run` with no config.toml exits 2 telling the user to run `switchboard init`."""
    result = switchboard(tmp_path, "run")
    assert result.returncode == 2
    line = _one_line(result.stderr)
    assert "config.toml" in line
    assert "switchboard init" in line


def test_run_with_bad_config_exits_2_in_one_line(tmp_path: Path) -> None:
    """`run` with an invalid config.toml exits 2 with the same one-line message as check-config."""
    (tmp_path / "config.toml").write_text("[router]\nmax_concurrent_turns = 0\n", encoding="utf-8")
    result = switchboard(tmp_path, "run")
    assert result.returncode == 2
    assert _one_line(result.stderr).startswith("switchboard: config.toml: router.max_concurrent_turns:")


def test_init_writes_a_valid_config_and_lists_env_vars(tmp_path: Path) -> None:
    """`init` writes config.toml that validates, and lists the environment variables to set."""
    result = switchboard(tmp_path, "init", env={"ANTHROPIC_API_KEY": "sk-ant-very-secret-123"})
    assert result.returncode == 0, result.stderr
    written = tmp_path / "config.toml"
    assert written.exists()
    config = load_config(written)
    assert config.agent.id == "main"
    for name in ("ANTHROPIC_API_KEY", "TELEGRAM_BOT_TOKEN", "DISCORD_BOT_TOKEN"):
        assert name in result.stdout
    text = written.read_text(encoding="utf-8")
    assert "sk-ant-very-secret-123" not in text
    assert "sk-ant-very-secret-123" not in result.stdout + result.stderr
    assert text == (ROOT / "config.toml.example").read_text(encoding="utf-8")
    # And the daemon's own checker agrees.
    check = switchboard(tmp_path, "check-config")
    assert check.returncode == 0, check.stderr


def test_init_written_file_holds_no_secret_values(tmp_path: Path) -> None:
    """Nothing in the written file is a secret: only names of environment variables."""
    result = switchboard(tmp_path, "init")
    assert result.returncode == 0, result.stderr
    data = tomllib.loads((tmp_path / "config.toml").read_text(encoding="utf-8"))
    assert "api_key" not in data["anthropic"]
    assert data["anthropic"]["api_key_env"] == "ANTHROPIC_API_KEY"
    assert "token" not in data["channels"]["telegram"]


def test_init_never_overwrites(tmp_path: Path) -> None:
    """`init` leaves an existing config.toml untouched and exits non-zero."""
    existing = tmp_path / "config.toml"
    existing.write_text("# my precious settings\n", encoding="utf-8")
    result = switchboard(tmp_path, "init")
    assert result.returncode != 0
    assert existing.read_text(encoding="utf-8") == "# my precious settings\n"
    assert "already exists" in _one_line(result.stderr)


def test_init_honours_config_path(tmp_path: Path) -> None:
    """`init --config PATH` writes that file instead of ./config.toml."""
    result = switchboard(tmp_path, "init", "--config", "other.toml")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "other.toml").exists()
    assert not (tmp_path / "config.toml").exists()


# -- admin reads on a prepared database -----------------------------------------------------


async def _prepare(db: Path) -> dict[str, int]:
    chat = ChatRef("telegram", "-100123", "7")
    async with Store.open(db) as store:

        def said(
            text: str, message_id: str, *, name: str = "Ada", reply_to: str | None = None
        ) -> InboundMessage:
            return InboundMessage(
                session_key=KEY, chat=chat, sender_id="42", sender_name=name, text=text,
                provider_message_id=message_id, reply_to_id=reply_to, sent_at=AT,
            )

        first = await store.append_inbound(said("what's on today?", "100"))
        assert first is not None
        reply = await store.append_reply(str(KEY), "Two meetings.", actions=["looked at the calendar"])
        await store.mark_delivered(reply.id, chat, ["101"])
        briefing = await store.append_reply(
            str(KEY), "Morning briefing: rain.", origin="scheduled", job_id="morning"
        )
        await store.mark_delivered(briefing.id, chat, ["102"])
        second = await store.append_inbound(said("umbrella then?", "103", name="Bob", reply_to="102"))
        assert second is not None
        answer = await store.append_reply(str(KEY), "Yes, take one.")

        first_context = Context(
            entries=[], scheduled=[], reply_to=None, triage=TriageReport("skipped"),
            history_limit=None, counts={"fetched": 0, "included": 0},
            explanation=Explanation("0011223344556677"),
        )
        await store.record_snapshot(
            str(KEY), first.id, reply.id, first_context.snapshot(), first_context.input_hash
        )
        second_context = Context(
            entries=[
                ContextEntry(first, "triaged"),
                ContextEntry(reply, "recent"),
                ContextEntry(briefing, "reply_to"),
            ],
            scheduled=[briefing],
            reply_to=briefing,
            triage=TriageReport(
                "selected", candidates=4, selected=2, latency_ms=12.345, input_tokens=321,
                output_tokens=7,
            ),
            history_limit=10,
            counts={"fetched": 2, "within_history_limit": 2, "within_recency": 2, "included": 3,
                    "scheduled_block": 1},
            explanation=Explanation("8899aabbccddeeff"),
        )
        await store.record_snapshot(
            str(KEY), second.id, answer.id, second_context.snapshot(), second_context.input_hash
        )
        await store.append_inbound(
            InboundMessage(session_key=OTHER, chat=ChatRef("telegram", "42"), sender_id="42",
                           sender_name="Ada", text="hi", provider_message_id="1", sent_at=AT)
        )
    return {"first": first.id, "reply": reply.id, "briefing": briefing.id, "second": second.id,
            "answer": answer.id}


@pytest.fixture
def prepared(tmp_path: Path, config_file: Path) -> dict[str, int]:
    return asyncio.run(_prepare(tmp_path / "data" / "bot.db"))


def test_sessions_lists_counts_and_last_activity(
    tmp_path: Path, config_file: Path, prepared: dict[str, int]
) -> None:
    """`sessions` lists every session, newest first, with message and turn counts and last activity."""
    result = switchboard(tmp_path, "sessions", "--config", str(config_file))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2
    assert re.fullmatch(rf"{re.escape(str(OTHER))}  messages=1  turns=1  last={TIME}", lines[0])
    assert re.fullmatch(rf"{re.escape(str(KEY))}  messages=5  turns=2  last={TIME}", lines[1])


def test_sessions_on_empty_database(tmp_path: Path, config_file: Path) -> None:
    """`sessions` on a database with nothing stored says so."""
    asyncio.run(_open_only(tmp_path / "data" / "bot.db"))
    result = switchboard(tmp_path, "sessions", "--config", str(config_file))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "no sessions yet"


async def _open_only(db: Path) -> None:
    async with Store.open(db):
        pass


def test_sessions_without_database(tmp_path: Path, config_file: Path) -> None:
    """`sessions` before anything was stored exits non-zero saying there is no database yet."""
    result = switchboard(tmp_path, "sessions", "--config", str(config_file))
    assert result.returncode != 0
    assert "no database" in _one_line(result.stderr)
    assert not (tmp_path / "data" / "bot.db").exists()


def test_history_prints_newest_messages(tmp_path: Path, config_file: Path, prepared: dict[str, int]) -> None:
    """`history KEY` prints each message with id, time, speaker and origin, oldest first."""
    result = switchboard(tmp_path, "history", str(KEY), "--config", str(config_file))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    patterns = [
        rf"#{prepared['first']} 2024-01-02 03:04:05 UTC Ada: what's on today\?",
        rf"#{prepared['reply']} {TIME} agent: Two meetings\.",
        rf"#{prepared['briefing']} {TIME} agent \[scheduled morning\]: Morning briefing: rain\.",
        rf"#{prepared['second']} 2024-01-02 03:04:05 UTC Bob: umbrella then\?",
        rf"#{prepared['answer']} {TIME} agent: Yes, take one\.",
    ]
    assert len(lines) == len(patterns), result.stdout
    for line, pattern in zip(lines, patterns, strict=True):
        assert re.fullmatch(pattern, line), (line, pattern)


def test_history_limit_shows_newest_n(tmp_path: Path, config_file: Path, prepared: dict[str, int]) -> None:
    """`history KEY --limit 2` prints only the two newest messages."""
    result = switchboard(tmp_path, "history", str(KEY), "--limit", "2", "--config", str(config_file))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == [f"#{prepared['second']}", f"#{prepared['answer']}"]


def test_history_accepts_dm_alias(tmp_path: Path, config_file: Path, prepared: dict[str, int]) -> None:
    """A key written with the `dm` alias finds the direct session."""
    result = switchboard(tmp_path, "history", "agent:main:telegram:dm:42", "--config", str(config_file))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("Ada: hi")


def test_context_shows_newest_turn_by_default(
    tmp_path: Path, config_file: Path, prepared: dict[str, int]
) -> None:
    """`context KEY` shows the newest turn: the request and reply texts, counts as a table, triage, and
    each message with its time, role, why it went in and its text; a snapshot stored before turns
    recorded their reply call still shows, saying that part is not recorded."""
    result = switchboard(tmp_path, "context", str(KEY), "--config", str(config_file))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.rstrip("\n").splitlines()
    assert re.fullmatch(
        rf"turn 2 of 2  at {TIME}  request #{prepared['second']}  reply #{prepared['answer']}  \(times UTC\)",
        lines[0],
    )
    assert lines[1:7] == [
        "request: Bob: umbrella then?",
        "model call: not recorded (a turn stored before this version recorded it)",
        "reply: Yes, take one.",
        "hash 8899aabbccddeeff  history limit 10",
        "triage selected: 2 of 4 older turns kept, 12.3 ms, 321+7 tokens",
        "counts",
    ]
    assert lines[7:12] == [
        "  fetched               2",
        "  within_history_limit  2",
        "  within_recency        2",
        "  included              3",
        "  scheduled_block       1",
    ]
    when = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    briefing = r"agent \[scheduled morning\]: Morning briefing: rain\."
    patterns = [
        r"in the context \(3, oldest first\)",
        rf"  #{prepared['first']}  2024-01-02 03:04:05  user       triaged    Ada: what's on today\?",
        rf"  #{prepared['reply']}  {when}  assistant  recent     agent: Two meetings\.",
        rf"  #{prepared['briefing']}  {when}  assistant  reply_to   {briefing}",
        r"scheduled previous-tasks block \(1, oldest first\)",
        rf"  #{prepared['briefing']}  {when}  assistant  scheduled  {briefing}",
    ]
    assert len(lines[12:]) == len(patterns), result.stdout
    for line, pattern in zip(lines[12:], patterns, strict=True):
        assert re.fullmatch(pattern, line), (line, pattern)


@pytest.mark.parametrize("turn", ["1", "-2"])
def test_context_turn_selects_an_older_turn(
    tmp_path: Path, config_file: Path, prepared: dict[str, int], turn: str
) -> None:
    """`context KEY --turn N` shows turn N (negative counts back from the newest)."""
    result = switchboard(tmp_path, "context", str(KEY), f"--turn={turn}", "--config", str(config_file))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert re.fullmatch(
        rf"turn 1 of 2  at {TIME}  request #{prepared['first']}  reply #{prepared['reply']}  \(times UTC\)",
        lines[0],
    )
    assert lines[3:] == [
        "reply: Two meetings.",
        "hash 0011223344556677  history limit none",
        "triage skipped: 0 of 0 older turns kept, 0.0 ms, 0+0 tokens",
        "counts",
        "  fetched   0",
        "  included  0",
    ]


def test_context_unknown_turn(tmp_path: Path, config_file: Path, prepared: dict[str, int]) -> None:
    """Asking for a turn that does not exist exits non-zero saying which turns there are."""
    result = switchboard(tmp_path, "context", str(KEY), "--turn", "5", "--config", str(config_file))
    assert result.returncode != 0
    assert "turns 1..2; no turn 5" in _one_line(result.stderr)


def test_context_of_session_without_turns(
    tmp_path: Path, config_file: Path, prepared: dict[str, int]
) -> None:
    """A session with messages but no recorded turns says so."""
    result = switchboard(tmp_path, "context", str(OTHER), "--config", str(config_file))
    assert result.returncode != 0
    assert "no recorded turns" in _one_line(result.stderr)


@pytest.mark.parametrize("command", ["history", "context"])
@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("agent:main:telegram", "has 3 parts"),
        ("agent:main:telegram:private:42", "unknown kind 'private'"),
        ("bot:main:telegram:direct:42", "must start with 'agent:'"),
        ("agent:main:telegram:direct:404", "no session 'agent:main:telegram:direct:404'"),
    ],
)
def test_bad_or_unknown_session_key(
    tmp_path: Path, config_file: Path, prepared: dict[str, int], command: str, key: str, message: str
) -> None:
    """An invalid or unknown session key exits non-zero with one clear line, no traceback."""
    result = switchboard(tmp_path, command, key, "--config", str(config_file))
    assert result.returncode != 0
    line = _one_line(result.stderr)
    assert line.startswith("switchboard: ")
    assert message in line
    assert result.stdout == ""


def test_admin_commands_need_a_config(tmp_path: Path) -> None:
    """Admin commands without a config file point the user to `switchboard init`."""
    result = switchboard(tmp_path, "sessions")
    assert result.returncode == 2
    assert "switchboard init" in _one_line(result.stderr)


# -- chat -----------------------------------------------------------------------------------


def test_chat_without_api_key_says_which_variable_to_set(tmp_path: Path, config_file: Path) -> None:
    """`echo hello | switchboard chat` with no API key answers which variable to set (not the generic
    apology), stores the turn and exits 0."""
    result = switchboard(tmp_path, "chat", "--config", str(config_file), stdin="hello\n")
    assert result.returncode == 0, result.stderr
    assert f"Testbot> {NO_KEY}" in result.stdout.splitlines()
    assert "Traceback" not in result.stderr

    history = switchboard(
        tmp_path, "history", "agent:main:console:direct:local", "--config", str(config_file)
    )
    assert history.returncode == 0, history.stderr
    lines = history.stdout.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].endswith("you: hello")
    assert lines[1].endswith(f"agent: {NO_KEY}")


def test_chat_answers_every_line_in_order(tmp_path: Path, config_file: Path) -> None:
    """Each line typed into `chat` gets its own reply, and the session records every turn."""
    result = switchboard(tmp_path, "chat", "--config", str(config_file), stdin="one\n\ntwo\nthree\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines().count(f"Testbot> {NO_KEY}") == 3
    sessions = switchboard(tmp_path, "sessions", "--config", str(config_file))
    assert "agent:main:console:direct:local  messages=6  turns=3" in sessions.stdout
