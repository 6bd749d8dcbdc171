"""Misconfigurations: a refused key, an unknown model, a spent balance or a revoked bot token, told
where they happen.

Each is a warning in the log that says what to fix and one line on the console (when it runs), at
most once an hour per cause; the newest per provider and per channel is kept for `switchboard
status`. A chat is told only that the bot is not set up (`Misconfiguration.reply`), never the key.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

import structlog

from bot.core.errors import ModelError, describe
from bot.core.messages import ChatRef, OutboundMessage

log = structlog.get_logger("switchboard.setup")
T = TypeVar("T")

# auth: the key was refused; model: no such model; billing: no credit left; token: a bot token refused.
ProblemKind = Literal["auth", "model", "billing", "token"]
Scope = Literal["provider", "channel"]
# A cause is told again after this long (seconds) if it is still there.
EVERY = 3600.0
CONSOLE = "console"

_REASONS: dict[str, str] = {
    "auth": "the model key was refused",
    "model": "the model name is not known",
    "billing": "the model account is out of credit",
}


@dataclass(frozen=True, slots=True)
class Misconfiguration:
    """What is wrong and where, what the admin should do, and the few words a chat may be told."""

    scope: Scope
    name: str  # the provider ("anthropic", "local") or the channel ("telegram", "discord.work")
    kind: ProblemKind
    summary: str  # what happened, naming the service and its answer; never the secret
    fix: str
    reason: str = ""  # for the user: "the model key was refused"

    def reply(self) -> str:
        return f"I'm not set up correctly right now ({self.reason}); the admin has been told."

    def line(self) -> str:
        """The one console line."""
        return f"Setup problem: {self.summary}. Fix: {self.fix}."


def problem_kind(
    status: int, error_type: str | None, code: str | None, message: str | None
) -> ProblemKind | None:
    """Whether an API's refusal is one only the admin can fix, and which; None: it may pass.

    Anthropic says "billing_error" (402) or, as often, 400 invalid_request_error "Your credit balance
    is too low…"; OpenAI 429 "insufficient_quota"; gateways (OpenRouter) 402.
    """
    text = (message or "").lower()
    if (status == 402 or "billing_error" in (error_type, code) or "insufficient_quota" in (error_type, code)
            or "credit balance" in text):
        return "billing"
    if status in (401, 403):  # 403: the key lacks the permission (permission_error)
        return "auth"
    if status == 404:  # Messages and Chat Completions have one path: what is missing is the model
        return "model"
    return None


@dataclass(frozen=True, slots=True)
class ProviderFacts:
    """What a notice says about the provider a model call went to."""

    name: str  # as in [providers] ("anthropic" for the [anthropic] section)
    url: str | None  # None: Anthropic's own API
    key_env: str | None  # the variable its key is read from

    @property
    def service(self) -> str:
        if self.url is None:
            return "Anthropic" if self.name == "anthropic" else f"provider '{self.name}' (Anthropic)"
        return f"provider '{self.name}' ({self.url})"

    def problem(self, kind: ProblemKind, model: str, error: str) -> Misconfiguration:
        service = self.service
        if kind == "billing":
            summary = f"{service} refused the call for lack of credit: {error}"
            where = ("in the Anthropic Console (Settings → Billing)" if self.url is None
                     else f"on the account behind {self.key_env or 'its key'}")
            fix = f"add credit or raise the spend limit {where}; replies resume by themselves"
        elif kind == "model":
            summary = f"{service} does not know the model '{model}': {error}"
            fix = (f"replace '{model}' with a model id {service} offers where the config names it "
                   "([anthropic] model, fast_model or models, [roles], a job's model) and restart the daemon")
        else:
            summary = f"{service} refused the API key: {error}"
            if self.key_env is None:
                fix = (f"the server wants a key: set [providers.{self.name}].api_key_env to the variable "
                       "holding it and restart the daemon")
            else:
                where = " (Anthropic Console → API Keys)" if self.url is None else ""
                fix = f"put a valid key{where} in {self.key_env} and restart the daemon"
        return Misconfiguration("provider", self.name, kind, summary, fix, _REASONS[kind])


def token_refused(
    platform: str, channel: str, env: str, detail: str, where_tokens_are: str
) -> Misconfiguration:
    """A bot token the platform refused: the channel is off until a new token and a restart."""
    return Misconfiguration(
        "channel", channel, "token", f"{platform} rejected the bot token ({detail}); the channel stays off",
        f"put the bot's current token ({where_tokens_are}) in {env} and restart the daemon")


class Sends(Protocol):
    """What a notice needs of a running channel (`bot.intake.channel.Channel`): a way to send."""

    async def send(self, message: OutboundMessage) -> object: ...


@runtime_checkable
class NoticeBoard(Protocol):
    """A channel that can show a line that is not a reply (the console)."""

    def notice(self, text: str) -> None: ...


class Misconfigurations:
    """A daemon's misconfigurations: each cause told at most once per `every` seconds, the newest
    per provider and per channel kept for status."""

    def __init__(
        self, channels: Mapping[str, Sends], *, clock: Callable[[], float] = time.monotonic,
        every: float = EVERY,
    ) -> None:
        self._channels = channels  # the running channels: the console is looked up when told
        self._clock = clock
        self._every = every
        self._told: dict[tuple[str, str, str, str], float] = {}
        self._latest: dict[tuple[str, str], tuple[Misconfiguration, float]] = {}

    async def report(self, problem: Misconfiguration) -> bool:
        """Keep it for status; log it and show it on the console unless this cause was told within
        the hour. True when it was told now."""
        self._latest[(problem.scope, problem.name)] = (problem, time.time())
        cause = (problem.scope, problem.name, problem.kind, problem.summary)
        now = self._clock()
        told = self._told.get(cause)
        if told is not None and now - told < self._every:
            return False
        self._told[cause] = now
        warn(problem)
        await self._show(problem)
        return True

    def latest(self, scope: Scope, name: str) -> dict[str, Any] | None:
        """The newest misconfiguration of one provider or channel, as status shows it."""
        found = self._latest.get((scope, name))
        if found is None:
            return None
        problem, at = found
        return {"name": name, "kind": problem.kind, "error": problem.summary, "fix": problem.fix, "at": at}

    def providers(self) -> list[dict[str, Any]]:
        """Every provider's newest misconfiguration, by name."""
        names = sorted(name for scope, name in self._latest if scope == "provider")
        return [entry for name in names if (entry := self.latest("provider", name)) is not None]

    async def _show(self, problem: Misconfiguration) -> None:
        """One line on the console, when it runs."""
        console = self._channels.get(CONSOLE)
        if console is None:
            return
        try:
            if isinstance(console, NoticeBoard):
                console.notice(problem.line())
            else:  # a console without notices shows it as a message of its own
                await console.send(OutboundMessage(ChatRef(CONSOLE, "local"), problem.line()))
        except Exception as exc:  # the log line already says it
            log.warning("setup problem not shown on the console", error=describe(exc), exc_info=True)


def warn(problem: Misconfiguration) -> None:
    """The warning line: what happened, where, and the fix."""
    log.warning(problem.summary, **{problem.scope: problem.name}, problem=problem.kind, fix=problem.fix)


async def told(misconfigured: Misconfigurations | None, call: Awaitable[T]) -> T:
    """A model call's result; a misconfiguration it fails with is told first (once an hour)."""
    try:
        return await call
    except ModelError as exc:
        if exc.problem is not None and misconfigured is not None:
            await misconfigured.report(exc.problem)
        raise


async def report(holder: object, problem: Misconfiguration) -> None:
    """Tell the misconfigurations `holder` keeps (the daemon, as a channel's intake), or just log it."""
    kept = getattr(holder, "misconfigured", None)
    if isinstance(kept, Misconfigurations):
        await kept.report(problem)
    else:
        warn(problem)
