"""The model SDKs load off the event loop, and only where a model is used."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bot.models import sdks as model_sdks
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.telegram_api import TelegramStandIn, private_chat, user
from tests.harness import API_KEY, FAST, MODEL, ROOT, echo

BOT_TOKEN = "7123456789:AAHsdkimporttestTokenValue_0123456789abc"


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


# Makes `import anthropic` take SDK_IMPORT_SECONDS in the daemon below, as it does on a loaded
# machine just after a start (the import is a second of CPU, several when two cores are shared).
SLOW_IMPORT = """
import sys, time
from importlib.abc import MetaPathFinder

class SlowAnthropic(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "anthropic":
            time.sleep({seconds})
        return None

sys.meta_path.insert(0, SlowAnthropic())
"""
SDK_IMPORT_SECONDS = 3.0


async def test_a_slow_sdk_import_is_not_counted_against_the_models_timeout(tmp_path: Path) -> None:
    """A message arriving while the SDK still imports (seconds on a loaded machine after a start)
    gets its reply, not "I couldn't reach the model": the model's timeout (here 1 s, shorter than
    the import) is the provider's time to answer, not this process's own import."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_IMPORT.format(seconds=SDK_IMPORT_SECONDS), encoding="utf-8")
    async with AnthropicStandIn() as api, TelegramStandIn(token=BOT_TOKEN) as tg:
        api.default = echo
        config = tmp_path / "config.toml"
        config.write_text(f"""
[database]
path = "{tmp_path / 'switchboard.db'}"

[anthropic]
base_url = "{api.base_url}"
model = "{MODEL}"
fast_model = "{FAST}"
timeout = 1.0
max_retries = 0

[semantic]
enabled = "off"

[channels.console]
enabled = false

[channels.telegram]
enabled = true
base_url = "{tg.base_url}"
allow_from = [42]
""", encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
               "ANTHROPIC_API_KEY": API_KEY, "TELEGRAM_BOT_TOKEN": BOT_TOKEN}
        env.pop("NOTIFY_SOCKET", None)
        log = tmp_path / "daemon.log"
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot", "run", "--config", str(config), cwd=tmp_path, env=env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=out)
            try:
                await tg.wait_for(lambda: any(c.method == "getUpdates" for c in tg.calls), timeout=60)
                ada = user(42, "Ada", "ada")
                tg.push_message(private_chat(ada), ada, "hello")
                await tg.wait_for(lambda: tg.sent, timeout=60)
            finally:
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), 60)
    assert [m.visible_text for m in tg.sent] == ["re: hello"], log.read_text(encoding="utf-8")[-3000:]
