"""Semantic recall's parts with the real all-MiniLM-L6-v2 weights (and the shipped static table) and
real SQLite files: the encoders, the store's vectors and search, the background worker, the
daemon's wiring, and the CLI."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import struct
import sys
import threading
import tracemalloc
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bot.config import Config, parse_config
from bot.context.embed_worker import EmbedWorker, embed_backlog, embed_batch
from bot.context.semantic_recall import SemanticRecall
from bot.core.messages import ChatRef, InboundMessage, StoredMessage
from bot.core.session_key import build
from bot.ranking.embedding import (
    Embedder,
    embedding_text,
    load_embedder,
    model_files,
    unavailable_reason,
    vector_bytes,
    vectors_from_bytes,
)
from bot.ranking.encode_threads import encode_in_thread
from bot.ranking.safetensors_reader import read_safetensors
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.fake_channel import FakeChannel
from tests.harness import config_data, daemon_with, say, switchboard_cli
from tests.sql import execute, rows

pytestmark = pytest.mark.skipif(unavailable_reason(parse_config({}, "<defaults>")) is not None,
                                reason="the semantic extra is not installed (`make semantic`)")

SESSION = build("main", "telegram", "group", "-100")
OTHER = build("main", "telegram", "group", "-200")


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    """The packaged model (all-MiniLM-L6-v2, the default encoder), loaded once for the module."""
    loaded = load_embedder(parse_config({}, "<defaults>"))
    assert loaded is not None
    return loaded


@pytest.fixture(scope="module")
def static() -> Embedder:
    """The shipped static table (`encoder = "static"`), loaded once for the module."""
    loaded = load_embedder(parse_config({"semantic": {"encoder": "static"}}, "<static>"))
    assert loaded is not None
    return loaded


async def say_in(store: Store, text: str, *, name: str = "Caroline", key: Any = SESSION) -> StoredMessage:
    """Store one group message from `name`."""
    stored = await store.append_inbound(InboundMessage(
        session_key=key, chat=ChatRef("telegram", str(key).rsplit(":", 1)[-1]), sender_id=name.lower(),
        sender_name=name, text=text,
    ))
    assert stored is not None
    return stored


async def embed_all(store: Store, embedder: Embedder) -> int:
    return await embed_backlog(store, embedder, batch_size=8)


async def ranked(store: Store, embedder: Embedder, request: StoredMessage, key: Any = SESSION,
                 limit: int = 10) -> list[str]:
    """Texts of the session's semantic matches for a stored request, best first."""
    query = await store.embedding_of(request.id, embedder.model_id)
    assert query is not None
    matches = await store.semantic_matches(str(key), query, model=embedder.model_id,
                                           before_id=request.id, limit=limit)
    texts = []
    for message_id, _ in matches:
        message = await store.message_by_id(message_id)
        assert message is not None
        texts.append(message.text)
    return texts


async def stored_vectors(store: Store) -> dict[int, str]:
    """message id -> model of every stored vector, read through the store's own connection."""
    found = await rows(store, "SELECT message_id, model FROM embeddings")
    return {int(row[0]): str(row[1]) for row in found}


def vectors_in(db: Path) -> dict[int, str]:
    with sqlite3.connect(db) as conn:
        return {int(row[0]): str(row[1]) for row in conn.execute("SELECT message_id, model FROM embeddings")}


def test_the_encoder_gives_the_published_similarities(embedder: Embedder) -> None:
    """Cosines match sentence-transformers' published example for all-MiniLM-L6-v2 (0.6660, 0.1046,
    0.1411), vectors are unit float32 rows of 384, and a text's vector does not depend on its batch."""
    texts = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
    vectors = embedder.encode(texts)
    assert vectors.shape == (3, 384) and str(vectors.dtype) == "float32"
    cos = vectors @ vectors.T
    published = {(0, 1): 0.6660, (0, 2): 0.1046, (1, 2): 0.1411}
    assert all(abs(cos[pair] - value) < 1e-3 for pair, value in published.items())
    alone = embedder.encode([texts[2]])[0]
    long_batch = embedder.encode(["word " * 300, texts[2]])[1]  # truncated at 256 tokens, padded
    assert float(alone @ long_batch) > 0.99999
    assert embedder.model_id.startswith("all-MiniLM-L6-v2@")


