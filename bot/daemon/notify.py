"""systemd notification: READY/STOPPING/RELOADING/STATUS and watchdog pings over `$NOTIFY_SOCKET`.

The sd_notify protocol is one datagram of `KEY=value` lines to the AF_UNIX socket systemd names in
`$NOTIFY_SOCKET` (a leading '@' means the abstract namespace). Outside systemd the variables are
absent and every call does nothing.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Mapping

import structlog

log = structlog.get_logger("switchboard.notify")


class Notifier:
    """Sends state changes to the service manager; a no-op when not run under `Type=notify`."""

    def __init__(self, address: str | None, watchdog_usec: int | None = None) -> None:
        self._address: str | bytes | None = None
        if address:
            # Abstract-namespace sockets are spelled with '@' in the variable and NUL on the wire.
            self._address = b"\0" + address[1:].encode() if address.startswith("@") else address
        self.watchdog_interval = watchdog_usec / 2_000_000 if watchdog_usec else None
        self._socket: socket.socket | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        """A notifier for `$NOTIFY_SOCKET`, pinging at half of `$WATCHDOG_USEC` when it is for us."""
        env = os.environ if environ is None else environ
        usec: int | None = None
        pid = env.get("WATCHDOG_PID")
        if env.get("WATCHDOG_USEC", "").isdigit() and (not pid or pid == str(os.getpid())):
            usec = int(env["WATCHDOG_USEC"]) or None
        return cls(env.get("NOTIFY_SOCKET") or None, usec)

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def send(self, **fields: str | int) -> bool:
        """Send one datagram of `KEY=value` lines; False (logged) when it could not be sent."""
        if self._address is None:
            return False
        payload = "\n".join(f"{key}={value}" for key, value in fields.items()).encode()
        try:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._socket.setblocking(False)
            self._socket.sendto(payload, self._address)
        except OSError as exc:
            log.warning("could not notify systemd", error=str(exc), fields=sorted(fields))
            return False
        return True

    def ready(self, status: str) -> None:
        self.send(READY=1, STATUS=status)

    def reloading(self) -> None:
        # systemd (253+) wants the monotonic time with RELOADING=1 to match the reload to its end.
        self.send(RELOADING=1, MONOTONIC_USEC=time.monotonic_ns() // 1000, STATUS="reloading config")

    def stopping(self) -> None:
        self.send(STOPPING=1, STATUS="stopping")

    def status(self, text: str) -> None:
        self.send(STATUS=text)

    async def watchdog(self) -> None:
        """Ping the watchdog from the event loop until cancelled, so a wedged loop stops pinging."""
        if self.watchdog_interval is None or self._address is None:
            return
        while True:
            self.send(WATCHDOG=1)
            await asyncio.sleep(self.watchdog_interval)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
