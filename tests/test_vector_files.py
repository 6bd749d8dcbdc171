"""Each session's vectors kept in a file beside the database: read instead of the table after a
restart, appended to as vectors come, never trusted when it differs from the table, and never in
the way when it cannot be read or written. Real stores (SQLite and PostgreSQL), vectors as the
embed worker stores them (int8)."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from bot.config import parse_config
from bot.core.messages import ChatRef, InboundMessage
from bot.core.session_key import build
from bot.ranking.embedding import unavailable_reason
from bot.store import Store
from bot.store.vector_files import vectors_dir
from tests.sql import execute, traced

pytestmark = pytest.mark.skipif(unavailable_reason(parse_config({}, "<defaults>")) is not None,
                                reason="the semantic extra is not installed (`make semantic`)")

np = pytest.importorskip("numpy")

MODEL = "test-model"
DIM = 16
SESSION = build("main", "telegram", "direct", "42")
HEADER = 16  # magic, vector size, the session's removed vectors when written


async def stored_with_vectors(store: Store, count: int, *, seed: int = 1) -> list[int]:
    """`count` messages of SESSION, each with a random int8 vector; their ids."""
    rng = np.random.default_rng(seed)
    ids = []
    for index in range(count):
        stored = await store.append_inbound(InboundMessage(
            session_key=SESSION, chat=ChatRef("telegram", "42"), sender_id="42", sender_name="Ada",
            text=f"message {seed}-{index}",
        ))
        assert stored is not None
        ids.append(stored.id)
    vectors = rng.integers(-127, 128, (count, DIM), dtype=np.int8)
    rows = [(i, str(SESSION), v.tobytes(), f"message {seed}-{index}")
            for index, (i, v) in enumerate(zip(ids, vectors, strict=True))]
    await store.save_embeddings(MODEL, rows)
    return ids


async def search(store: Store, *, limit: int = 1000) -> list[tuple[int, float]]:
    query = np.ones(DIM, dtype=np.float32) / np.sqrt(DIM)
    return await store.semantic_matches(str(SESSION), query, model=MODEL, before_id=10**12, limit=limit)


async def traced_search(store: Store) -> tuple[list[tuple[int, float]], int]:
    """A search, and how many statements it made that read vectors from the table."""
    async with traced(store) as statements:
        found = await search(store)
    return found, sum(1 for sql in statements
                      if "vector" in sql and "FROM embeddings" in sql and "group_concat" in sql)


def the_file(store: Store) -> Path:
    return store.vector_files().path(str(SESSION), MODEL)


def blocks_in_file(store: Store) -> list[tuple[list[int], list[float], bytes]]:
    """The file's blocks: (ids, 1/norms, vectors) each."""
    data, at, blocks = the_file(store).read_bytes(), HEADER, []
    assert data[:4] == b"SBV3"
    while at < len(data):
        count = int(np.frombuffer(data, "<i8", 1, at)[0])
        ids = np.frombuffer(data, "<i8", count, at + 8)
        scales = np.frombuffer(data, "<f8", count, at + 8 + 8 * count)
        blocks.append(([int(i) for i in ids], [float(x) for x in scales],
                       data[at + 8 + 16 * count:at + 8 + (16 + DIM) * count]))
        at += 8 + (16 + DIM) * count
    assert at == len(data)
    return blocks


def block(ids: list[int], scales: list[float], vectors: bytes) -> bytes:
    return (np.array([len(ids), *ids], "<i8").tobytes() + np.array(scales, "<f8").tobytes() + vectors)


def ids_in_file(store: Store) -> list[int]:
    return [i for ids, _, _ in blocks_in_file(store) for i in ids]


def records_file(store: Store, removed: int = 0) -> bytes:
    """The session's vectors in the earlier layout (SBV2): a record (id, vector) per vector."""
    body = b"".join(
        np.int64(i).astype("<i8").tobytes() + vector
        for ids, _, vectors in blocks_in_file(store)
        for i, vector in zip(ids, (vectors[n * DIM:(n + 1) * DIM] for n in range(len(ids))), strict=True))
    return b"SBV2" + np.uint32(DIM).astype("<u4").tobytes() + np.int64(removed).astype("<i8").tobytes() + body


