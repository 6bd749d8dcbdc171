"""In-process fakes of the outside world for core tests: a lease clock the test moves by hand.
(The fake channel and the recording intake are part of the test kit, in `bot.testing`.)"""

from __future__ import annotations

import asyncio
import time

from bot.intake.session_lease import LeaseClock


class MovedClock(LeaseClock):
    """A lease clock that stands still until the test moves it (`advance`): a sleep ends once the
    clock has passed its end, and `asleep` waits until the code waits on the clock, which is how a
    test knows the code has done what it does before its next look."""

    def __init__(self) -> None:
        self.elapsed = 0.0
        self._monotonic, self._wall = time.monotonic(), time.time()
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []
        self._slept = asyncio.Event()

    def monotonic(self) -> float:
        return self._monotonic + self.elapsed

    def time(self) -> float:
        return self._wall + self.elapsed

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        entry = (self.elapsed + seconds, asyncio.get_running_loop().create_future())
        self._sleepers.append(entry)
        self._slept.set()
        try:
            await entry[1]
        finally:
            if entry in self._sleepers:
                self._sleepers.remove(entry)

    def advance(self, seconds: float) -> None:
        """Move the clock on, ending the sleeps it passes (their tasks run at the loop's next turn:
        moving the clock without awaiting is time passing while the loop is blocked)."""
        self.elapsed += seconds
        for entry in [e for e in self._sleepers if e[0] <= self.elapsed]:
            self._sleepers.remove(entry)
            if not entry[1].done():
                entry[1].set_result(None)

    async def asleep(self, count: int = 1, timeout: float = 30.0) -> None:
        """Return once `count` tasks wait on the clock."""
        async with asyncio.timeout(timeout):
            while len(self._sleepers) < count:
                self._slept.clear()
                await self._slept.wait()
