"""Recall: a session's older messages found by the words of a new one, and the turns they belong to."""

from __future__ import annotations

import bisect
import sqlite3
import time
from collections.abc import Iterable, Sequence
from typing import Any

import aiosqlite
import structlog

from bot.lexical import LENGTH, SearchTerm, index_terms, search_terms, term_weight
from bot.messages import Origin, StoredMessage
from bot.store.connection import Database, in_connection_thread
from bot.store.messages import MESSAGE_COLUMNS, qualified_columns, rows_to_messages
from bot.store.turn_starts import TURN_STARTS, P, Planner, TurnStarts

log = structlog.get_logger("switchboard.store")

RECALL_COMMON = 250  # a term found in more of the searched messages than this is left out
POOL = 2  # matches per wanted one ranked by summed weight before lengths are read
SEARCHED_CAP = 10_000  # the searched messages counted for idf: bounds the count in huge sessions
MAX_TURN = 6  # messages of a recalled turn (its user message and the first replies)
BACKLOG_BATCH = 5_000  # older messages given their terms per transaction when the store opens
# Index pages one merge step may rewrite (about 1 MiB): a few milliseconds of holding the write lock.
MERGE_PAGES = 256

_M_COLUMNS = qualified_columns("m")  # the message columns of `messages m`
_WEIGHT = "recall_weight"  # bot.lexical.term_weight, registered on the connection
_FLOOR = "(SELECT COALESCE((SELECT context_floor FROM sessions WHERE key = ?1), 0))"


# Each asked id's turn start (the user message it is or answers, above the floor), once per turn,
# and the next user message: one seek each in messages_turn_starts (named: the planner would
# rather walk messages_session_origin, reading each row for its role). Materialized, so the start's
# subquery runs once per id (inlined, the IS NOT NULL below ran it a second time). Then every
# message from a start up to the next user message: small range reads on
# messages(session_key, origin, id). ?1 is the session key, ?2 `before_id`; `asked(id)` comes first.
_TURNS = (
    "starts(id) AS MATERIALIZED (SELECT DISTINCT (SELECT u.id FROM messages u "
    "INDEXED BY messages_turn_starts WHERE u.session_key = ?1 "
    f"AND u.origin = 'interactive' AND u.id <= asked.id AND u.id > {_FLOOR} "
    "AND u.role = 'user' ORDER BY u.id DESC LIMIT 1) FROM asked), "
    "turns(start, stop) AS MATERIALIZED (SELECT s.id, COALESCE((SELECT n.id FROM messages n "
    "INDEXED BY messages_turn_starts "
    "WHERE n.session_key = ?1 AND n.origin = 'interactive' AND n.id > s.id AND n.id < ?2 "
    "AND n.role = 'user' ORDER BY n.id LIMIT 1), ?2) FROM starts s WHERE s.id IS NOT NULL)"
)
# The session's turn starts (interactive user messages above the floor and below ?2), newest first,
# as one comma-separated list: one range of messages_turn_starts, where two seeks per asked id cost
# ~8 µs each. At most TURN_STARTS, so a very long session's read stays short.
_STARTS = (
    "starts(ids) AS MATERIALIZED (SELECT group_concat(id) FROM (SELECT u.id FROM messages u "
    "INDEXED BY messages_turn_starts WHERE u.session_key = ?1 AND u.origin = 'interactive' "
    "AND u.role = 'user' AND u.id > (SELECT floor FROM f) AND u.id < ?2 "
    f"ORDER BY u.id DESC LIMIT {TURN_STARTS}))"
)
_TURN_ROWS = (
    "FROM turns t CROSS JOIN messages m ON m.session_key = ?1 AND m.origin = 'interactive' "
    "AND m.id >= t.start AND m.id < t.stop WHERE m.fallback = 0"
)


