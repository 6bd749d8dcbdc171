"""Malformed configs that used to start the daemon (or end in a traceback) are refused at load, in
one line naming the file, the key and what was expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import load_config
from bot.core.errors import ConfigError
from tests.test_cli import _one_line, switchboard

JOB = '[[schedules]]\nid = "daily"\nprompt = "Brief me."\n'


@pytest.mark.parametrize(
    ("content", "key", "expected"),
    [
        ('[channels.telegram]\nbase_url = "not a url"\n', "channels.telegram.base_url", "https:// URL"),
        ('[channels.telegram]\nbase_url = "ftp://example.com/bot"\n', "channels.telegram.base_url",
         "https:// URL"),
        ('[anthropic]\nbase_url = "::::"\n', "anthropic.base_url", "https:// URL"),
        ('[anthropic]\nbase_url = "http://localhost:99999"\n', "anthropic.base_url", "https:// URL"),
        ("[anthropic]\ntimeout = inf\n", "anthropic.timeout", "a finite number (got inf)"),
        ("[anthropic]\ntimeout = nan\n", "anthropic.timeout", "a finite number (got nan)"),
        ("[router]\nshutdown_grace = -inf\n", "router.shutdown_grace", "a finite number"),
        ("[conversation]\nhistory_share = nan\n", "conversation.history_share", "a finite number"),
        ("[anthropic]\nmax_tokens = 99999999999999999999\n", "anthropic.max_tokens", "64-bit integer"),
        ("[anthropic]\nmax_tokens = 1000000\n", "anthropic.max_tokens", "less than or equal to 128000"),
        ("[conversation]\nlookback_count = 99999999999999999999\n", "conversation.lookback_count",
         "64-bit integer"),
        (JOB + 'cron = "0 8 * * *"\ndeliver_to = "agent:main:telegram:direct:abc"\n',
         'schedules[0] (id "daily").deliver_to', "numeric id, not 'abc'"),
        (JOB + 'cron = "0 8 * * *"\ndeliver_to = "telegram:@someone"\n',
         'schedules[0] (id "daily").deliver_to', "numeric id"),
        (JOB + 'cron = "0 8 * * *"\ndeliver_to = "agent:main:discord:channel:1:thread:general"\n',
         'schedules[0] (id "daily").deliver_to', "numeric id, not 'general'"),
        (JOB + 'cron = "0 7 31 2 *"\ndeliver_to = "console:local"\n', 'schedules[0] (id "daily").cron',
         "never fires"),
        (JOB + 'cron = "0 0 31 4,6,9,11 *"\ndeliver_to = "console:local"\n',
         'schedules[0] (id "daily").cron', "never fires"),
        ('[channels.telegram.dms."bob"]\nhistory_limit = 3\n', "channels.telegram.dms.bob", "numeric id"),
        ('[channels.telegram.group_settings."xyz"]\nrequire_mention = false\n',
         "channels.telegram.group_settings.xyz", "numeric id"),
        ('[channels.discord.dms."alice"]\nhistory_limit = 3\n', "channels.discord.dms.alice", "numeric id"),
        ('[channels.discord.guilds."my guild"]\nusers = [1]\n', 'channels.discord.guilds."my guild"',
         "numeric id"),
        ('[channels.discord.channel_settings."general"]\nhistory_limit = 2\n',
         "channels.discord.channel_settings.general", "numeric id"),
        ('[channels.telegram]\nstreaming = "on"\n', "channels.telegram.streaming", "'auto' or 'off'"),
        ("[channels.discord]\nstreaming = true\n", "channels.discord.streaming", "'auto' or 'off'"),
    ],
)
def test_malformed_values_are_refused_naming_file_and_key(
    tmp_path: Path, content: str, key: str, expected: str
) -> None:
    """Each malformed value is a ConfigError naming the file and the key, with what was expected."""
    path = tmp_path / "config.toml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key == key
    assert expected in info.value.expected
    assert str(info.value).startswith(f"{path}: {key}: ")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "content",
    [
        '[channels.telegram]\nbase_url = "http://127.0.0.1:8081/bot"\n'
        '[channels.telegram.dms."42"]\nhistory_limit = 3\n'
        '[channels.telegram.group_settings."-1001234567890"]\nrequire_mention = false\n',
        '[anthropic]\nbase_url = "https://api.example.com"\nmax_tokens = 128000\ntimeout = 1e3\n',
        JOB + 'cron = "0 7 29 2 *"\ndeliver_to = "console:local"\n',
        JOB + 'cron = "0 8 * * *"\ndeliver_to = "agent:main:telegram:group:-1001:topic:7"\n',
    ],
)
def test_good_neighbours_of_the_refused_values_still_load(tmp_path: Path, content: str) -> None:
    """Numeric ids, local http URLs, large finite values and a leap-day cron are accepted."""
    path = tmp_path / "config.toml"
    path.write_text(content, encoding="utf-8")
    load_config(path)


@pytest.mark.parametrize("command", ["check-config", "run"])
def test_an_unusable_anthropic_url_stops_run_and_check_config_alike(tmp_path: Path, command: str) -> None:
    """`anthropic.base_url = "::::"` exits 2 in one line from check-config and from run, no traceback."""
    (tmp_path / "config.toml").write_text('[anthropic]\nbase_url = "::::"\n', encoding="utf-8")
    result = switchboard(tmp_path, command)
    assert result.returncode == 2, result.stderr
    line = _one_line(result.stderr)
    assert line.startswith("switchboard: config.toml: anthropic.base_url: expected an http")
