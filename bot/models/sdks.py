"""The model SDKs (anthropic, openai): imported off the event loop, and only where a model is used.

Each takes about a second of CPU to import (several on a loaded machine). Imported with the
daemon's modules it would hold back the first poll and the console's first prompt; imported
inside the first model call it would stall the event loop for every chat. So the daemon starts
the import in a thread of its own once its channels are up (`preload`), and a brain's first call
awaits that import (`load`), starting it if nothing has.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import os
import sys
import threading
import time
from collections.abc import Awaitable
from types import ModuleType
from typing import Literal, TypeVar

T = TypeVar("T")

_imports: dict[str, concurrent.futures.Future[ModuleType]] = {}
_guard = threading.Lock()


def preload(*names: str) -> None:
    """Start importing each module in a background thread, once per process."""
    for name in names:
        _import(name)


async def load(name: str) -> ModuleType:
    """The module, imported in a background thread if no import of it has finished yet."""
    future = _import(name)
    if future.done():
        return future.result()
    # Shielded: a waiter cancelled (a /stop, a shutdown) must not cancel the import every later call
    # shares; wrap_future alone would pass the cancellation on to it.
    return await asyncio.shield(asyncio.wrap_future(future))


async def beside_deadline(ready: Awaitable[T], deadline: float) -> tuple[T, float]:
    """`ready`'s result (a client whose SDK may still be importing) and `deadline` moved on by the
    wait: a model call's deadline is the provider's time to answer, and the import is this process's
    own (seconds on a loaded machine just after a start), which must not turn into an apology."""
    began = time.monotonic()
    result = await ready
    return result, deadline + (time.monotonic() - began)


def _import(name: str) -> concurrent.futures.Future[ModuleType]:
    with _guard:
        future = _imports.get(name)
        if future is None:
            future = _imports[name] = concurrent.futures.Future()
            imported = sys.modules.get(name)
            if imported is not None:  # by code of the caller's own
                future.set_result(imported)
            else:  # a daemon thread: a stop during the import does not wait for it
                threading.Thread(target=_run, args=(name, future), name=f"import {name}", daemon=True).start()
    return future


def _run(name: str, future: concurrent.futures.Future[ModuleType]) -> None:
    try:
        future.set_result(importlib.import_module(name))
    except BaseException as exc:  # handed to whoever awaits the import
        future.set_exception(exc)


def anthropic_open_telemetry() -> Literal[False] | None:
    """The Anthropic client's `open_telemetry` option: its own default (None: spans, as its
    environment variables say) where OpenTelemetry may record them (a tracer provider is set or
    named, or `ANTHROPIC_OPEN_TELEMETRY` is), else False. With nothing to record them the SDK would
    still work out every call's span attributes, only to drop the span: a few percent of a turn's CPU.
    """
    if "ANTHROPIC_OPEN_TELEMETRY" in os.environ or os.environ.get("OTEL_PYTHON_TRACER_PROVIDER"):
        return None
    from opentelemetry import trace  # the anthropic SDK's own dependency, imported with it

    return False if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider) else None
