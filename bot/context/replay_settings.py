"""The settings a context was selected under, recorded with each turn, so `replay` can name the
ones that changed since instead of only saying the rebuilt context differs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.config import Config

# The sections a context build reads (history limits, lookback, recall, triage, budget, semantic).
SECTIONS = ("conversation", "semantic", "compaction")


def selection_settings(config: Config) -> dict[str, Any]:
    """The settings of `SECTIONS` in force, as JSON values."""
    return {name: getattr(config, name).model_dump(mode="json") for name in SECTIONS}


def changed_settings(recorded: Mapping[str, Any] | None, config: Config) -> list[str]:
    """One line per setting whose value differs now from the one recorded, `section.key: then → now`;
    none when the turn recorded no settings (it was stored before they were)."""
    if not isinstance(recorded, Mapping):
        return []
    now = _flat(selection_settings(config))
    then = _flat(dict(recorded))
    return [f"{key}: {then.get(key, '(unset)')!r} then, {now.get(key, '(unset)')!r} now"
            for key in sorted(now.keys() | then.keys()) if then.get(key) != now.get(key)]


def _flat(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat |= _flat(value, name + ".")
        else:
            flat[name] = value
    return flat
