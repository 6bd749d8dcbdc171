"""`switchboard` commands forked from a Python that has imported their modules once.

A test that starts `switchboard run` again and again (killed, then started to see what it resumes)
pays Python's imports each time: about two seconds of CPU for the model SDK, the platform library
and the daemon, ten times that wall time on a loaded machine, where the test is about what the
daemon does after the imports. `Preloaded` starts one process (the zygote) that imports the named
modules and then forks each command from there: the child runs `bot.cli.main(argv)` as the main
module of its own process, with its own environment, working folder, stdin (/dev/null or a file), its
output in a file, its own signals and exit code, and Python's usual shutdown (threads joined,
atexit, output flushed), as `python -m bot ARGV` would, only without importing what the zygote
already had, nor taking it apart at the end.

The child is the zygote's, not the test's, so `Forked.wait()` learns its exit status from the
zygote. The zygote runs no threads and no event loop, so forking it is safe; `random` reseeds
itself in each child. Closing the `Preloaded` (or the test process dying, which closes the
zygote's stdin) SIGKILLs every child still running.

Usage: `async with Preloaded(["anthropic", "channels.slack.channel"]) as zygote:` then
`proc = await zygote.spawn(["run", "--config", path], cwd=..., env=..., log=...)`, or
`code, out, err = await zygote.run([...], cwd=..., env=...)` for a command's output
(`run_blocking` without an event loop).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parent.parent.parent


class Forked:
    """One command forked by the zygote: `pid`, `returncode` once known, `send_signal`, `wait`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited: Future[int] = Future()

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # exited, its status on its way
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def wait(self) -> int:
        """The exit code as `asyncio.subprocess.Process.wait` gives it (-N when killed by signal N)."""
        return await asyncio.shield(asyncio.wrap_future(self._exited))

    def wait_blocking(self, timeout: float) -> int:
        """`wait` for a caller with no event loop; TimeoutError after `timeout` seconds."""
        return self._exited.result(timeout)

    def _exit(self, code: int) -> None:
        self.returncode = code
        self._exited.set_result(code)


class Preloaded:
    """The zygote (see the module). `start()` launches it and returns at once (the imports go on
    meanwhile), `close()` ends it and its children; `with` and `async with` do both. A thread reads
    its reports, so one zygote serves any event loop: a session's tests share one."""

    def __init__(self, modules: Sequence[str]) -> None:
        self.modules = ["bot.cli", *modules]
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._ready: Future[None] = Future()
        self._starting: deque[Future[Forked]] = deque()
        self._children: dict[int, Forked] = {}
        self._lock = threading.Lock()

    def start(self) -> Preloaded:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bot.testing.preloaded", *self.modules], cwd=ROOT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._reader = threading.Thread(target=self._read, name="zygote-reports", daemon=True)
        self._reader.start()
        return self

    def close(self) -> None:
        if self._proc is None:
            return
        assert self._proc.stdin is not None
        self._proc.stdin.close()  # the zygote SIGKILLs its children, reports them and exits
        try:
            self._proc.wait(30)
        finally:
            if self._proc.returncode is None:
                self._proc.kill()
                self._proc.wait()
            if self._reader is not None:
                self._reader.join(30)
            assert self._proc.stdout is not None
            self._proc.stdout.close()

    def __enter__(self) -> Preloaded:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> Preloaded:
        return self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await asyncio.to_thread(self.close)

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        ready = self._proc.stdout.readline()
        if json.loads(ready or b"{}").get("ready") is not True:
            self._ready.set_exception(RuntimeError(f"the zygote did not start: {ready!r}"))
            return
        self._ready.set_result(None)
        while line := self._proc.stdout.readline():
            event = json.loads(line)
            with self._lock:
                if "started" in event:
                    child = self._children[event["started"]] = Forked(event["started"])
                    self._starting.popleft().set_result(child)
                else:
                    self._children.pop(event["exited"])._exit(event["code"])
        with self._lock:
            for waiting in self._starting:
                waiting.set_exception(RuntimeError("the zygote is gone"))

    async def spawn(self, argv: Sequence[str], *, cwd: Path, env: dict[str, str], log: Path,
                    err: Path | None = None) -> Forked:
        """`switchboard ARGV` forked with exactly `env`, in `cwd`; stdout (and stderr, unless `err`
        names another file) appended to `log`."""
        await asyncio.wrap_future(self._ready)
        return await asyncio.wrap_future(self._fork(argv, cwd, env, log, err or log, None))

    def _fork(self, argv: Sequence[str], cwd: Path, env: dict[str, str], out: Path, err: Path,
              stdin: Path | None) -> Future[Forked]:
        assert self._proc is not None and self._proc.stdin is not None, "start() the zygote first"
        request = {"argv": list(argv), "cwd": str(cwd), "env": env, "out": str(out), "err": str(err),
                   "in": str(stdin) if stdin else os.devnull}
        started: Future[Forked] = Future()
        with self._lock:  # the zygote answers starts in the order they were asked
            self._starting.append(started)
            self._proc.stdin.write(json.dumps(request).encode() + b"\n")
            self._proc.stdin.flush()
        return started

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

    def run_blocking(self, argv: Sequence[str], *, cwd: Path, env: dict[str, str], stdin: str = "",
                     timeout: float = 60) -> tuple[int, str, str]:
        """`run` for a caller with no event loop (as `subprocess.run`), `stdin` its input."""
        self._ready.result(timeout)
        with tempfile.TemporaryDirectory(prefix="switchboard-forked-") as scratch:
            out, err, given = Path(scratch) / "out", Path(scratch) / "err", Path(scratch) / "in"
            given.write_text(stdin, encoding="utf-8")
            child = self._fork(argv, cwd, env, out, err, given).result(timeout)
            try:
                code = child.wait_blocking(timeout)
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
    gc.freeze()  # the children's collections then leave the shared pages alone (copy on write)
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
    given = os.open(request["in"], os.O_RDONLY)
    os.dup2(given, 0)
    os.close(given)
    out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    err = out if request["err"] == request["out"] else os.open(
        request["err"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in {out, err}:
        os.close(fd)
    sys.argv = ["switchboard", *request["argv"]]


def finish(request: dict[str, Any]) -> NoReturn:
    """In the child: `switchboard ARGV` to its end, then Python's own exit (non-daemon threads
    joined, atexit handlers run, output flushed) minus taking the zygote's modules apart, which
    costs a second of CPU for the SDKs' thousands of objects and is no part of what a command does."""
    become(request)
    from bot.cli import main

    try:
        main(request["argv"])
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    finish(serve(sys.argv[1:]))
