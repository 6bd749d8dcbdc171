"""What slack-bolt's AsyncApp is given by the Slack channel: its authorization, a catch-all listener
and a quieter log."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize


class ClientGiven(logging.Filter):
    """Bolt warns that the token in SLACK_BOT_TOKEN goes unused whenever it is given a client (ours
    carries the token and the base URL), or is ignored beside an `authorize` (ours, `SignedIn`),
    while that variable is set, which is the default setup: once per start, saying nothing wrong."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return "`token` will be unused" not in message and "will be ignored" not in message


async def ignore() -> None:
    return None


class SignedIn(AsyncAuthorize):
    """Bolt's authorization from our own auth.test at start. Bolt would call auth.test on the first
    events itself, and envelopes waiting on that call could reach the listener out of order; with
    nothing to wait for, listeners are entered in the order the envelopes arrived."""

    def __init__(self, result: AuthorizeResult) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # unannotated in bolt
        self._result = result

    async def __call__(self, **_: Any) -> AuthorizeResult:
        return self._result


def quiet_bolt() -> None:
    bolt = logging.getLogger("slack_bolt.AsyncApp")  # Bolt's own logger for an AsyncApp
    if not any(isinstance(f, ClientGiven) for f in bolt.filters):
        bolt.addFilter(ClientGiven())
