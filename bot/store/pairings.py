"""Pairing: strangers' requests to talk to the bot, their codes, and the admin's decisions.

One row per user and platform. A request is pending with a short code until it expires or an
admin decides; an approval lets the user in at once (the channels ask the store about every user
their allowlist does not know) and for good; a denial keeps them out until approved by id.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Literal

from bot.store.database import Database

# No 0/O, 1/I/L: a code read off a phone screen and typed into a terminal must not be misread.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8

PairingStatus = Literal["pending", "approved", "denied"]


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normal_code(code: str) -> str:
    """A code as typed by an admin (any case, spaces or dashes) in its stored form."""
    return "".join(ch for ch in code.upper() if ch.isalnum())


@dataclass(frozen=True, slots=True)
class PairingState:
    """Where a user stands, and whether they should be told (at most one notice an interval)."""

    status: PairingStatus
    code: str | None = None
    expires_at: float | None = None
    notify: bool = False


@dataclass(frozen=True, slots=True)
class Pairing:
    """One row, as `switchboard pairing list` shows it."""

    provider: str
    user_id: str
    status: PairingStatus
    code: str | None
    user_name: str | None
    requested_at: float
    expires_at: float | None
    decided_at: float | None


class PairingError(Exception):
    """An approval or denial that cannot be applied (unknown or expired code)."""


class Pairings(Database):
    """Writes and reads of the `pairings` table."""

    async def pairing_status(self, provider: str, user_id: str) -> PairingStatus | None:
        rows = await self._conn.execute_fetchall(
            "SELECT status FROM pairings WHERE provider = ? AND user_id = ?", (provider, user_id)
        )
        row = next(iter(rows), None)
        return row[0] if row is not None else None

    async def request_pairing(
        self, provider: str, user_id: str, user_name: str | None, *, now: float, ttl: float,
        notice_interval: float, chat_id: str | None = None,
    ) -> PairingState:
        """The user's standing, creating (or renewing, once expired) their pending code.

        A user asking again before the code expires gets the same code; `notify` is set at most
        once per `notice_interval`, and whenever a new code is made.
        """
        if await self.pairing_status(provider, user_id) == "approved":  # the common case: no write
            return PairingState("approved")
        async with self._transaction():
            await self._serialize("pairing", provider, user_id)
            rows = await self._conn.execute_fetchall(
                "SELECT status, code, expires_at, notified_at FROM pairings "
                "WHERE provider = ? AND user_id = ?", (provider, user_id),
            )
            row = next(iter(rows), None)
            if row is not None and row[0] == "approved":
                return PairingState("approved")
            due = row is None or row[3] is None or now - row[3] >= notice_interval
            if row is not None and row[0] == "denied":
                if due:
                    await self._notified(provider, user_id, now)
                return PairingState("denied", notify=due)
            if row is not None and row[2] is not None and row[2] > now:
                if due:
                    await self._notified(provider, user_id, now)
                return PairingState("pending", row[1], row[2], notify=due)
            code = await self._unused_code(now)
            await self._conn.execute(
                "INSERT INTO pairings (provider, user_id, status, code, user_name, requested_at, "
                "expires_at, notified_at, chat_id) VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (provider, user_id) DO UPDATE SET status = 'pending', code = excluded.code, "
                "user_name = excluded.user_name, requested_at = excluded.requested_at, "
                "expires_at = excluded.expires_at, notified_at = excluded.notified_at, decided_at = NULL, "
                "chat_id = COALESCE(excluded.chat_id, pairings.chat_id)",
                (provider, user_id, code, user_name, now, now + ttl, now, chat_id),
            )
            return PairingState("pending", code, now + ttl, notify=True)

    async def _notified(self, provider: str, user_id: str, now: float) -> None:
        await self._conn.execute(
            "UPDATE pairings SET notified_at = ? WHERE provider = ? AND user_id = ?",
            (now, provider, user_id),
        )

    async def _unused_code(self, now: float) -> str:
        while True:
            code = new_code()
            taken = await self._conn.execute_fetchall(
                "SELECT 1 FROM pairings WHERE code = ? AND status = 'pending' AND expires_at > ?",
                (code, now),
            )
            if not list(taken):
                return code

    async def decide_pairing(self, code: str, approve: bool, *, now: float) -> Pairing:
        """Approve or deny the pending request with this code; PairingError when there is none
        (or it expired: the user then asks again and gets a new one)."""
        wanted = normal_code(code)
        async with self._transaction():
            rows = await self._conn.execute_fetchall(
                "SELECT provider, user_id, expires_at FROM pairings WHERE code = ? AND status = 'pending' "
                "ORDER BY requested_at DESC", (wanted,),
            )
            row = next(iter(rows), None)
            if row is None:
                raise PairingError(f"no pending request has the code {wanted} "
                                   "(see `switchboard pairing list`)")
            if row[2] is not None and row[2] <= now:
                raise PairingError(f"the code {wanted} has expired; the user gets a new one by "
                                   "writing again, or approve them by id (--user)")
            await self._decide(row[0], row[1], approve, now)
        return await self._pairing(row[0], row[1])

    async def decide_user(self, provider: str, user_id: str, approve: bool, *, now: float) -> Pairing:
        """Approve or deny a user by id, whether or not they asked (a denial revokes an approval)."""
        async with self._transaction():
            await self._conn.execute(
                "INSERT INTO pairings (provider, user_id, status, requested_at) VALUES (?, ?, 'pending', ?) "
                "ON CONFLICT (provider, user_id) DO NOTHING", (provider, user_id, now),
            )
            await self._decide(provider, user_id, approve, now)
        return await self._pairing(provider, user_id)

    async def _decide(self, provider: str, user_id: str, approve: bool, now: float) -> None:
        # A decision ends the code's life; the next notice (a denied user's) is due at once.
        await self._conn.execute(
            "UPDATE pairings SET status = ?, code = NULL, expires_at = NULL, decided_at = ?, "
            "notified_at = NULL, welcomed_at = NULL WHERE provider = ? AND user_id = ?",
            ("approved" if approve else "denied", now, provider, user_id),
        )

    async def unwelcomed_approvals(self) -> list[tuple[str, str, str]]:
        """(provider, user id, private chat id) of users approved since they asked and not yet told."""
        rows = await self._conn.execute_fetchall(
            "SELECT provider, user_id, chat_id FROM pairings "
            "WHERE status = 'approved' AND welcomed_at IS NULL AND chat_id IS NOT NULL"
        )
        return [(str(row[0]), str(row[1]), str(row[2])) for row in rows]

    async def mark_welcomed(self, provider: str, user_id: str, *, now: float) -> None:
        async with self._transaction():
            await self._conn.execute(
                "UPDATE pairings SET welcomed_at = ? WHERE provider = ? AND user_id = ?",
                (now, provider, user_id),
            )

    async def _pairing(self, provider: str, user_id: str) -> Pairing:
        found = await self.pairings(provider=provider, user_id=user_id)
        assert found, "the row was just written"
        return found[0]

    async def pairings(self, *, provider: str | None = None, user_id: str | None = None) -> list[Pairing]:
        """Every request and decision, newest first."""
        where, params = [], []
        if provider is not None:
            where.append("provider = ?")
            params.append(provider)
        if user_id is not None:
            where.append("user_id = ?")
            params.append(user_id)
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        rows = await self._conn.execute_fetchall(
            "SELECT provider, user_id, status, code, user_name, requested_at, expires_at, decided_at "
            f"FROM pairings {clause}ORDER BY COALESCE(decided_at, requested_at) DESC", params,
        )
        return [Pairing(*row) for row in rows]
