"""The log redactor: one search decides whether a string needs the secret patterns at all, and
what it blanks is exactly what the patterns alone would blank."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bot.core.log import _SECRET_PATTERNS, REDACTED, Redactor

# Pieces that are (or nearly are) the shapes the patterns look for, and plain text around them.
PIECES = st.sampled_from([
    "sk-ant-api03-Qm4nB8vC2xZ6", "sk-ant-short", "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw",
    "12345:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw", "Bearer abcdefgh12", "bEaReR   token.value_x",
    "/bot123456789:AAH-x_y", "postgres://ada:pw@db/x", "POSTGRESQL://ada:s3cret@h", "password=hunter2",
    "PASSWORD=x&y=1", "agent:main:telegram:direct:42", "2026-11-28T20:00:00Z", "the-known-secret",
    " ", ":", "@", "/", "&", "\n",
])
TEXT = st.lists(st.one_of(PIECES, st.text(max_size=8)), max_size=8).map("".join)


def reference(text: str, secrets: list[str]) -> str:
    """Every known secret, then every pattern in turn, with no shortcut."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + REDACTED, text)
    return text


@given(TEXT)
def test_the_redactor_blanks_what_the_patterns_blank(text: str) -> None:
    """Whatever the text, the redactor's answer is the patterns' own (the search skips no match)."""
    secrets = ["the-known-secret"]
    assert Redactor(secrets).redact(text) == reference(text, secrets)


def test_a_line_has_its_secrets_blanked_in_every_field() -> None:
    """Strings at the top and inside dicts, lists and tuples are redacted; other values are kept."""
    line = {"event": "call Bearer abcdefgh12", "n": 3, "none": None,
            "nested": {"url": "postgres://ada:pw@db/x", "parts": ["sk-ant-api03-Qm4nB8vC2xZ6", 1.5]},
            "pair": ("password=hunter2", "plain")}
    out = Redactor().__call__(None, "info", dict(line))
    assert out == {"event": f"call Bearer {REDACTED}", "n": 3, "none": None,
                   "nested": {"url": f"postgres://{REDACTED}@db/x", "parts": [REDACTED, 1.5]},
                   "pair": (f"password={REDACTED}", "plain")}


SHARED = Redactor(["the-known-secret"])


@given(st.lists(TEXT, max_size=6))
def test_a_string_seen_before_is_redacted_as_the_first_time(texts: list[str]) -> None:
    """One redactor across many lines (it remembers the strings it found clean): each text, met
    again, is still answered as the patterns answer it."""
    for text in [*texts, *texts]:
        assert SHARED.redact(text) == reference(text, ["the-known-secret"])


def test_a_str_subclass_field_is_redacted() -> None:
    class Label(str):
        pass

    out = Redactor(["the-known-secret"])(None, "info", {"event": Label("key the-known-secret"), "ok": True})
    assert out == {"event": f"key {REDACTED}", "ok": True}
