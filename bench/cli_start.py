"""How long the `switchboard` command takes to start, beside a bare interpreter.

Usage: .venv/bin/python -m bench.cli_start [--runs 10]

Each figure is a whole process, median and max over `--runs`: `python -c pass`, then
`switchboard --version`, `switchboard status` with a config and no daemon running (it exits 3
after reading the config and finding no control socket), and `switchboard chat` on a terminal (a
pty) up to its first `you>` prompt, with the shipped example config (the console on, the model
never called). Targets (issue 33): `--version` and `status` at most 0.4 s above the bare
interpreter; the first prompt within 2 s.
"""

from __future__ import annotations

import argparse
import os
import pty
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWITCHBOARD = Path(sys.executable).with_name("switchboard")
PROMPT = b"you>"  # prompt_toolkit draws it with escape codes around it


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    return time.perf_counter() - started


def to_prompt(cwd: Path, env: dict[str, str], timeout: float = 30.0) -> float:
    """Seconds from spawning `switchboard chat` on a pty to its first prompt on the screen."""
    main, child = pty.openpty()
    started = time.perf_counter()
    proc = subprocess.Popen([str(SWITCHBOARD), "chat"], cwd=cwd, env=env, stdin=child, stdout=child,
                            stderr=child, close_fds=True)
    os.close(child)
    seen = b""
    try:
        while PROMPT not in seen:
            if time.perf_counter() - started > timeout:
                return float("nan")
            ready, _, _ = select.select([main], [], [], 0.05)
            if ready:
                try:
                    seen += os.read(main, 4096)
                except OSError:  # the child closed the terminal: it exited
                    return float("nan")
        return time.perf_counter() - started
    finally:
        proc.kill()
        proc.wait()
        os.close(main)


def spread(label: str, values: list[float], target: str = "") -> str:
    return (f"  {label:<34} median {statistics.median(values):6.3f} s  max {max(values):6.3f} s"
            + (f"  {target}" if target else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sb-cli-") as tmp:
        workdir = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "SWITCHBOARD_"))}
        env |= {"ANTHROPIC_API_KEY": "sk-ant-bench-not-a-key", "TERM": "xterm"}
        subprocess.run([str(SWITCHBOARD), "init"], cwd=workdir, env=env, capture_output=True, check=True)
        runs: dict[str, Callable[[], float]] = {
            "python -c pass": lambda: timed([sys.executable, "-c", "pass"], workdir, env),
            "switchboard --version": lambda: timed([str(SWITCHBOARD), "--version"], workdir, env),
            "switchboard status (no daemon)": lambda: timed([str(SWITCHBOARD), "status"], workdir, env),
            "switchboard chat → first prompt": lambda: to_prompt(workdir, env),
        }
        figures = {label: [run() for _ in range(args.runs)] for label, run in runs.items()}
    bare = statistics.median(figures["python -c pass"])
    print(f"switchboard's start, {args.runs} runs each; load average {os.getloadavg()[0]:.2f}")
    for label, values in figures.items():
        target = ""
        if label.startswith(("switchboard --version", "switchboard status")):
            above = statistics.median(values) - bare
            verdict = "met" if above <= 0.4 else "MISSED"
            target = f"{above:+.3f} s above the interpreter (target ≤ 0.4 s: {verdict})"
        elif label.startswith("switchboard chat"):
            median = statistics.median(values)
            target = f"target ≤ 2 s: {'met' if median <= 2 else 'MISSED'}"
        print(spread(label, values, target))


if __name__ == "__main__":
    main()
