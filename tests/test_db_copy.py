"""`switchboard db copy`: an SQLite bot moved onto PostgreSQL and back keeps every row of every
table, answers recall, vector search, history and a context build the same, and the command
refuses a target that holds data, a password on its command line and a running daemon."""

from __future__ import annotations

import asyncio
import hashlib
import time
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bot.config import parse_config
from bot.context.builder import ContextBuilder
from bot.context.replay import replay
from bot.core.media import Media
from bot.core.messages import ChatRef, InboundMessage, OutboundMessage
from bot.core.session_key import build
from bot.models.brain import AnthropicBrain
from bot.ranking.embedding import vector_bytes
from bot.store import Instance, Store, UsageRecord
from bot.store.copying import copy_store
from bot.store.postgres import PostgresStore
from bot.store.tables import quoted
from tests.harness import switchboard_cli
from tests.sql import execute, rows

DM = build("main", "telegram", "direct", "42")
GROUP = build("main", "telegram", "group", "-100")
CHAT = ChatRef("telegram", "42")
MODEL = "test-vectors"
PICTURE = b"\xff\xd8\xff\xe0" + b"cat" * 40
TOPICS = ("the alpha plan is ready", "dinner in Lisbon on friday", "the bravo deploy failed",
          "milk and coffee for the office", "the alpha plan needs a review")


def said(text: str, message_id: str, *, key: Any = DM, sender: str = "42") -> InboundMessage:
    chat = ChatRef("telegram", key.peer)
    return InboundMessage(session_key=key, chat=chat, sender_id=sender, sender_name="Ada", text=text,
                          provider_message_id=message_id)


def on_postgres(url: str, tmp_path: Path) -> AbstractAsyncContextManager[PostgresStore]:
    return PostgresStore.connect(url, state_path=tmp_path / "state.db", label=url)


