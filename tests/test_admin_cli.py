"""The operator's commands, each a real process of its own (forked from the session's zygote):
status and reload with no daemon, database backup and pruning, and a damaged database refused at
start with one clear line."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, overload

import pytest

from bot.core.media import Media
from bot.core.messages import ChatRef, InboundMessage
from bot.core.session_key import build
from bot.store import Store
from bot.testing.preloaded import Preloaded
from tests.test_cli import _one_line
from tests.test_operations import _fill, corrupt


def fill(db: Path, **shape: Any) -> list[str]:
    """Old answered DM sessions in a database file (see tests.test_operations._fill)."""
    return asyncio.run(_fill(db, **shape))


@overload
def messages(db: Path) -> int: ...
@overload
def messages(db: Path, session: str) -> list[str]: ...
def messages(db: Path, session: str | None = None) -> int | list[str]:
    """How many messages a file holds, or one session's texts in order."""
    with sqlite3.connect(db) as conn:
        if session is None:
            return int(conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0])
        rows = conn.execute("SELECT text FROM messages WHERE session_key = ? ORDER BY id", (session,))
        return [str(row[0]) for row in rows]


Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cli(preloaded: Preloaded) -> Cli:
    """`switchboard ARGS` in a process of its own, as `tests.test_cli.switchboard` runs it, but
    forked from the session's zygote (bot/testing/preloaded.py): no second of imports per command."""

    def run(
        tmp_path: Path, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        environ = dict(os.environ) | (env or {})  # cleaned of secrets, XDG_STATE_HOME in tmp_path
        code, out, err = preloaded.run_blocking(list(args), cwd=tmp_path, env=environ, timeout=120)
        return subprocess.CompletedProcess(["switchboard", *args], code, out, err)

    return run


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text('[database]\npath = "data/bot.db"\n[channels.telegram]\nenabled = true\n',
                    encoding="utf-8")
    return path


def test_status_says_not_running_and_exits_3_when_no_daemon_listens(
    tmp_path: Path, config_file: Path, cli: Cli
) -> None:
    """`switchboard status` with no daemon prints that it is not running and exits 3, as systemctl does."""
    result = cli(tmp_path, "status")
    assert result.returncode == 3, result.stderr
    assert result.stdout.startswith("switchboard: not running")
    assert str(tmp_path / "data" / "switchboard.sock") in result.stdout


def test_reload_without_a_daemon_is_one_clear_line(tmp_path: Path, config_file: Path, cli: Cli) -> None:
    """`switchboard reload` with no daemon fails in one line naming the socket, exit 3 as `status`."""
    result = cli(tmp_path, "reload")
    assert result.returncode == 3
    assert "not running" in _one_line(result.stderr)


def test_reload_checks_the_file_before_asking_the_daemon(tmp_path: Path, config_file: Path, cli: Cli) -> None:
    """A broken config.toml is reported by `reload` itself (exit 2), naming the key."""
    config_file.write_text("[conversation]\nhistory_limit = -1\n", encoding="utf-8")
    result = cli(tmp_path, "reload")
    assert result.returncode == 2
    assert "conversation.history_limit" in _one_line(result.stderr)


def test_db_backup_into_a_missing_folder_names_the_folder(
    tmp_path: Path, config_file: Path, cli: Cli
) -> None:
    """A backup into a folder that does not exist fails in one line naming that folder, not the
    partial file a backup is first written to."""
    fill(tmp_path / "data" / "bot.db", sessions=1, turns=1)
    result = cli(tmp_path, "db", "backup", "nowhere/copy.db")
    assert result.returncode == 1
    line = _one_line(result.stderr)
    assert "the folder nowhere does not exist" in line and "partial" not in line


def test_db_backup_writes_a_private_checked_copy_and_never_overwrites(
    tmp_path: Path, config_file: Path, cli: Cli
) -> None:
    """`db backup PATH` copies every message into a new 0600 file, and refuses an existing one
    unless --force is given."""
    fill(tmp_path / "data" / "bot.db", sessions=2, turns=3)
    result = cli(tmp_path, "db", "backup", "copy.db")
    assert result.returncode == 0, result.stderr
    assert "(12 messages, 0 kept files in " in result.stdout
    assert (tmp_path / "copy.db").stat().st_mode & 0o777 == 0o600
    assert messages(tmp_path / "copy.db") == 12

    again = cli(tmp_path, "db", "backup", "copy.db")
    assert again.returncode == 1 and "already exists" in _one_line(again.stderr)
    forced = cli(tmp_path, "db", "backup", "copy.db", "--force")
    assert forced.returncode == 0, forced.stderr
    assert not list(tmp_path.glob(".copy.db.partial"))


async def _with_picture(db: Path, picture: bytes) -> str:
    """A stored photo message whose picture the store keeps beside the database; its sha256."""
    async with Store.open(db) as store:
        sha = await store.kept_files().keep(picture)
        await store.append_inbound(InboundMessage(
            session_key=build("main", "telegram", "direct", 7), chat=ChatRef("telegram", "7"),
            sender_id="7", sender_name="Ada", text="my cat", media=(
                Media("photo", "kept", sha256=sha, mime="image/jpeg", size=len(picture)),)))
    return sha


def test_db_backup_in_another_folder_keeps_the_pictures_its_messages_refer_to(
    tmp_path: Path, config_file: Path, cli: Cli
) -> None:
    """A backup restored on another machine still has every picture a message refers to: they are
    copied into `files/` beside the backup, and the closing line counts them."""
    picture = b"\xff\xd8\xff\xe0" + b"cat" * 40
    fill(tmp_path / "data" / "bot.db", sessions=1, turns=2)
    sha = asyncio.run(_with_picture(tmp_path / "data" / "bot.db", picture))
    (tmp_path / "backups").mkdir()
    result = cli(tmp_path, "db", "backup", "backups/copy.db")
    assert result.returncode == 0, result.stderr
    assert "(5 messages, 1 kept files in " in result.stdout

    async def read_back() -> bytes | None:
        async with Store.open(tmp_path / "backups" / "copy.db") as copy:
            return await copy.kept_files().read(sha)

    assert asyncio.run(read_back()) == picture


def test_db_prune_dry_run_then_prune_keeps_the_lookback(tmp_path: Path, config_file: Path, cli: Cli) -> None:
    """`db prune --older-than DAYS --dry-run` lists what would go and deletes nothing; without it the
    old messages go but each session keeps its newest lookback_count messages."""
    config_file.write_text(config_file.read_text() + "[conversation]\nlookback_count = 4\n")
    db = tmp_path / "data" / "bot.db"
    first, second = fill(db, sessions=2, turns=10, age_days=30)
    dry = cli(tmp_path, "db", "prune", "--older-than", "7", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would remove 32 message(s) older than 7 day(s)")
    assert f"{first}  16" in dry.stdout
    assert messages(db) == 40

    done = cli(tmp_path, "db", "prune", "--older-than", "7")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("removed 32 message(s)")
    assert messages(db, second) == ["q8", "a8", "q9", "a9"]
    young = cli(tmp_path, "db", "prune", "--older-than", "60")
    assert young.stdout.startswith("removed 0 message(s)")


def test_db_prune_rejects_a_non_positive_age(tmp_path: Path, config_file: Path, cli: Cli) -> None:
    """`--older-than 0` is a usage error, not a request to delete everything."""
    result = cli(tmp_path, "db", "prune", "--older-than", "0")
    assert result.returncode == 2 and "older-than" in result.stderr


def test_a_damaged_database_is_refused_at_start_in_one_line(
    tmp_path: Path, config_file: Path, cli: Cli
) -> None:
    """`run` on a damaged file exits 1 with one line naming the file and saying to restore a backup."""
    db = tmp_path / "data" / "bot.db"
    fill(db, sessions=1, turns=20)
    corrupt(db)
    result = cli(tmp_path, "run", env={"TELEGRAM_BOT_TOKEN": "123:abc", "ANTHROPIC_API_KEY": "k"})
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"switchboard: database {db} is damaged") and "backup" in last
    backup = cli(tmp_path, "db", "backup", "copy.db")
    assert backup.returncode == 1 and "damaged" in _one_line(backup.stderr)
    assert not (tmp_path / "copy.db").exists()

