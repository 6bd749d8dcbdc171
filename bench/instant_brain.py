"""An in-process Brain that replies and triages at once, so benchmarks measure only our own code."""

from __future__ import annotations

import asyncio

from bot.models.brain import Completion, ReplyRequest, TextSink


class InstantCompleter:
    """Answers every triage prompt at once, choosing the first two units; no I/O."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, prompt: str, *, system: str, model: str, deadline: float) -> Completion:
        self.calls += 1
        return Completion('{"relevant":[1,2]}', model, len(prompt) // 4, 8)


class InstantBrain:
    """A Brain whose reply and fast completion return immediately."""

    def __init__(self, reply_delay: float = 0.0) -> None:
        self.completer = InstantCompleter()
        # A reply delay stands for the model's time where a bench measures what happens meanwhile.
        self.reply_delay = reply_delay

    async def reply(self, request: ReplyRequest, on_text: TextSink | None = None) -> Completion:
        if self.reply_delay:
            await asyncio.sleep(self.reply_delay)
        return Completion("Sure, noted. Anything else?", "bench-main", 120, 7)

    def fast_completer(self) -> InstantCompleter:
        return self.completer

    def model_for(self, role: str) -> str:
        return {"fast": "bench-fast", "main": "bench-main"}.get(role, role)
