"""The daemon process's heap once it has started: what start-up built is set aside from the
collector.

Start-up (the daemon's modules, the platform libraries, then the model SDKs imported after the
first poll) leaves a couple of hundred thousand objects that live as long as the process. Each of
CPython's full collections walks every tracked object, so on a busy daemon each costs the event
loop tens of milliseconds while turns wait, for objects that never become garbage. Once the SDKs
are in, one collection clears start-up's garbage and `gc.freeze()` moves what is left to the
permanent generation, which collections never walk: a full collection then walks what the running
daemon made, and comes as often as before (its trigger counts objects that survived since).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Iterable

import structlog

from bot.daemon.assembly import Daemon, serve
from bot.models import sdks as model_sdks

log = structlog.get_logger("switchboard.daemon")


async def serve_settled(daemon: Daemon, sdks: Iterable[str]) -> None:
    """`serve(daemon)`, with start-up's heap frozen once the daemon is ready and `sdks` imported."""
    settling = asyncio.create_task(settle(daemon, tuple(sdks)), name="heap settles")
    try:
        await serve(daemon)
    finally:
        settling.cancel()


async def settle(daemon: Daemon, sdks: tuple[str, ...]) -> None:
    """Once the channels are up and the SDKs imported (a failed import is its callers' to
    report): collect once, then freeze what survives."""
    await daemon.ready.wait()
    for name in sdks:
        with contextlib.suppress(Exception):
            await model_sdks.load(name)
    collected = gc.collect()
    gc.freeze()
    log.debug("start-up heap frozen", objects=gc.get_freeze_count(), collected=collected)
