"""Chat commands (/help, /reset, /stop, …): one implementation shared by every channel.

/reset and /compact wait in their session's queue behind the turn being written, so they apply
in order; /stop and the read-only ones are answered at once, even while a reply is being written.
None is stored as conversation: they would only be noise in later context.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from bot.config import Config, resolve_history_limit
from bot.config.provider_check import model_lines
from bot.context.compaction import CompactionError, Compactor
from bot.core.errors import SessionNotFoundError
from bot.core.messages import InboundMessage
from bot.intake.router import Router
from bot.models.usage import UsageTotal, describe, period_starts, usage_report
from bot.store.seams import CommandStore


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    description: str
    # In a shared chat these affect everyone; when admins are configured only they may use them.
    admin_in_groups: bool = False


COMMANDS: tuple[Command, ...] = (
    Command("start", "Say hello and show what I can do"),
    Command("help", "List the commands"),
    Command("reset", "Start a fresh context (history stays stored)", admin_in_groups=True),
    Command("new", "Start a fresh context (the same as /reset)", admin_in_groups=True),
    Command("stop", "Abandon the reply I am working on", admin_in_groups=True),
    Command("compact", "Summarise this chat's older messages to make room (history stays stored)",
            admin_in_groups=True),
    Command("status", "Show this chat's session and limits"),
    Command("model", "Show this chat's model, or switch it: /model NAME"),
    Command("usage", "Tokens and estimated cost of this chat, today and this month"),
    Command("whoami", "Show your user id (for allowlists)"),
)
_BY_NAME = {command.name: command for command in COMMANDS}
# Commands that change the session: they keep its order (and are recorded, so a restart runs them).
QUEUED_COMMANDS = frozenset({"reset", "new", "compact"})


def parse_command(text: str, bot_username: str | None = None) -> str | None:
    """The command name in `/name[@bot] args`, lower-cased; None when the text is no command
    or names another bot."""
    if not text.startswith("/"):
        return None
    word = text[1:].split(maxsplit=1)[0] if len(text) > 1 and not text[1].isspace() else ""
    name, _, addressee = word.partition("@")
    if not name:
        return None
    if addressee and (bot_username is None or addressee.lower() != bot_username.lower()):
        return None
    return name.lower()


def is_known(name: str) -> bool:
    return name in _BY_NAME


def command_args(text: str) -> str:
    """What follows the command word (`/model haiku` → "haiku"), after any leading mention."""
    words = text.split()
    start = next((index for index, word in enumerate(words) if word.startswith("/")), len(words))
    return " ".join(words[start + 1:])


class CommandHandler:
    """Runs a command for the session it was sent in and returns the text to answer with."""

    def __init__(self, config: Config, store: CommandStore, router: Router, compactor: Compactor) -> None:
        self._config = config
        self._store = store
        self._router = router
        self._compactor = compactor

    async def run(self, name: str, inbound: InboundMessage) -> str:
        command = _BY_NAME.get(name)
        if command is None:
            return f"Unknown command /{name}. Send /help for the list."
        key = inbound.session_key
        if command.admin_in_groups and not key.is_direct and not self._is_admin(inbound):
            return f"Only an admin can use /{name} in a shared chat."
        handler = getattr(self, f"_{name}")
        text: str = await handler(inbound)
        return text

    def _is_admin(self, inbound: InboundMessage) -> bool:
        section = self._config.chat_channel(inbound.chat.provider)
        # Channels without admin lists (the local console) are run by their admin.
        if section is None or not section.admins:
            return True
        return inbound.sender_id in section.admins

    async def _start(self, inbound: InboundMessage) -> str:
        return (
            f"Hi, I'm {self._config.agent.name}. Write to me and I'll answer; "
            "send /help to see the commands."
        )

    async def _help(self, inbound: InboundMessage) -> str:
        lines = [f"/{c.name} - {c.description}" for c in COMMANDS]
        if not inbound.session_key.is_direct:
            lines.append("In this chat, mention me or reply to one of my messages to talk to me.")
        return "\n".join(lines)

    async def _reset(self, inbound: InboundMessage) -> str:
        await self._store.reset_context(str(inbound.session_key))
        return "Started a fresh context. Earlier messages stay stored but I won't use them."

    _new = _reset

    async def _model(self, inbound: InboundMessage) -> str:
        """Show the session's model, or switch it to one the admin allows ([anthropic].models)."""
        key = str(inbound.session_key)
        anthropic = self._config.anthropic
        allowed = anthropic.models
        chosen = await self._store.session_model(key)
        choices = ", ".join(f"{name} ({model})" for name, model in allowed.items())
        wanted = command_args(inbound.text).lower()
        if not wanted:
            current = allowed[chosen] if chosen in allowed else self._default_model()
            named = f" ({chosen})" if chosen in allowed else " (the default)"
            lines = [f"This chat's model: {current}{named}."]
            if allowed:
                lines.append(f"Switch with /model NAME: {choices}; /model default goes back.")
            if self._config.uses_providers():  # what each provider offers, and for what
                lines += ["Models by provider:", *model_lines(self._config)]
            return "\n".join(lines)
        if not inbound.session_key.is_direct and not self._is_admin(inbound):
            return "Only an admin can switch the model in a shared chat."
        if wanted == "default":
            await self._store.set_session_model(key, None, inbound.sender_id)
            return f"Back to the default model, {self._default_model()}. The next reply uses it."
        name = wanted if wanted in allowed else next(
            (name for name, model in allowed.items() if model.lower() == wanted), None)
        if name is None:
            if not allowed:
                return "Switching models is not enabled here: the admin has not allowed any."
            return f"I can't switch to {wanted!r}. Allowed: {choices}, or default."
        await self._store.set_session_model(key, name, inbound.sender_id)
        return f"Switched this chat to {name} ({allowed[name]}). The next reply uses it."

    def _default_model(self) -> str:
        """The main role's first model ("provider:model" when providers are configured)."""
        if not self._config.uses_providers():
            return self._config.anthropic.model
        provider, model = self._config.role_chain("main")[0]
        return f"{provider}:{model}"

    async def _usage(self, inbound: InboundMessage) -> str:
        """This session's tokens today and this month, with the estimate from [prices]."""
        zone = ZoneInfo(self._config.agent.timezone)
        now = time.time()
        month = period_starts(now, zone)[1]
        report = await usage_report(self._store, month, zone, ("day",), self._config.prices,
                                    str(inbound.session_key))
        today = report.groups["day"].get(datetime.fromtimestamp(now, zone).date().isoformat(), UsageTotal())
        return "\n".join([
            "This chat's model use (cost estimated from the configured prices):",
            f"Today: {describe(today)}",
            f"This month: {describe(report.total)}",
        ])

    async def _stop(self, inbound: InboundMessage) -> str:
        abandoned = await self._router.stop_session(str(inbound.session_key))
        for stored in abandoned:
            await self._store.abandon_request(stored.id, "stopped")
        if not abandoned:
            return "Nothing to stop: I'm not working on a reply here."
        waiting = len(abandoned) - 1
        tail = f" and dropped {waiting} waiting message{'s' if waiting != 1 else ''}" if waiting else ""
        return f"Stopped the reply I was working on{tail}."

    async def _compact(self, inbound: InboundMessage) -> str:
        key = str(inbound.session_key)
        try:
            outcome = await self._compactor.compact(key, notified=True)
        except CompactionError as exc:
            return f"I couldn't summarise this chat now ({exc}). Nothing was lost."
        if outcome.status == "superseded":
            return "This chat was just summarised (another summary finished first); nothing was lost."
        if outcome.status == "limited":
            return ("This chat has a history limit, so I only see its latest turns anyway; "
                    "there is nothing to summarise.")
        if outcome.record is None:
            return "Nothing to summarise yet: this chat is still short."
        kept = self._config.compaction.keep_recent
        return (f"Summarised {outcome.summarised} earlier messages; the newest {kept} stay as they "
                "are. The full history is still stored.")

    async def _status(self, inbound: InboundMessage) -> str:
        key = inbound.session_key
        try:
            summary = await self._store.session(str(key))
            stored = f"{summary.message_count} ({summary.user_turns} from people)"
        except SessionNotFoundError:
            stored = "0"
        limit = resolve_history_limit(self._config, key)
        conversation = self._config.conversation
        if not conversation.enabled:
            context = "off (each message is answered on its own)"
        else:
            context = f"the last {conversation.lookback_count} messages, newest " \
                      f"{conversation.always_include_recent} always"
            if conversation.use_selection:
                context += ", older ones picked for relevance by the fast model"
        running, waiting = self._router.session_state(str(key))
        now = "writing a reply" if running else "idle"
        if waiting:
            now += f", {waiting} message{'s' if waiting != 1 else ''} waiting"
        return "\n".join([
            f"Session: {key}",
            f"Messages stored: {stored}",
            f"History limit: {f'{limit} turns' if limit else 'unlimited'}",
            f"Context: {context}",
            f"Now: {now}",
        ])

    async def _whoami(self, inbound: InboundMessage) -> str:
        return f"Your user id is {inbound.sender_id} (chat {inbound.chat.chat_id})."