def test_the_static_table_ranks_the_published_example_as_minilm_does(static: Embedder) -> None:
    """The static encoder gives unit float32 rows of its table's width, orders the published
    example's pairs as all-MiniLM-L6-v2 does (lovely weather nearest to sunny), gives a text the
    same vector alone or in a batch, zeros to a text without word pieces, and names itself."""
    texts = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
    vectors = np.asarray(static.encode(texts))
    assert vectors.shape == (3, 256) and str(vectors.dtype) == "float32"
    assert all(abs(float(v @ v) - 1) < 1e-5 for v in vectors)
    cos = vectors @ vectors.T
    assert cos[0, 1] > max(cos[0, 2], cos[1, 2])
    assert float(np.asarray(static.encode([texts[2]])[0]) @ vectors[2]) > 0.99999
    assert not any(static.encode([""])[0])
    assert static.model_id.startswith("minilm-static@")


async def test_a_switch_of_encoder_embeds_again_and_never_compares_the_two(
    store: Store, embedder: Embedder, static: Embedder
) -> None:
    """MiniLM's vectors and the static table's carry different model ids: after a switch every
    message is pending for the new encoder, and its vector replaces the old one (several messages
    of a session in one batch)."""
    said = [await say_in(store, "I looked into adoption agencies last week"),
            await say_in(store, "and then I rang two of them")]
    ids = [message.id for message in said]
    assert await embed_all(store, embedder) == 2
    assert embedder.model_id != static.model_id
    assert [m.id for m in await store.pending_embeddings(static.model_id)] == ids
    assert await embed_all(store, static) == 2
    assert await stored_vectors(store) == dict.fromkeys(ids, static.model_id)
    assert [m.id for m in await store.pending_embeddings(embedder.model_id)] == ids
    kept, counted = await counts_and_aggregate(store)
    assert kept == counted


async def test_a_fact_said_in_other_words_is_nearer_than_distractors_sharing_words(
    store: Store, embedder: Embedder
) -> None:
    """"Has Caroline been finding out how to adopt a kid?" finds "I looked into adoption agencies",
    which shares none of its words, before messages that share several."""
    fact = await say_in(store, "I looked into adoption agencies last week")
    for text, name in [("finding a parking spot has been hard", "Caroline"),
                       ("my kid has been out all day", "Melanie"),
                       ("how did the kids like the museum?", "Caroline"),
                       ("Caroline, how is the new kid at work?", "Melanie"),
                       ("we looked at the sunset last week", "Caroline")]:
        await say_in(store, text, name=name)
    request = await say_in(store, "Has Caroline been finding out how to adopt a kid?", name="Melanie")
    assert await embed_all(store, embedder) == 7
    assert embedding_text(request) == "Melanie: Has Caroline been finding out how to adopt a kid?"
    found = await ranked(store, embedder, request)
    assert found[0] == fact.text
    assert len(found) == 6


async def test_a_request_the_worker_has_not_reached_is_embedded_by_its_turn(
    store: Store, embedder: Embedder
) -> None:
    """The turn embeds its own request when the worker is behind, and finds the session's earlier
    words by meaning all the same, in a store that has read none of the session's vectors yet; the
    request's vector is kept (the worker and replay reuse it) and the next search still sees it."""
    fact = await say_in(store, "I looked into adoption agencies last week")
    parking = await say_in(store, "finding a parking spot has been hard")
    assert await embed_all(store, embedder) == 2
    request = await say_in(store, "Has Caroline been finding out how to adopt a kid?", name="Melanie")
    recall = SemanticRecall(store, embedder)
    found = await recall.matches(str(SESSION), request, limit=5)
    assert [message_id for message_id, _ in found] == [fact.id, parking.id]  # never the request
    assert await store.embedding_of(request.id, embedder.model_id) is not None
    later = await say_in(store, "Who adopts a kid these days?", name="Melanie")
    assert await embed_all(store, embedder) == 1
    assert await ranked(store, embedder, later) == [request.text, fact.text, parking.text]


