"""The PostgreSQL store's own promises: the same schema history as SQLite's, refusals that name
what to do, the guarantees several writers rely on, and a password that never shows."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import psycopg
import pytest

from bot.config import load_config
from bot.core.errors import ConfigError, StoreError
from bot.core.log import Redactor
from bot.core.messages import ChatRef, InboundMessage
from bot.core.session_key import build
from bot.ranking.lexical import index_terms
from bot.store import ReminderLimitError, Store
from bot.store.opening import open_store
from bot.store.postgres import PostgresStore
from bot.store.schema import migrations
from bot.testing.postgres import PostgresServer
from tests.harness import ROOT, switchboard_cli
from tests.sql import execute

DM = build("main", "telegram", "direct", "42")


def said(text: str, message_id: str) -> InboundMessage:
    return InboundMessage(session_key=DM, chat=ChatRef("telegram", "42"), sender_id="42",
                          sender_name="Ada", text=text, provider_message_id=message_id)


def opened(url: str, tmp_path: Path) -> AbstractAsyncContextManager[PostgresStore]:
    return PostgresStore.connect(url, state_path=tmp_path / "switchboard.db", label=url)


def test_both_schema_histories_have_every_migration() -> None:
    """PostgreSQL's schema history has an entry for each of SQLite's (a migration added to one and
    not the other fails here)."""
    assert len(migrations("postgres")) == len(migrations("sqlite"))


async def test_migrations_are_recorded_once_and_a_newer_schema_is_refused(
    pg_url: str, tmp_path: Path
) -> None:
    """Reopening applies nothing again and keeps the data; a database a newer Switchboard migrated
    is refused with the error SQLite gives, naming the database."""
    async with opened(pg_url, tmp_path) as store:
        assert await store.schema_version() == len(migrations("postgres"))
        await store.append_inbound(said("hello", "1"))
    async with opened(pg_url, tmp_path) as store:
        assert await store.schema_version() == len(migrations("postgres"))
        assert [m.text for m in await store.history(str(DM), 5)] == ["hello"]
        newer = len(migrations("postgres")) + 1
        await execute(store, "INSERT INTO schema_migrations VALUES (?, 0)", (newer,))
    with pytest.raises(StoreError, match="newer than this Switchboard") as refused:
        async with opened(pg_url, tmp_path):
            pass
    assert pg_url in str(refused.value)


async def test_an_unreachable_server_is_one_store_error_naming_it(tmp_path: Path) -> None:
    """No server where the url points: a StoreError at once, naming the database and the reason."""
    url = f"postgresql://switchboard@/switchboard?host={tmp_path}&port=5999"
    with pytest.raises(StoreError, match="cannot open database") as refused:
        async with opened(url, tmp_path):
            pass
    assert url in str(refused.value) and "\n" not in str(refused.value)


async def test_two_writers_store_a_platform_message_once(pg_url: str, tmp_path: Path) -> None:
    """Two stores on one database (two daemons) receiving the same updates at the same moment store
    each platform message once, and exactly one of them gets it back as stored."""
    async with opened(pg_url, tmp_path) as first, opened(pg_url, tmp_path) as second:
        for n in range(20):
            results = await asyncio.gather(first.append_inbound(said(f"m{n}", str(n))),
                                           second.append_inbound(said(f"m{n}", str(n))))
            assert sum(result is not None for result in results) == 1
        history = await first.history(str(DM), 100)
        assert [m.text for m in history] == [f"m{n}" for n in range(20)]
        assert (await first.session(str(DM))).message_count == 20


async def test_two_writers_share_one_run_record_and_record_a_command_once(
    pg_url: str, tmp_path: Path
) -> None:
    """A job time claimed by two daemons at once has one run record (the unique key decides, no
    error); a chat command delivered to both is recorded once."""
    async with opened(pg_url, tmp_path) as first, opened(pg_url, tmp_path) as second:
        for n in range(10):
            claims = await asyncio.gather(first.claim_run("daily", 1000.0 + n),
                                          second.claim_run("daily", 1000.0 + n))
            assert claims[0][0].id == claims[1][0].id and claims[0][0].status == "running"
            command = InboundMessage(session_key=DM, chat=ChatRef("telegram", "42"), sender_id="42",
                                     sender_name="Ada", text="/reset", provider_message_id=f"c{n}",
                                     command="reset")
            recorded = await asyncio.gather(first.append_command(command, "reset"),
                                            second.append_command(command, "reset"))
            assert sum(result is not None for result in recorded) == 1
        assert len(await first.pending_commands()) == 10
        assert len(await first.schedule_runs("daily", 100)) == 10


async def test_limits_counted_before_a_write_hold_for_writers_at_once(pg_url: str, tmp_path: Path) -> None:
    """A user's reminder and note limits hold when two daemons add at the same moment: the
    count and the write of one finish before the other counts (as under SQLite's write lock)."""
    async with opened(pg_url, tmp_path) as first, opened(pg_url, tmp_path) as second:

        async def remind(store: Store, n: int) -> bool:
            try:
                await store.add_reminder(
                    session_key=str(DM), chat=ChatRef("telegram", "42"), user_id="42", user_name="Ada",
                    text=f"r{n}", at=2e9, repeat=None, timezone="UTC", request_message_id=None,
                    max_pending=3)
            except ReminderLimitError:
                return False
            return True

        added = await asyncio.gather(*(remind(store, n) for n in range(4) for store in (first, second)))
        assert sum(added) == 3 and len(await first.pending_reminders(user_id="42")) == 3
        notes = await asyncio.gather(*(
            store.add_note("telegram", "42", f"n{n}", session_key=None, max_notes=2)
            for n in range(3) for store in (first, second)))
        assert sum(note is not None for note in notes) == 2


async def test_a_reply_and_its_cleared_request_are_one_transaction(pg_url: str, tmp_path: Path) -> None:
    """A reply whose write fails leaves its request waiting (nothing half-written), and a reply
    written clears it: what a restart finds is always one or the other."""
    async with opened(pg_url, tmp_path) as store:
        request = await store.append_inbound(said("question", "1"))
        assert request is not None
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            await _failing_reply(store, request.id)
        assert [r.message.id for r in await store.awaiting_requests()] == [request.id]
        await store.append_reply(str(DM), "answer", request_id=request.id)
        assert await store.awaiting_requests() == []


async def _failing_reply(store: Store, request_id: int) -> None:
    """append_reply's transaction with a statement that fails after the request is cleared."""
    async with store._transaction():
        await execute(store, "UPDATE messages SET awaiting_reply = 0 WHERE id = ?", (request_id,))
        await execute(store, "INSERT INTO outbox (message_id, provider, chat_id, text, created_at) "
                                  "VALUES (999999, 'telegram', '42', 'x', 0)")


@pytest.mark.parametrize(
    ("database", "expected"),
    [
        ('url = "postgresql://bot:hunter2-secret@db.example.com/switchboard"', "without a password"),
        ('url = "postgresql://bot@db.example.com/switchboard?password=hunter2-secret"', "without a password"),
        ('url = "mysql://bot@db.example.com/switchboard"', "postgresql:// URL"),
        ('url = "postgresql://bot@db/x"\npath = "x.db"', "not both"),
        ('password_env = "DB_PASSWORD"', "set url too"),
        ("pool_size = 4", "set url too"),
        ('url = "postgresql://bot@db/x"\npool_size = 1', "greater than or equal to 2"),
    ],
)
def test_database_settings_that_cannot_work_are_refused(tmp_path: Path, database: str, expected: str) -> None:
    """A password in the url (never echoed back), a url of another database, both a file and a url,
    a password variable or a pool size without a url, a pool too small for the instance lock and
    one query: one error naming [database]."""
    path = tmp_path / "config.toml"
    path.write_text(f"[database]\n{database}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=expected) as refused:
        load_config(path)
    assert refused.value.key is not None and refused.value.key.startswith("database")
    assert "hunter2" not in str(refused.value)


def test_the_password_variable_is_read_and_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """password_env names where the password is; its value, and any password written in a
    database url, never reach a log line."""
    monkeypatch.setenv("DB_PASSWORD", "correct-horse-battery")
    path = tmp_path / "config.toml"
    path.write_text('[database]\nurl = "postgresql://bot@db/switchboard"\npassword_env = "DB_PASSWORD"\n',
                    encoding="utf-8")
    config = load_config(path)
    assert config.database.password() == "correct-horse-battery"
    assert "DB_PASSWORD" in config.secret_env_names()
    redact = Redactor(["correct-horse-battery"]).redact
    line = redact("connecting postgresql://bot:hunter2-secret@db/x with correct-horse-battery, "
                  "host=db password=hunter2-secret")
    assert "hunter2" not in line and "correct-horse" not in line and "postgresql://" in line


async def test_the_daemon_keeps_no_more_connections_than_pool_size(pg_url: str, tmp_path: Path) -> None:
    """[database] pool_size bounds the connections the server sees from one store, however many
    statements run at once (they wait for a free one)."""
    (tmp_path / "config.toml").write_text(f'[database]\nurl = "{pg_url}"\npool_size = 3\n', encoding="utf-8")
    config = load_config(tmp_path / "config.toml")
    others = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
              "AND pid <> pg_backend_pid()")
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as observer:
        # Backends of earlier tests may still be on their way out: only the store's are counted.
        before = {row[0] for row in await (await observer.execute(others)).fetchall()}
        async with open_store(config) as store:
            sleeping = asyncio.gather(*(execute(store, "SELECT pg_sleep(0.4)") for _ in range(8)))
            seen = []
            while not sleeping.done():  # the pool grows while statements wait: the most it reached
                pids = {row[0] for row in await (await observer.execute(others)).fetchall()}
                seen.append(len(pids - before))
                await asyncio.sleep(0.05)
            await sleeping
    assert max(seen) == 3


async def test_the_cli_works_on_postgresql_and_says_backups_need_pg_dump(pg_url: str, tmp_path: Path) -> None:
    """`switchboard history` reads a PostgreSQL store named by [database] url; `db backup` says to
    use PostgreSQL's own tools instead of failing half-way."""
    async with opened(pg_url, tmp_path) as store:
        await store.append_inbound(said("kept in postgres", "1"))
    (tmp_path / "config.toml").write_text(f'[database]\nurl = "{pg_url}"\n', encoding="utf-8")
    code, out, err = await switchboard_cli(tmp_path, "history", str(DM))
    assert code == 0, err
    assert "kept in postgres" in out
    code, out, err = await switchboard_cli(tmp_path, "db", "backup", str(tmp_path / "copy.db"))
    assert code == 1 and "pg_dump" in err and not (tmp_path / "copy.db").exists()


def test_an_sqlite_daemon_never_loads_the_postgresql_driver(tmp_path: Path) -> None:
    """Opening the default SQLite store imports neither psycopg nor its pool."""
    code = (
        "import asyncio, sys\n"
        "from bot.config import parse_config\n"
        "from bot.store.opening import open_store\n"
        f"config = parse_config({{'database': {{'path': {str(tmp_path / 'x.db')!r}}}}}, 'x.toml')\n"
        "async def main():\n"
        "    async with open_store(config) as store:\n"
        "        await store.message_count()\n"
        "asyncio.run(main())\n"
        "assert not any(name.startswith('psycopg') for name in sys.modules), sorted(sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


async def test_terms_stored_before_the_posting_table_are_found_after_it(
    pg_server: PostgresServer, tmp_path: Path
) -> None:
    """A database of schema 16 (recall's terms in a GIN-indexed tsvector) opened by this Switchboard
    finds what its stored terms match, ranked as before, and what is written after as well."""
    with psycopg.connect(pg_server.url(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE schema_16 TEMPLATE template0")
    url = pg_server.url("schema_16")
    key = str(DM)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, "
                     "applied_at DOUBLE PRECISION NOT NULL)")
        for version, sql in enumerate(migrations("postgres")[:16], start=1):
            conn.execute(sql)
            conn.execute("INSERT INTO schema_migrations VALUES (%s, 0)", (version,))
        conn.execute("INSERT INTO sessions (key, created_at, updated_at) VALUES (%s, 0, 0)", (key,))
        for n in range(10, 22):
            text = f"the lighthouse keeper number {n}"
            (message_id,) = conn.execute(
                "INSERT INTO messages (session_key, role, origin, text, created_at, token_estimate) "
                "VALUES (%s, 'user', 'interactive', %s, 0, 5) RETURNING id", (key, text)).fetchone()
            conn.execute("INSERT INTO recall_terms (message_id, terms) VALUES (%s, %s)",
                         (message_id, index_terms(key, text)))
    async with opened(url, tmp_path) as store:
        assert await store.schema_version() == len(migrations("postgres"))
        found, _ = await store.lexical_turns(key, "lighthouse", before_id=10**9, limit=20)
        assert len(found) == 12
        found, _ = await store.lexical_turns(key, "keeper number 17", before_id=10**9, limit=4)
        assert [message_id for message_id, _ in found] == [8, 12, 11, 10]
        new = await store.append_inbound(said("a new lighthouse", "new"))
        assert new is not None
        found, _ = await store.lexical_turns(key, "lighthouse", before_id=10**9, limit=1)
        assert [message_id for message_id, _ in found] == [new.id]
