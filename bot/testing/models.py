"""The made-up model names a test daemon is configured with, and the scripted answer most tests give.

A daemon under test talks to `AnthropicStandIn` with `MODEL` as its reply model and `FAST` as its
triage model, so a responder tells the two apart by `request.model`. `echo` is the default answer:
the reply model says back the user's current message ("re: hello"), triage picks no history.
"""

from __future__ import annotations

import re

from bot.testing.anthropic_api import RecordedRequest, Response, Text

MODEL = "test-model"
FAST = "test-fast"
API_KEY = "test-key"

# The time each user message carries in the prompt ("[14:02] "), which is not what the user wrote.
STAMP = re.compile(r"^\[\d\d:\d\d\] ")


def last_user_line(request: RecordedRequest) -> str:
    """The last line the user wrote in a recorded request (the current message, without its time)."""
    content = request.messages[-1]["content"]
    text = content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)
    return STAMP.sub("", text.strip().splitlines()[-1])


def unstamped(text: str) -> str:
    """A prompt text with the dates and times the history carries taken out, for comparing."""
    lines = [line for line in text.split("\n") if not re.fullmatch(r"\[\w+ \d{4}-\d\d-\d\d\]", line)]
    return "\n".join(STAMP.sub("", line) for line in lines)


def echo(request: RecordedRequest) -> Response:
    """A default answer: the reply model echoes the current message; triage picks nothing."""
    if request.model == FAST:
        return Text('{"relevant": []}')
    return Text(f"re: {last_user_line(request)}")
