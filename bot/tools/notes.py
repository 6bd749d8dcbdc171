"""Notes per user: `remember` and `forget`, and the block of a user's notes in their system prompt."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bot.config import Config
from bot.store import UserNote
from bot.store.seams import NoteStore
from bot.tools.base import FunctionTool, ToolContext, ToolResult
from bot.tools.scope import is_person

NOTE_CHARS = 500
NO_PERSON = ("notes belong to a person; this message was sent on behalf of a group, a channel or "
             "an agent, which keeps none")


def note_tools(store: NoteStore, config: Callable[[], Config]) -> list[FunctionTool]:
    async def remember(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        if not is_person(context.chat.provider, context.user_id):
            return ToolResult.error(NO_PERSON)
        note = " ".join(str(arguments["note"]).split())
        if not note:
            return ToolResult.error("the note is empty")
        if len(note) > NOTE_CHARS:
            return ToolResult.error(f"a note holds at most {NOTE_CHARS} characters; make it shorter")
        limit = config().tools.max_notes
        kept = await store.add_note(context.chat.provider, context.user_id, note,
                                    session_key=str(context.session_key), max_notes=limit)
        if kept is None:
            return ToolResult.error(f"this user already has {limit} notes; forget one first")
        return ToolResult(f"Kept as note #{kept.id}.", f"note #{kept.id} kept")

    async def forget(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        if not is_person(context.chat.provider, context.user_id):
            return ToolResult.error(NO_PERSON)
        note_id = int(arguments["note_id"])
        if not await store.forget_note(context.chat.provider, context.user_id, note_id):
            return ToolResult.error(f"this user has no note #{note_id}")
        return ToolResult(f"Note #{note_id} forgotten.", f"note #{note_id} forgotten")

    return [
        FunctionTool(
            "remember",
            "Keep a short note about the user you are talking to (a preference, a fact they want "
            "you to keep), shown to you in their private chats from now on. Only what they asked "
            "you to remember or clearly want kept.",
            {"type": "object", "properties": {"note": {
                "type": "string", "description": f"the note, at most {NOTE_CHARS} characters"}},
             "required": ["note"], "additionalProperties": False},
            remember, writes=True,
        ),
        FunctionTool(
            "forget",
            "Delete one of the user's notes by its number (the notes you are shown list them).",
            {"type": "object", "properties": {"note_id": {"type": "integer", "minimum": 1}},
             "required": ["note_id"], "additionalProperties": False},
            forget, writes=True,
        ),
    ]


def notes_block(notes: Sequence[UserNote], name: str, cap: int) -> str:
    """The user's notes for the per-turn system prompt, newest kept when `cap` characters run out."""
    if not notes or cap <= 0:
        return ""
    head = f"Notes {name} asked you to keep (`forget` takes the number):"
    lines: list[str] = []
    used = len(head)
    for note in reversed(notes):
        line = f"#{note.id} {note.note}"
        if used + len(line) + 1 > cap:
            break
        lines.append(line)
        used += len(line) + 1
    left_out = len(notes) - len(lines)
    shown = [head, *reversed(lines)]
    if left_out:
        plural = "s" if left_out != 1 else ""
        shown.append(f"[{left_out} older note{plural} not shown: the cap is {cap} characters]")
    return "\n".join(shown)