async def test_a_request_is_encoded_beside_the_reads_only_where_the_session_outnumbers_the_window(
    store: Store, embedder: Embedder
) -> None:
    """`early_matches` (started with the turn's reads) encodes a request without a vector when
    the session already holds the window's number of vectors, with the matches `matches` finds;
    in a shorter session it leaves the request to the pool (None, nothing encoded)."""
    fact = await say_in(store, "I looked into adoption agencies last week")
    parking = await say_in(store, "finding a parking spot has been hard")
    assert await embed_all(store, embedder) == 2
    request = await say_in(store, "Has Caroline been finding out how to adopt a kid?", name="Melanie")
    counting = CountingEmbedder(embedder)
    recall = SemanticRecall(store, counting)  # type: ignore[arg-type]
    assert await recall.early_matches(str(SESSION), request, limit=5, window=3) is None
    assert counting.texts == []
    found = await recall.early_matches(str(SESSION), request, limit=5, window=2)
    assert found is not None and [message_id for message_id, _ in found] == [fact.id, parking.id]
    assert counting.texts == [embedding_text(request)]
    assert await recall.matches(str(SESSION), request, limit=5) == found  # stored: not encoded again
    assert counting.texts == [embedding_text(request)]


async def test_matches_stay_in_their_session_above_the_floor_and_below_before_id(
    store: Store, embedder: Embedder
) -> None:
    """Search never returns another session's vectors, a message from before /reset, or one at or
    after before_id; equal scores list the newer message first."""
    old = await say_in(store, "we adopted a puppy from the shelter")
    await say_in(store, "we adopted a puppy from the shelter", key=OTHER)
    await store.reset_context(str(SESSION))
    first = await say_in(store, "the shelter gave us a puppy")
    second = await say_in(store, "the shelter gave us a puppy")
    later = await say_in(store, "the shelter gave us a puppy")
    await embed_all(store, embedder)
    query = embedder.encode(["Caroline: we adopted a puppy from the shelter"])[0]
    matches = await store.semantic_matches(str(SESSION), query, model=embedder.model_id,
                                           before_id=later.id, limit=10)
    assert [message_id for message_id, _ in matches] == [second.id, first.id]
    assert matches[0][1] == matches[1][1] and 0.5 < matches[0][1] <= 1.0
    assert old.id not in dict(matches)
    assert await store.semantic_matches(str(SESSION), query, model="another-model", before_id=later.id,
                                        limit=10) == []
    only = await store.semantic_matches(str(SESSION), query, model=embedder.model_id, before_id=later.id + 1,
                                        limit=1)
    assert [message_id for message_id, _ in only] == [later.id]


async def test_search_sees_new_and_deleted_vectors(store: Store, embedder: Embedder) -> None:
    """The in-memory copy of a session's vectors follows the table: a new vector is found at once,
    and a message deleted by another connection (its vector goes with it) is never returned."""
    kept = await say_in(store, "my sister lives in Lisbon")
    gone = await say_in(store, "my brother lives in Porto")
    await embed_all(store, embedder)
    query = embedder.encode(["Caroline: where does my family live?"])[0]

    async def ids() -> set[int]:
        return {message_id for message_id, _ in await store.semantic_matches(
            str(SESSION), query, model=embedder.model_id, before_id=10**9, limit=10)}

    assert await ids() == {kept.id, gone.id}
    assert await store.warm_embeddings(embedder.model_id, sessions=10) == 1  # the one session there is
    added = await say_in(store, "my parents live in Faro")
    await embed_all(store, embedder)
    assert await ids() == {kept.id, gone.id, added.id}
    await execute(store, "DELETE FROM messages WHERE id = ?", (gone.id,))
    assert await ids() == {kept.id, added.id}


