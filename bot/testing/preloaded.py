"""`switchboard` commands forked from a Python that has imported their modules once.

A test that starts `switchboard run` again and again (killed, then started to see what it resumes)
pays Python's imports each time: about two seconds of CPU for the model SDK, the platform library
and the daemon, ten times that wall time on a loaded machine, where the test is about what the
daemon does after the imports. `Preloaded` starts one process (the zygote) that imports the named
modules and then forks each command from there: the child runs `bot.cli.main(argv)` as the main
module of its own process, with its own environment, working folder, stdin from /dev/null, its
output in a file, its own signals and exit code, and Python's usual shutdown (threads joined,
atexit), as `python -m bot ARGV` would, only without importing what the zygote already had.

The child is the zygote's, not the test's, so `Forked.wait()` learns its exit status from the
zygote. The zygote runs no threads and no event loop, so forking it is safe; `random` reseeds
itself in each child. Closing the `Preloaded` (or the test process dying, which closes the
zygote's stdin) SIGKILLs every child still running.

Usage: `async with Preloaded(["anthropic", "channels.slack.channel"]) as zygote:` then
`proc = await zygote.spawn(["run", "--config", path], cwd=..., env=..., log=...)`, or
`code, out, err = await zygote.run([...], cwd=..., env=...)` for a command's output.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import select
import signal
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent


class Forked:
    """One command forked by the zygote: `pid`, `returncode` once known, `send_signal`, `wait`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # exited, its status on its way
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def wait(self) -> int:
        """The exit code as `asyncio.subprocess.Process.wait` gives it (-N when killed by signal N)."""
        return await asyncio.shield(self._exited)

    def _exit(self, code: int) -> None:
        self.returncode = code
        if not self._exited.done():
            self._exited.set_result(code)


class Preloaded:
    """The zygote: an async context manager that forks `switchboard` commands (see the module)."""

    def __init__(self, modules: Sequence[str]) -> None:
        self.modules = ["bot.cli", *modules]
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._starting: list[asyncio.Future[Forked]] = []
        self._children: dict[int, Forked] = {}
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> Preloaded:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.testing.preloaded", *self.modules, cwd=ROOT, env=env,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        assert self._proc.stdout is not None
        ready = await self._proc.stdout.readline()
        if json.loads(ready or b"{}").get("ready") is not True:
            raise RuntimeError(f"the zygote did not start: {ready!r}")
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.close()  # the zygote SIGKILLs its children and exits
        try:
            await asyncio.wait_for(self._proc.wait(), 30)
        finally:
            if self._proc.returncode is None:
                self._proc.kill()
                await self._proc.wait()
            if self._reader is not None:
                await asyncio.wait_for(self._reader, 30)

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        while line := await self._proc.stdout.readline():
            event = json.loads(line)
            if "started" in event:
                child = Forked(event["started"])
                self._children[child.pid] = child
                self._starting.pop(0).set_result(child)
            else:
                self._children.pop(event["exited"])._exit(event["code"])
        for waiting in self._starting:
            waiting.set_exception(RuntimeError("the zygote is gone"))

    async def spawn(self, argv: Sequence[str], *, cwd: Path, env: dict[str, str], log: Path,
                    err: Path | None = None) -> Forked:
        """`switchboard ARGV` forked with exactly `env`, in `cwd`; stdout (and stderr, unless `err`
        names another file) appended to `log`."""
        assert self._proc is not None and self._proc.stdin is not None
        request = {"argv": list(argv), "cwd": str(cwd), "env": env, "out": str(log),
                   "err": str(err or log)}
        async with self._lock:  # the zygote answers starts in order
            started: asyncio.Future[Forked] = asyncio.get_running_loop().create_future()
            self._starting.append(started)
            self._proc.stdin.write(json.dumps(request).encode() + b"\n")
            await self._proc.stdin.drain()
            return await started

    async def run(self, argv: Sequence[str], *, cwd: Path, env: dict[str, str],
                  timeout: float = 60) -> tuple[int, str, str]:
        """`switchboard ARGV` to its end: (exit code, stdout, stderr)."""
        with tempfile.TemporaryDirectory(prefix="switchboard-forked-") as scratch:
            out, err = Path(scratch) / "out", Path(scratch) / "err"
            child = await self.spawn(argv, cwd=cwd, env=env, log=out, err=err)
            try:
                code = await asyncio.wait_for(child.wait(), timeout)
            finally:
                child.kill()
            return code, out.read_text(encoding="utf-8"), err.read_text(encoding="utf-8")


# -- the zygote's side ---------------------------------------------------------------------------


def _say(event: dict[str, Any]) -> None:
    os.write(1, json.dumps(event).encode() + b"\n")


def serve(modules: Sequence[str]) -> dict[str, Any]:
    """Import `modules`, then fork a child per request line on stdin and report its pid and exit
    status on stdout. Returns only in a child, with its request; exits when stdin closes."""
    for name in modules:
        importlib.import_module(name)
    assert threading.active_count() == 1, "a preloaded module started a thread: forking is unsafe"
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wake_write)
    children: set[int] = set()
    pending = b""
    _say({"ready": True})
    while True:
        try:
            readable, _, _ = select.select([0, wake_read], [], [])
        except InterruptedError:
            continue
        if wake_read in readable:
            os.read(wake_read, 512)
            _reap(children)
        if 0 not in readable:
            continue
        data = os.read(0, 65536)
        if not data:
            for pid in children:
                os.kill(pid, signal.SIGKILL)
            while children:
                pid, status = os.waitpid(-1, 0)
                children.discard(pid)
                _say({"exited": pid, "code": os.waitstatus_to_exitcode(status)})
            os._exit(0)  # nothing to flush; tearing the imported modules down costs a second
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(wake_read)
                os.close(wake_write)
                return dict(request)
            children.add(pid)
            _say({"started": pid})


def _reap(children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _say({"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def become(request: dict[str, Any]) -> None:
    """In the child: take the request's environment, folder and files, as a fresh process has."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    err = out if request["err"] == request["out"] else os.open(
        request["err"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in {out, err}:
        os.close(fd)
    sys.argv = ["switchboard", *request["argv"]]


if __name__ == "__main__":
    asked = serve(sys.argv[1:])
    become(asked)
    from bot.cli import main

    main(asked["argv"])
