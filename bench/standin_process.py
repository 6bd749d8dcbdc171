"""A stand-in in a child process: it plays the platform's servers, so its CPU is not charged to us."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp


@asynccontextmanager
async def child_standin(
    module: str, timeout: float, *, ready_within: float = 30.0,
) -> AsyncIterator[tuple[aiohttp.ClientSession, Any]]:
    """Run `python -m module --serve-standin`, which prints one JSON hello line when ready and stops when its
    stdin closes; yields a control session and the hello."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, "--serve-standin",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        line = await asyncio.wait_for(child.stdout.readline(), ready_within)
        if not line:
            raise RuntimeError(f"the stand-in process of {module} exited before it was ready")
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            yield session, json.loads(line)
    finally:
        child.stdin.close()
        try:
            await asyncio.wait_for(child.wait(), 10)
        except TimeoutError:
            child.kill()
            await child.wait()
