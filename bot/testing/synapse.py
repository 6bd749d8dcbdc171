"""A real Matrix homeserver for the tests: Synapse from PyPI in a virtualenv of its own, cached
between runs, started on 127.0.0.1 with SQLite in a temporary directory, stopped at the end.

The first use on a machine installs `matrix-synapse` (pinned below) into
`~/.cache/switchboard-test/synapse-<version>` (`SWITCHBOARD_TEST_CACHE` moves the cache), under a
file lock so that two test workers install it once; later runs only start it. `python -m
bot.testing.synapse` installs it ahead (`.ci/run` does, so the suite pays only for starting).
Each server gets the config `--generate-config` would write (a signing key, secrets), written
here rather than by a second run of Synapse, with what a test server needs: one client listener on a
free loopback port, SQLite, no presence, no key servers, and rate limits relaxed unless the test
passes its own (`rate_limits`). Users are made with the shared-secret admin API
(`/_synapse/admin/v1/register`), each getting an access token; `limit_messages` gives one user a
rate limit of its own (the admin API's `override_ratelimit`).
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SYNAPSE_VERSION = "1.163.2"
START_TIMEOUT = 180.0  # a loaded machine's first start creates the whole schema
_RELAXED = {"per_second": 1000, "burst_count": 10000}
# Every limit a test could trip by writing quickly; a test that wants one passes `rate_limits`.
RELAXED_LIMITS: dict[str, Any] = {
    "rc_message": _RELAXED,
    "rc_registration": _RELAXED,
    "rc_login": {"address": _RELAXED, "account": _RELAXED, "failed_attempts": _RELAXED},
    "rc_joins": {"local": _RELAXED, "remote": _RELAXED},
    "rc_joins_per_room": _RELAXED,
    "rc_invites": {"per_room": _RELAXED, "per_user": _RELAXED, "per_issuer": _RELAXED},
    "rc_room_creation": _RELAXED,
    "rc_admin_redaction": _RELAXED,
}


def cache_root() -> Path:
    return Path(os.environ.get("SWITCHBOARD_TEST_CACHE") or Path.home() / ".cache" / "switchboard-test")


def install(version: str = SYNAPSE_VERSION) -> Path:
    """The python of a virtualenv holding matrix-synapse `version`, installing it on first use."""
    home = cache_root() / f"synapse-{version}"
    python = home / "bin" / "python"
    done = home / ".installed"
    if done.exists():
        return python
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"synapse-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be installing it right now
        if done.exists():
            return python
        shutil.rmtree(home, ignore_errors=True)  # a half-made one from an interrupted install
        _run([sys.executable, "-m", "venv", str(home)])
        _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              f"matrix-synapse=={version}"])
        done.write_text(f"matrix-synapse=={version}\n")
    return python


def _run(argv: list[str], cwd: Path | None = None) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=cwd)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-2000:]}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class MatrixAccount:
    """A user made on the test server, with an access token of its own device."""

    user_id: str
    access_token: str
    device_id: str


class SynapseServer:
    """One throwaway homeserver: `start()`, `register(name)`, `base_url`, `stop()`."""

    def __init__(self, *, server_name: str = "localhost", rate_limits: dict[str, Any] | None = None,
                 version: str = SYNAPSE_VERSION) -> None:
        self.server_name = server_name
        self.version = version
        self._limits = {**RELAXED_LIMITS, **(rate_limits or {})}
        self.root = Path(tempfile.mkdtemp(prefix="switchboard-synapse-"))
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._secret = ""
        self._count = 0
        self._admin: MatrixAccount | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The homeserver's process id while it runs (a bench reads its CPU time)."""
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        python = install(self.version)
        config = self.root / "homeserver.yaml"
        self._secret = secrets.token_hex(16)
        self.port = free_port()
        # What `--generate-config` would write (a second start of Synapse's imports, half the
        # start's time), with a signing key of our own, then what a test server needs: one client
        # listener on a free loopback port, SQLite, no presence, no key servers. JSON is YAML.
        key = self.root / f"{self.server_name}.signing.key"
        seed = base64.b64encode(secrets.token_bytes(32)).decode().rstrip("=")  # signedjson's form
        key.write_text(f"ed25519 a_{secrets.token_hex(2)} {seed}\n", encoding="utf-8")
        config.write_text(json.dumps({
            "server_name": self.server_name, "pid_file": str(self.root / "homeserver.pid"),
            "media_store_path": str(self.root / "media_store"), "signing_key_path": str(key),
            "macaroon_secret_key": secrets.token_hex(32), "form_secret": secrets.token_hex(32),
            "listeners": [{"port": self.port, "bind_addresses": ["127.0.0.1"], "type": "http",
                           "tls": False, "x_forwarded": False,
                           "resources": [{"names": ["client"], "compress": False}]}],
            "database": {"name": "sqlite3", "args": {"database": str(self.root / "homeserver.db")}},
            "log_config": str(self._log_config()),
            "registration_shared_secret": self._secret,
            "trusted_key_servers": [], "suppress_key_server_warning": True,
            "presence": {"enabled": False}, "url_preview_enabled": False,
            "enable_metrics": False, "report_stats": False, "bcrypt_rounds": 4,
            **self._limits,
        }))
        with open(self.root / "stdout.log", "wb") as log:
            self._process = subprocess.Popen(
                [str(python), "-m", "synapse.app.homeserver", "-c", str(config)],
                cwd=self.root, stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _log_config(self) -> Path:
        """Warnings and worse to a file in the server's directory (read when it fails to start)."""
        path = self.root / "log.yaml"
        path.write_text(json.dumps({
            "version": 1,
            "formatters": {"plain": {"format": "%(asctime)s %(name)s %(levelname)s %(message)s"}},
            "handlers": {"file": {"class": "logging.FileHandler", "formatter": "plain",
                                  "filename": str(self.root / "homeserver.log")}},
            "root": {"level": "WARNING", "handlers": ["file"]},
            "disable_existing_loggers": False,
        }))
        return path

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"Synapse exited ({self._process.returncode}): {self._log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/_matrix/client/versions", timeout=2):
                    return
            except (OSError, urllib.error.URLError):
                time.sleep(0.1)
        raise RuntimeError(f"Synapse did not answer within {START_TIMEOUT:.0f} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        parts = [p.read_text(errors="replace")[-1500:] for p in
                 (self.root / "stdout.log", self.root / "homeserver.log") if p.exists()]
        return "\n".join(parts)

    def register(self, name: str | None = None, *, admin: bool = False,
                 password: str = "correct horse battery") -> MatrixAccount:
        """A new user (`name`, else user<n>) through the shared-secret admin API."""
        self._count += 1
        name = name or f"user{self._count}"
        url = f"{self.base_url}/_synapse/admin/v1/register"
        nonce = _request("GET", url)["nonce"]
        mac = hmac.new(self._secret.encode(), digestmod=hashlib.sha1)
        mac.update(b"\x00".join([nonce.encode(), name.encode(), password.encode(),
                                 b"admin" if admin else b"notadmin"]))
        made = _request("POST", url, {"nonce": nonce, "username": name, "password": password,
                                      "admin": admin, "mac": mac.hexdigest()})
        return MatrixAccount(made["user_id"], made["access_token"], made["device_id"])

    def limit_messages(self, user_id: str, per_second: float, burst_count: int) -> None:
        """A rate limit of its own on one user's messages (the admin API's override): a test
        that wants `M_LIMIT_EXCEEDED` gets it without slowing the other tests' users."""
        if self._admin is None:
            self._admin = self.register("synapse-admin", admin=True)
        quoted = urllib.parse.quote(user_id)
        _request("POST", f"{self.base_url}/_synapse/admin/v1/users/{quoted}/override_ratelimit",
                 {"messages_per_second": per_second, "burst_count": burst_count},
                 token=self._admin.access_token)

    def stop(self) -> None:
        try:
            if self._process is not None and self._process.poll() is None:
                self._process.terminate()
                try:
                    self._process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _request(method: str, url: str, body: dict[str, Any] | None = None, *, token: str | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"{method} {url}: HTTP {exc.code} {exc.read()[:500]!r}") from exc


if __name__ == "__main__":  # python -m bot.testing.synapse: install ahead of the tests
    started = time.monotonic()
    print(install(), f"({time.monotonic() - started:.1f} s)")
