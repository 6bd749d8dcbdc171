"""Slack's rate limits as the channel reads them: the seconds a 429's `Retry-After` asks for.

Each Web API method has its tier (calls a minute per workspace; chat.postMessage about one a
second per conversation); past it Slack answers HTTP 429 with `Retry-After`, and that method is not
to be called again until then.
"""

from __future__ import annotations

from typing import Any


def retry_after(headers: Any) -> float:
    """Seconds in a response's Retry-After header (a value or a list of one, as slack_sdk has it);
    1 when Slack names none."""
    for key, value in dict(headers or {}).items():
        if str(key).lower() == "retry-after":
            try:
                return float(value[0] if isinstance(value, list) else value)
            except (TypeError, ValueError, IndexError):
                break
    return 1.0
