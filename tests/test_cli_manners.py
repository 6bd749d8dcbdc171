"""The `switchboard` command's manners: check-config refuses what `run` refuses, a refused file
costs no daemon imports, and small usage fixes (init, --turn, --version,
help with examples, `run` on the defaults on a terminal)."""

from __future__ import annotations

import asyncio
import os
import pty
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.daemon.control import NotRunningError, request, serving, socket_path
from tests.test_cli import ROOT, _one_line, switchboard

TELEGRAM = "[channels.telegram]\nenabled = true\n"
JOB = '[[schedules]]\nid = "daily"\ncron = "0 8 * * *"\nprompt = "Brief me."\n'


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text('[database]\npath = "data/bot.db"\n' + text, encoding="utf-8")
    return path


# -- check-config checks what run checks ------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "key", "expected"),
    [
        (TELEGRAM, "channels.telegram.token_env", "TELEGRAM_BOT_TOKEN it names is not set"),
        ("[channels.discord]\nenabled = true\ntoken_env = \"MY_DISCORD\"\n", "channels.discord.token_env",
         "MY_DISCORD it names is not set"),
        (TELEGRAM + JOB + 'deliver_to = "discord:1"\n', 'schedules[0] (id "daily").deliver_to',
         "[channels.discord] is not"),
        ("[channels.console]\nenabled = false\n", "channels", "no channel is enabled"),
    ],
)
def test_check_config_refuses_what_run_refuses(tmp_path: Path, content: str, key: str, expected: str) -> None:
    """A file `run` would refuse (unset token, a job for a disabled channel, no channel) fails
    check-config too, exit 2 with the very line `run` prints."""
    _write(tmp_path, content)
    env = {"TELEGRAM_BOT_TOKEN": "123:abc"} if "deliver_to" in content else {}
    check = switchboard(tmp_path, "check-config", env=env)
    run = switchboard(tmp_path, "run", env=env)
    assert (check.returncode, run.returncode) == (2, 2), (check.stderr, run.stderr)
    line = _one_line(check.stderr)
    assert line == _one_line(run.stderr)
    assert line.startswith(f"switchboard: {tmp_path / 'config.toml'}: {key}: ")
    assert expected in line


def test_a_disabled_job_for_a_disabled_channel_is_fine(tmp_path: Path) -> None:
    """A job that is switched off may point at a channel that is off too."""
    _write(tmp_path, JOB + 'deliver_to = "discord:1"\nenabled = false\n')
    result = switchboard(tmp_path, "check-config")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("content", ["", "# only comments\n# [agent]\n"])
def test_check_config_on_an_empty_file_says_it_runs_on_defaults(tmp_path: Path, content: str) -> None:
    """An empty or comment-only file passes, saying it sets nothing and that only the console is on."""
    (tmp_path / "config.toml").write_text(content, encoding="utf-8")
    result = switchboard(tmp_path, "check-config")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("config.toml: OK (") and lines[0].endswith("channels: console)")
    assert "note: the file sets nothing: every value is the built-in default" in lines
    assert any(line.startswith("note: no channel but the console is enabled") for line in lines)


def test_check_config_with_a_platform_and_its_token_is_quiet_about_channels(tmp_path: Path) -> None:
    """A file with an enabled channel and its token set gets no channel note."""
    _write(tmp_path, TELEGRAM)
    result = switchboard(tmp_path, "check-config", env={"TELEGRAM_BOT_TOKEN": "123:abc"})
    assert result.returncode == 0, result.stderr
    assert "channels: console, telegram" in result.stdout
    assert "note: no channel" not in result.stdout and "sets nothing" not in result.stdout


# -- imports --------------------------------------------------------------------------------

_PROBE = """
import sys
from bot.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
heavy = sorted({name.split(".")[0] for name in sys.modules} & {"anthropic", "telegram", "discord"})
print("HEAVY", ",".join(heavy), "CODE", code)
"""


def _imports(tmp_path: Path, *args: str) -> tuple[str, str]:
    environ = dict(os.environ)
    environ["PYTHONPATH"] = str(ROOT)
    result = subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=tmp_path, env=environ,
                            capture_output=True, text=True, timeout=60, check=False)
    words = result.stdout.strip().splitlines()[-1].split(" ")
    assert words[0] == "HEAVY" and words[2] == "CODE", result.stdout + result.stderr
    return words[1], words[3]


@pytest.mark.parametrize(
    "content", ["[router]\nmax_concurrent_turns = 0\n", TELEGRAM, "[channels.console]\nenabled = false\n"]
)
def test_run_refuses_a_bad_file_before_importing_the_daemon(tmp_path: Path, content: str) -> None:
    """`run` with a file it refuses exits 2 without importing the Anthropic SDK, python-telegram-bot
    or discord.py."""
    _write(tmp_path, content)
    assert _imports(tmp_path, "run") == ("", "2")


