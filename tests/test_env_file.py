"""`[secrets] env_file`: secrets in a 0600 file of NAME=value lines beside the config, read into the
environment when the config loads; the environment already set always wins."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.config import load_config
from bot.core.errors import ConfigError

NAMES = ("SB_TEST_TOKEN", "SB_TEST_KEY", "SB_TEST_QUOTED")


@pytest.fixture(autouse=True)
def _unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's variables start unset and are unset again afterwards, whatever the loading set."""
    for name in NAMES:
        monkeypatch.setenv(name, "placeholder")
        monkeypatch.delenv(name)


def _files(tmp_path: Path, secrets: str, *, mode: int = 0o600, name: str = "switchboard.env") -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "config.toml"
    config.write_text(f'[secrets]\nenv_file = "{name}"\n', encoding="utf-8")
    env_file = tmp_path / name
    env_file.parent.mkdir(parents=True, exist_ok=True)
    env_file.write_text(secrets, encoding="utf-8")
    env_file.chmod(mode)
    return config


def test_values_are_read_into_the_environment(tmp_path: Path) -> None:
    """NAME=value lines land in the environment; comments, blank lines and quotes are allowed."""
    config = _files(tmp_path, "# bot secrets\n\nSB_TEST_TOKEN=123:abc\n  SB_TEST_KEY = sk-1=2  \n"
                              "export SB_TEST_QUOTED=\"quoted value\"\n")
    loaded = load_config(config)
    assert loaded.secrets.env_file == "switchboard.env"
    assert os.environ["SB_TEST_TOKEN"] == "123:abc"
    assert os.environ["SB_TEST_KEY"] == "sk-1=2"
    assert os.environ["SB_TEST_QUOTED"] == "quoted value"


def test_the_environment_already_set_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A variable set before the config loads keeps its value; the file only fills in the rest."""
    monkeypatch.setenv("SB_TEST_TOKEN", "from-the-shell")
    load_config(_files(tmp_path, "SB_TEST_TOKEN=from-the-file\nSB_TEST_KEY=k\n"))
    assert os.environ["SB_TEST_TOKEN"] == "from-the-shell"
    assert os.environ["SB_TEST_KEY"] == "k"


def test_a_reload_takes_the_files_new_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading again (a reload) takes a value changed in the file, but never one the shell set."""
    monkeypatch.setenv("SB_TEST_KEY", "from-the-shell")
    config = _files(tmp_path, "SB_TEST_TOKEN=old\nSB_TEST_KEY=file\n")
    load_config(config)
    (tmp_path / "switchboard.env").write_text("SB_TEST_TOKEN=new\nSB_TEST_KEY=file2\n", encoding="utf-8")
    load_config(config)
    assert os.environ["SB_TEST_TOKEN"] == "new"
    assert os.environ["SB_TEST_KEY"] == "from-the-shell"


def test_a_file_others_may_read_is_refused(tmp_path: Path) -> None:
    """A file readable by group or others is refused, naming the file, its mode and the fix."""
    config = _files(tmp_path, "SB_TEST_TOKEN=123:abc\n", mode=0o644)
    with pytest.raises(ConfigError) as info:
        load_config(config)
    message = str(info.value)
    assert str(tmp_path / "switchboard.env") in message and "secrets.env_file" in message
    assert "0644" in message and "chmod 600" in message
    assert "SB_TEST_TOKEN" not in os.environ


def test_a_bad_line_is_named_without_its_content(tmp_path: Path) -> None:
    """A line that is not NAME=value is refused by its number; the (maybe secret) text is not shown."""
    config = _files(tmp_path, "SB_TEST_TOKEN=ok\nsk-ant-pasted-alone-secret\n")
    with pytest.raises(ConfigError) as info:
        load_config(config)
    message = str(info.value)
    assert "line 2" in message and "NAME=value" in message
    assert "sk-ant-pasted-alone-secret" not in message


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    """An env_file that does not exist is an error naming the path it was looked for at."""
    config = _files(tmp_path, "")
    (tmp_path / "switchboard.env").unlink()
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert str(tmp_path / "switchboard.env") in str(info.value)
    assert "not found" in str(info.value)


def test_the_path_is_relative_to_the_config_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative env_file is found beside the config, whatever the working directory."""
    config = _files(tmp_path / "etc", "SB_TEST_TOKEN=here\n", name="secrets/bot.env")
    monkeypatch.chdir(tmp_path)
    load_config(Path("etc") / config.name)
    assert os.environ["SB_TEST_TOKEN"] == "here"


def test_without_the_key_nothing_is_read(tmp_path: Path) -> None:
    """No env_file: a switchboard.env lying beside the config is not read (and may be any mode)."""
    (tmp_path / "switchboard.env").write_text("SB_TEST_TOKEN=x\n", encoding="utf-8")
    (tmp_path / "switchboard.env").chmod(0o644)
    config = tmp_path / "config.toml"
    config.write_text("", encoding="utf-8")
    assert load_config(config).secrets.env_file is None
    assert "SB_TEST_TOKEN" not in os.environ
