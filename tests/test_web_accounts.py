"""The console's accounts beyond `add`: `web user passwd` over a running console (a real socket, a
real SQLite file), and the store's password change on either backend."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest

from bot.cli import main
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.fake_channel import FakeChannel
from bot.web.auth import hash_password, password_matches
from tests.test_web import PASSWORD, browser, console, log_in

NEW_PASSWORD = "a brand new passphrase"


def _cli(config: Path, monkeypatch: pytest.MonkeyPatch, *args: str, stdin: str = "") -> int:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    with pytest.raises(SystemExit) as done:
        main([*args, "--config", str(config)])
    return int(str(done.value.code))


async def test_passwd_changes_the_password_and_ends_the_sessions(
    make_config: Any, api: AnthropicStandIn, channel: FakeChannel, db: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """`web user passwd ada` while ada is logged in: her open session ends at once (the next page
    leads to the login), the old password no longer logs in, the new one does; the new password
    is stored hashed as `add` hashes it and never printed."""
    config = tmp_path / "config.toml"
    config.write_text(f'[database]\npath = "{db}"\n', encoding="utf-8")
    async with console(make_config, api, channel, db) as (_, url), browser() as client:
        assert (await log_in(client, url)).status == 303
        async with client.get(f"{url}/", allow_redirects=False) as page:
            assert page.status == 200
        code = await asyncio.to_thread(_cli, config, monkeypatch, "web", "user", "passwd", "ada",
                                       stdin=NEW_PASSWORD + "\n")
        shown = capsys.readouterr()
        assert code == 0, shown.err
        assert "password of ada changed" in shown.out and NEW_PASSWORD not in shown.out + shown.err
        async with client.get(f"{url}/", allow_redirects=False) as page:
            assert page.status == 303 and page.headers["Location"].startswith("/login")
        assert (await log_in(client, url, PASSWORD)).status == 401
        assert (await log_in(client, url, NEW_PASSWORD)).status == 303
    async with Store.open(db) as store:
        stored = await store.web_password_hash("ada")
    assert stored is not None and stored.startswith("$argon2id$") and NEW_PASSWORD not in stored


def test_passwd_refuses_an_unknown_name_and_a_short_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An account that does not exist is named (exit 1) before any password is read; a password
    under the minimum is refused (exit 2) and the old one kept."""
    config = tmp_path / "config.toml"
    config.write_text(f'[database]\npath = "{tmp_path / "bot.db"}"\n', encoding="utf-8")
    assert _cli(config, monkeypatch, "web", "user", "add", "ada", stdin=PASSWORD + "\n") == 0
    assert _cli(config, monkeypatch, "web", "user", "passwd", "bob", stdin=NEW_PASSWORD + "\n") == 1
    assert "no account 'bob'" in capsys.readouterr().err
    assert _cli(config, monkeypatch, "web", "user", "passwd", "ada", stdin="short\n") == 2

    async def stored() -> str | None:
        async with Store.open(tmp_path / "bot.db") as store:
            return await store.web_password_hash("ada")

    kept = asyncio.run(stored())
    assert kept is not None and password_matches(kept, PASSWORD)


async def test_the_store_changes_a_password_and_ends_only_that_accounts_sessions(store: Store) -> None:
    """On either backend: the new hash replaces the old, every session of that account ends and
    another account's stays; an unknown name changes nothing."""
    assert await store.add_web_account("ada", hash_password(PASSWORD), now=1.0)
    assert await store.add_web_account("bob", "bob-hash", now=1.0)
    await store.open_web_session("t-ada-1", "ada", "c1", now=2.0, expires_at=1e12)
    await store.open_web_session("t-ada-2", "ada", "c2", now=2.0, expires_at=1e12)
    await store.open_web_session("t-bob", "bob", "c3", now=2.0, expires_at=1e12)
    assert await store.change_web_password("ada", "new-hash")
    assert await store.web_password_hash("ada") == "new-hash"
    assert await store.web_session("t-ada-1", now=3.0) is None
    assert await store.web_session("t-ada-2", now=3.0) is None
    assert await store.web_session("t-bob", now=3.0) is not None
    assert not await store.change_web_password("carol", "x")
    assert await store.web_password_hash("bob") == "bob-hash"


async def test_the_store_counts_sign_ups_per_address_within_the_window(store: Store) -> None:
    """On either backend: sign-ups are counted per address since a time, apart from failed logins,
    and those older than the window are dropped as new ones are recorded."""
    await store.record_signup("10.0.0.1", now=10.0, keep=100.0)
    await store.record_signup("10.0.0.1", now=20.0, keep=100.0)
    await store.record_signup("10.0.0.2", now=20.0, keep=100.0)
    assert await store.signups("10.0.0.1", since=0.0) == 2
    assert await store.signups("10.0.0.1", since=15.0) == 1
    assert await store.login_failures("10.0.0.1", "ada", since=0.0) == (0, 0)
    await store.record_signup("10.0.0.2", now=115.0, keep=100.0)  # drops the one at 10.0
    assert await store.signups("10.0.0.1", since=0.0) == 1