async def fill_every_table(store: Store) -> None:
    """A bot's life in miniature: conversations with replies (one still in the outbox), context
    snapshots, a compaction and a memory flush, schedule runs, chat commands, a quarantined update,
    pairings, a session model, usage, tool calls, notes, a timezone, reminders, web console
    accounts, sessions and failed logins, vectors, a lease and an instance's heartbeat, a backlog
    marker, and a picture kept for a message."""
    rng = np.random.default_rng(3)
    vectors: list[tuple[int, str, bytes, str]] = []
    for n in range(12):
        key = GROUP if n % 4 == 3 else DM
        request = await store.append_inbound(said(f"{TOPICS[n % len(TOPICS)]} ({n})", f"m{n}", key=key,
                                                  sender=str(42 + n % 2)))
        assert request is not None
        chat = ChatRef("telegram", key.peer)
        deliver = OutboundMessage(chat, f"answer {n}") if n == 11 else None
        reply = await store.append_reply(str(key), f"answer {n}: {TOPICS[(n + 1) % len(TOPICS)]}",
                                         request_id=request.id, deliver=deliver, actions=("looked it up",))
        if n != 11:
            await store.mark_delivered(reply.id, chat, [f"r{n}"])
        await store.record_snapshot(str(key), request.id, reply.id, {"turn": n, "why": "test"}, f"h{n}")
        for message in (request, reply):
            vector = rng.standard_normal(16).astype(np.float32)
            unit = vector_bytes(vector / np.linalg.norm(vector))
            vectors.append((message.id, str(key), unit, message.text))
        if n == 5:
            calls = await store.begin_tool_round(str(key), request.id, 1, "let me look",
                                                 [("tu1", "search", {"q": "alpha"}), ("tu2", "clock", {})])
            for call in calls:
                await store.finish_tool_call(call, result="found", summary="1 hit", is_error=False,
                                             duration_ms=1.5)
            await store.attach_tool_calls(request.id, reply.id)
    await store.save_embeddings(MODEL, vectors)
    # A vector deleted: its session's count keeps the largest id it ever counted.
    await execute(store, "DELETE FROM embeddings WHERE message_id = ?", (vectors[-2][0],))
    history = await store.history(str(DM), 100)
    await store.record_compaction(str(DM), summary="they planned alpha", last_summarised_id=history[3].id,
                                  first_kept_message_id=history[4].id, tokens_before=900, tokens_after=120,
                                  model="summariser", replaces=None)
    flush = await store.claim_memory_flush(str(DM), cycle_start=0, threshold=0.5, share=0.52,
                                           request_id=history[2].id)
    assert flush is not None
    await store.finish_memory_flush(flush, model="model-x", notes=1, actions=["remember(likes tea)"],
                                    reply="kept")
    run, _ = await store.claim_run("morning", 1_700_000_000.0)
    output = await store.record_scheduled_output(run.id, str(DM), "good morning", job_id="morning",
                                                 attempts=1)
    await store.finish_run(run.id, "delivered", delivered_ids=["s1"])
    await store.record_missed("morning", [1_699_900_000.0], "daemon was down")
    assert output.id
    command = InboundMessage(session_key=DM, chat=CHAT, sender_id="42", sender_name="Ada", text="/reset",
                             provider_message_id="c1", command="reset")
    await store.append_command(command, "reset")
    await store.quarantine("telegram", "991", '{"update_id": 991}', "missing field")
    now = time.time()
    await store.request_pairing("telegram", "77", "Stranger", now=now, ttl=3600, notice_interval=3600,
                                chat_id="77")
    await store.set_session_model(str(DM), "fast", "42")
    await store.record_usage(UsageRecord(str(DM), "42", "reply", "model-x", 120, 30, 5, 60, now))
    await store.add_note("telegram", "42", "likes tea", session_key=str(DM), max_notes=10)
    await store.set_user_timezone("telegram", "42", "Europe/Lisbon")
    await store.add_reminder(session_key=str(DM), chat=CHAT, user_id="42", user_name="Ada", text="call Jo",
                             at=now + 3600, repeat="0 9 * * 1", timezone="Europe/Lisbon",
                             request_message_id=history[0].id, max_pending=5)
    await store.add_web_account("ada", "$argon2id$a-stand-in-hash", now=now)
    await store.open_web_session("a-cookie-hash", "ada", "a-csrf-token", now=now, expires_at=now + 3600)
    await store.record_login_failure("127.0.0.1", "bob", now=now, keep=900)
    await store.take_lease(str(GROUP), "old-instance", 30)
    await store.keep_channel_cursor("matrix", "s72594_4483_1934")
    await store.heartbeat(Instance("old-instance", "host-a", 4242, now - 7200, now - 3600))
    await execute(store, "INSERT INTO index_backlog (name, upto) VALUES ('lexical', 0)")
    sha = await store.kept_files().keep(PICTURE)
    await store.append_inbound(replace(said("my cat", "pic"), media=(
        Media("photo", "kept", sha256=sha, mime="image/jpeg", size=len(PICTURE), width=640, height=480),)))


