"""The SQLite store: file safety, migrations, idempotent inbound, context reads and their query plans."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from bot.core.errors import SessionNotFoundError, StoreError
from bot.core.messages import ChatRef, InboundMessage
from bot.core.session_key import SessionKey, build
from bot.store import Store
from bot.store.schema import migrations
from tests.sql import traced

DM = build("main", "telegram", "direct", 42)
OTHER_DM = build("main", "telegram", "direct", 43)


def inbound(
    text: str,
    *,
    key: SessionKey = DM,
    chat_id: str | None = None,
    message_id: str | None = None,
) -> InboundMessage:
    return InboundMessage(
        session_key=key,
        chat=ChatRef(key.provider, chat_id or key.peer),
        sender_id="42",
        sender_name="Ada",
        text=text,
        provider_message_id=message_id,
    )


def _plain(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path)


async def test_database_file_is_private(tmp_path: Path) -> None:
    """The database file (and its WAL side files) are readable by the owner only."""
    path = tmp_path / "nested" / "switchboard.db"
    async with Store.open(path) as store:
        await store.append_inbound(inbound("secret stuff", message_id="1"))
        for name in ("switchboard.db", "switchboard.db-wal", "switchboard.db-shm"):
            side = path.parent / name
            assert side.exists(), name
            assert stat.S_IMODE(os.stat(side).st_mode) == 0o600, name
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


async def test_wal_journal_mode(tmp_path: Path) -> None:
    """The database is in WAL mode, so admin reads never block the daemon's writes."""
    path = tmp_path / "s.db"
    async with Store.open(path):
        pass
    with _plain(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_foreign_keys_are_enforced(store: Store) -> None:
    """A snapshot pointing at a message or session that does not exist is refused by the database."""
    import psycopg

    refused = (sqlite3.IntegrityError, psycopg.errors.ForeignKeyViolation)
    with pytest.raises(refused, match=r"(?i)foreign key"):
        await store.record_snapshot("agent:main:telegram:direct:404", 12345, None, {}, "h")
    # The failed write left nothing behind and the store is still usable.
    stored = await store.append_inbound(inbound("still works"))
    assert stored is not None


async def test_migrations_recorded_and_not_reapplied(tmp_path: Path) -> None:
    """Every migration is recorded once; reopening keeps the data and applies nothing again."""
    path = tmp_path / "s.db"
    async with Store.open(path) as store:
        assert await store.schema_version() == len(migrations("sqlite"))
        await store.append_inbound(inbound("hello", message_id="1"))
    with _plain(path) as conn:
        first = conn.execute("SELECT version, applied_at FROM schema_migrations ORDER BY version").fetchall()
    assert [version for version, _ in first] == list(range(1, len(migrations("sqlite")) + 1))

    async with Store.open(path) as store:
        assert await store.schema_version() == len(migrations("sqlite"))
        assert [m.text for m in await store.history(str(DM), 10)] == ["hello"]
    with _plain(path) as conn:
        again = conn.execute("SELECT version, applied_at FROM schema_migrations ORDER BY version").fetchall()
    assert again == first


def _at_schema(version: int, source: Path, tables: Sequence[str]) -> Path:
    """A database beside `source` made by its first `version` migrations only, holding `tables`'
    rows from `source` (the columns that schema has): as a Switchboard of that schema left it."""
    old = source.with_name(f"schema-{version}.db")
    with _plain(old) as conn:
        conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
        for number, sql in enumerate(migrations("sqlite")[:version], start=1):
            conn.executescript(sql)
            conn.execute("INSERT INTO schema_migrations VALUES (?, 0)", (number,))
        conn.execute("ATTACH DATABASE ? AS now", (str(source),))
        for table in tables:
            kept = {row[1] for row in conn.execute(f"PRAGMA main.table_info({table})")}
            columns = ", ".join(row[1] for row in conn.execute(f"PRAGMA now.table_info({table})")
                                if row[1] in kept)
            conn.execute(f"INSERT INTO main.{table} ({columns}) SELECT {columns} FROM now.{table}")
    return old


async def test_replies_stored_before_migration_20_learn_their_request_from_their_snapshot(
    tmp_path: Path,
) -> None:
    """A reply stored before replies named their request gets it from its turn's snapshot when the
    database is brought up to date, so it stays its asker's in history search."""
    path = tmp_path / "s.db"
    async with Store.open(path) as store:
        request = await store.append_inbound(inbound("what is the tide?"))
        assert request is not None
        reply = await store.append_reply(str(DM), "High at six.", request_id=request.id)
        await store.record_snapshot(str(DM), request.id, reply.id, {}, "h")
    with _plain(path) as conn:
        assert conn.execute("SELECT request_id FROM messages WHERE id = ?", (reply.id,)).fetchone() == (
            request.id,)
    old = _at_schema(19, path, ("sessions", "messages", "context_snapshots"))
    async with Store.open(old):
        pass
    with _plain(old) as conn:
        rows = conn.execute("SELECT id, request_id FROM messages ORDER BY id").fetchall()
    assert rows == [(request.id, None), (reply.id, request.id)]


async def test_newer_database_is_refused(tmp_path: Path) -> None:
    """A database migrated by a newer Switchboard is refused with a StoreError saying so."""
    path = tmp_path / "s.db"
    async with Store.open(path):
        pass
    with _plain(path) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (?, 0)", (len(migrations("sqlite")) + 1,))
    with pytest.raises(StoreError, match="newer than this Switchboard"):
        async with Store.open(path):
            pass


async def test_unopenable_path_is_a_store_error(tmp_path: Path) -> None:
    """A database path that cannot be created gives a StoreError naming it, not a raw OSError."""
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(StoreError, match="cannot open database"):
        async with Store.open(blocker / "s.db"):
            pass


async def test_inbound_is_idempotent_per_chat(store: Store) -> None:
    """The same platform message delivered twice is stored and counted once."""
    first = await store.append_inbound(inbound("hi", message_id="77"))
    assert first is not None
    assert first.text == "hi" and first.role == "user" and first.origin == "interactive"
    again = await store.append_inbound(inbound("hi", message_id="77"))
    assert again is None
    assert [m.id for m in await store.history(str(DM), 10)] == [first.id]
    summary = await store.session(str(DM))
    assert summary.message_count == 1
    assert summary.user_turns == 1


async def test_same_provider_id_in_another_chat_is_another_message(store: Store) -> None:
    """Platform ids are per chat: id 77 in another chat is a different message."""
    a = await store.append_inbound(inbound("in chat 42", message_id="77"))
    b = await store.append_inbound(inbound("in chat 43", key=OTHER_DM, message_id="77"))
    assert a is not None and b is not None and a.id != b.id
    assert await store.message_by_provider_id(ChatRef("telegram", "42"), "77") == a
    assert await store.message_by_provider_id(ChatRef("telegram", "43"), "77") == b
    # Same chat id on another provider is also distinct.
    discord = build("main", "discord", "direct", 42)
    c = await store.append_inbound(inbound("discord", key=discord, message_id="77"))
    assert c is not None and c.id not in (a.id, b.id)


async def test_messages_without_provider_id_are_all_stored(store: Store) -> None:
    """Messages with no platform id (console) are never deduplicated."""
    first = await store.append_inbound(inbound("same"))
    second = await store.append_inbound(inbound("same"))
    assert first is not None and second is not None and first.id != second.id


async def test_multi_chunk_reply_found_by_every_chunk_id(store: Store) -> None:
    """A reply sent as several chunks can be found by any of the chunks' platform ids."""
    request = await store.append_inbound(inbound("tell me a long story", message_id="10"))
    assert request is not None
    reply = await store.append_reply(str(DM), "a long story", actions=["searched the web"])
    assert reply.role == "assistant" and reply.actions == ("searched the web",)
    chat = ChatRef("telegram", "42")
    await store.mark_delivered(reply.id, chat, ["11", "12", "13"])
    for chunk_id in ("11", "12", "13"):
        found = await store.message_by_provider_id(chat, chunk_id)
        assert found is not None
        assert found.id == reply.id
        assert found.text == "a long story"
        assert found.actions == ("searched the web",)
        assert found.provider_message_id == "11"
    assert await store.message_by_provider_id(chat, "14") is None
    assert await store.message_by_provider_id(ChatRef("telegram", "43"), "11") is None
    summary = await store.session(str(DM))
    assert summary.message_count == 2 and summary.user_turns == 1


async def _conversation(store: Store, turns: int, key: SessionKey = DM) -> list[int]:
    ids = []
    for n in range(1, turns + 1):
        user = await store.append_inbound(inbound(f"u{n}", key=key))
        assert user is not None
        reply = await store.append_reply(str(key), f"a{n}")
        ids += [user.id, reply.id]
    return ids


async def test_recent_messages_newest_n_oldest_first(store: Store) -> None:
    """recent_messages gives the newest N interactive messages of one session, oldest first."""
    await _conversation(store, 3, key=OTHER_DM)
    await _conversation(store, 5)
    await store.append_reply(str(DM), "briefing", origin="scheduled", job_id="morning")
    request = await store.append_inbound(inbound("now"))
    assert request is not None
    got = await store.recent_messages(str(DM), before_id=request.id, limit=4)
    assert [m.text for m in got] == ["u4", "a4", "u5", "a5"]
    everything = await store.recent_messages(str(DM), before_id=request.id, limit=100)
    assert [m.text for m in everything] == [t for n in range(1, 6) for t in (f"u{n}", f"a{n}")]
    scheduled = await store.recent_messages(str(DM), before_id=request.id, limit=10, origin="scheduled")
    assert [(m.text, m.job_id) for m in scheduled] == [("briefing", "morning")]


async def test_recent_messages_respects_before_id(store: Store) -> None:
    """Only messages older than the given one are returned."""
    ids = await _conversation(store, 4)
    got = await store.recent_messages(str(DM), before_id=ids[4], limit=10)  # before u3
    assert [m.text for m in got] == ["u1", "a1", "u2", "a2"]


async def test_reset_context_hides_older_messages_from_context_only(store: Store) -> None:
    """After a reset, older messages leave the context but stay in the history."""
    await _conversation(store, 2)
    await store.reset_context(str(DM))
    after = await store.append_inbound(inbound("fresh start"))
    assert after is not None
    request = await store.append_inbound(inbound("and now?"))
    assert request is not None
    context = await store.recent_messages(str(DM), before_id=request.id, limit=25)
    assert [m.text for m in context] == ["fresh start"]
    history = await store.history(str(DM), 10)
    assert [m.text for m in history] == ["u1", "a1", "u2", "a2", "fresh start", "and now?"]


async def test_reset_of_one_session_leaves_others(store: Store) -> None:
    """Resetting one session does not touch another's context."""
    await _conversation(store, 2)
    await _conversation(store, 2, key=OTHER_DM)
    await store.reset_context(str(DM))
    other = await store.recent_messages(str(OTHER_DM), before_id=10**9, limit=25)
    assert [m.text for m in other] == ["u1", "a1", "u2", "a2"]


async def test_context_reads_are_the_three_reads(store: Store) -> None:
    """The context build's one read gives what latest_compaction, scheduled_between (since the
    user's previous message) and recent_messages give, above a /reset floor, without a fallback
    reply, and no compaction when it is not asked for."""
    await store.append_inbound(inbound("before the reset"))
    await store.reset_context(str(DM))
    previous = await store.append_inbound(inbound("thanks"))
    assert previous is not None
    await store.append_reply(str(DM), "you're welcome")
    await store.append_reply(str(DM), "sorry, no answer", fallback=True)
    briefings = [
        await store.append_reply(str(DM), f"briefing {n}", origin="scheduled", job_id="b") for n in range(3)
    ]
    compaction = await store.record_compaction(
        str(DM), summary="they said thanks", last_summarised_id=previous.id,
        first_kept_message_id=previous.id, tokens_before=10, tokens_after=3, model="m", replaces=None,
    )
    assert compaction is not None
    request = await store.append_inbound(inbound("and now?"))
    assert request is not None
    await store.append_inbound(inbound("another session", key=OTHER_DM))

    latest, block, history, before = await store.context_reads(
        str(DM), before_id=2**62, limit=3, request_id=request.id, scheduled=2, compaction=True)
    assert latest == await store.latest_compaction(str(DM)) == compaction
    assert block == await store.scheduled_between(str(DM), after_id=None, before_id=request.id, limit=2)
    assert [m.id for m in block] == [b.id for b in briefings[1:]]
    assert history == await store.recent_messages(str(DM), before_id=2**62, limit=3)
    assert [m.text for m in history] == ["thanks", "you're welcome", "and now?"]
    assert before in ([], None)  # nothing stored after the request

    none, no_block, all_history, _ = await store.context_reads(
        str(DM), before_id=request.id, limit=10, request_id=request.id, scheduled=0, compaction=False)
    assert (none, no_block) == (None, [])
    assert [m.text for m in all_history] == ["thanks", "you're welcome"]


async def test_scheduled_between_and_previous_user_message(store: Store) -> None:
    """Scheduled outputs since the user's previous message are found, newest `limit`, oldest first."""
    old = await store.append_reply(str(DM), "old briefing", origin="scheduled", job_id="b")
    previous = await store.append_inbound(inbound("thanks"))
    assert previous is not None
    reply = await store.append_reply(str(DM), "you're welcome")
    briefings = [
        await store.append_reply(str(DM), f"briefing {n}", origin="scheduled", job_id="b") for n in range(4)
    ]
    request = await store.append_inbound(inbound("what about the second one?"))
    assert request is not None

    since_user = await store.scheduled_between(str(DM), after_id=None, before_id=request.id, limit=10)
    assert [m.id for m in since_user] == [b.id for b in briefings]  # since "thanks"
    assert await store.scheduled_between(str(OTHER_DM), after_id=None, before_id=request.id, limit=10) == []

    got = await store.scheduled_between(str(DM), after_id=previous.id, before_id=request.id, limit=3)
    assert [m.id for m in got] == [b.id for b in briefings[1:]]
    assert all(m.origin == "scheduled" for m in got)
    everything = await store.scheduled_between(str(DM), after_id=0, before_id=request.id, limit=10)
    assert [m.id for m in everything] == [old.id] + [b.id for b in briefings]
    assert reply.id not in [m.id for m in everything]
    assert await store.scheduled_between(str(DM), after_id=0, before_id=request.id, limit=0) == []


async def test_list_sessions_counts(store: Store) -> None:
    """Sessions are listed newest activity first with message and user-turn counts."""
    await _conversation(store, 3)
    await store.append_reply(str(DM), "briefing", origin="scheduled")
    group = build("main", "telegram", "group", -100123, topic=7)
    await store.append_inbound(inbound("hello group", key=group, chat_id="-100123", message_id="5"))
    sessions = await store.list_sessions()
    assert [s.key for s in sessions] == [str(group), str(DM)]
    by_key = {s.key: s for s in sessions}
    assert (by_key[str(DM)].message_count, by_key[str(DM)].user_turns) == (7, 3)
    assert (by_key[str(group)].message_count, by_key[str(group)].user_turns) == (1, 1)
    assert by_key[str(DM)].created_at <= by_key[str(DM)].updated_at


async def test_unknown_session_is_reported(store: Store) -> None:
    """Asking for a session that was never stored raises SessionNotFoundError naming it."""
    with pytest.raises(SessionNotFoundError, match="agent:main:telegram:direct:404"):
        await store.session("agent:main:telegram:direct:404")


async def test_history_shows_every_origin_newest_n(store: Store) -> None:
    """history() shows the newest N messages of all origins, oldest first."""
    await _conversation(store, 2)
    await store.append_reply(str(DM), "briefing", origin="scheduled")
    got = await store.history(str(DM), 3)
    assert [(m.text, m.origin) for m in got] == [
        ("u2", "interactive"), ("a2", "interactive"), ("briefing", "scheduled"),
    ]


def _plans(path: Path, statements: Sequence[str]) -> list[str]:
    with _plain(path) as conn:
        return [
            " | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql))
            for sql in statements
        ]


async def _traced(store: Store, calls: Callable[[], object]) -> list[str]:
    # Observe the SQL the store really runs (bound values expanded), not a copy of it.
    async with traced(store) as statements:
        await calls()  # type: ignore[misc]
    return [s for s in statements if s.lstrip().upper().startswith("SELECT")]


@pytest.mark.sqlite_only
async def test_context_reads_use_indexes(store: Store) -> None:
    """Every read the context pipeline does is an index search, never a scan of all messages."""
    await _conversation(store, 30)
    await _conversation(store, 30, key=OTHER_DM)
    await store.append_reply(str(DM), "briefing", origin="scheduled")
    request = await store.append_inbound(inbound("now", message_id="900"))
    assert request is not None
    await store.mark_delivered(request.id, ChatRef("telegram", "42"), ["900"])

    async def reads() -> None:
        await store.recent_messages(str(DM), before_id=request.id, limit=25)
        await store.scheduled_between(str(DM), after_id=1, before_id=request.id, limit=3)
        await store.scheduled_between(str(DM), after_id=None, before_id=request.id, limit=3)
        await store.message_by_provider_id(ChatRef("telegram", "42"), "900")

    statements = await _traced(store, reads)
    assert len(statements) == 4
    plans = _plans(store.path, statements)
    recent_plan = plans[0]
    assert "USING INDEX messages_session_origin" in recent_plan or "COVERING INDEX" in recent_plan
    for sql, plan in zip(statements, plans, strict=True):
        assert "SCAN messages" not in plan, (sql, plan)
        assert "SCAN m " not in f"{plan} ", (sql, plan)
        assert "SCAN provider_messages" not in plan, (sql, plan)
        assert "TEMP B-TREE" not in plan, (sql, plan)


@pytest.mark.sqlite_only
async def test_the_compaction_check_reads_the_index_alone(store: Store) -> None:
    """Whether a session is due for compaction is asked after every turn: its count of the
    uncompacted history's messages and tokens reads only an index, never each message's row (a
    long chat's thousands of rows per turn on SQLite's one thread)."""
    await _conversation(store, 30)

    async def reads() -> None:
        assert await store.history_tokens(str(DM), after_id=0) == (60, sum(
            m.token_estimate for m in await store.recent_messages(str(DM), before_id=2**62, limit=100)))

    statements = await _traced(store, reads)
    (plan,) = _plans(store.path, statements[:1])
    assert "COVERING INDEX messages_session_origin" in plan, plan
