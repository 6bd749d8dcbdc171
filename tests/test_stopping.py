"""A platform request raced against a channel's stop (`bot.core.stopping.unless_stopped`)."""

from __future__ import annotations

import asyncio

from bot.core.stopping import unless_stopped


async def test_a_stop_cancels_the_waiting_request_and_gives_none() -> None:
    stopped, cancelled = asyncio.Event(), asyncio.Event()

    async def long_poll() -> list[int]:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return [1]

    asyncio.get_running_loop().call_soon(stopped.set)
    assert await asyncio.wait_for(unless_stopped(long_poll(), stopped), 10) is None
    assert cancelled.is_set()


async def test_a_batch_that_arrived_with_the_stop_is_still_handed_over() -> None:
    stopped = asyncio.Event()

    async def answered() -> list[int]:
        stopped.set()  # the stop comes while the answer is already there
        return [7]

    assert await unless_stopped(answered(), stopped) == [7]