async def every_row(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Each data table's rows, in a fixed order (values as Python compares them: bytes, floats)."""
    tables = await store.table_columns()
    found: dict[str, list[tuple[Any, ...]]] = {}
    for table, columns in tables.items():
        listed = ", ".join(quoted(column) for column in columns)
        read = await rows(store, f"SELECT {listed} FROM {quoted(table)}")
        found[table] = sorted((tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                               for row in read), key=repr)
    return found


async def test_a_round_trip_through_postgresql_keeps_every_row_of_every_table(
    tmp_path: Path, pg_url: str
) -> None:
    """SQLite -> PostgreSQL -> SQLite: every table (each with rows, whatever later issues add) holds
    the same rows on all three, ids included; the per-table counts say so; new rows get new ids."""
    async with Store.open(tmp_path / "bot.db") as source:
        await fill_every_table(source)
        original = await every_row(source)
        assert [table for table, rows in original.items() if not rows] == []
        async with on_postgres(pg_url, tmp_path) as pg:
            counts = await copy_store(source, pg, batch=7)
            tables = [c for c in counts if c.table != "kept files"]
            assert all(c.source == c.target == len(original[c.table]) for c in tables)
            assert {c.table for c in tables} == set(original)
            assert [(c.source, c.target) for c in counts if c.table == "kept files"] == [(1, 1)]
            assert await every_row(pg) == original
            sha = hashlib.sha256(PICTURE).hexdigest()
            assert await pg.kept_files().read(sha) == PICTURE  # in the database, not beside it
            async with Store.open(tmp_path / "back" / "back.db") as back:
                await copy_store(pg, back, batch=5)
                assert await every_row(back) == original
                assert await back.foreign_key_problems() == 0
                assert (tmp_path / "back" / "files" / sha[:2] / sha).read_bytes() == PICTURE
            # The identities continue after the copied ids.
            later = await pg.append_inbound(said("after the move", "m-new"))
            assert later is not None and later.id == max(row[0] for row in original["messages"]) + 1


async def test_the_copy_answers_recall_vector_search_and_a_context_build_as_the_original(
    tmp_path: Path, pg_url: str
) -> None:
    """Lexical recall and vector search on the copied session find the same messages with the same
    scores, and the turn recorded on SQLite replays to the same context on PostgreSQL."""
    config = parse_config({"conversation": {"lookback_count": 4, "recall_count": 2, "context_window": 400,
                                            "reserve_tokens": 0}}, str(tmp_path / "config.toml"))
    brain = AnthropicBrain(config.anthropic, None)  # no key: triage fails open, deterministically
    async with Store.open(tmp_path / "bot.db") as source, on_postgres(pg_url, tmp_path) as pg:
        await fill_every_table(source)
        request = await source.append_inbound(said("what about the alpha plan review?", "ask"))
        assert request is not None
        built = await ContextBuilder(config, source, brain).build(DM, request, CHAT)
        await source.record_snapshot(str(DM), request.id, None, built.snapshot(), built.input_hash)
        await copy_store(source, pg)

        for store in (source, pg):
            assert built.recalled, "the scenario should recall something"
            found = await store.lexical_turns(str(DM), request.text, before_id=request.id, limit=5)
            assert found == await source.lexical_turns(str(DM), request.text, before_id=request.id, limit=5)
            first = (await source.history(str(DM), 100))[0]
            query = await source.embedding_of(first.id, MODEL)
            assert query is not None
            near = await store.semantic_matches(str(DM), query, model=MODEL, before_id=request.id, limit=4)
            assert near == await source.semantic_matches(str(DM), query, model=MODEL, before_id=request.id,
                                                         limit=4)
            assert near and (await store.history(str(DM), 50)) == (await source.history(str(DM), 50))
        replayed = await replay(config, pg, brain, str(DM), -1)
        assert replayed.matches and replayed.rebuilt.input_hash == built.input_hash


async def test_the_command_moves_a_bot_to_postgresql_and_backs_it_up_again(
    tmp_path: Path, pg_url: str
) -> None:
    """`db copy --to URL` from an SQLite config prints every table's counts and exits 0; the copy
    answers `switchboard history` the same; from the PostgreSQL config `--to FILE` writes a backup
    that answers the same again."""
    async with Store.open(tmp_path / "bot.db") as source:
        await fill_every_table(source)
    sqlite_dir, pg_dir = tmp_path / "on-sqlite", tmp_path / "on-pg"
    sqlite_dir.mkdir()
    pg_dir.mkdir()
    (sqlite_dir / "config.toml").write_text(f'[database]\npath = "{tmp_path / "bot.db"}"\n', encoding="utf-8")
    (pg_dir / "config.toml").write_text(f'[database]\nurl = "{pg_url}"\n', encoding="utf-8")

    code, out, err = await switchboard_cli(sqlite_dir, "db", "copy", "--to", pg_url)
    assert code == 0, err
    assert f"to {pg_url}" in out and out.splitlines()[-1].startswith("every table's rows counted equal")
    assert [line.split() for line in out.splitlines() if line.split()[:1] == ["messages"]] == [
        ["messages", "26", "26"]]
    assert [line.split() for line in out.splitlines() if line.split()[:2] == ["kept", "files"]] == [
        ["kept", "files", "1", "1"]]
    assert out.splitlines()[-1].endswith(" tables, 26 messages, 1 kept files)")
    backup = tmp_path / "backups" / "switchboard.db"
    # Three commands that only read the two databases (the backup writes a third), side by side:
    # each is a process start, most of this test's time on a loaded machine.
    (_, before, _), (code, after, err), backed_up = await asyncio.gather(
        switchboard_cli(sqlite_dir, "history", str(DM), "--limit", "50"),
        switchboard_cli(pg_dir, "history", str(DM), "--limit", "50"),
        switchboard_cli(pg_dir, "db", "copy", "--to", str(backup)))
    assert code == 0 and after == before and "the alpha plan" in after, err
    code, out, err = backed_up
    assert code == 0 and backup.exists(), err
    assert not list(backup.parent.glob(".*partial*"))
    (pg_dir / "config.toml").write_text(f'[database]\npath = "{backup}"\n', encoding="utf-8")
    _, restored, _ = await switchboard_cli(pg_dir, "history", str(DM), "--limit", "50")
    assert restored == before


async def test_a_target_holding_data_is_refused_and_left_alone(tmp_path: Path, pg_url: str) -> None:
    """Copying into a database that already holds messages (a second copy, another bot's file)
    is refused in one line naming it, exit 1, and changes nothing there."""
    async with Store.open(tmp_path / "bot.db") as source:
        await fill_every_table(source)
    async with on_postgres(pg_url, tmp_path) as pg:
        await pg.append_inbound(said("already here", "x1"))
    async with Store.open(tmp_path / "other.db") as other:
        await other.append_inbound(said("another bot", "y1"))
    (tmp_path / "config.toml").write_text(f'[database]\npath = "{tmp_path / "bot.db"}"\n', encoding="utf-8")
    for target in (pg_url, str(tmp_path / "other.db")):
        code, out, err = await switchboard_cli(tmp_path, "db", "copy", "--to", target)
        assert code == 1 and out == ""
        assert err.count("\n") == 1 and "already holds data" in err and target in err
    async with on_postgres(pg_url, tmp_path) as pg:
        assert await pg.message_count() == 1
    async with Store.open(tmp_path / "other.db") as other:
        assert await other.message_count() == 1


async def test_a_password_in_the_url_is_refused_without_showing_it(tmp_path: Path) -> None:
    """`--to postgresql://user:secret@…` is refused before anything is opened, and the password
    appears nowhere in what the command prints."""
    async with Store.open(tmp_path / "bot.db") as source:
        await source.append_inbound(said("hello", "1"))
    (tmp_path / "config.toml").write_text(f'[database]\npath = "{tmp_path / "bot.db"}"\n', encoding="utf-8")
    for url in ("postgresql://bot:hunter2-secret@db.example.com/bot",
                "postgresql://bot@db.example.com/bot?password=hunter2-secret"):
        code, out, err = await switchboard_cli(tmp_path, "db", "copy", "--to", url)
        assert code == 1 and "PGPASSWORD" in err
        assert "hunter2" not in out + err and "db.example.com" not in out + err


async def test_a_running_daemon_is_refused(tmp_path: Path, pg_url: str) -> None:
    """While an instance beats on the source database, the copy refuses and says to stop it."""
    async with on_postgres(pg_url, tmp_path) as pg:
        await pg.append_inbound(said("hello", "1"))
        await pg.heartbeat(Instance("live", "host-a", 4242, time.time() - 60, time.time()))
    (tmp_path / "config.toml").write_text(f'[database]\nurl = "{pg_url}"\n', encoding="utf-8")
    code, _, err = await switchboard_cli(tmp_path, "db", "copy", "--to", str(tmp_path / "backup.db"))
    assert code == 1 and "stop it first" in err
    assert not (tmp_path / "backup.db").exists()
