"""The model SDKs load off the event loop, and only where a model is used."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bot.models import sdks as model_sdks
from tests.harness import ROOT


def test_the_daemon_and_the_cli_import_no_model_sdk() -> None:
    """Starting the daemon's and the CLI's modules (the console and Telegram included) imports
    neither the anthropic nor the openai SDK: the first call does, or the daemon once it is up."""
    probe = ("import sys, bot.cli, bot.daemon.assembly, bot.models.providers, bot.models.openai_brain, "
             "channels.telegram.channel, channels.console.channel; "
             "print(sorted({'anthropic', 'openai', 'httpx2'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


async def test_a_module_loads_in_a_thread_of_its_own_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`load` imports in a background thread, and a second load (or a preload) gets the same module."""
    (tmp_path / "sb_probe_sdk.py").write_text(
        "import threading\nLOADED_IN = threading.current_thread().name\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    model_sdks.preload("sb_probe_sdk")
    module = await model_sdks.load("sb_probe_sdk")
    assert module.LOADED_IN == "import sb_probe_sdk" != threading.current_thread().name
    assert await model_sdks.load("sb_probe_sdk") is module


async def test_a_module_that_cannot_load_fails_the_call_that_needs_it() -> None:
    """An SDK that is not installed raises its ImportError in the call that awaits it."""
    with pytest.raises(ModuleNotFoundError):
        await model_sdks.load("sb_no_such_sdk")


async def test_a_call_cancelled_while_the_sdk_imports_leaves_the_import_to_the_next_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn stopped (/stop, a shutdown, a timeout) while it waits for the SDK does not cancel the
    import itself: the next call gets the module, not a CancelledError, for the rest of the run."""
    release = threading.Event()
    monkeypatch.setattr("builtins.sb_gate", release, raising=False)
    (tmp_path / "sb_slow_sdk.py").write_text(
        "import builtins\nbuiltins.sb_gate.wait(30)\nVALUE = 42\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    waiting = asyncio.create_task(model_sdks.load("sb_slow_sdk"))
    await asyncio.sleep(0)  # the call is waiting on the import's thread
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release.set()
    module = await asyncio.wait_for(model_sdks.load("sb_slow_sdk"), 30)
    assert module.VALUE == 42