async def test_a_vector_of_another_size_is_left_out_and_the_rest_found(
    store: Store, embedder: Embedder
) -> None:
    """A row of another size (written by something else) never breaks a search: read afresh or
    added to a session already in memory, it is left out and every other vector is still found,
    each with the score a fresh read gives."""
    first = await say_in(store, "my sister lives in Lisbon")
    odd = await say_in(store, "my brother lives in Porto")
    await embed_all(store, embedder)
    query = embedder.encode(["Caroline: where does my family live?"])[0]

    async def found() -> list[tuple[int, float]]:
        return await store.semantic_matches(str(SESSION), query, model=embedder.model_id,
                                            before_id=10**9, limit=10)

    before = await found()
    assert {message_id for message_id, _ in before} == {first.id, odd.id}
    later = await say_in(store, "my parents live in Faro")
    added = await say_in(store, "my cousin lives in Braga")
    await store.save_embeddings(embedder.model_id, [(later.id, str(SESSION), b"\x01" * 10, later.text)])
    await embed_all(store, embedder)  # `added` gets a real vector
    appended = await found()
    assert {message_id for message_id, _ in appended} == {first.id, odd.id, added.id}
    store.drop_cached_vectors()  # as after a restart: everything read afresh
    assert await found() == appended
    assert dict(appended)[first.id] == dict(before)[first.id]


async def test_fallback_replies_and_scheduled_output_are_never_embedded(
    store: Store, embedder: Embedder
) -> None:
    """Only interactive messages that are not the fallback apology get a vector."""
    request = await say_in(store, "are you there?")
    apology = await store.append_reply(str(SESSION), "I couldn't reach the model, try again in a moment.",
                                       request_id=request.id)
    await execute(store, "UPDATE messages SET fallback = 1 WHERE id = ?", (apology.id,))
    report = await store.append_reply(str(SESSION), "Your morning report", origin="scheduled", job_id="m")
    answered = await store.append_reply(str(SESSION), "Yes, I'm here.")  # a later answer of its own
    assert [m.id for m in await store.pending_embeddings(embedder.model_id)] == [request.id, answered.id]
    await embed_all(store, embedder)
    vectors = await stored_vectors(store)
    assert set(vectors) == {request.id, answered.id}
    assert apology.id not in vectors and report.id not in vectors
    assert await store.pending_embeddings(embedder.model_id) == []


async def test_the_worker_embeds_what_is_stored_and_a_restart_fills_the_gaps(
    tmp_path: Path, embedder: Embedder
) -> None:
    """Notified, the worker embeds new messages; messages stored while no worker ran, or whose
    vector is missing, are embedded when the next worker starts; a failing pass is retried."""
    db = tmp_path / "switchboard.db"
    async with Store.open(db) as store:
        async with EmbedWorker(store, embedder, batch_size=2, retry_delay=0.01) as worker:
            stored = [await say_in(store, f"message number {i}") for i in range(5)]
            worker.notify()
            await worker.settled()
            assert set(vectors_in(db)) == {m.id for m in stored}
        stored += [await say_in(store, "said while the daemon was down")]
        with sqlite3.connect(db) as conn:
            conn.execute("DELETE FROM embeddings WHERE message_id = ?", (stored[0].id,))
        flaky = FlakyEmbedder(embedder, failures=1)
        async with EmbedWorker(store, flaky, batch_size=32, retry_delay=0.01) as worker:  # type: ignore[arg-type]
            await worker.settled()
        assert set(vectors_in(db)) == {m.id for m in stored}
        assert flaky.calls == 2


