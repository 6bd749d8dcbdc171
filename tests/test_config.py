"""Config: defaults, the documented example, and errors that name the file, key and expectation."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from bot.config import Config, ConversationConfig, load_config, parse_config
from bot.core.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[1] / "config.toml.example"


def test_conversation_defaults_match_the_spec() -> None:
    """With no [conversation] section, every setting has the documented default."""
    conv = Config().conversation
    assert conv == ConversationConfig(
        enabled=True,
        lookback_count=25,
        skip_selection_threshold=3,
        use_selection=True,
        selection_model="fast",
        selection_timeout=30.0,
        always_include_recent=5,
        context_truncation=0,
        context_recency_hours=0,
        context_min_messages=10,
        previous_tasks_count=3,
        selection_fallback="ranked",
        ranked_fallback_turns=60,
        ranked_fallback_tokens=1200,
        history_limit=0,
        recall_count=30,
        recall_expansions=0,
        semantic_count=60,
        triage_max_candidates=60,
        triage_second_round=0,
    )
    assert conv.model_dump() == {
        "enabled": True,
        "lookback_count": 25,
        "skip_selection_threshold": 3,
        "use_selection": True,
        "selection_model": "fast",
        "selection_timeout": 30.0,
        "always_include_recent": 5,
        "context_truncation": 0,
        "context_recency_hours": 0,
        "context_min_messages": 10,
        "previous_tasks_count": 3,
        "selection_fallback": "ranked",
        "ranked_fallback_turns": 60,
        "ranked_fallback_tokens": 1200,
        "history_limit": 0,
        "context_window": 0,
        "reserve_tokens": 20000,
        "history_share": 0.5,
        "recall_count": 30,
        "recall_expansions": 0,
        "semantic_count": 60,
        "triage_max_candidates": 60,
        "triage_second_round": 0,
    }


def test_other_defaults() -> None:
    """The agent id, key variable and channel switches default as documented."""
    config = Config()
    assert config.agent.id == "main"
    assert config.anthropic.api_key_env == "ANTHROPIC_API_KEY"
    assert "haiku" in config.anthropic.fast_model
    assert config.channels.console.enabled is True
    assert config.channels.telegram.enabled is False
    assert config.channels.discord.enabled is False


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    """An empty config file is valid and equals the defaults."""
    path = tmp_path / "config.toml"
    path.write_text("", encoding="utf-8")
    config = load_config(path)
    assert config.model_dump() == Config().model_dump()
    assert config.source == str(path)


def test_example_config_loads_and_validates() -> None:
    """config.toml.example is itself a valid config."""
    config = load_config(EXAMPLE)
    assert config.agent.id == "main"


def _walk(data: dict[str, Any], model: BaseModel, path: str) -> list[tuple[str, Any, Any]]:
    pairs: list[tuple[str, Any, Any]] = []
    for name, value in data.items():
        dotted = f"{path}.{name}" if path else name
        assert name in type(model).model_fields, f"{dotted} is not a config key"
        default = getattr(model, name)
        if isinstance(value, dict) and isinstance(default, BaseModel):
            pairs.extend(_walk(value, default, dotted))
        else:
            pairs.append((dotted, value, default))
    return pairs


def test_every_key_in_the_example_is_the_default() -> None:
    """Every key set in config.toml.example equals the model default, so the example cannot drift."""
    data = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    pairs = _walk(data, Config(), "")
    assert len(pairs) >= 30
    drifted = [(key, value, default) for key, value, default in pairs if value != default]
    assert drifted == []
    # And with the same types (1 == 1.0 would hide a float written as an int in one place).
    mistyped = [key for key, value, default in pairs if type(value) is not type(default)]
    assert mistyped == []


def _sections(model: type[BaseModel], path: str = "") -> list[tuple[str, type[BaseModel]]]:
    found = [(path, model)] if path else []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found.extend(_sections(annotation, f"{path}.{name}" if path else name))
    return found


def test_example_documents_every_key() -> None:
    """Every key of every section appears in config.toml.example, set or commented out."""
    text = EXAMPLE.read_text(encoding="utf-8")
    headers = list(re.finditer(r"^\[([^\]]+)\]\s*$", text, flags=re.MULTILINE))
    blocks = {
        match.group(1): text[match.end(): headers[i + 1].start() if i + 1 < len(headers) else len(text)]
        for i, match in enumerate(headers)
    }
    missing = []
    for section, model in _sections(Config):
        fields = {
            name: field for name, field in model.model_fields.items()
            if not (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel))
        }
        if not fields:
            continue
        block = blocks.get(section)
        if block is None:
            missing.append(f"[{section}]")
            continue
        for name in fields:
            documented = re.search(rf"^\s*#?\s*{name}\s*=", block, flags=re.MULTILINE) or (
                f"[{section}.{name}." in block
            )
            if not documented:
                missing.append(f"{section}.{name}")
    assert missing == []


def _error(data: dict[str, Any], source: str = "/etc/switchboard/config.toml") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(data, source)
    return info.value


@pytest.mark.parametrize(
    ("data", "key", "expected"),
    [
        # unknown keys, at every depth
        ({"bogus": 1}, "bogus", "unknown key; expected one of: agent, database"),
        ({"conversation": {"lookbak_count": 3}}, "conversation.lookbak_count", "lookback_count"),
        ({"anthropic": {"api_key": "sk-x"}}, "anthropic.api_key", "api_key_env"),
        ({"channels": {"irc": {}}}, "channels.irc", "console, telegram, discord, slack"),
        (
            {"channels": {"telegram": {"dms": {"123": {"histroy_limit": 1}}}}},
            'channels.telegram.dms."123".histroy_limit',
            "expected one of: history_limit",
        ),
        ({"channels": {"console": {"dms": {}}}}, "channels.console.dms", "unknown key"),
        ({"source": "elsewhere"}, "source", "unknown key"),
        # wrong types
        ({"conversation": {"lookback_count": "25"}}, "conversation.lookback_count", "integer"),
        ({"conversation": {"lookback_count": 2.5}}, "conversation.lookback_count", "integer"),
        ({"conversation": {"lookback_count": True}}, "conversation.lookback_count", "integer"),
        ({"conversation": {"enabled": 1}}, "conversation.enabled", "boolean"),
        ({"conversation": {"selection_timeout": "30"}}, "conversation.selection_timeout", "number"),
        ({"agent": {"name": 5}}, "agent.name", "string"),
        ({"conversation": 5}, "conversation", "a table"),
        ({"channels": {"telegram": {"dms": {"123": 5}}}}, 'channels.telegram.dms."123"', "a table"),
        # impossible values
        ({"conversation": {"lookback_count": 0}}, "conversation.lookback_count", ">= 1"),
        ({"conversation": {"history_limit": -1}}, "conversation.history_limit", "greater than or equal to 0"),
        (
            {"conversation": {"context_recency_hours": -1}},
            "conversation.context_recency_hours",
            "greater than or equal to 0",
        ),
        ({"conversation": {"selection_timeout": 0}}, "conversation.selection_timeout", "greater than 0"),
        (
            {"channels": {"discord": {"dms": {"9": {"history_limit": -3}}}}},
            'channels.discord.dms."9".history_limit',
            "greater than or equal to 0",
        ),
        ({"channels": {"telegram": {"dm_history_limit": -1}}}, "channels.telegram.dm_history_limit", ">= 0"),
        ({"agent": {"timezone": "Mars/Olympus"}}, "agent.timezone", "IANA timezone"),
        ({"conversation": {"selection_fallback": "x"}}, "conversation.selection_fallback", "'recent' or"),
        ({"semantic": {"enabled": "yes"}}, "semantic.enabled", "'auto', 'on' or 'off'"),
        ({"logging": {"level": "LOUD"}}, "logging.level", "'DEBUG', 'INFO', 'WARNING' or 'ERROR'"),
        ({"logging": {"format": "xml"}}, "logging.format", "'auto', 'json' or 'console'"),
        ({"agent": {"id": "a:b"}}, "agent.id", "a string matching"),
        ({"anthropic": {"api_key_env": "MY KEY"}}, "anthropic.api_key_env", "a string matching"),
        # pairing, per-chat models and prices
        ({"channels": {"telegram": {"dm_policy": "pair"}}}, "channels.telegram.dm_policy", "'pairing'"),
        ({"channels": {"discord": {"guild_policy": "pairing"}}}, "channels.discord.guild_policy",
         "'allowlist', 'open' or 'disabled'"),
        ({"channels": {"telegram": {"group_policy": "pairing"}}}, "channels.telegram.group_policy",
         "'allowlist', 'open' or 'disabled'"),
        ({"channels": {"discord": {"pairing_code_ttl": 0}}}, "channels.discord.pairing_code_ttl", ">= 1"),
        ({"anthropic": {"models": {"Big One": "m"}}}, 'anthropic.models."Big One"', "a string matching"),
        ({"anthropic": {"models": {"haiku": ""}}}, "anthropic.models.haiku", "a string matching"),
        ({"prices": {"claude-x": {"input": 3.0}}}, 'prices."claude-x".output', "required key is missing"),
        ({"prices": {"m": {"input": -1.0, "output": 1.0}}}, "prices.m.input", ">= 0"),
        ({"prices": {"m": {"input": 1.0, "output": 1.0, "cache": 1.0}}}, "prices.m.cache",
         "expected one of: input, output, cache_write, cache_read"),
    ],
)
def test_invalid_values_name_file_key_and_expectation(data: dict[str, Any], key: str, expected: str) -> None:
    """An unknown key, wrong type or impossible value gives one line naming file, key path and expectation."""
    error = _error(data)
    message = str(error)
    assert error.path == "/etc/switchboard/config.toml"
    assert error.key == key
    assert message.startswith(f"/etc/switchboard/config.toml: {key}: ")
    expected = expected.replace(">= ", "a value greater than or equal to ")
    assert expected in message
    assert "\n" not in message
    # Never pydantic's raw multi-line report or its documentation links.
    assert "errors.pydantic.dev" not in message
    assert "validation error" not in message


def test_wrong_value_shows_what_was_given() -> None:
    """A wrong value is echoed back so the user can find it in the file."""
    message = str(_error({"conversation": {"lookback_count": -7}}))
    assert "(got -7)" in message


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    """A file that is not TOML gives a ConfigError naming the file and the parse problem."""
    path = tmp_path / "config.toml"
    path.write_text("[conversation\nlookback_count = 3\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.path == str(path)
    assert str(info.value).startswith(f"{path}: is not valid TOML")
    assert "line 1" in str(info.value)


def test_invalid_utf8_names_the_file(tmp_path: Path) -> None:
    """A file that is not UTF-8 text gives a ConfigError naming the file."""
    path = tmp_path / "config.toml"
    path.write_bytes(b'[agent]\nname = "\xff\xfe"\n')
    with pytest.raises(ConfigError, match=re.escape(str(path))):
        load_config(path)


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    """Loading a file that does not exist says which file and that it was not found."""
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=re.escape(f"{path}: file not found")):
        load_config(path)


def test_error_from_a_file_names_that_file(tmp_path: Path) -> None:
    """Validation errors from load_config name the path the file was read from."""
    path = tmp_path / "config.toml"
    path.write_text("[conversation]\nuse_selection = \"yes\"\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: conversation.use_selection: expected a valid boolean")


def test_config_is_frozen() -> None:
    """A loaded config cannot be changed by accident at run time."""
    config = Config()
    with pytest.raises(ValueError, match="frozen"):
        config.conversation.lookback_count = 3  # type: ignore[misc]


def test_database_path_defaults_to_xdg_state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without [database].path the file lives under $XDG_STATE_HOME/switchboard."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert Config().database_path() == tmp_path / "xdg" / "switchboard" / "switchboard.db"


def test_database_path_defaults_to_cwd_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without XDG_STATE_HOME the file lives in ./state under the working directory."""
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert Config().database_path() == tmp_path / "state" / "switchboard.db"