def test_context_does_not_import_the_model_sdk(tmp_path: Path) -> None:
    """`context` reads snapshots only: it imports no Anthropic SDK (it exits 1: no database here)."""
    _write(tmp_path, "")
    assert _imports(tmp_path, "context", "agent:main:console:direct:local") == ("", "1")


# -- jobs run --------------------------------------------------------------------------------


def test_jobs_run_without_a_daemon_fails_at_once_and_queues_nothing(tmp_path: Path) -> None:
    """`jobs run ID` with no daemon exits 3 in one line at once, and leaves no request to run later."""
    _write(tmp_path, JOB + 'deliver_to = "console:local"\n')
    result = switchboard(tmp_path, "jobs", "run", "daily")
    assert result.returncode == 3, result.stderr
    assert "not running" in _one_line(result.stderr)
    assert not (tmp_path / "data" / "bot.db").exists()


@asynccontextmanager
async def _daemon_answering(socket: Path, schedules: list[dict[str, Any]]) -> AsyncIterator[None]:
    """A stand-in daemon on the control socket that answers `status` and never takes a request up."""

    async def status() -> dict[str, Any]:
        return {"schedules": schedules, "config": "config.toml"}

    socket.parent.mkdir(parents=True, exist_ok=True)
    async with serving(socket, {"status": status}):
        yield


async def _cli(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    environ = dict(os.environ)
    environ["PYTHONPATH"] = str(ROOT)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, cwd=tmp_path, env=environ,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_jobs_run_twice_before_the_daemon_takes_it_up_is_one_run(tmp_path: Path) -> None:
    """Two `jobs run ID` before the daemon picks the first up share one request: one run, not two."""
    _write(tmp_path, JOB + 'deliver_to = "console:local"\n')
    socket = tmp_path / "data" / "switchboard.sock"
    async with _daemon_answering(socket, [{"id": "daily", "runnable": True}]):
        first = await _cli(tmp_path, "jobs", "run", "daily", "--wait", "0")
        second = await _cli(tmp_path, "jobs", "run", "daily", "--wait", "0")
    assert first[0] == 0 and second[0] == 0, (first, second)
    assert first[1].startswith("requested run #1 of daily")
    assert second[1].startswith("run #1 of daily was already requested")


async def test_jobs_run_for_a_job_whose_channel_is_not_running_fails_at_once(tmp_path: Path) -> None:
    """A job the daemon cannot run here (its channel is not running) is refused, not waited for."""
    _write(tmp_path, JOB + 'deliver_to = "console:local"\n')
    socket = tmp_path / "data" / "switchboard.sock"
    async with _daemon_answering(socket, [{"id": "daily", "runnable": False}]):
        code, _, err = await _cli(tmp_path, "jobs", "run", "daily")
    assert code == 1 and "its channel is not running" in _one_line(err)
    assert not (tmp_path / "data" / "bot.db").exists()


# -- small usage fixes -------------------------------------------------------------------------


def test_init_into_a_missing_directory_creates_it(tmp_path: Path) -> None:
    """`init --config new/dir/config.toml` creates the directory and writes the file, no traceback."""
    result = switchboard(tmp_path, "init", "--config", "new/dir/config.toml")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "new" / "dir" / "config.toml").is_file()


def test_init_where_nothing_can_be_written_is_one_line(tmp_path: Path) -> None:
    """`init` under a path that is a file fails in one line naming the target."""
    (tmp_path / "blocker").write_text("", encoding="utf-8")
    result = switchboard(tmp_path, "init", "--config", "blocker/config.toml")
    assert result.returncode == 1
    assert _one_line(result.stderr).startswith("switchboard: cannot write blocker/config.toml")


@pytest.mark.parametrize("command", ["context", "replay"])
def test_turn_zero_is_refused_in_one_line(tmp_path: Path, command: str) -> None:
    """`--turn 0` is a usage error in one line (turns count from 1), exit 2."""
    _write(tmp_path, "")
    result = switchboard(tmp_path, command, "agent:main:console:direct:local", "--turn", "0")
    assert result.returncode == 2
    line = _one_line(result.stderr)
    assert "--turn" in line and "no turn 0" in line


