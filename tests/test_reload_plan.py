"""What a reload changes, decided from the old and new config alone (no daemon runs here)."""

from __future__ import annotations

from typing import Any

from bot.config import Config, parse_config
from bot.daemon.reload_plan import plan_reload


def config(**sections: Any) -> Config:
    return parse_config(sections, "config.toml")


def telegram(**section: Any) -> dict[str, Any]:
    return {"telegram": {"enabled": True, **section}}


def test_an_unchanged_file_changes_nothing() -> None:
    """Reloading the same config starts, stops and reconfigures nothing and needs no restart."""
    old = config(channels=telegram(allow_from=[1]))
    plan = plan_reload(old, old, {"telegram"})
    assert (plan.changed, plan.restart_required, plan.start, plan.stop, plan.reconfigure) == (
        [], [], [], [], [])


def test_enabling_disabling_and_editing_channels() -> None:
    """A newly enabled channel starts, a disabled one stops, an edited one is reconfigured in place."""
    old = config(channels={**telegram(allow_from=[1]), "discord": {"enabled": False}})
    new = config(channels={**telegram(allow_from=[1, 2]), "discord": {"enabled": True}})
    plan = plan_reload(old, new, {"telegram"})
    assert (plan.start, plan.stop, plan.reconfigure) == (["discord"], [], ["telegram"])
    assert plan.changed == ["channels"]

    off = plan_reload(new, old, {"telegram", "discord"})
    assert (off.start, off.stop, off.reconfigure) == ([], ["discord"], ["telegram"])


def test_a_new_token_variable_or_base_url_reconnects() -> None:
    """A changed token variable or base URL stops the running channel and starts a new one."""
    old = config(channels=telegram())
    for new in (config(channels=telegram(token_env="OTHER_TOKEN")),
                config(channels=telegram(base_url="http://127.0.0.1:9/bot"))):
        plan = plan_reload(old, new, {"telegram"})
        assert (plan.start, plan.stop, plan.reconfigure) == (["telegram"], ["telegram"], [])


def test_switching_to_or_from_a_webhook_or_moving_it_reconnects() -> None:
    """Polling <-> webhook, and a webhook's new address, URL or secret variable, restart the channel."""
    hook = {"mode": "webhook", "webhook_url": "https://bot.example.com/t", "webhook_secret_env": "HOOK"}
    polling, webhook = config(channels=telegram()), config(channels=telegram(**hook))
    moved = [config(channels=telegram(**(hook | change))) for change in (
        {"webhook_listen": "127.0.0.1:8080"}, {"webhook_url": "https://bot.example.com/u"},
        {"webhook_secret_env": "OTHER_HOOK"})]
    for old, new in [(polling, webhook), (webhook, polling)] + [(webhook, m) for m in moved]:
        plan = plan_reload(old, new, {"telegram"})
        assert (plan.start, plan.stop, plan.reconfigure) == (["telegram"], ["telegram"], [])


def test_an_enabled_channel_that_is_not_running_is_started() -> None:
    """An enabled channel missing from the running ones (it failed for good) starts again."""
    cfg = config(channels=telegram())
    assert plan_reload(cfg, cfg, set()).start == ["telegram"]


def test_what_only_a_restart_applies_keeps_its_running_value() -> None:
    """Database, model provider, logging, agent id, concurrency and console keep their running
    values and are named as needing a restart; the rest is taken from the new file."""
    old = config(database={"path": "/tmp/a.db"}, agent={"id": "main", "name": "Old"},
                 router={"max_concurrent_turns": 4}, conversation={"lookback_count": 10})
    new = config(database={"path": "/tmp/b.db"}, agent={"id": "other", "name": "New"},
                 router={"max_concurrent_turns": 9}, conversation={"lookback_count": 30},
                 anthropic={"model": "another-model"}, logging={"level": "DEBUG"},
                 channels={"console": {"user_name": "me"}})
    plan = plan_reload(old, new, set())
    assert plan.restart_required == ["database", "anthropic", "logging", "agent.id",
                                     "router.max_concurrent_turns", "channels.console"]
    kept = plan.config
    assert (kept.database, kept.anthropic, kept.logging) == (old.database, old.anthropic, old.logging)
    assert (kept.agent.id, kept.agent.name) == ("main", "New")
    assert kept.router.max_concurrent_turns == 4
    assert kept.channels.console == old.channels.console
    assert kept.conversation.lookback_count == 30
    assert plan.changed == ["agent", "conversation"]


def test_the_console_only_daemon_touches_no_platform_channel() -> None:
    """`switchboard chat` (platforms off) never starts or stops Telegram or Discord on reload."""
    plan = plan_reload(config(), config(channels=telegram()), set(), platforms=False)
    assert (plan.start, plan.stop, plan.reconfigure) == ([], [], [])


def with_work(**account: Any) -> dict[str, Any]:
    return telegram(accounts={"work": {"token_env": "WORK_TOKEN", **account}})


def test_accounts_are_planned_each_on_its_own() -> None:
    """An added account starts, a removed or disabled one stops, an edited one is reconfigured (one
    given another agent too: the inbox routes by the config in force); the first bot is untouched."""
    old = config(channels=telegram())
    added = plan_reload(old, config(channels=with_work()), {"telegram"})
    assert (added.start, added.stop, added.reconfigure) == (["telegram.work"], [], [])

    running = {"telegram", "telegram.work"}
    for new in (old, config(channels=with_work(enabled=False))):
        removed = plan_reload(config(channels=with_work()), new, running)
        assert (removed.start, removed.stop, removed.reconfigure) == ([], ["telegram.work"], [])

    edited = plan_reload(config(channels=with_work()), config(channels=with_work(allow_from=[7])), running)
    assert (edited.start, edited.stop, edited.reconfigure) == ([], [], ["telegram.work"])

    agents = [{"id": "work"}]
    moved = plan_reload(config(channels=with_work(), agents=agents),
                        config(channels=with_work(agent="work"), agents=agents), running)
    assert (moved.start, moved.stop, moved.reconfigure) == ([], [], ["telegram.work"])


def test_channels_that_are_not_bots_are_never_stopped() -> None:
    """The console (and any other non-platform channel running) is not planned by a reload."""
    cfg = config(channels=telegram())
    plan = plan_reload(cfg, cfg, {"console", "telegram", "fake"})
    assert (plan.start, plan.stop, plan.reconfigure) == ([], [], [])
