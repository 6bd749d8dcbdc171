"""`[scheduler]` and `[[schedules]]` config: defaults, documentation, and errors naming the entry."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from bot.config import Config, ScheduleConfig, SchedulerConfig, parse_config, parse_duration
from bot.core.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[1] / "config.toml.example"
SOURCE = "/etc/switchboard/config.toml"


def entry(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": "daily", "cron": "0 8 * * *", "prompt": "Brief me.",
        "deliver_to": "agent:main:telegram:direct:42",
    }
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not None}


def error(*entries: dict[str, Any], **sections: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config({"schedules": list(entries), **sections}, SOURCE)
    return info.value


def test_a_valid_entry_and_the_defaults() -> None:
    """A minimal entry validates; the scheduler settings have their documented defaults."""
    config = parse_config({"schedules": [entry(), entry(id="poll", cron=None, every="1h30m")]}, SOURCE)
    assert [job.id for job in config.schedules] == ["daily", "poll"]
    assert config.schedules[0].enabled is True and config.schedules[0].timezone is None
    assert config.schedules[1].interval_seconds() == 5400
    assert Config().schedules == []
    assert SchedulerConfig().model_dump() == {
        "misfire_grace": 600, "stale_after": 1800, "retries": 2, "retry_delay": 30.0,
        "timeout": 120.0, "max_failures": 5, "history_runs": 1, "quiet_marker": "NO_REPLY",
        "request_poll": 2.0,
    }


@pytest.mark.parametrize(
    ("entries", "key", "expected"),
    [
        ([entry(), entry(id="x", cron="61 * * * *")], 'schedules[1] (id "x").cron', "five-field cron"),
        ([entry(cron="0 8 * *")], 'schedules[0] (id "daily").cron', "expected 5 fields"),
        ([entry(cron="0 8 1 * 1")], 'schedules[0] (id "daily").cron', "not both"),
        ([entry(cron="0 8 * * 8")], 'schedules[0] (id "daily").cron', "bad weekday"),
        ([entry(timezone="Mars/Olympus")], 'schedules[0] (id "daily").timezone', "IANA timezone"),
        ([entry(deliver_to="agent:main:irc:direct:1")], 'schedules[0] (id "daily").deliver_to',
         "unknown channel 'irc'"),
        ([entry(deliver_to="nowhere")], 'schedules[0] (id "daily").deliver_to', "session key"),
        ([entry(deliver_to="agent:other:telegram:direct:1")], 'schedules[0] (id "daily").deliver_to',
         "there is no agent 'other'"),
        ([entry(deliver_to="agent:main:discord:direct:9")], 'schedules[0] (id "daily").chat',
         "DM channel id"),
        ([entry(), entry()], 'schedules[1] (id "daily").id', "unique id"),
        ([entry(every="30m")], 'schedules[0] (id "daily")', "exactly one of cron or every"),
        ([entry(cron=None)], 'schedules[0] (id "daily")', "exactly one of cron or every"),
        ([entry(cron=None, every="30s")], 'schedules[0] (id "daily").every', "at least 1m"),
        ([entry(cron=None, every="soon")], 'schedules[0] (id "daily").every', "a duration"),
        ([entry(prompt=None)], 'schedules[0] (id "daily").prompt', "required key is missing"),
        ([entry(colour="red")], 'schedules[0] (id "daily").colour', "expected one of: id, cron, every"),
        ([entry(id="a b")], 'schedules[0] (id "a b").id', "a string matching"),
    ],
)
def test_invalid_entries_name_the_entry(entries: list[dict[str, Any]], key: str, expected: str) -> None:
    """A bad cron, timezone, target, duplicate id or unknown key is an error naming the entry and key."""
    problem = error(*entries)
    assert problem.path == SOURCE and problem.key == key
    assert expected in str(problem) and "\n" not in str(problem)


def test_invalid_scheduler_settings_name_the_key() -> None:
    """A bad `[scheduler]` value names its key."""
    assert error(scheduler={"max_failures": 0}).key == "scheduler.max_failures"
    assert error(scheduler={"quiet_marker": ""}).key == "scheduler.quiet_marker"


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d12h", 129600)])
def test_durations(text: str, seconds: int) -> None:
    """Interval strings combine days, hours, minutes and seconds."""
    assert parse_duration(text) == seconds


def test_the_example_documents_every_schedule_key() -> None:
    """Every [[schedules]] key appears, commented out, in config.toml.example's example entry."""
    text = EXAMPLE.read_text(encoding="utf-8")
    block = text[text.index("# [[schedules]]"):]
    missing = [name for name in ScheduleConfig.model_fields if not re.search(rf"^# {name} = ", block, re.M)]
    assert missing == []
    # The example entry itself is valid once uncommented.
    uncommented = "\n".join(
        line.removeprefix("# ") for line in block.splitlines()
        if line.startswith(("# [[schedules]]", "# id", "# cron", "# timezone", "# prompt", "# deliver_to",
                            "# model", "# enabled", "# history_runs"))
    )
    import tomllib

    config = parse_config(tomllib.loads(uncommented), SOURCE)
    assert config.schedules[0].id == "morning"
