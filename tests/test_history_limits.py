"""History limits: every key shape against every config level, resolved and applied end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.config import Config, parse_config, resolve_history_limit
from bot.context.builder import ContextBuilder
from bot.core.errors import ConfigError
from bot.core.messages import ChatRef, InboundMessage
from bot.core.session_key import SessionKey, parse
from bot.store import Store

TURNS = 8  # stored user turns before the request, more than any limit used here

# Every key shape, with the user whose DM it is (None for groups and channels).
SHAPES: dict[str, str] = {
    "telegram direct": "agent:main:telegram:direct:42",
    "telegram group": "agent:main:telegram:group:-100123",
    "telegram group topic": "agent:main:telegram:group:-100123:topic:7",
    "discord direct": "agent:main:discord:direct:9",
    "discord direct thread": "agent:main:discord:direct:9:thread:99",
    "discord channel": "agent:main:discord:channel:555",
    "discord channel thread": "agent:main:discord:channel:555:thread:777",
    "matrix direct": "agent:main:matrix:direct:@ada:example.org",
    "matrix direct thread": "agent:main:matrix:direct:@ada:example.org:thread:$root:example.org",
    "matrix room": "agent:main:matrix:room:!tea:example.org",
    "matrix room thread": "agent:main:matrix:room:!tea:example.org:thread:$root:example.org",
}

PER_DM, DM, CHANNEL, CONVERSATION = 2, 3, 4, 5


def _per_dm() -> dict[str, Any]:
    # Entries for the DM users, and also for the group/channel peers: those must never apply.
    return {
        "telegram": {"dms": {"42": {"history_limit": PER_DM}, "-100123": {"history_limit": 1}}},
        "discord": {"dms": {"9": {"history_limit": PER_DM}, "555": {"history_limit": 1}}},
        "matrix": {"dms": {"@ada:example.org": {"history_limit": PER_DM},
                           "!tea:example.org": {"history_limit": 1}}},
    }


def _merge(*parts: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(result.get(key), dict):
                result[key] = _merge(result[key], value)
            else:
                result[key] = value
    return result


def _channels(**values: Any) -> dict[str, Any]:
    return {"channels": {"telegram": dict(values), "discord": dict(values), "matrix": dict(values)}}


LEVELS: dict[str, dict[str, Any]] = {
    "per-dm": {"channels": _per_dm()},
    "dm_history_limit": _channels(dm_history_limit=DM),
    "channel history_limit": _channels(history_limit=CHANNEL),
    "conversation": {"conversation": {"history_limit": CONVERSATION}},
    "none": {},
    "all levels": _merge(
        {"channels": _per_dm()},
        _channels(dm_history_limit=DM, history_limit=CHANNEL),
        {"conversation": {"history_limit": CONVERSATION}},
    ),
    "all but per-dm": _merge(
        _channels(dm_history_limit=DM, history_limit=CHANNEL),
        {"conversation": {"history_limit": CONVERSATION}},
    ),
    "dm and conversation": _merge(
        _channels(dm_history_limit=DM), {"conversation": {"history_limit": CONVERSATION}}
    ),
    "channel and conversation": _merge(
        _channels(history_limit=CHANNEL), {"conversation": {"history_limit": CONVERSATION}}
    ),
}


def _expected(level: str, key: SessionKey) -> int | None:
    """The documented resolution order, written out independently of the code under test."""
    direct_chain = {"per-dm": PER_DM, "dm_history_limit": DM, "conversation": CONVERSATION}
    group_chain = {"channel history_limit": CHANNEL, "conversation": CONVERSATION}
    chain = direct_chain if key.is_direct else group_chain
    set_levels = {
        "per-dm": {"per-dm"},
        "dm_history_limit": {"dm_history_limit"},
        "channel history_limit": {"channel history_limit"},
        "conversation": {"conversation"},
        "none": set(),
        "all levels": {"per-dm", "dm_history_limit", "channel history_limit", "conversation"},
        "all but per-dm": {"dm_history_limit", "channel history_limit", "conversation"},
        "dm and conversation": {"dm_history_limit", "conversation"},
        "channel and conversation": {"channel history_limit", "conversation"},
    }[level]
    for name, value in chain.items():
        if name in set_levels:
            return value
    return None


class InstantBrain:
    """A brain for use_selection=false: context building never calls the model."""

    def fast_completer(self) -> None:
        return None

    def model_for(self, role: str) -> str:
        return role


def _config(tmp_path: Path, data: dict[str, Any]) -> Config:
    base = {
        "database": {"path": str(tmp_path / "switchboard.db")},
        "conversation": {"use_selection": False, "lookback_count": 200, "always_include_recent": 0},
    }
    return parse_config(_merge(base, data), str(tmp_path / "config.toml"))


def _inbound(key: SessionKey, text: str) -> InboundMessage:
    return InboundMessage(
        session_key=key,
        chat=ChatRef(key.provider, key.peer, key.suffix_id),
        sender_id=key.peer if key.is_direct else "42",
        sender_name="Ada",
        text=text,
    )


async def _user_turns_in_context(config: Config, store: Store, key: SessionKey) -> list[str]:
    """Store TURNS turns, build the next turn's context, return the texts that went in."""
    for n in range(1, TURNS + 1):
        await store.append_inbound(_inbound(key, f"question {n}"))
        await store.append_reply(str(key), f"answer {n}")
    request = await store.append_inbound(_inbound(key, "the request"))
    assert request is not None
    context = await ContextBuilder(config, store, InstantBrain()).build(key, request)  # type: ignore[arg-type]
    return [entry.message.text for entry in context.entries]


