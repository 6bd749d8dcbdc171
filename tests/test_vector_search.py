"""The store's vector search without numpy (bot/store/vector_matrix.py): the same neighbours, in the
same order, as float arithmetic gives, and no numpy imported on the static encoder's path."""

from __future__ import annotations

import subprocess
import sys
from array import array
from pathlib import Path

import pytest

from bot.ranking.embedding import vector_bytes
from bot.store.vector_matrix import appended, build_matrix, float_parts, vectors_of

np = pytest.importorskip("numpy")
DIM = 64


def reference(rows: object, ids: object, query: object, *, floor: int, before: int, limit: int) -> list[int]:
    """The order numpy's search gave: cosines rounded to six decimals, ties newer first."""
    matrix = np.asarray(rows, dtype=np.float64)
    cosines = matrix @ np.asarray(query, dtype=np.float64)
    cosines /= np.linalg.norm(matrix, axis=1) * np.linalg.norm(query)
    scored = [(round(float(c), 6), int(i)) for c, i in zip(cosines, ids, strict=True) if floor < i < before]
    return [i for _, i in sorted(scored, reverse=True)[:limit]]


def random_matrix(seed: int, count: int) -> tuple[object, array[int]]:
    rng = np.random.default_rng(seed)
    rows = rng.integers(-127, 128, (count, DIM), dtype=np.int8)
    rows[count // 2] = rows[count // 3]  # a tie: the newer one must come first
    ids = array("q", sorted(rng.choice(10 * count, count, replace=False).tolist()))
    return rows, ids


def test_a_stored_query_finds_what_float_arithmetic_finds() -> None:
    rows, ids = random_matrix(1, 500)
    matrix = build_matrix(ids, DIM, rows.tobytes(), signature=(len(ids), ids[-1], sum(ids)))
    query = rows[len(ids) // 3]
    for floor, before, limit in ((0, 2**62, 20), (ids[10], ids[400], 7), (0, ids[3], 50), (0, 2**62, 500)):
        found = matrix.nearest(query.tobytes(), floor=floor, before_id=before, limit=limit)
        assert [i for i, _ in found] == reference(rows, ids, query, floor=floor, before=before, limit=limit)
    tied = matrix.nearest(query.tobytes(), floor=0, before_id=2**62, limit=2)
    assert tied[0][1] == tied[1][1] == 1.0 and tied[0][0] > tied[1][0]


def test_a_float_query_scores_within_a_hundred_thousandth() -> None:
    rows, ids = random_matrix(2, 300)
    matrix = build_matrix(ids, DIM, rows.tobytes(), signature=(len(ids), ids[-1], sum(ids)))
    query = np.random.default_rng(3).standard_normal(DIM).astype(np.float32)
    found = dict(matrix.nearest(query, floor=0, before_id=2**62, limit=300))
    cosines = rows.astype(np.float64) @ query / (np.linalg.norm(rows.astype(np.float64), axis=1)
                                                 * np.linalg.norm(query))
    assert max(abs(found[int(i)] - float(c)) for i, c in zip(ids, cosines, strict=True)) < 1e-5


def test_a_float_query_is_split_as_pythons_round_splits_it() -> None:
    """The query's int8 parts (worked out in simsimd's loops) are exactly Python's round() of
    its scaled values and of their remainders × 254, halves to even; not finite: refused."""
    rng = np.random.default_rng(4)
    halves = [127.0, 0.5, -0.5, 1.5, -1.5, 2.5, 63.5, -63.5, 0.0, 126.5 / 127 * 127]
    for values in (rng.standard_normal(DIM).tolist(), halves * 4, [x / 254 for x in range(-127, 128)]):
        scale = 127.0 / max(map(abs, values))
        scaled = [v * scale for v in values]
        first = [round(v) for v in scaled]
        second = [round((v - f) * 254) for v, f in zip(scaled, first, strict=True)]
        assert float_parts(values) == [array("b", first).tobytes(), array("b", second).tobytes()]
    with pytest.raises(ValueError, match="finite"):
        float_parts([1.0, float("nan")])


def test_a_row_of_zeros_scores_zero_and_the_others_as_float_arithmetic() -> None:
    """A vector of zeros (no word piece encoded) has no norm: it scores 0, and the rest are ranked
    as numpy ranks them, by a stored query and by a float one."""
    rows, ids = random_matrix(5, 200)
    rows[17] = 0
    matrix = build_matrix(ids, DIM, rows.tobytes(), signature=(len(ids), ids[-1], sum(ids)))
    query = rows[40]
    found = matrix.nearest(query.tobytes(), floor=0, before_id=2**62, limit=200)
    assert dict(found)[int(ids[17])] == 0.0
    assert [i for i, _ in found if i != ids[17]] == [
        i for i in reference(np.delete(rows, 17, axis=0), np.delete(np.asarray(ids), 17), query,
                             floor=0, before=2**62, limit=200)]
    floats = dict(matrix.nearest(query.astype(np.float32) / 3, floor=0, before_id=2**62, limit=200))
    assert floats[int(ids[17])] == 0.0 and max(floats.values()) == 1.0


def test_vectors_read_out_of_order_and_appended_search_as_one_matrix() -> None:
    rows, ids = random_matrix(4, 40)
    shuffled = list(range(40))[::-1]
    listed = ",".join(str(ids[i]) for i in shuffled)
    read = vectors_of(listed, b"".join(rows[i].tobytes() for i in shuffled), DIM)
    assert read is not None and read[0] == ids and read[2] == rows.tobytes()
    first = build_matrix(ids[:25], DIM, rows[:25].tobytes(), signature=(25, ids[24], sum(ids[:25])))
    whole = appended(first, ids[25:], DIM, rows[25:].tobytes(), signature=(40, ids[-1], sum(ids)))
    assert whole is not None
    query = rows[7]
    assert [i for i, _ in whole.nearest(query.tobytes(), floor=0, before_id=2**62, limit=40)] == reference(
        rows, ids, query, floor=0, before=2**62, limit=40)


def test_the_quantised_bytes_are_numpys() -> None:
    """vector_bytes rounds in float32 as numpy did: the same stored bytes for the same floats."""
    vectors = np.random.default_rng(5).standard_normal((200, DIM)).astype(np.float32)
    for vector in vectors:
        scaled = vector * (127.0 / float(np.abs(vector).max()))
        assert vector_bytes(vector) == np.rint(scaled).astype(np.int8).tobytes()
        assert vector_bytes(array("f", vector.tobytes())) == vector_bytes(vector)
    ties = np.array([127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -126.5, 0.0], dtype=np.float32)  # to even
    expected = bytes([127, 0, 2, 2, 0, 254, 130, 0])
    assert vector_bytes(ties) == np.rint(ties).astype(np.int8).tobytes() == expected
    assert vector_bytes([0.0] * 4) == bytes(4)


def test_the_static_encoders_search_imports_no_numpy() -> None:
    """In a fresh interpreter: encode with the static table, store as bytes, search: numpy (~14 MiB
    of the daemon) is never imported."""
    script = (
        "import sys\n"
        "from array import array\n"
        "from bot.ranking.embedding import ModelFiles, vector_bytes, vectors_from_bytes\n"
        "from bot.ranking.static_embedding import MODEL_NAME, PACKAGED, StaticEncoder\n"
        "from bot.store.vector_matrix import build_matrix\n"
        "encoder = StaticEncoder.load(ModelFiles(MODEL_NAME, directory=PACKAGED, encoder='static'))\n"
        "texts = ['we adopted a puppy', 'the train to Lisbon', 'a dog from the shelter']\n"
        "stored = [vector_bytes(v) for v in encoder.encode(texts)]\n"
        "matrix = build_matrix(array('q', [1, 2, 3]), 256, b''.join(stored), signature=(3, 3, 6))\n"
        "found = matrix.nearest(stored[0], floor=0, before_id=99, limit=3)\n"
        "unit = vectors_from_bytes([stored[0]], 256)[0]\n"
        "float_found = matrix.nearest(unit, floor=0, before_id=99, limit=3)\n"
        "print([i for i, _ in found], [i for i, _ in float_found], 'numpy' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.stdout.split() == ["[1,", "3,", "2]", "[1,", "3,", "2]", "False"]


def test_two_threads_encode_through_a_small_row_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The turns' and the background's threads share the encoder's float rows: encoding from both
    at once, with a cache far smaller than the texts need, gives every text its own vector."""
    import threading

    from bot.ranking import static_embedding
    from bot.ranking.embedding import ModelFiles

    monkeypatch.setattr(static_embedding, "CACHED_ROWS", 8)
    encoder = static_embedding.StaticEncoder.load(ModelFiles(
        static_embedding.MODEL_NAME, directory=static_embedding.PACKAGED, encoder="static"))
    texts = [f"message {n}: the train to Lisbon leaves at {n % 24} from platform {n % 7}" for n in range(300)]
    expected = [vector_bytes(v) for v in encoder.encode(texts)]
    found: dict[int, list[bytes]] = {}
    failed: list[BaseException] = []

    def encode(worker: int) -> None:
        try:
            found[worker] = [vector_bytes(encoder.encode([text])[0]) for text in texts]
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=encode, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failed == [] and all(found[n] == expected for n in range(4))
