"""Session keys: building, parsing and round-tripping `agent:<id>:<provider>:<kind>:<peer>[...]`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.core.errors import SessionKeyError
from bot.core.session_key import KINDS, SessionKey, build, parse

DESIGN = Path(__file__).resolve().parents[2] / "shared" / "DESIGN.md"

# Text ids: any non-empty string without ':' or whitespace (unicode included).
text_ids = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cs",),
        blacklist_characters=":",
    ),
    min_size=1,
    max_size=20,
).filter(lambda s: not any(ch.isspace() for ch in s))
int_ids = st.integers(min_value=-(10**15), max_value=10**15) | st.sampled_from([-100123, -1001234567890, 0])
ids = text_ids | int_ids
kinds = st.sampled_from(KINDS)
suffixes = st.sampled_from([None, "thread", "topic"])


@given(agent=text_ids, provider=text_ids, kind=kinds, peer=ids, suffix=suffixes, suffix_id=ids)
def test_parse_of_build_round_trips(
    agent: str, provider: str, kind: str, peer: str | int, suffix: str | None, suffix_id: str | int
) -> None:
    """Any key built from valid ids parses back to the same key, and its text form round-trips."""
    extra = {suffix: suffix_id} if suffix else {}
    key = build(agent, provider, kind, peer, **extra)  # type: ignore[arg-type]
    assert key.peer == str(peer)
    if suffix:
        assert key.suffix_kind == suffix
        assert key.suffix_id == str(suffix_id)
    else:
        assert key.suffix_kind is None and key.suffix_id is None
    assert parse(str(key)) == key
    assert str(parse(str(key))) == str(key)


@given(peer=int_ids, topic=st.integers(min_value=1, max_value=10**9))
def test_negative_telegram_group_ids_round_trip(peer: int, topic: int) -> None:
    """Negative Telegram chat ids survive build → text → parse, with and without a topic."""
    plain = build("main", "telegram", "group", peer)
    assert str(plain) == f"agent:main:telegram:group:{peer}"
    assert parse(str(plain)) == plain
    with_topic = build("main", "telegram", "group", peer, topic=topic)
    assert str(with_topic) == f"agent:main:telegram:group:{peer}:topic:{topic}"
    assert parse(str(with_topic)) == with_topic


@given(agent=text_ids, provider=text_ids, peer=ids)
def test_dm_alias_parses_as_direct(agent: str, provider: str, peer: str | int) -> None:
    """`dm` in a key is read as `direct`, and the canonical form says `direct`."""
    key = parse(f"agent:{agent}:{provider}:dm:{peer}")
    assert key.kind == "direct"
    assert key.is_direct
    assert str(key) == f"agent:{agent}:{provider}:direct:{peer}"


# The table of DESIGN.md, kept here so the suite runs where the design notes are not checked out.
DESIGN_EXAMPLES = [
    "agent:main:telegram:direct:42",
    "agent:main:telegram:group:-100123",
    "agent:main:telegram:group:-100123:topic:7",
    "agent:main:discord:direct:9",
    "agent:main:discord:channel:555",
    "agent:main:discord:channel:555:thread:777",
    "agent:main:console:direct:local",
]


def _design_keys() -> list[str]:
    if not DESIGN.exists():
        return []
    text = DESIGN.read_text(encoding="utf-8")
    return sorted(set(re.findall(r"`(agent:[^`<>]+)`", text)))


def test_design_examples_are_all_listed_here() -> None:
    """Every example key in DESIGN.md (when present) is among the examples tested here."""
    assert set(_design_keys()) <= set(DESIGN_EXAMPLES)


@pytest.mark.parametrize("text", sorted(set(DESIGN_EXAMPLES) | set(_design_keys())))
def test_every_design_example_parses(text: str) -> None:
    """Every example key in DESIGN.md parses and prints back unchanged."""
    assert str(parse(text)) == text


def test_design_examples_have_expected_parts() -> None:
    """The documented examples split into the parts the table describes."""
    assert parse("agent:main:telegram:group:-100123:topic:7") == SessionKey(
        "main", "telegram", "group", "-100123", "topic", "7"
    )
    assert parse("agent:main:discord:channel:555:thread:777") == SessionKey(
        "main", "discord", "channel", "555", "thread", "777"
    )
    assert parse("agent:main:console:direct:local") == SessionKey("main", "console", "direct", "local")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("agent:main:telegram:direct", r"4 parts.*expected"),  # missing peer
        ("agent:main:telegram", r"3 parts"),
        ("", r"1 parts"),
        ("agent:main:telegram:direct:42:extra", r"6 parts"),  # extra part
        ("agent:main:telegram:group:-100123:topic:7:8", r"8 parts"),
        ("agent:main:telegram:group:-100123:topic", r"6 parts"),  # suffix without id
        ("agent:main:telegram:supergroup:42", r"unknown kind 'supergroup'"),
        ("agent:main:discord:channel:555:reply:9", r"unknown suffix 'reply'"),
        ("agents:main:telegram:direct:42", r"must start with 'agent:'"),
        ("user:main:telegram:direct:42", r"must start with 'agent:'"),
        ("agent::telegram:direct:42", r"agent_id.*non-empty"),
        ("agent:main:telegram:direct:", r"peer.*non-empty"),
        ("agent:main:discord:channel:555:thread:", r"suffix_id.*non-empty"),
        ("agent:main:telegram:direct:4 2", r"whitespace"),
    ],
)
def test_malformed_keys_raise_clear_errors(text: str, expected: str) -> None:
    """A key with a missing, extra or unknown part raises SessionKeyError saying what is wrong."""
    with pytest.raises(SessionKeyError, match=expected):
        parse(text)


def test_session_key_error_is_a_value_error() -> None:
    """Callers that catch ValueError also catch a bad session key."""
    with pytest.raises(ValueError, match="parts"):
        parse("nonsense")


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"peer": "a:b"}, r"must not contain ':'"),
        ({"peer": "a b"}, r"whitespace"),
        ({"peer": ""}, r"non-empty"),
        ({"kind": "dm"}, r"unknown chat kind"),
        ({"thread": 1, "topic": 2}, r"thread or a topic, not both"),
    ],
)
def test_build_rejects_parts_that_would_not_parse(kwargs: dict[str, object], expected: str) -> None:
    """Building a key from a part that could not be parsed back fails at once."""
    args: dict[str, object] = {"agent_id": "main", "provider": "discord", "kind": "channel", "peer": "555"}
    args.update(kwargs)
    with pytest.raises(SessionKeyError, match=expected):
        build(**args)  # type: ignore[arg-type]


@given(agent=text_ids, provider=text_ids, kind=kinds, peer=ids, suffix=suffixes, suffix_id=ids)
def test_base_strips_the_suffix(
    agent: str, provider: str, kind: str, peer: str | int, suffix: str | None, suffix_id: str | int
) -> None:
    """`base()` is the same chat without its thread or topic."""
    extra = {suffix: suffix_id} if suffix else {}
    key = build(agent, provider, kind, peer, **extra)  # type: ignore[arg-type]
    base = key.base()
    assert base == build(agent, provider, kind, peer)  # type: ignore[arg-type]
    assert base.suffix_kind is None and base.suffix_id is None
    assert str(key).startswith(str(base))