def _last_turns(count: int) -> list[str]:
    return [text for n in range(TURNS - count + 1, TURNS + 1) for text in (f"question {n}", f"answer {n}")]


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("shape", list(SHAPES))
async def test_history_limit_matrix(tmp_path: Path, shape: str, level: str) -> None:
    """Each key shape gets the limit of the first configured level, and its context holds exactly that."""
    key = parse(SHAPES[shape])
    config = _config(tmp_path, LEVELS[level])
    expected = _expected(level, key)
    assert resolve_history_limit(config, key) == expected

    async with Store.open(config.database_path()) as store:
        texts = await _user_turns_in_context(config, store, key)
    assert texts == _last_turns(expected if expected is not None else TURNS)


def test_matrix_is_not_vacuous() -> None:
    """Each configured level decides at least one key shape, so no level is left untested."""
    decided = {
        level: {_expected(level, parse(text)) for text in SHAPES.values()} for level in LEVELS
    }
    for value in (PER_DM, DM, CHANNEL, CONVERSATION):
        assert any(value in values for values in decided.values())
    assert decided["none"] == {None}


@pytest.mark.parametrize(
    ("shape", "data", "fallen_through_to"),
    [
        ("telegram group", _channels(history_limit=0), CONVERSATION),
        ("telegram group topic", _channels(history_limit=0), CONVERSATION),
        ("discord channel thread", _channels(history_limit=0), CONVERSATION),
        ("telegram direct", _channels(dm_history_limit=0), CONVERSATION),
        ("discord direct thread", _channels(dm_history_limit=0), CONVERSATION),
        (
            "discord direct",
            _merge(
                {"channels": {"discord": {"dms": {"9": {"history_limit": 0}}}}},
                _channels(dm_history_limit=DM),
            ),
            DM,
        ),
    ],
)
async def test_zero_means_unlimited_and_stops_fall_through(
    tmp_path: Path, shape: str, data: dict[str, Any], fallen_through_to: int
) -> None:
    """A level set to 0 means unlimited there: the lower levels are not consulted and every turn stays."""
    key = parse(SHAPES[shape])
    config = _config(tmp_path, _merge(data, {"conversation": {"history_limit": CONVERSATION}}))
    assert resolve_history_limit(config, key) is None
    async with Store.open(config.database_path()) as store:
        texts = await _user_turns_in_context(config, store, key)
    assert texts == _last_turns(TURNS)
    assert len(texts) != 2 * fallen_through_to


@pytest.mark.parametrize(
    "shape", ["discord direct thread", "telegram direct"],
)
def test_per_dm_lookup_ignores_thread_suffix(shape: str) -> None:
    """Every thread of one DM shares that DM's per-user limit."""
    key = parse(SHAPES[shape])
    config = parse_config({"channels": _per_dm()}, "config.toml")
    assert resolve_history_limit(config, key) == PER_DM
    assert resolve_history_limit(config, key.base()) == PER_DM
    threaded = parse(f"{key.base()}:thread:12345")
    assert resolve_history_limit(config, threaded) == PER_DM


