"""The Anthropic client's OpenTelemetry spans: off where nothing could record them, the SDK's own
default where something may (a tracer provider named, or the SDK's variable set)."""

from __future__ import annotations

import pytest

from bot.models.sdks import anthropic_open_telemetry


@pytest.fixture
def no_telemetry_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("ANTHROPIC_OPEN_TELEMETRY", "OTEL_PYTHON_TRACER_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_spans_are_off_with_no_tracer_provider(no_telemetry_env: pytest.MonkeyPatch) -> None:
    """No provider set or named: no span could be recorded, so the client makes none."""
    assert anthropic_open_telemetry() is False


@pytest.mark.parametrize(("name", "value"), [
    ("ANTHROPIC_OPEN_TELEMETRY", "true"), ("ANTHROPIC_OPEN_TELEMETRY", "false"),
    ("OTEL_PYTHON_TRACER_PROVIDER", "sdk_tracer_provider"),
])
def test_the_sdk_decides_where_telemetry_is_configured(
    no_telemetry_env: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """The SDK's variable (either way) or a named provider: the SDK's own default, which reads them."""
    no_telemetry_env.setenv(name, value)
    assert anthropic_open_telemetry() is None
