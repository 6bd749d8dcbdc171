"""The daemon's time per turn through the OpenAI-compatible path against the Anthropic path.

Usage: .venv/bin/python -m bench.provider_overhead [--turns 200] [--repeat 3]

The real `Daemon` (store, router, context builder, turn runner, tool loop with the built-in tools
offered) with an in-process channel, answering through the real SDK brains against local
stand-ins that answer at once (a three-chunk streamed reply): the anthropic SDK against the
Messages API stand-in (`[anthropic]` only, the single-provider brain), and the openai SDK against
the OpenAI-compatible stand-in (`[providers.local]` with `[roles]`, the brain by role). Triage is
off so each turn makes one model call. Per path (median, p95 over `--turns` sequential turns, best
of `--repeat` runs): the whole turn, its model call (SDK, HTTP to 127.0.0.1, the stand-in, parsing
the stream) and the rest (the daemon's own work), read from the `turn` log line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from bot.config import parse_config
from bot.core.log import configure_logging
from bot.daemon.assembly import Daemon
from bot.testing.anthropic_api import AnthropicStandIn, Text
from bot.testing.fake_channel import FakeChannel
from bot.testing.openai_api import OpenAIStandIn, Reply


def config_for(path: str, tmp: str, api: AnthropicStandIn, local: OpenAIStandIn) -> Any:
    data: dict[str, Any] = {
        "database": {"path": str(Path(tmp) / f"{path}.db")},
        "anthropic": {"base_url": api.base_url, "model": "bench-main", "fast_model": "bench-fast",
                      "timeout": 10.0, "max_retries": 0},
        "conversation": {"use_selection": False},
        "semantic": {"enabled": "off"},
        "compaction": {"enabled": False},
    }
    if path == "openai":
        data["providers"] = {"local": {"kind": "openai", "base_url": local.base_url, "timeout": 10.0,
                                       "max_retries": 0}}
        data["roles"] = {"main": "local:bench-main", "fast": "local:bench-fast"}
    return parse_config(data, str(Path(tmp) / "config.toml"))


async def one_run(path: str, turns: int, api: AnthropicStandIn, local: OpenAIStandIn) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        channel = FakeChannel()
        daemon = Daemon(config_for(path, tmp, api, local), [channel])
        task = asyncio.create_task(daemon.run())
        await asyncio.wait_for(daemon.started.wait(), 10)
        assert daemon.router is not None
        try:
            with capture_logs() as logs:
                for n in range(turns):
                    await channel.inject(channel.message(f"message number {n}", peer=str(n % 10)))
                    await daemon.router.idle()
        finally:
            daemon.request_stop()
            await asyncio.wait_for(task, 30)
        lines = [line for line in logs if line["event"] == "turn"]
        assert len(lines) == turns and not any(line["error"] for line in lines), lines[:1]
        return lines


def summary(lines: list[dict[str, Any]]) -> tuple[float, float, float, float, float, float]:
    total = sorted(line["total_ms"] for line in lines)
    model = sorted(line["model_ms"] for line in lines)
    rest = sorted(line["total_ms"] - line["model_ms"] for line in lines)

    def p95(values: list[float]) -> float:
        return values[int(len(values) * 0.95) - 1]

    return (statistics.median(total), p95(total), statistics.median(model), p95(model),
            statistics.median(rest), p95(rest))


async def run(args: argparse.Namespace) -> None:
    os.environ["ANTHROPIC_API_KEY"] = "bench-key"
    async with AnthropicStandIn() as api, OpenAIStandIn() as local:
        api.default = lambda rec: Text("Sure, noted. Anything else?")
        local.default = lambda rec: Reply("Sure, noted. Anything else?")
        print(f"{args.turns} sequential turns per run, best median of {args.repeat} runs; ms")
        print(f"{'path':<10} {'turn med':>9} {'p95':>7} {'model med':>10} {'p95':>7} "
              f"{'daemon med':>11} {'p95':>7}")
        for path in ("anthropic", "openai"):
            runs = [summary(await one_run(path, args.turns, api, local)) for _ in range(args.repeat)]
            best = min(runs)
            print(f"{path:<10} {best[0]:>9.2f} {best[1]:>7.2f} {best[2]:>10.2f} {best[3]:>7.2f} "
                  f"{best[4]:>11.2f} {best[5]:>7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("command: .venv/bin/python -m bench.provider_overhead " + " ".join(sys.argv[1:]))
    with open(os.devnull, "w") as sink:
        configure_logging("INFO", "json", secrets=[], stream=sink)
        asyncio.run(run(args))
    print(f"load average {os.getloadavg()[0]:.2f} (other processes share the machine)")


if __name__ == "__main__":
    main()
