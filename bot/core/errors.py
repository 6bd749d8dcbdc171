"""The error tree: every error Switchboard raises on purpose descends from BotError."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.core.misconfiguration import Misconfiguration


class BotError(Exception):
    """Root of Switchboard's own errors; the CLI turns these into exit codes."""


class ConfigError(BotError):
    """A config file is missing, unreadable or invalid; carries where and what was expected."""

    def __init__(self, path: str, key: str | None, expected: str) -> None:
        self.path = path
        self.key = key
        self.expected = expected
        where = f"{path}: {key}" if key else path
        super().__init__(f"{where}: {expected}")


class SessionKeyError(BotError, ValueError):
    """A session key string does not have the documented shape."""


class StoreError(BotError):
    """The database cannot be opened or migrated."""


class AlreadyAnsweredError(StoreError):
    """A reply to a request no longer waiting: another instance answered it meanwhile (its lease
    on the chat had passed to that one), so this reply is not stored, nor sent."""


class ModelError(BotError):
    """The model provider could not produce a reply within the retries and deadline allowed.

    `problem` is set when the provider refused for a reason only the admin can fix (a refused key,
    an unknown model, no credit; its `kind` says which): waiting will not help, and it says what
    to do. Without one the failure may pass (an outage, a timeout, a rate limit).
    """

    def __init__(
        self, message: str, *, retryable: bool = True, problem: Misconfiguration | None = None
    ) -> None:
        self.retryable = retryable and problem is None
        self.problem = problem
        super().__init__(message)


class MissingApiKeyError(ModelError):
    """No API key is configured: no retry can help; the message says which variable to set."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class SessionNotFoundError(BotError):
    """An admin command named a session the store does not know."""


class DeliveryError(BotError):
    """A reply could not be (fully) sent; `sent_ids` are the chunks that did arrive.

    `permanent` means retrying cannot help (the bot was blocked or lacks a permission).
    """

    def __init__(self, message: str, *, sent_ids: list[str] | None = None, permanent: bool = False) -> None:
        self.sent_ids = list(sent_ids or [])
        self.permanent = permanent
        super().__init__(message)


class AgentMessageRefused(BotError):
    """A message between agents was not passed on; `reason` is short ("hop limit"), the text says
    why and what to do (the model reads it as a tool error)."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class NotStartedError(BotError):
    """A part was asked to act before it started: a bug in the assembly (or in a plugin calling
    too early), not a platform failure; the message names the part and what was asked."""


class ChannelNotStartedError(NotStartedError):
    """A channel was asked to act before `start` (or after `stop`): a bug in the assembly, not a
    platform failure; the message names the channel and what was asked."""


def describe(exc: BaseException) -> str:
    """`Type: message`, the one-line description every log field and stored error uses.

    An exception whose `__str__` fails still has a type to report."""
    try:
        message = str(exc)
    except Exception:  # a foreign __str__ may fail any way: that only means "no message"
        message = "(no message)"
    return f"{type(exc).__name__}: {message}"