def _scored(term_count: int) -> str:
    """The CTEs ending in scored(id, score): the best matches of `term_count` search terms.

    The postings hold one session's interactive messages: terms are counted and summed on them
    alone, and only the best few are looked up in `messages` (where the session key still
    filters what a colliding tag adds). The searched count is an index-only count. Parameters:
    ?1 session key, ?2 before_id, ?3 RECALL_COMMON, ?4-?6 the length factor, ?7 limit, ?8 the
    pool, ?9... the terms (`_scored_parameters`).
    """
    arms = " UNION ALL ".join(
        f"SELECT {index} AS k, id FROM (SELECT rowid AS id FROM recall_fts "
        f"WHERE recall_fts MATCH ?{9 + index} AND rowid > (SELECT floor FROM f) "
        "AND rowid < ?2 ORDER BY rowid DESC LIMIT ?3 + 1)"
        for index in range(term_count)
    )
    return (
        f"WITH f(floor) AS MATERIALIZED (SELECT {_FLOOR}), hits(k, id) AS MATERIALIZED ({arms}), "
        "counted(k, n) AS MATERIALIZED (SELECT k, COUNT(*) FROM hits GROUP BY k), "
        "searched(n) AS MATERIALIZED (SELECT COUNT(*) FROM (SELECT 1 FROM f CROSS JOIN messages "
        "WHERE session_key = ?1 AND origin = 'interactive' AND id > f.floor AND id < ?2 "
        f"LIMIT {SEARCHED_CAP})), "
        f"weights(k, w) AS MATERIALIZED (SELECT c.k, {_WEIGHT}(c.n, s.n) FROM searched s "
        "CROSS JOIN counted c WHERE c.n <= ?3), "
        "best(id, w) AS MATERIALIZED (SELECT h.id, SUM(g.w) AS summed FROM hits h "
        "CROSS JOIN weights g ON g.k = h.k GROUP BY h.id ORDER BY summed DESC, h.id DESC LIMIT ?8), "
        "scored(id, score) AS MATERIALIZED (SELECT m.id, b.w * ?4 / (?5 + ?6 * m.token_estimate) "
        "AS score FROM best b CROSS JOIN messages m ON m.id = b.id WHERE m.session_key = ?1 "
        "AND m.origin = 'interactive' AND m.fallback = 0 ORDER BY score DESC, m.id DESC LIMIT ?7)"
    )


def _scored_parameters(
    session_key: str, before_id: int, limit: int, terms: Sequence[SearchTerm]
) -> tuple[object, ...]:
    return (session_key, before_id, RECALL_COMMON, *LENGTH, limit, POOL * limit,
            *(term.match() for term in terms))


def _group(rows: Sequence[Any], asked: Sequence[int], *, max_len: int) -> dict[int, list[StoredMessage]]:
    """(turn start, message columns...) rows as each asked id's turn, oldest first."""
    start_of = {int(row[1]): int(row[0]) for row in rows}
    groups: dict[int, list[StoredMessage]] = {}
    for message in rows_to_messages(row[1:] for row in rows):  # a malformed row is left out
        groups.setdefault(start_of[message.id], []).append(message)
    starts = sorted(groups)
    turns: dict[int, list[StoredMessage]] = {}
    for message_id in sorted(asked):
        # The asked id's start is the newest start at or before it: every start is a user
        # message above the floor, so none lies between an id and its own start.
        index = bisect.bisect_right(starts, message_id) - 1
        if index >= 0:
            turns[message_id] = groups[starts[index]][:max_len]
    return turns