def test_relative_paths_resolve_against_the_config_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative database path or soul file is relative to the config file, not the working directory."""
    folder = tmp_path / "etc"
    folder.mkdir()
    path = folder / "config.toml"
    path.write_text('[database]\npath = "data/bot.db"\n[agent]\nsoul_file = "SOUL.md"\n', encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(path)
    assert config.database_path() == folder / "data" / "bot.db"
    assert config.resolve("SOUL.md") == folder / "SOUL.md"


def test_relative_path_with_relative_config_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config named by a relative path still resolves its paths against its own folder."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.toml").write_text('[database]\npath = "bot.db"\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    config = load_config("conf/config.toml")
    monkeypatch.chdir("/")
    assert config.database_path() == tmp_path / "conf" / "bot.db"


def test_absolute_and_home_paths_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An absolute database path is used as is, and `~` means the home folder."""
    config = parse_config({"database": {"path": str(tmp_path / "abs.db")}}, str(tmp_path / "x" / "c.toml"))
    assert config.database_path() == tmp_path / "abs.db"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config = parse_config({"database": {"path": "~/bot.db"}}, str(tmp_path / "x" / "c.toml"))
    assert config.database_path() == tmp_path / "home" / "bot.db"


def test_api_key_comes_from_the_named_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API key is read from the environment variable api_key_env names, never from the file."""
    config = parse_config({"anthropic": {"api_key_env": "MY_CLAUDE_KEY"}}, "config.toml")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-wrong")
    assert config.anthropic.api_key() is None
    monkeypatch.setenv("MY_CLAUDE_KEY", "sk-right")
    assert config.anthropic.api_key() == "sk-right"
    monkeypatch.setenv("MY_CLAUDE_KEY", "")
    assert config.anthropic.api_key() is None
    assert "MY_CLAUDE_KEY" in config.secret_env_names()


def test_default_api_key_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """By default the key is read from ANTHROPIC_API_KEY."""
    assert Config().anthropic.api_key() is None
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    assert Config().anthropic.api_key() == "sk-test"
