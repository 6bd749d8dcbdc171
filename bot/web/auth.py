"""Who gets into the browser console: password hashes, login sessions, CSRF tokens, the login limit.

Passwords are hashed with Argon2id (argon2-cffi): memory-hard, its parameters and salt carried in
the stored string, and old hashes upgraded on the next login when the defaults grow. A session is a
random cookie; the store keeps its SHA-256 and a CSRF token every form of that session must carry.
Failed logins are counted in the store per client address and per account name over a window;
self sign-ups (chat-only accounts, under the web chat's `dm_policy = "pairing"`) per address.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from bot.store.web_accounts import Role, WebAccount, WebSession

# A login lasts this long, then the browser logs in again.
SESSION_SECONDS = 12 * 3600
# Failed logins counted over this window; at the limit, logins are refused until they age out.
FAILURE_WINDOW = 15 * 60
ADDRESS_LIMIT = 10  # from one client address, whatever names it tries
ACCOUNT_LIMIT = 5  # on one account name, from anywhere
SIGNUP_LIMIT = 5  # sign-ups tried from one client address over the window, made or refused
MIN_PASSWORD = 10
NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_.-"

_hasher = PasswordHasher()


@functools.cache
def _unknown() -> str:
    """Verified when no account has the name: an unknown name costs what a wrong password does."""
    return _hasher.hash(secrets.token_urlsafe(16))


class AccountStore(Protocol):
    """The store's part the console's logins use (`bot.store.web_accounts`)."""

    async def add_web_account(
        self, name: str, password_hash: str, *, now: float, role: Role = "admin"
    ) -> bool: ...
    async def web_accounts(self) -> list[WebAccount]: ...
    async def web_password_hash(self, name: str) -> str | None: ...
    async def set_web_password_hash(self, name: str, password_hash: str) -> None: ...
    async def remove_web_account(self, name: str) -> bool: ...
    async def open_web_session(
        self, token_hash: str, account: str, csrf_token: str, *, now: float, expires_at: float
    ) -> None: ...
    async def web_session(self, token_hash: str, *, now: float) -> WebSession | None: ...
    async def end_web_session(self, token_hash: str) -> None: ...
    async def record_login_failure(self, address: str, account: str, *, now: float, keep: float) -> None: ...
    async def login_failures(self, address: str, account: str, *, since: float) -> tuple[int, int]: ...
    async def record_signup(self, address: str, *, now: float, keep: float) -> None: ...
    async def signups(self, address: str, *, since: float) -> int: ...


def account_name_problem(name: str) -> str | None:
    """What is wrong with an account name, or None: 1-64 of lower-case letters, digits, '_.-'."""
    if not 1 <= len(name) <= 64 or any(ch not in NAME_CHARS for ch in name):
        return "a name of 1-64 lower-case letters, digits, '_', '.' or '-'"
    return None


def password_problem(password: str) -> str | None:
    """What is wrong with a new password, or None."""
    if len(password) < MIN_PASSWORD:
        return f"a password of at least {MIN_PASSWORD} characters, please"
    return None


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def password_matches(stored: str, password: str) -> bool:
    try:
        return _hasher.verify(stored, password)
    except (VerificationError, InvalidHashError):
        return False


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def same_token(given: str | None, expected: str) -> bool:
    """Whether a submitted CSRF token is the expected one (in constant time)."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


@dataclass(frozen=True, slots=True)
class Login:
    """What a login attempt came to: a session cookie, a refusal, or a wait (rate-limited)."""

    token: str | None = None
    session: WebSession | None = None
    limited: bool = False
    problem: str | None = None  # a sign-up refused: what to change


class Logins:
    """Checks passwords and opens, finds and ends sessions, on the store any instance shares."""

    def __init__(self, store: AccountStore, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    async def log_in(self, name: str, password: str, address: str) -> Login:
        now = self._clock()
        by_address, by_account = await self._store.login_failures(address, name, since=now - FAILURE_WINDOW)
        if by_address >= ADDRESS_LIMIT or by_account >= ACCOUNT_LIMIT:
            return Login(limited=True)  # refused before hashing: a flood costs no CPU
        stored = await self._store.web_password_hash(name)
        # Hashing takes tens of milliseconds of CPU: off the loop the turns run on.
        matches = await asyncio.to_thread(password_matches, stored or _unknown(), password)
        if stored is None or not matches:
            await self._store.record_login_failure(address, name, now=now, keep=FAILURE_WINDOW)
            return Login()
        if _hasher.check_needs_rehash(stored):
            await self._store.set_web_password_hash(name, await asyncio.to_thread(hash_password, password))
        return await self._open(name, "admin", now)

    async def sign_up(self, name: str, password: str, again: str, address: str,
                      taken: Callable[[str], Awaitable[bool]]) -> Login:
        """A chat-only account a visitor makes for themselves, logged in at once; refused with the
        problem (a bad or `taken` name, a short or mistyped password), or limited per address (a
        sign-up tried counts, made or not; an address at the login limit is refused too)."""
        now = self._clock()
        since = now - FAILURE_WINDOW
        by_address, _ = await self._store.login_failures(address, name, since=since)
        if by_address >= ADDRESS_LIMIT or await self._store.signups(address, since=since) >= SIGNUP_LIMIT:
            return Login(limited=True)
        await self._store.record_signup(address, now=now, keep=FAILURE_WINDOW)
        problem = account_name_problem(name) or password_problem(password)
        if problem is None and password != again:
            problem = "the two passwords differ"
        if problem is None and await taken(name):
            problem = "that name is taken: pick another"
        if problem is not None:
            return Login(problem=problem)
        password_hash = await asyncio.to_thread(hash_password, password)
        if not await self._store.add_web_account(name, password_hash, now=now, role="chat"):
            return Login(problem="that name is taken: pick another")
        return await self._open(name, "chat", now)

    async def _open(self, name: str, role: Role, now: float) -> Login:
        token, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        session = WebSession(name, csrf, now + SESSION_SECONDS, role)
        await self._store.open_web_session(token_hash(token), name, csrf, now=now,
                                           expires_at=session.expires_at)
        return Login(token=token, session=session)

    async def session(self, token: str | None) -> WebSession | None:
        if not token:
            return None
        return await self._store.web_session(token_hash(token), now=self._clock())

    async def log_out(self, token: str) -> None:
        await self._store.end_web_session(token_hash(token))
