"""The two threads every sentence encoding in the process runs on: one for the turns, one (at a
lower priority) for the background embed worker; and glibc's memory given back after each pass."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.ranking.embedding import Encoder, Vectors

# Two threads run every encoding in the process: one for the turns (a request its recall needs now),
# one for the background (the embed worker), each encoding in turn. A forward pass's temporaries
# (a few MB a text, tens for a batch) then live in two malloc arenas: when the default executor's
# threads encoded side by side, each kept its own arena's high-water mark, and glibc, raising its
# mmap threshold after the first large free, served the next ones from those arenas and never gave
# them back (+150 MiB over 2 000 messages, bench/daemon_rss.py). A turn never waits behind the
# worker's batch, and the worker never takes more than one core, and that at a lower priority
# (Linux gives each thread its own nice value): on a busy machine it waits for the turns.
_threads: dict[bool, ThreadPoolExecutor] = {}
BACKGROUND_NICENESS = 10


def single_threaded_blas() -> None:
    """One BLAS thread, unless the environment says otherwise; only before numpy is first imported.

    Encoders run beside the daemon's event loop on small shared machines: OpenBLAS's threads spin
    while they wait for a core, and with the cores busy a 2-thread encode was measured 10× slower
    than a 1-thread one (bench/embedding_speed.py), while idle it is only ~1.5× faster.
    """
    if "numpy" not in sys.modules:
        for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(name, "1")


def _lower_priority() -> None:
    """Raise the calling thread's nice value: Linux keeps one per thread (elsewhere it is the whole
    process's, which is left as it is)."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0) + BACKGROUND_NICENESS)


async def encode_in_thread(encoder: Encoder, texts: Sequence[str], *, urgent: bool = False) -> Vectors:
    """`encoder.encode(texts)` on the turns' encoding thread (`urgent`: a turn waits for it) or the
    background's, the event loop running meanwhile."""
    thread = _threads.get(urgent)
    if thread is None:
        name = "switchboard-encode-" + ("turn" if urgent else "background")
        thread = _threads.setdefault(urgent, ThreadPoolExecutor(
            1, thread_name_prefix=name, initializer=None if urgent else _lower_priority))
    return await asyncio.get_running_loop().run_in_executor(thread, _encode_then_trim, encoder, texts)


def _encode_then_trim(encoder: Encoder, texts: Sequence[str]) -> Vectors:
    try:
        return encoder.encode(texts)
    finally:
        _trim()


def _trim() -> None:
    """Give the pages a pass freed back to the system (glibc's malloc_trim; elsewhere nothing): its
    arena otherwise keeps them for the next one, ~20 MiB over 2 000 messages."""
    global _malloc_trim
    if _malloc_trim is None:
        import ctypes

        try:
            _malloc_trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None  # glibc's malloc_trim once looked up; False where there is none
