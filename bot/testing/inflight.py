"""The requests a stand-in is serving now, so that closing it cancels them (long polls, held streams)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class InFlight:
    """Handlers register while they serve; `cancel` stops every one still running and waits."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    @contextmanager
    def serving(self) -> Iterator[None]:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            yield
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def cancel(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
