"""The browser console's accounts: their password hashes and roles, login sessions, failed logins
and self sign-ups (counted for their limits).

The store keeps only what it is given: hashing passwords and minting tokens is `bot.web.auth`'s
business. A session is found by the hash of its cookie; failed logins are rows counted over a
window, per client address and per account, so every instance on a shared store applies one limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bot.store.database import Database

# "admin": the whole console and the web chat; "chat": the web chat only.
Role = Literal["admin", "chat"]


def _role(value: object) -> Role:
    return "chat" if value == "chat" else "admin"


@dataclass(frozen=True, slots=True)
class WebAccount:
    """One account of the console, as `switchboard web user list` shows it."""

    name: str
    created_at: float
    last_login_at: float | None
    role: Role = "admin"


@dataclass(frozen=True, slots=True)
class WebSession:
    """A logged-in browser: whose it is, the token its forms must carry, when it ends."""

    account: str
    csrf_token: str
    expires_at: float
    role: Role = "admin"  # the account's, read with the session: a change applies at once


class WebAccounts(Database):
    """Writes and reads of `web_accounts`, `web_sessions` and `web_login_failures`."""

    async def add_web_account(
        self, name: str, password_hash: str, *, now: float, role: Role = "admin"
    ) -> bool:
        """A new account; False (nothing written) when the name is taken."""
        async with self._transaction():
            cursor = await self._conn.execute(
                "INSERT INTO web_accounts (name, password_hash, created_at, role) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (name) DO NOTHING", (name, password_hash, now, role),
            )
        return cursor.rowcount == 1

    async def web_accounts(self) -> list[WebAccount]:
        rows = await self._conn.execute_fetchall(
            "SELECT name, created_at, last_login_at, role FROM web_accounts ORDER BY name")
        return [WebAccount(str(row[0]), float(row[1]), row[2], _role(row[3])) for row in rows]

    async def web_password_hash(self, name: str) -> str | None:
        rows = await self._conn.execute_fetchall(
            "SELECT password_hash FROM web_accounts WHERE name = ?", (name,))
        row = next(iter(rows), None)
        return str(row[0]) if row is not None else None

    async def set_web_password_hash(self, name: str, password_hash: str) -> None:
        """A new hash of the same password (the hasher's parameters grew) or a new password."""
        async with self._one_write():
            await self._conn.execute(
                "UPDATE web_accounts SET password_hash = ? WHERE name = ?", (password_hash, name))

    async def change_web_password(self, name: str, password_hash: str) -> bool:
        """A new password (`switchboard web user passwd`): the hash replaced and every session of the
        account ended, on every instance; False (nothing written) when there is no such account."""
        async with self._transaction():
            cursor = await self._conn.execute(
                "UPDATE web_accounts SET password_hash = ? WHERE name = ?", (password_hash, name))
            if cursor.rowcount != 1:
                return False
            await self._conn.execute("DELETE FROM web_sessions WHERE account = ?", (name,))
        return True

    async def remove_web_account(self, name: str) -> bool:
        """Delete the account and end its sessions; False when there was none."""
        async with self._transaction():
            await self._conn.execute("DELETE FROM web_sessions WHERE account = ?", (name,))
            cursor = await self._conn.execute("DELETE FROM web_accounts WHERE name = ?", (name,))
        return cursor.rowcount == 1

    async def open_web_session(
        self, token_hash: str, account: str, csrf_token: str, *, now: float, expires_at: float
    ) -> None:
        """A successful login: the session, the account's login time, its failures forgotten, and
        every expired session and stale failure swept (logins are rare, so this stays small)."""
        async with self._transaction():
            await self._conn.execute(
                "INSERT INTO web_sessions (token_hash, account, csrf_token, created_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?)", (token_hash, account, csrf_token, now, expires_at))
            await self._conn.execute(
                "UPDATE web_accounts SET last_login_at = ? WHERE name = ?", (now, account))
            await self._conn.execute(
                "DELETE FROM web_login_failures WHERE scope = 'account' AND subject = ?", (account,))
            await self._conn.execute("DELETE FROM web_sessions WHERE expires_at <= ?", (now,))

    async def web_session(self, token_hash: str, *, now: float) -> WebSession | None:
        """The live session with this cookie hash, if any (an expired one is none), with its
        account's role."""
        rows = await self._conn.execute_fetchall(
            "SELECT s.account, s.csrf_token, s.expires_at, a.role FROM web_sessions s "
            "JOIN web_accounts a ON a.name = s.account "
            "WHERE s.token_hash = ? AND s.expires_at > ?", (token_hash, now))
        row = next(iter(rows), None)
        if row is None:
            return None
        return WebSession(str(row[0]), str(row[1]), float(row[2]), _role(row[3]))

    async def end_web_session(self, token_hash: str) -> None:
        async with self._one_write():
            await self._conn.execute("DELETE FROM web_sessions WHERE token_hash = ?", (token_hash,))

    async def record_login_failure(self, address: str, account: str, *, now: float, keep: float) -> None:
        """One failed login, counted against the address and the account name tried; failures
        older than `keep` seconds are dropped."""
        async with self._transaction():
            await self._conn.execute(
                "INSERT INTO web_login_failures (scope, subject, at) VALUES ('address', ?, ?), "
                "('account', ?, ?)", (address, now, account, now))
            await self._conn.execute("DELETE FROM web_login_failures WHERE at <= ?", (now - keep,))

    async def record_signup(self, address: str, *, now: float, keep: float) -> None:
        """One self sign-up tried from this address (made or refused), counted for its limit in
        the same table as failed logins; rows older than `keep` seconds are dropped."""
        async with self._transaction():
            await self._conn.execute(
                "INSERT INTO web_login_failures (scope, subject, at) VALUES ('signup', ?, ?)", (address, now))
            await self._conn.execute("DELETE FROM web_login_failures WHERE at <= ?", (now - keep,))

    async def signups(self, address: str, *, since: float) -> int:
        """Sign-ups tried from this address since `since`."""
        rows = await self._conn.execute_fetchall(
            "SELECT COUNT(*) FROM web_login_failures WHERE scope = 'signup' AND subject = ? AND at > ?",
            (address, since))
        return int(next(iter(rows))[0])

    async def login_failures(self, address: str, account: str, *, since: float) -> tuple[int, int]:
        """(failures from this address, failures on this account name) since `since`."""
        rows = await self._conn.execute_fetchall(
            "SELECT scope, COUNT(*) FROM web_login_failures WHERE at > ? AND "
            "((scope = 'address' AND subject = ?) OR (scope = 'account' AND subject = ?)) GROUP BY scope",
            (since, address, account))
        counts = {str(row[0]): int(row[1]) for row in rows}
        return counts.get("address", 0), counts.get("account", 0)
