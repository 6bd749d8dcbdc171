"""A platform request raced against the channel's stop, so a long poll never holds a stop up."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def unless_stopped(step: Awaitable[T], stopped: asyncio.Event) -> T | None:
    """`step`'s result, or None when `stopped` was set first (the step is then cancelled and waited
    for). A result that arrived together with the stop is still returned: it may hold updates that
    must be handed over."""
    task = asyncio.ensure_future(step)
    stopping = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait([task])
    return None if task.cancelled() else task.result()
