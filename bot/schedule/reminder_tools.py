"""The reminder tools: set_reminder, list_reminders and cancel_reminder, over the stored reminders.

A reminder belongs to the user who set it and is sent to the chat (and thread) they set it in, as
written, at its time (`bot.schedule.reminders`). Times are read in the user's zone. A recurring
reminder is a cron line rather than words such as "every weekday at 8": models write cron
reliably, it is the format `[[schedules]]` already validates (same weekday numbering, same
clock-change rules), and it leaves nothing for us to guess.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bot.schedule.reminder_time import describe, future_when, parse_when, repeat_trigger
from bot.schedule.reminders import next_time
from bot.store import ReminderLimitError
from bot.tools.base import FunctionTool, Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from bot.config import RemindersConfig
    from bot.schedule.reminders import ReminderSchedule
    from bot.store import Reminder
    from bot.store.seams import ReminderStore

MAX_TEXT = 1000  # characters; a reminder is a line or two, not a document

_WHEN = (
    "When, in the user's timezone unless it carries an offset: an ISO 8601 local time such as "
    '"2025-04-01T09:00" (best: work it out from the current time), or "in 2 hours", "+90m", '
    '"tomorrow 09:00", "friday 18:30", "next monday 8am". Required for a one-time reminder; for a '
    "recurring one, when it starts (default: now)."
)
_REPEAT = (
    "Only for a recurring reminder: a five-field cron line (minute hour day-of-month month weekday) "
    'in the user\'s timezone. Examples: "0 8 * * 1-5" every weekday at 08:00, "30 18 * * *" every '
    'day at 18:30, "0 9 * * mon" every Monday at 09:00, "0 10 1 * *" the 1st of each month at 10:00.'
)


class ReminderTools:
    """A `ToolSource` of the three reminder tools; `schedule` (the running daemon's) fires new ones."""

    def __init__(
        self, store: ReminderStore, settings: Callable[[], RemindersConfig],
        schedule: ReminderSchedule | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._schedule = schedule
        # Built once: the same definitions (and bytes) on every request keep the prompt cache warm.
        self._tools: tuple[Tool, ...] = (
            FunctionTool(
                name="set_reminder",
                description=(
                    "Remind the user in this chat at a time, once (`when`) or repeatedly (`repeat`). "
                    "The text is sent as written at that time, without asking you. The result gives "
                    "the reminder's number and the exact time it resolved to: tell the user that time."
                ),
                input_schema={
                    "type": "object",
                    "properties": {
                        "text": {"type": "string", "description": "What to remind them of, as it "
                                 'should reach them, e.g. "Call the bank about the mortgage".'},
                        "when": {"type": "string", "description": _WHEN},
                        "repeat": {"type": "string", "description": _REPEAT},
                    },
                    "required": ["text"],
                    "additionalProperties": False,
                },
                handler=self._set,
                writes=True,
            ),
            FunctionTool(
                name="list_reminders",
                description="The user's pending reminders in this chat, with their numbers and next times.",
                input_schema={"type": "object", "properties": {}, "additionalProperties": False},
                handler=self._list,
            ),
            FunctionTool(
                name="cancel_reminder",
                description="Cancel one of the user's pending reminders in this chat by its number.",
                input_schema={
                    "type": "object",
                    "properties": {"id": {"type": "integer", "description": "The reminder's number, "
                                          "as set_reminder or list_reminders gave it."}},
                    "required": ["id"],
                    "additionalProperties": False,
                },
                handler=self._cancel,
                writes=True,
            ),
        )

    def tools(self) -> Sequence[Tool]:
        return self._tools

    # -- the handlers ---------------------------------------------------------------------------

    async def _set(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        text, when, repeat = (arguments.get(name) for name in ("text", "when", "repeat"))
        if not isinstance(text, str) or not text.strip():
            return ToolResult.error("`text` is required: what to remind the user of")
        if len(text) > MAX_TEXT:
            return ToolResult.error(f"`text` is {len(text)} characters; keep it under {MAX_TEXT}")
        for name, value in (("when", when), ("repeat", repeat)):
            if value is not None and not isinstance(value, str):
                return ToolResult.error(f"`{name}` must be a string")
        if not when and not repeat:
            return ToolResult.error("give `when` (a time) for a one-time reminder, or `repeat` (a cron "
                                    "line) for a recurring one")
        try:
            zone = _zone(context)
            settings = self._settings()
            if repeat:
                repeat = " ".join(repeat.split())
                repeat_trigger(repeat, zone, settings.min_repeat_seconds())
                # A start in the past is now: times already gone are not caught up.
                start = parse_when(when, context.now, zone).timestamp() if when else context.now
                at = max(start, context.now)
            else:
                assert isinstance(when, str)
                at = future_when(when, context.now, zone).timestamp()
        except ValueError as exc:
            return ToolResult.error(str(exc))
        request = await self._store.message_by_id(context.request_id)
        try:
            reminder = await self._store.add_reminder(
                session_key=str(context.session_key), chat=context.chat, user_id=context.user_id,
                user_name=request.sender_name if request is not None else None, text=text.strip(),
                at=at, repeat=repeat or None, timezone=str(zone), request_message_id=context.request_id,
                max_pending=settings.max_pending,
            )
        except ReminderLimitError as exc:
            return ToolResult.error(f"{exc}; cancel one first (list_reminders shows them)")
        if self._schedule is not None:
            await self._schedule.add(reminder)
        upcoming = next_time(reminder, context.now)
        when_text = describe(upcoming, zone) if upcoming is not None else "never"
        if reminder.repeat is None:
            content = f"reminder #{reminder.id} set for {when_text} ({zone}): {reminder.text}"
            summary = f"reminder #{reminder.id} at {_short(reminder.at, zone)}"
        else:
            content = (f"recurring reminder #{reminder.id} set: cron {reminder.repeat!r} in {zone}, "
                       f"first on {when_text}: {reminder.text}")
            summary = f"reminder #{reminder.id} repeating {reminder.repeat!r}"
        return ToolResult(content=content, summary=summary)

    async def _list(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        try:
            zone = _zone(context)
        except ValueError as exc:
            return ToolResult.error(str(exc))
        reminders = await self._store.pending_reminders(session_key=str(context.session_key),
                                                        user_id=context.user_id)
        if not reminders:
            return ToolResult(content="no pending reminders of this user in this chat",
                              summary="no reminders")
        lines = [_line(reminder, context.now, zone) for reminder in reminders]
        return ToolResult(content="\n".join(lines), summary=f"{len(reminders)} reminders")

    async def _cancel(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        raw = arguments.get("id")
        if isinstance(raw, str) and raw.strip().lstrip("#").isdigit():
            raw = int(raw.strip().lstrip("#"))
        if not isinstance(raw, int) or isinstance(raw, bool):
            return ToolResult.error("`id` must be a reminder's number, as list_reminders shows it")
        cancelled = await self._store.cancel_reminder(raw, session_key=str(context.session_key),
                                                      user_id=context.user_id)
        if cancelled is None:
            return ToolResult.error(f"no pending reminder #{raw} of this user in this chat "
                                    "(list_reminders shows them)")
        if self._schedule is not None:
            self._schedule.remove(cancelled.id)
        return ToolResult(content=f"reminder #{cancelled.id} cancelled: {cancelled.text}",
                          summary=f"reminder #{cancelled.id} cancelled")


def _zone(context: ToolContext) -> ZoneInfo:
    try:
        return ZoneInfo(context.timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"the user's timezone {context.timezone!r} is not a known IANA zone") from exc


def _short(at: float, zone: ZoneInfo) -> str:
    return datetime.fromtimestamp(at, zone).strftime("%H:%M %a %d %b")


def _line(reminder: Reminder, now: float, zone: ZoneInfo) -> str:
    upcoming = next_time(reminder, now)
    when = describe(upcoming, zone) if upcoming is not None else "no next time"
    if reminder.repeat is None:
        late = " (overdue, being sent)" if reminder.at <= now else ""
        return f"#{reminder.id} {when}{late}: {reminder.text}"
    return f"#{reminder.id} repeats {reminder.repeat!r} ({reminder.timezone}), next {when}: {reminder.text}"