def test_version_prints_the_installed_version(tmp_path: Path) -> None:
    """`switchboard --version` prints the installed package's version."""
    from importlib.metadata import version

    result = switchboard(tmp_path, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"switchboard {version('switchboard')}"


@pytest.mark.parametrize(
    "command", [["run"], ["history"], ["context"], ["jobs", "run"], ["db", "prune"], ["check-config"]]
)
def test_subcommand_help_has_examples(tmp_path: Path, command: list[str]) -> None:
    """Each command's --help ends with examples; a SESSION_KEY argument says what it is."""
    result = switchboard(tmp_path, *command, "--help")
    assert result.returncode == 0, result.stderr
    examples = result.stdout.split("examples:\n", 1)[1]
    assert examples.lstrip().startswith(f"switchboard {' '.join(command)}")
    if command in (["history"], ["context"]):
        words = " ".join(result.stdout.split())
        assert "SESSION_KEY a session, as `switchboard sessions` lists them" in words


# -- run without a config file ---------------------------------------------------------------


def test_run_on_a_terminal_without_config_starts_on_the_defaults(tmp_path: Path) -> None:
    """`run` on a terminal with no config.toml starts the console on the defaults (database under
    ./state), says so in one line naming `make init`, and stops cleanly on SIGTERM."""
    environ = {k: v for k, v in os.environ.items() if k != "XDG_STATE_HOME"}
    environ["PYTHONPATH"] = str(ROOT)
    main, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "bot", "run"], cwd=tmp_path, env=environ,
                               stdin=terminal, stdout=terminal, stderr=subprocess.PIPE)
    os.close(terminal)
    try:
        database = tmp_path / "state" / "switchboard.db"
        deadline = time.monotonic() + 60
        while not database.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert database.exists()
        while True:  # started: it answers on its control socket
            try:
                request(socket_path(database), "status", timeout=10.0)
                break
            except NotRunningError:
                assert process.poll() is None and time.monotonic() < deadline, "run never started"
                time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(main)
    stderr = err.decode()
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    notice = stderr.splitlines()[0]
    assert notice.startswith("switchboard: no config.toml here, so running on the built-in defaults")
    assert f"database {database}" in notice and "`make init`" in notice


# -- papercuts of the first ten minutes (issue 34) ----------------------------------------------


async def _database(path: Path) -> None:
    from bot.store import Store

    async with Store.open(path):
        pass


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    """`switchboard pairing list | head -1`: the reader has closed the pipe when the output is
    written; no BrokenPipeError traceback, exit 0."""
    _write(tmp_path, "")
    asyncio.run(_database(tmp_path / "data" / "bot.db"))
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line
    try:
        result = subprocess.run([sys.executable, "-m", "bot", "pairing", "list"], cwd=tmp_path,
                                env=environ, stdout=write_end, stderr=subprocess.PIPE, text=True,
                                timeout=120, check=False)
    finally:
        os.close(write_end)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr


@pytest.mark.parametrize("args", [("notes", "42"), ("pairing", "approve"),
                                  ("pairing", "deny", "K7QPM3XD", "--user", "telegram:1")])
def test_usage_errors_the_parser_cannot_see_exit_2(tmp_path: Path, args: tuple[str, ...]) -> None:
    """`notes 42` (not PROVIDER:ID) and `pairing approve` with neither or both of a code and --user
    are usage errors: one line naming the command and its help, exit 2, before any config is read."""
    result = switchboard(tmp_path, *args)  # no config.toml here: the usage is wrong first
    assert result.returncode == 2, result.stderr
    line = _one_line(result.stderr)
    assert line.startswith(f"switchboard {args[0]}: ") and f"`switchboard {args[0]} --help`" in line


def test_the_config_can_be_named_by_an_environment_variable(tmp_path: Path) -> None:
    """From another folder, `$SWITCHBOARD_CONFIG` names the config (`status` finds the daemon's
    state); without it the error says how to name one."""
    _write(tmp_path, "")
    asyncio.run(_database(tmp_path / "data" / "bot.db"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    lost = switchboard(elsewhere, "sessions")
    assert lost.returncode == 2 and "SWITCHBOARD_CONFIG" in _one_line(lost.stderr)
    found = switchboard(elsewhere, "sessions", env={"SWITCHBOARD_CONFIG": str(tmp_path / "config.toml")})
    assert found.returncode == 0, found.stderr


def test_make_init_twice_keeps_the_config_without_a_make_error(tmp_path: Path) -> None:
    """`make init` writes config.toml once; a second time it says the file stays as it is and
    exits 0, not a red `make: *** … Error 1`. (`-o`: the installed venv is taken as it is.)"""
    config = tmp_path / "config.toml"
    make = ["make", "-s", "-C", str(ROOT), "-o", ".venv/.installed", "init", f"CONFIG={config}"]
    first = subprocess.run(make, capture_output=True, text=True, timeout=120, check=False,
                           stdin=subprocess.DEVNULL)
    assert first.returncode == 0, first.stderr
    written = config.read_text(encoding="utf-8")
    again = subprocess.run(make, capture_output=True, text=True, timeout=120, check=False,
                           stdin=subprocess.DEVNULL)
    assert again.returncode == 0, again.stderr
    assert "already exists; leaving it as it is" in again.stdout and "Error" not in again.stderr
    assert config.read_text(encoding="utf-8") == written