class FlakyEmbedder:
    """The real embedder, failing its first `failures` calls as a full disk or a bug would."""

    def __init__(self, embedder: Embedder, *, failures: int) -> None:
        self._embedder = embedder
        self.model_id = embedder.model_id
        self.failures = failures
        self.calls = 0

    def encode(self, texts: Sequence[str]) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError("simulated failure")
        return self._embedder.encode(texts)


async def test_the_daemon_embeds_requests_and_replies(
    api: AnthropicStandIn, make_config: Any, channel: FakeChannel, db: Path, embedder: Embedder
) -> None:
    """With [semantic] on, a running daemon embeds each request and its reply in the background."""
    config: Config = make_config(config_data(api, semantic={"enabled": "on"}))
    async with daemon_with(config, channel) as daemon:
        assert daemon.embedder is not None and daemon.embedder.model_id == embedder.model_id
        await say(daemon, channel, "I looked into adoption agencies")
        assert daemon.embed_worker is not None
        await daemon.embed_worker.settled()
    with sqlite3.connect(db) as conn:
        texts = [str(row[0]) for row in conn.execute(
            "SELECT m.text FROM embeddings e JOIN messages m ON m.id = e.message_id ORDER BY m.id")]
    assert texts == ["I looked into adoption agencies", "re: I looked into adoption agencies"]


async def test_db_embed_fills_and_rebuilds_an_existing_database(tmp_path: Path, static: Embedder) -> None:
    """`switchboard db embed` embeds every message that lacks a vector and says how many; --rebuild
    drops them all and computes them again."""
    # On the static encoder: which messages lack a vector, and what --rebuild drops, is the
    # command's and the same whatever encodes them; MiniLM read twice in subprocesses was most of
    # this test's time under load (reading and encoding with MiniLM are the tests above).
    embedder = static
    (tmp_path / "config.toml").write_text('[database]\npath = "bot.db"\n[semantic]\nencoder = "static"\n',
                                          encoding="utf-8")
    db = tmp_path / "bot.db"
    async with Store.open(db) as store:
        for i in range(3):
            await say_in(store, f"old message {i}")
        vector = vector_bytes(embedder.encode(["Caroline: old message 0"])[0])
        await store.save_embeddings(embedder.model_id, [(1, str(SESSION), vector, "old message 0")])
    code, out, err = await switchboard_cli(tmp_path, "db", "embed")
    assert code == 0, err
    assert f"embedded 2 message(s) with {embedder.model_id}" in out
    assert set(vectors_in(db)) == {1, 2, 3}
    code, out, err = await switchboard_cli(tmp_path, "db", "embed", "--rebuild")
    assert code == 0, err
    assert out.startswith("dropped 3 vector(s), then embedded 3 message(s)")
    assert "Traceback" not in err