@pytest.mark.sqlite_only
async def test_after_a_restart_a_search_reads_the_file_not_the_vectors(store: Store) -> None:
    """A session searched once has its vectors in a file; a restarted daemon's search reads them
    from it (no vector leaves the database) and finds exactly what the table gives."""
    ids = await stored_with_vectors(store, 30)
    first = await search(store)
    assert ids_in_file(store) == ids
    store.drop_cached_vectors()  # as after a restart
    assert await traced_search(store) == (first, 0)


async def test_new_vectors_are_appended_and_a_deleted_one_rewrites_the_file(store: Store) -> None:
    """Vectors stored after the file was written are added to it (in memory or after a restart);
    when the table loses one, the file is written again and the search never returns it."""
    ids = await stored_with_vectors(store, 10)
    await search(store)
    ids += await stored_with_vectors(store, 5, seed=2)
    assert {i for i, _ in await search(store)} == set(ids)
    assert ids_in_file(store) == ids
    ids += await stored_with_vectors(store, 3, seed=3)
    store.drop_cached_vectors()
    assert {i for i, _ in await search(store)} == set(ids)
    assert ids_in_file(store) == ids
    gone = ids[4]
    await execute(store, "DELETE FROM embeddings WHERE message_id = ?", (gone,))
    store.drop_cached_vectors()
    found = {i for i, _ in await search(store)}
    assert gone not in found and found == set(ids) - {gone}
    assert ids_in_file(store) == [i for i in ids if i != gone]


@pytest.mark.sqlite_only
async def test_vectors_stored_for_a_session_in_memory_join_it_there_and_in_its_file(store: Store) -> None:
    """Vectors the embed worker stores for a session searched before are added to its vectors in
    memory and to its file: its next search (the next turn's) reads no vector from the database,
    and finds what a fresh read finds. Vectors another writer stored meanwhile are not taken for
    this store's own: the search then reads what the table gained."""
    ids = await stored_with_vectors(store, 10)
    await search(store)
    ids += await stored_with_vectors(store, 4, seed=2)
    found, reads = await traced_search(store)
    assert reads == 0 and {i for i, _ in found} == set(ids)
    assert ids_in_file(store) == ids
    store.drop_cached_vectors()
    assert await search(store) == found

    async with Store.open(store.path) as other:  # another process writing the same database
        ids += await stored_with_vectors(other, 2, seed=3)
    ids += await stored_with_vectors(store, 2, seed=4)
    found, reads = await traced_search(store)
    assert reads == 1 and {i for i, _ in found} == set(ids)
    assert ids_in_file(store) == ids


@pytest.mark.parametrize("damage", ["cut short", "not a vector file", "blocks out of order", "empty"])
async def test_a_damaged_file_is_never_trusted_and_is_written_again(store: Store, damage: str) -> None:
    """A file cut short by a crash, written by something else, appended to by two writers at once
    or empty gives no wrong vector: the search reads the table, and the file is mended."""
    ids = await stored_with_vectors(store, 12)
    truth = await search(store)
    path = the_file(store)
    data = path.read_bytes()
    if damage == "cut short":
        path.write_bytes(data[:-5])
    elif damage == "not a vector file":
        path.write_bytes(b"PK\x03\x04" + data[4:])
    elif damage == "blocks out of order":  # as two writers appending at once may leave them
        (ids, scales, vectors), = blocks_in_file(store)
        path.write_bytes(data[:HEADER] + block(ids[6:], scales[6:], vectors[6 * DIM:])
                         + block(ids[:6], scales[:6], vectors[:6 * DIM]))
    else:
        path.write_bytes(b"")
    store.drop_cached_vectors()
    assert await search(store) == truth
    assert ids_in_file(store) == ids