def test_per_dm_entry_of_another_user_does_not_apply() -> None:
    """One user's DM limit never leaks into another user's DM."""
    config = parse_config(
        {"channels": {"telegram": {"dms": {"42": {"history_limit": 2}}, "dm_history_limit": 7}}},
        "config.toml",
    )
    assert resolve_history_limit(config, parse("agent:main:telegram:direct:42")) == 2
    assert resolve_history_limit(config, parse("agent:main:telegram:direct:43")) == 7
    assert resolve_history_limit(config, parse("agent:main:discord:direct:42")) is None


def test_provider_limits_do_not_cross() -> None:
    """A Telegram limit does not apply to Discord sessions, and the reverse."""
    config = parse_config({"channels": {"telegram": {"history_limit": 4}}}, "config.toml")
    assert resolve_history_limit(config, parse("agent:main:telegram:group:-1")) == 4
    assert resolve_history_limit(config, parse("agent:main:discord:channel:555")) is None


async def test_console_dm_limit_applies(tmp_path: Path) -> None:
    """The console session uses `[channels.console].dm_history_limit`, end to end."""
    key = parse("agent:main:console:direct:local")
    config = _config(tmp_path, {"channels": {"console": {"dm_history_limit": 2}}})
    assert resolve_history_limit(config, key) == 2
    async with Store.open(config.database_path()) as store:
        assert await _user_turns_in_context(config, store, key) == _last_turns(2)


def test_console_group_limit_is_rejected_not_ignored() -> None:
    """A group limit under [channels.console] would do nothing, so it is a config error."""
    with pytest.raises(ConfigError, match=r"channels\.console\.history_limit: unknown key"):
        parse_config({"channels": {"console": {"history_limit": 3}}}, "config.toml")


async def test_unknown_provider_uses_conversation_limit(tmp_path: Path) -> None:
    """A provider with no channel section still honours `[conversation].history_limit`."""
    key = parse("agent:main:fake:direct:42")
    config = _config(tmp_path, {"conversation": {"history_limit": 3}})
    assert resolve_history_limit(config, key) == 3
    async with Store.open(config.database_path()) as store:
        assert await _user_turns_in_context(config, store, key) == _last_turns(3)


async def test_limit_counts_turns_not_messages(tmp_path: Path) -> None:
    """A turn with several agent messages still counts as one turn."""
    key = parse(SHAPES["telegram direct"])
    config = _config(tmp_path, {"conversation": {"history_limit": 2}})
    async with Store.open(config.database_path()) as store:
        for n in range(1, 5):
            await store.append_inbound(_inbound(key, f"question {n}"))
            await store.append_reply(str(key), f"answer {n}a")
            await store.append_reply(str(key), f"answer {n}b")
        request = await store.append_inbound(_inbound(key, "the request"))
        assert request is not None
        context = await ContextBuilder(config, store, InstantBrain()).build(key, request)  # type: ignore[arg-type]
    assert [e.message.text for e in context.entries] == [
        "question 3", "answer 3a", "answer 3b", "question 4", "answer 4a", "answer 4b",
    ]
    assert context.history_limit == 2
    assert context.snapshot()["history_limit"] == 2


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("agent:main:telegram:group:-100", 4),          # its group settings
        ("agent:main:telegram:group:-100:topic:9", 4),  # a forum topic shares its group's
        ("agent:main:telegram:group:-200", 50),         # another group: the channel's limit
        ("agent:main:discord:channel:555", 6),          # the channel's settings
        ("agent:main:discord:channel:555:thread:1", 6),  # a thread shares its parent's ...
        ("agent:main:discord:channel:555:thread:2", 2),  # ... unless it has its own entry
        ("agent:main:discord:channel:777", 40),
    ],
)
def test_per_chat_settings_override_the_channel_limit(key: str, expected: int) -> None:
    """`group_settings`/`channel_settings` limits beat the channel's; topics and threads inherit."""
    config = parse_config(
        {
            "channels": {
                "telegram": {"history_limit": 50, "group_settings": {"-100": {"history_limit": 4}}},
                "discord": {
                    "history_limit": 40,
                    "channel_settings": {"555": {"history_limit": 6}, "2": {"history_limit": 2}},
                },
            }
        },
        "config.toml",
    )
    assert resolve_history_limit(config, parse(key)) == expected