class Recall(Database):
    """Lexical recall over per-session postings (`recall_terms` / `recall_fts`), ranked by `bot.lexical`.

    Opening the store finishes the index first: interactive messages stored before migration 6
    (up to `index_backlog.upto`) get their terms, newest first, a batch per transaction, and the
    index is merged into one segment once they all have.
    """

    async def _migrate(self) -> None:
        """Migrations, then recall's part of opening: its SQL function, and the backlog's terms."""
        await super()._migrate()
        await self._conn.create_function(_WEIGHT, 2, term_weight, deterministic=True)
        await self._fill_backlog()

    async def lexical_turns(
        self, session_key: str, text: str, *, before_id: int, limit: int
    ) -> tuple[list[tuple[int, float]], dict[int, list[StoredMessage]]]:
        """(message id, score) of up to `limit` messages sharing words with `text`, best first,
        and each one's whole turn (as `turns_of` gives it), in one read.

        Searched: the session's interactive messages above its context floor and below
        `before_id`, fallback replies left out. Each of the request's terms weighs its idf among
        the searched messages (`bot.lexical.term_weight`; a term in more than RECALL_COMMON of
        them is left out); the POOL x `limit` messages with the largest summed weight are scored
        with BM25's length factor (`bot.lexical.score`), ties going to the newer message. Nothing
        outside the session's searched range moves a score, so a replayed turn finds what it
        found. Each term's postings are walked once. (`lexical_matches` and `turns_at` give the
        same in two reads, for when the turns wanted are known only once another source answers.)
        """
        terms = search_terms(session_key, text)
        if limit <= 0 or not terms:
            return [], {}
        blank = ", ".join(["NULL"] * len(MESSAGE_COLUMNS.split(",")))
        rows = await self._conn.execute_fetchall(
            f"{_scored(len(terms))}, asked(id) AS (SELECT id FROM scored), {_TURNS} "
            f"SELECT 0, id, score, {blank} FROM scored UNION ALL "
            f"SELECT 1, t.start, NULL, {_M_COLUMNS} {_TURN_ROWS} ORDER BY 1, 4",
            _scored_parameters(session_key, before_id, limit, terms),
        )
        matches = sorted(((int(r[1]), float(r[2])) for r in rows if r[0] == 0), key=lambda m: (-m[1], -m[0]))
        turns = _group([row[1:2] + row[3:] for row in rows if row[0] == 1],
                       [message_id for message_id, _ in matches], max_len=MAX_TURN)
        return matches, turns

    async def lexical_matches(
        self, session_key: str, text: str, *, before_id: int, limit: int
    ) -> tuple[list[tuple[int, float]], TurnStarts]:
        """The matches `lexical_turns` finds, and where the session's turns start (see TurnStarts),
        in one read: the turns are read once it is known which are wanted (`turns_at`)."""
        sql, parameters = _matches_statement(session_key, text, before_id=before_id, limit=limit)
        return _matches_and_starts(await self._conn.execute_fetchall(sql, parameters), before_id)

    async def lexical_then_turns(
        self, session_key: str, text: str, *, before_id: int, limit: int, plan: Planner[P],
    ) -> tuple[list[tuple[int, float]], TurnStarts, P | None, dict[int, list[StoredMessage]]]:
        """`lexical_matches`, then `plan` and the turns it wants (`turns_at`), on SQLite's thread in
        one hand-off from the event loop: the loop is not woken between the words' search and the
        turns' read (each hand-off costs ~0.05 ms each way). `plan` is called there with the
        matches and the starts; None (it cannot say yet) leaves the turns to the caller. Gives the
        matches, the starts, the plan and its turns by start."""
        sql, parameters = _matches_statement(session_key, text, before_id=before_id, limit=limit)

        def search_then_read(conn: sqlite3.Connection) -> tuple[Any, ...]:
            matches, starts = _matches_and_starts(conn.execute(sql, parameters).fetchall(), before_id)
            planned = plan(matches, starts)
            spans = sorted(planned.wanted) if planned is not None else []
            rows = conn.execute(*_turn_rows_sql(session_key, spans)).fetchall() if spans else []
            return matches, starts, planned, spans, rows

        matches, starts, planned, spans, rows = await in_connection_thread(self._conn, search_then_read)
        turns = _turns_from_rows(rows)
        return matches, starts, planned, {start: turns.get(start, []) for start, _ in spans}

    async def turns_at(
        self, session_key: str, spans: Sequence[tuple[int, int]]
    ) -> dict[int, list[StoredMessage]]:
        """The turns [start, stop) (as `TurnStarts.span` gives them) by their start, in one read:
        their messages as `turns_of` gives them."""
        if not spans:
            return {}
        return _turns_from_rows(await self._turn_rows(session_key, spans))

    async def _turn_rows(self, session_key: str, spans: Sequence[tuple[int, int]]) -> list[Any]:
        """(start, message columns...) of every message in the turns, in id order."""
        return list(await self._conn.execute_fetchall(*_turn_rows_sql(session_key, spans)))

    async def merge_recall_index(self) -> None:
        """One bounded step of merging the index's segments towards one.

        Every message written adds a small segment that FTS5 merges only now and then, and a
        search looks each term up in every segment (about 2.5 µs each): a few steps a minute keep
        a busy index at one or two segments. Nothing to merge costs almost nothing.
        """
        async with self._transaction():
            await self._conn.execute(
                "INSERT INTO recall_fts (recall_fts, rank) VALUES ('merge', ?)", (-MERGE_PAGES,)
            )

    async def _optimize_recall_index(self) -> None:
        """The backlog's fill left many small segments, and every search term is looked up in
        each of them: merge them into one."""
        async with self._transaction():
            await self._conn.execute("INSERT INTO recall_fts (recall_fts) VALUES ('optimize')")

    async def turns_of(
        self, session_key: str, message_ids: Sequence[int], *, before_id: int, max_len: int = MAX_TURN
    ) -> dict[int, list[StoredMessage]]:
        """For each id, the turn it belongs to, oldest first, in one read.

        A turn is the interactive user message an id is or answers, and the replies after it up
        to the next user message and `before_id` (fallback replies left out), at most `max_len`
        messages. An id whose user message is not above the context floor (or not below
        `before_id`) is absent.
        """
        asked = sorted({message_id for message_id in message_ids if message_id < before_id})
        if not asked:
            return {}
        values = ", ".join(f"(?{3 + index})" for index in range(len(asked)))
        rows = await self._conn.execute_fetchall(
            f"WITH asked(id) AS (VALUES {values}), {_TURNS} "
            f"SELECT t.start, {_M_COLUMNS} {_TURN_ROWS} ORDER BY m.id",
            (session_key, before_id, *asked),
        )
        return _group(list(rows), asked, max_len=max_len)

    async def _fill_backlog(self) -> None:
        """Write the terms of interactive messages stored before the index existed."""
        found = await self._conn.execute_fetchall(
            "SELECT upto FROM index_backlog WHERE name = 'lexical'"
        )
        row = next(iter(found), None)
        if row is None:
            return
        upto, written, started = int(row[0]), 0, time.perf_counter()
        log.info("recall index: writing the terms of older messages", upto=upto)
        while True:
            async with self._transaction():
                rows = list(await self._conn.execute_fetchall(
                    "SELECT id, session_key, text FROM messages WHERE origin = 'interactive' "
                    "AND id <= ? ORDER BY id DESC LIMIT ?",
                    (upto, BACKLOG_BATCH),
                ))
                if not rows:
                    await self._conn.execute("DELETE FROM index_backlog WHERE name = 'lexical'")
                    break
                terms = [(row[0], index_terms(row[1], row[2])) for row in reversed(rows)]
                # Nothing on conflict, never a replace: a replaced row would skip the delete trigger.
                await self._conn.executemany(
                    "INSERT INTO recall_terms (message_id, terms) VALUES (?, ?) ON CONFLICT DO NOTHING",
                    [term for term in terms if term[1]],
                )
                upto = int(rows[-1][0]) - 1
                await self._conn.execute(
                    "UPDATE index_backlog SET upto = ? WHERE name = 'lexical'", (upto,)
                )
                written += len(rows)
        await self._optimize_recall_index()
        log.info("recall index: older messages indexed", messages=written,
                 seconds=round(time.perf_counter() - started, 1))