async def test_a_file_of_the_earlier_layout_is_never_parsed_as_this_one(store: Store) -> None:
    """A file a former version wrote (a record per vector) is not read as blocks: the search
    finds what the table holds, and the file is written again in this layout."""
    ids = await stored_with_vectors(store, 9)
    truth = await search(store)
    old = records_file(store)
    the_file(store).write_bytes(old)
    store.drop_cached_vectors()
    assert await search(store) == truth
    assert ids_in_file(store) == ids and the_file(store).read_bytes() != old


async def test_appended_blocks_keep_each_rows_norm_and_are_joined_when_many(store: Store) -> None:
    """Each append adds a block with its rows' norms, and a search after a restart finds what a
    fresh read of the table does; a file of many blocks is written again as one."""
    ids = await stored_with_vectors(store, 5)
    await search(store)
    for seed in range(2, 12):
        ids += await stored_with_vectors(store, 1, seed=seed)
    assert len(blocks_in_file(store)) == 11 and ids_in_file(store) == ids
    store.drop_cached_vectors()
    from_file, reads = await traced_search(store)
    joined = blocks_in_file(store)
    assert reads == 0 and len(joined) == 1 and ids_in_file(store) == ids
    store.vector_files().clear()
    store.drop_cached_vectors()
    assert await search(store) == from_file
    assert blocks_in_file(store) == joined  # the same norms as worked out from the table


async def test_a_file_holding_other_vectors_than_the_table_counts_is_replaced(store: Store) -> None:
    """A file from another state of the table (a copy restored beside a different database, a
    session pruned since) is written again from the table, not searched."""
    await stored_with_vectors(store, 8)
    await search(store)
    stale = the_file(store).read_bytes()
    ids = await stored_with_vectors(store, 4, seed=5)
    await execute(store, "DELETE FROM embeddings WHERE message_id = ?", (ids[0],))
    truth = await search(store)
    the_file(store).write_bytes(stale)  # 8 vectors; the table has 11, not 8 and then newer ones
    store.drop_cached_vectors()
    assert await search(store) == truth
    assert len(ids_in_file(store)) == 11


async def test_a_folder_that_cannot_be_written_only_means_reading_the_table(store: Store) -> None:
    """With the vectors' folder unusable (here a plain file stands where it should be), every
    search still finds what the table holds, and the daemon says why once."""
    folder = store.vector_files().directory
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.write_text("in the way")
    ids = await stored_with_vectors(store, 6)
    with capture_logs() as logs:
        assert {i for i, _ in await search(store)} == set(ids)
        store.drop_cached_vectors()
        more = await stored_with_vectors(store, 2, seed=9)
        assert {i for i, _ in await search(store)} == set(ids + more)
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert len(warnings) == 1 and str(folder) == warnings[0]["folder"]
    assert folder.read_text() == "in the way"


async def test_a_session_left_without_vectors_keeps_no_file(store: Store) -> None:
    """When every vector of a session is gone (its messages pruned), its file goes at its next
    search: nothing of what was said stays beside the database."""
    ids = await stored_with_vectors(store, 4)
    await search(store)
    assert the_file(store).exists()
    for message_id in ids:
        await execute(store, "DELETE FROM embeddings WHERE message_id = ?", (message_id,))
    assert await search(store) == []
    assert not the_file(store).exists()


async def test_clearing_the_vectors_deletes_their_files(store: Store) -> None:
    """`db embed --rebuild` clears the vectors: their files go with them."""
    await stored_with_vectors(store, 5)
    await search(store)
    assert the_file(store).exists()
    await store.clear_embeddings()
    assert not the_file(store).exists()
    assert await search(store) == []


def test_two_databases_in_one_folder_keep_their_own_files(tmp_path: Path) -> None:
    """Session keys repeat across databases: each database's files are in a folder of its own."""
    assert vectors_dir(tmp_path / "a.db") != vectors_dir(tmp_path / "b.db")
    assert vectors_dir(tmp_path / "a.db").parent == tmp_path
