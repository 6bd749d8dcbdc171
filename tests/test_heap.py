"""The daemon's start-up heap: frozen out of the collector's walks once the daemon is ready and its
model SDKs are imported, even when an import fails."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from bot.daemon.heap import settle


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """The test process's heap as it was: whatever a test froze goes back to the collector."""
    gc.unfreeze()
    yield
    gc.unfreeze()


async def test_the_heap_is_frozen_once_ready_and_the_sdks_are_in(unfrozen: None) -> None:
    """Nothing is frozen while the daemon starts; once it is ready and the SDKs (one of which
    cannot be imported) are in, what start-up built is in the permanent generation."""
    daemon = SimpleNamespace(ready=asyncio.Event())
    settling = asyncio.create_task(settle(daemon, ("json", "switchboard_no_such_sdk")))  # type: ignore[arg-type]
    for _ in range(5):
        await asyncio.sleep(0)
    assert not settling.done() and gc.get_freeze_count() == 0
    kept = SimpleNamespace(made="before the freeze")
    daemon.ready.set()
    await settling
    assert gc.get_freeze_count() > 1000
    assert gc.is_tracked(kept) and not any(kept is o for gen in range(3) for o in gc.get_objects(gen))