async def test_semantic_on_without_the_model_stops_run_and_db_embed_in_one_line(tmp_path: Path) -> None:
    """enabled = "on" with a model_path that holds no model: `run` exits 2 naming semantic.enabled and
    what to install, without a traceback; `db embed` refuses in one line too."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "config.toml").write_text(
        '[database]\npath = "bot.db"\n[semantic]\nenabled = "on"\nmodel_path = "empty"\n'
        "[channels.telegram]\nenabled = true\n", encoding="utf-8")
    code, _, err = await switchboard_cli(tmp_path, "run", env={"TELEGRAM_BOT_TOKEN": "123:abc"})
    assert code == 2
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"switchboard: {tmp_path / 'config.toml'}: semantic.enabled: \"on\", but")
    assert str(tmp_path / "empty") in last and "make semantic" in last
    async with Store.open(tmp_path / "bot.db"):
        pass
    code, _, err = await switchboard_cli(tmp_path, "db", "embed")
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "cannot embed" in err and "make semantic" in err


async def test_a_vector_is_written_once_per_model(store: Store, embedder: Embedder) -> None:
    """A second vector of the same model for a message is ignored (the first is what was searched);
    one of another model replaces it, and a deleted message gets none."""
    message = await say_in(store, "hello there")
    first = vector_bytes(embedder.encode(["hello there"])[0])
    other = vector_bytes(embedder.encode(["something else"])[0])
    model, text = embedder.model_id, message.text
    assert await store.save_embeddings(model, [(message.id, str(SESSION), first, text)]) == 1
    assert await store.save_embeddings(model, [(message.id, str(SESSION), other, text)]) == 0
    assert [bytes(row[0]) for row in await rows(store, "SELECT vector FROM embeddings")] == [first]
    assert await store.save_embeddings("model-b", [(message.id, str(SESSION), other, message.text)]) == 1
    assert await stored_vectors(store) == {message.id: "model-b"}
    assert await store.save_embeddings("model-b", [(message.id + 1, str(SESSION), other, message.text)]) == 0
    assert await store.clear_embeddings() == 1


async def counts_and_aggregate(store: Store) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """embedding_counts' rows with a count, and the same counted from the vectors themselves."""
    kept = await rows(store, "SELECT session_key, model, count, total FROM embedding_counts "
                            "WHERE count > 0 ORDER BY 1, 2")
    counted = await rows(store, "SELECT session_key, model, COUNT(*), SUM(message_id) "
                               "FROM embeddings GROUP BY 1, 2 ORDER BY 1, 2")
    return kept, counted


async def test_the_vector_counts_follow_every_write(store: Store, embedder: Embedder) -> None:
    """The per-session counts a search checks its cached vectors against stay those of the table
    through new vectors, a vector replaced by another model's, deleted messages and a rebuild."""
    other = build("main", "fake", "direct", "someone-else")
    said = [await say_in(store, f"note {n}") for n in range(3)]
    elsewhere = await say_in(store, "another chat", key=other)
    await embed_all(store, embedder)
    kept, counted = await counts_and_aggregate(store)
    assert kept == counted and [row[2] for row in kept] == [1, 3]
    vector = vector_bytes(embedder.encode(["x"])[0])
    assert await store.save_embeddings("model-b", [(said[0].id, str(SESSION), vector, said[0].text)]) == 1
    await execute(store, "DELETE FROM messages WHERE id IN (?, ?)", (said[1].id, elsewhere.id))
    kept, counted = await counts_and_aggregate(store)
    assert kept == counted == sorted([(str(SESSION), "model-b", 1, said[0].id),
                                      (str(SESSION), embedder.model_id, 1, said[2].id)])
    await store.clear_embeddings()
    assert await counts_and_aggregate(store) == ([], [])