def _matches_statement(
    session_key: str, text: str, *, before_id: int, limit: int
) -> tuple[str, tuple[object, ...]]:
    """The words' search with the session's turn starts (`lexical_matches`), or the starts alone."""
    terms = search_terms(session_key, text) if limit > 0 else []
    if not terms:
        return (f"WITH f(floor) AS MATERIALIZED (SELECT {_FLOOR}), {_STARTS} SELECT NULL, ids FROM starts",
                (session_key, before_id))
    return (f"{_scored(len(terms))}, {_STARTS} SELECT id, score FROM scored UNION ALL "
            "SELECT NULL, ids FROM starts", _scored_parameters(session_key, before_id, limit, terms))


def _matches_and_starts(rows: Iterable[Any], before_id: int) -> tuple[list[tuple[int, float]], TurnStarts]:
    rows = list(rows)
    matches = sorted(((int(r[0]), float(r[1])) for r in rows if r[0] is not None),
                     key=lambda m: (-m[1], -m[0]))
    listed = next((row[1] for row in rows if row[0] is None), None)
    return matches, TurnStarts.of(listed, before_id)


def _turn_rows_sql(session_key: str, spans: Sequence[tuple[int, int]]) -> tuple[str, tuple[object, ...]]:
    """(start, message columns...) of every message in the turns [start, stop), in id order."""
    values = ", ".join(f"(?{2 + 2 * index}, ?{3 + 2 * index})" for index in range(len(spans)))
    return (f"WITH t(start, stop) AS (VALUES {values}) SELECT t.start, {_M_COLUMNS} "
            "FROM t CROSS JOIN messages m ON m.session_key = ?1 AND m.origin = 'interactive' "
            "AND m.id >= t.start AND m.id < t.stop WHERE m.fallback = 0 ORDER BY m.id",
            (session_key, *(bound for span in spans for bound in span)))


def _turns_from_rows(rows: Sequence[Any]) -> dict[int, list[StoredMessage]]:
    """(start, message columns...) rows in id order as each start's turn."""
    messages = rows_to_messages(row[1:] for row in rows)
    if len(messages) == len(rows):  # each message by its row's start
        pairs: Iterable[tuple[int, StoredMessage]] = zip([row[0] for row in rows], messages, strict=True)
    else:  # a malformed row was left out
        start_of = {row[1]: row[0] for row in rows}
        pairs = ((start_of[message.id], message) for message in messages)
    turns: dict[int, list[StoredMessage]] = {}
    for start, message in pairs:
        turn = turns.get(start)
        if turn is None:
            turns[start] = [message]
        elif len(turn) < MAX_TURN:
            turn.append(message)
    return turns


async def index_message(
    conn: aiosqlite.Connection, message_id: int, *, session_key: str, origin: Origin, text: str
) -> None:
    """Write an interactive message's terms (inside the caller's transaction)."""
    if origin != "interactive":
        return
    terms = index_terms(session_key, text)
    if terms:
        await conn.execute(
            "INSERT INTO recall_terms (message_id, terms) VALUES (?, ?)", (message_id, terms)
        )
