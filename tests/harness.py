"""Shared helpers for end-to-end tests: a daemon with the real SDK brain against the API stand-in."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

# The model SDKs load with the suite, before any test runs: a daemon imports them in a thread
# once its channels are up (`bot.models.sdks`), and the tests' short model deadlines (seconds,
# triage half a second) must not pay that import on a loaded machine.
import anthropic as _anthropic_sdk  # noqa: F401
import openai as _openai_sdk  # noqa: F401

from bot.config import Config
from bot.core.messages import ChatRef, InboundMessage
from bot.daemon.assembly import Daemon
from bot.intake.channel import Channel
from bot.intake.router import Router
from bot.models.brain import AnthropicBrain
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest
from bot.testing.fake_channel import FakeChannel

# Re-exported: most end-to-end tests take the model names and `echo` from here with the rest.
from bot.testing.models import API_KEY as API_KEY
from bot.testing.models import FAST as FAST
from bot.testing.models import MODEL as MODEL
from bot.testing.models import STAMP as STAMP
from bot.testing.models import echo as echo
from bot.testing.models import last_user_line as last_user_line
from bot.testing.models import unstamped as unstamped
from bot.testing.preloaded import Preloaded

ROOT = Path(__file__).resolve().parents[1]


def config_data(api: AnthropicStandIn, **sections: dict[str, Any]) -> dict[str, Any]:
    """Config sections for a test daemon: made-up models, small timeouts, the stand-in's URL."""
    anthropic = {
        "base_url": api.base_url, "model": MODEL, "fast_model": FAST,
        # A model call to the local stand-in takes milliseconds, and seconds on a loaded machine.
        "timeout": 20.0, "max_retries": 1,
    }
    anthropic.update(sections.pop("anthropic", {}))
    conversation: dict[str, Any] = {"selection_timeout": 0.5}
    conversation.update(sections.pop("conversation", {}))
    router: dict[str, Any] = {"shutdown_grace": 2.0}
    router.update(sections.pop("router", {}))
    # Semantic recall costs a second and 125 MB per daemon to load: only the tests about it turn it on.
    semantic: dict[str, Any] = {"enabled": "off"}
    semantic.update(sections.pop("semantic", {}))
    return {"anthropic": anthropic, "conversation": conversation, "router": router,
            "semantic": semantic, **sections}


def reply_requests(api: AnthropicStandIn) -> list[RecordedRequest]:
    return api.requests_for(MODEL)


def request_text(request: RecordedRequest) -> str:
    """Everything the model was sent in a request's turns, as one string."""
    return "\n".join(str(m["content"]) for m in request.messages)


def router_of(daemon: Daemon) -> Router:
    assert daemon.router is not None, "the daemon has not started"
    return daemon.router


@asynccontextmanager
async def running(
    config: Config,
    channels: Sequence[Channel],
    brain: AnthropicBrain | None,
    **options: Any,
) -> AsyncIterator[Daemon]:
    """Run a daemon as a task (`options` go to Daemon, e.g. a `clock`; no brain: the daemon builds
    its own from the config); on exit stop it, wait for it, close the brain."""
    daemon = Daemon(config, channels, brain=brain, **options)
    task = asyncio.create_task(daemon.run())
    try:
        # Started (router up, channels running) or failed: a failure surfaces from the task.
        started = asyncio.create_task(daemon.started.wait())
        await asyncio.wait([started, task], timeout=10, return_when=asyncio.FIRST_COMPLETED)
        started.cancel()
        if task.done():
            task.result()
        yield daemon
    finally:
        daemon.request_stop()
        try:
            await asyncio.wait_for(task, timeout=10)
        finally:
            if brain is not None:
                await brain.aclose()


@asynccontextmanager
async def daemon_with(
    config: Config, channel: FakeChannel, *, api_key: str | None = API_KEY
) -> AsyncIterator[Daemon]:
    async with running(config, [channel], AnthropicBrain(config.anthropic, api_key)) as daemon:
        yield daemon


async def turn(daemon: Daemon, channel: FakeChannel, message: InboundMessage) -> None:
    """Inject one message and wait until every queued turn has been answered."""
    await channel.inject(message)
    await router_of(daemon).idle()


async def say(daemon: Daemon, channel: FakeChannel, text: str, **kwargs: Any) -> None:
    await turn(daemon, channel, channel.message(text, **kwargs))


async def wait_until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll a condition with tiny waits (for I/O happening in other tasks)."""
    for _ in range(int(timeout / 0.005)):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"condition not met within {timeout}s")


# What the `switchboard` commands the tests run import before their first answer: the daemon with
# Slack or Telegram and the Anthropic provider, `compact`, `db`, `doctor`, `context` and `replay`.
PRELOAD = ["bot.cli.daemon_commands", "bot.cli.history", "bot.cli.db", "bot.cli.doctor",
           "bot.cli.doctor_models", "bot.cli.doctor_platforms", "bot.cli.context_view",
           "bot.daemon.assembly", "channels.slack.channel", "channels.telegram.channel",
           "bot.models.brain", "bot.store.postgres", "anthropic"]
_zygotes: list[Preloaded] = []


def zygote() -> Preloaded:
    """This test worker's zygote (bot/testing/preloaded.py), started on first use: `switchboard`
    commands forked from a Python that imported their modules once."""
    if not _zygotes:
        _zygotes.append(Preloaded(PRELOAD).start())
    return _zygotes[0]


def close_zygote() -> None:
    for started in _zygotes:
        started.close()


async def switchboard_cli(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """`switchboard ARGS` in a process of its own, forked from this worker's zygote (its imports
    done once), without blocking the loop the stand-ins answer on; (exit code, stdout, stderr)."""
    environ = dict(os.environ)  # already cleaned of secrets by the conftest
    environ.update(env or {})
    return await zygote().run(list(args), cwd=cwd, env=environ, timeout=60)


def chat(channel: FakeChannel, peer: str = "42") -> ChatRef:
    return ChatRef(channel.provider, peer)