class ThreadNotingEmbedder:
    """The real embedder, noting the thread each encoding runs on."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
        self.model_id = embedder.model_id
        self.threads: dict[str, int] = {}
        self.niceness: dict[str, int] = {}

    def encode(self, texts: Sequence[str]) -> Any:
        self.threads.update(dict.fromkeys(texts, threading.get_ident()))
        self.niceness.update(dict.fromkeys(texts, os.getpriority(os.PRIO_PROCESS, 0)))
        return self._embedder.encode(texts)


async def test_encodings_run_on_two_threads(store: Store, embedder: Embedder) -> None:
    """Turns encoding their requests and the worker's batch, all at once, are encoded on two
    threads, the turns' and the background's (concurrent passes each kept their own malloc
    arena's peak), never on the event loop's; the background's at a lower priority (Linux)."""
    noting = ThreadNotingEmbedder(embedder)
    recall = SemanticRecall(store, noting)  # type: ignore[arg-type]
    requests = [await say_in(store, f"a question about the garden, number {i}") for i in range(4)]
    batch = [await say_in(store, f"a message about the weather, number {i}") for i in range(4)]
    await asyncio.gather(*(recall.matches(str(SESSION), request, limit=5) for request in requests),
                         embed_batch(store, noting, batch))  # type: ignore[arg-type]
    turns = {noting.threads[embedding_text(request)] for request in requests}
    background = {noting.threads[embedding_text(message)] for message in batch}
    assert len(turns) == 1 and len(background) == 1 and turns != background
    assert threading.get_ident() not in turns | background
    if sys.platform == "linux":
        assert noting.niceness[embedding_text(batch[0])] > noting.niceness[embedding_text(requests[0])]


def test_the_weights_are_read_tensor_by_tensor(embedder: Embedder) -> None:
    """Loading the packaged model holds at most twice the weights file at its peak (the whole file
    and its arrays side by side were three times), and keeps less than the file: the word table,
    looked up only, is kept as float16."""
    files = model_files(parse_config({}, "<defaults>"))
    assert files is not None
    if files.archive is not None:  # its size as the zip records it: reading it inflates 90 MB
        with zipfile.ZipFile(files.archive) as archive:
            size = archive.getinfo("model.safetensors").file_size
    else:
        assert files.directory is not None
        size = (files.directory / "model.safetensors").stat().st_size
    tracemalloc.start()
    try:
        loaded = Embedder.load(files)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * size and kept < 0.8 * size
    assert loaded.model_id == embedder.model_id


def test_a_safetensors_file_reads_tensor_by_tensor(tmp_path: Path) -> None:
    """Every tensor of a safetensors file (metadata, several types, stored out of name order) comes
    back equal, and the digest is the whole file's."""
    import numpy as np

    tensors = {"b.weight": np.arange(12, dtype="<f4").reshape(3, 4), "a.ids": np.arange(5, dtype="<i8"),
               "c.half": np.ones((2, 2), dtype="<f2")}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    data = b""
    for name, kind in (("b.weight", "F32"), ("c.half", "F16"), ("a.ids", "I64")):
        raw = tensors[name].tobytes()
        header[name] = {"dtype": kind, "shape": list(tensors[name].shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    encoded = json.dumps(header).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        read = read_safetensors(stream, digest)
    assert read.keys() == tensors.keys()
    for name, value in tensors.items():
        assert read[name].dtype == value.dtype and (read[name] == value).all()
    assert digest.hexdigest() == hashlib.sha256(path.read_bytes()).hexdigest()


class CountingEmbedder:
    """The real embedder, counting the texts it encodes."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
        self.model_id = embedder.model_id
        self.texts: list[str] = []

    def encode(self, texts: Sequence[str]) -> Any:
        self.texts.extend(texts)
        return self._embedder.encode(texts)


async def test_the_worker_leaves_a_request_to_its_turn(store: Store, embedder: Embedder) -> None:
    """Notified of a new request, the worker waits a moment before its pass: the turn, which needs
    the request's vector at once, encodes it, and the worker finds it stored instead of encoding
    it a second time; what the turn did not embed, the worker does."""
    counting = CountingEmbedder(embedder)
    async with EmbedWorker(store, counting, batch_size=32, gather=60.0) as worker:  # type: ignore[arg-type]
        await worker.settled()
        request = await say_in(store, "Has Caroline been finding out how to adopt a kid?", name="Melanie")
        worker.notify()  # as the daemon does once it has stored a message
        await SemanticRecall(store, counting).matches(str(SESSION), request, limit=5)  # type: ignore[arg-type]
        reply = await say_in(store, "She looked into agencies last week", name="Melanie")
        worker.notify()
        await worker.settled()
    assert counting.texts == [embedding_text(request), embedding_text(reply)]


class GatedEmbedder:
    """The real embedder, noting the texts it encodes in order, its first call held until `go`."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
        self.model_id = embedder.model_id
        self.started = threading.Event()
        self.go = threading.Event()
        self.order: list[str] = []

    def encode(self, texts: Sequence[str]) -> Any:
        if not self.started.is_set():
            self.started.set()
            assert self.go.wait(30)
        self.order.extend(texts)
        return self._embedder.encode(texts)


async def test_a_turns_request_never_waits_behind_the_background(embedder: Embedder) -> None:
    """While the background's batch is being encoded, a turn's request is encoded all the same,
    and the background's next batch waits for the one before it."""
    gated = GatedEmbedder(embedder)
    busy = asyncio.ensure_future(encode_in_thread(gated, ["a long background batch"]))  # type: ignore[arg-type]
    assert await asyncio.to_thread(gated.started.wait, 30)
    later = asyncio.ensure_future(encode_in_thread(gated, ["the next background batch"]))  # type: ignore[arg-type]
    try:
        async with asyncio.timeout(30):
            await encode_in_thread(gated, ["the turn's request"], urgent=True)  # type: ignore[arg-type]
    finally:
        gated.go.set()
    await asyncio.gather(busy, later)
    assert gated.order == ["the turn's request", "a long background batch", "the next background batch"]


async def test_a_deleted_messages_vector_never_answers_for_the_row_that_reuses_its_id(
    store: Store, static: Embedder, store_backend: str
) -> None:
    """After the session's newest message is deleted and the next one is stored under its id (as
    SQLite does; a PostgreSQL sequence set back does the same), a search scores the new message by
    its own vector: neither the session's vectors in memory nor its vector file still hold the old."""
    kept = await say_in(store, "my sister lives in Lisbon")
    gone = await say_in(store, "my brother lives in Porto, near the river")
    await embed_all(store, static)
    query = static.encode(["Caroline: where does my brother live?"])[0]

    async def scores() -> dict[int, float]:
        return dict(await store.semantic_matches(str(SESSION), query, model=static.model_id,
                                                 before_id=10**9, limit=10))

    assert set(await scores()) == {kept.id, gone.id}  # kept in memory and written to its file
    await execute(store, "DELETE FROM messages WHERE id = ?", (gone.id,))
    if store_backend == "postgres":
        await execute(store, "SELECT setval(pg_get_serial_sequence('messages', 'id'), ?, false)", (gone.id,))
    new = await say_in(store, "we had pancakes for breakfast")
    assert new.id == gone.id
    await embed_all(store, static)
    own = await store.embedding_of(new.id, static.model_id)
    assert own is not None
    expected = float(np.dot(np.asarray(own, dtype=np.float64), np.asarray(query, dtype=np.float64)))
    assert abs((await scores())[new.id] - expected) < 1e-4  # the vector in memory
    store.drop_cached_vectors()  # as after a restart: the session's vector file is read
    assert abs((await scores())[new.id] - expected) < 1e-4


async def test_a_vector_encoded_before_its_row_was_replaced_is_never_kept(
    store: Store, static: Embedder, store_backend: str
) -> None:
    """The worker encodes the session's newest message; meanwhile it is deleted and the next
    message is stored under its id (SQLite reuses the newest id). The vector of the old text is
    not kept for the new row, and the new message gets a vector of its own in the same pass."""
    gated = GatedEmbedder(static)
    kept = await say_in(store, "my sister lives in Lisbon")
    gone = await say_in(store, "my brother lives in Porto, near the river")
    async with EmbedWorker(store, gated, batch_size=32) as worker:  # type: ignore[arg-type]
        await asyncio.to_thread(gated.started.wait, 30)  # the first pass is encoding both
        await execute(store, "DELETE FROM messages WHERE id = ?", (gone.id,))
        if store_backend == "postgres":
            await execute(store, "SELECT setval(pg_get_serial_sequence('messages', 'id'), ?, false)",
                          (gone.id,))
        new = await say_in(store, "we had pancakes for breakfast")
        assert new.id == gone.id
        gated.go.set()
        worker.notify()
        await worker.settled()
    assert gated.order == [embedding_text(kept), embedding_text(gone), embedding_text(new)]
    own = vector_bytes(static.encode([embedding_text(new)])[0])
    assert await store.embedding_of(new.id, static.model_id) == vectors_from_bytes([own], len(own))[0]
