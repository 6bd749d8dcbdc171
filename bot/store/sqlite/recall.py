"""Recall on SQLite: the words' search in `recall_fts` (FTS5 over `recall_terms`), the turns read
in the same hand-off from the event loop where it can."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any

from bot.core.messages import StoredMessage
from bot.ranking.lexical import SearchTerm, search_terms, term_weight
from bot.store.history_search import TERM_HITS
from bot.store.messages import MESSAGE_COLUMNS, qualified_columns
from bot.store.recall import (
    MAX_TURN,
    SEARCHED_CAP,
    Recall,
    _group,
    _scored_parameters,
    _turns_from_rows,
)
from bot.store.sqlite.connection import in_connection_thread
from bot.store.turn_starts import TURN_STARTS, P, Planner, TurnStarts

# Index pages one merge step may rewrite (about 1 MiB): a few milliseconds of holding the write lock.
MERGE_PAGES = 256

_M_COLUMNS = qualified_columns("m")  # the message columns of `messages m`
_WEIGHT = "recall_weight"  # bot.ranking.lexical.term_weight, registered on the connection
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
    pool, ?9... the terms, then each term's factor (`_scored_parameters`).
    """
    arms = " UNION ALL ".join(
        f"SELECT {index} AS k, id FROM (SELECT rowid AS id FROM recall_fts "
        f"WHERE recall_fts MATCH ?{9 + index} AND rowid > (SELECT floor FROM f) "
        "AND rowid < ?2 ORDER BY rowid DESC LIMIT ?3 + 1)"
        for index in range(term_count)
    )
    factors = ", ".join(f"({index}, ?{9 + term_count + index})" for index in range(term_count))
    return (
        f"WITH f(floor) AS MATERIALIZED (SELECT {_FLOOR}), hits(k, id) AS MATERIALIZED ({arms}), "
        "counted(k, n) AS MATERIALIZED (SELECT k, COUNT(*) FROM hits GROUP BY k), "
        "searched(n) AS MATERIALIZED (SELECT COUNT(*) FROM (SELECT 1 FROM f CROSS JOIN messages "
        "WHERE session_key = ?1 AND origin = 'interactive' AND id > f.floor AND id < ?2 "
        f"LIMIT {SEARCHED_CAP})), "
        f"factors(k, x) AS MATERIALIZED (VALUES {factors}), "
        f"weights(k, w) AS MATERIALIZED (SELECT c.k, {_WEIGHT}(c.n, s.n) * x.x FROM searched s "
        "CROSS JOIN counted c JOIN factors x ON x.k = c.k WHERE c.n <= ?3), "
        "best(id, w) AS MATERIALIZED (SELECT h.id, SUM(g.w) AS summed FROM hits h "
        "CROSS JOIN weights g ON g.k = h.k GROUP BY h.id ORDER BY summed DESC, h.id DESC LIMIT ?8), "
        "scored(id, score) AS MATERIALIZED (SELECT m.id, b.w * ?4 / (?5 + ?6 * m.token_estimate) "
        "AS score FROM best b CROSS JOIN messages m ON m.id = b.id WHERE m.session_key = ?1 "
        "AND m.origin = 'interactive' AND m.fallback = 0 ORDER BY score DESC, m.id DESC LIMIT ?7)"
    )


def several_cpus() -> bool:
    """Whether this thread may run on more than one CPU (its affinity, where the platform says),
    so that SQLite's thread can search while the event loop works."""
    try:
        return len(os.sched_getaffinity(0)) > 1
    except AttributeError:  # not on Linux
        return (os.cpu_count() or 1) > 1


class SqliteRecall(Recall):
    """`Recall` over `recall_terms` and its FTS5 index `recall_fts` (a row per message, its terms
    the tokens), and history search's term lookups there."""

    async def _migrate(self) -> None:
        """Recall's SQL function on the connection, then migrations and the backlog (`Recall`)."""
        await self._conn.create_function(_WEIGHT, 2, term_weight, deterministic=True)
        await super()._migrate()

    async def lexical_turns(
        self, session_key: str, text: str, *, before_id: int, limit: int, expand: int = 0
    ) -> tuple[list[tuple[int, float]], dict[int, list[StoredMessage]]]:
        """See `Recall.lexical_turns`: each term's postings walked once, in one read."""
        statement = lexical_turns_statement(session_key, text, before_id=before_id, limit=limit,
                                            expand=expand)
        if statement is None:
            return [], {}
        return lexical_turns_of(await self._conn.execute_fetchall(*statement))

    async def lexical_matches(
        self, session_key: str, text: str, *, before_id: int, limit: int, expand: int = 0
    ) -> tuple[list[tuple[int, float]], TurnStarts]:
        """See `Recall.lexical_matches`."""
        sql, parameters = _matches_statement(session_key, text, before_id=before_id, limit=limit,
                                             expand=expand)
        return _matches_and_starts(await self._conn.execute_fetchall(sql, parameters), before_id)

    async def lexical_then_turns(
        self, session_key: str, text: str, *, before_id: int, limit: int,
        plan: Awaitable[Planner[P]], expand: int = 0,
    ) -> tuple[list[tuple[int, float]], TurnStarts, P, dict[int, list[StoredMessage]]]:
        """See `Recall.lexical_then_turns`. On one CPU: once the planner is given, on SQLite's
        thread in one hand-off from the event loop, so the loop is not woken between the words'
        search and the turns' read. With more CPUs as everywhere: the search at once, beside the
        event loop's own work (issue 38, the 1 M build unpinned on two cores: waiting for the
        planner made it 4.5-4.7 → 5.2-5.6 ms)."""
        if several_cpus():
            return await super().lexical_then_turns(session_key, text, before_id=before_id, limit=limit,
                                                    plan=plan, expand=expand)
        sql, parameters = _matches_statement(session_key, text, before_id=before_id, limit=limit,
                                             expand=expand)
        planner = await plan

        def search_then_read(conn: sqlite3.Connection) -> tuple[Any, ...]:
            matches, starts = _matches_and_starts(conn.execute(sql, parameters).fetchall(), before_id)
            planned = planner(matches, starts)
            spans = sorted(planned.wanted)
            rows = conn.execute(*_turn_rows_sql(session_key, spans)).fetchall() if spans else []
            return matches, starts, planned, spans, rows

        matches, starts, planned, spans, rows = await in_connection_thread(self._conn, search_then_read)
        turns = _turns_from_rows(rows)
        return matches, starts, planned, {start: turns.get(start, []) for start, _ in spans}

    async def _turn_rows(self, session_key: str, spans: Sequence[tuple[int, int]]) -> list[Any]:
        """(start, message columns...) of every message in the turns, in id order."""
        return list(await self._conn.execute_fetchall(*_turn_rows_sql(session_key, spans)))

    async def merge_recall_index(self) -> None:
        """See `Recall.merge_recall_index`: every message written adds a small segment that FTS5
        merges only now and then, and a search looks each term up in every segment (about 2.5 µs
        each)."""
        async with self._one_write():
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
        """See `Recall.turns_of`."""
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

    async def _term_hits(self, term: SearchTerm) -> list[tuple[int]]:
        """The newest TERM_HITS messages (ids) whose postings hold the term (`history_search`)."""
        return [(int(row[0]),) for row in await self._conn.execute_fetchall(
            "SELECT rowid FROM recall_fts WHERE recall_fts MATCH ? ORDER BY rowid DESC LIMIT ?",
            (term.match(), TERM_HITS),
        )]

_BLANK = ", ".join(["NULL"] * len(MESSAGE_COLUMNS.split(",")))


def lexical_turns_statement(
    session_key: str, text: str, *, before_id: int, limit: int, expand: int = 0
) -> tuple[str, tuple[object, ...]] | None:
    """`lexical_turns`' statement and parameters; None when there is nothing to search for."""
    terms = search_terms(session_key, text, expand=expand)
    if limit <= 0 or not terms:
        return None
    return (f"{_scored(len(terms))}, asked(id) AS (SELECT id FROM scored), {_TURNS} "
            f"SELECT 0, id, score, {_BLANK} FROM scored UNION ALL "
            f"SELECT 1, t.start, NULL, {_M_COLUMNS} {_TURN_ROWS} ORDER BY 1, 4",
            _scored_parameters(session_key, before_id, limit, terms))


def lexical_turns_of(rows: Iterable[Any]) -> tuple[list[tuple[int, float]], dict[int, list[StoredMessage]]]:
    """`lexical_turns`' answer from its statement's rows."""
    rows = list(rows)
    matches = sorted(((int(r[1]), float(r[2])) for r in rows if r[0] == 0), key=lambda m: (-m[1], -m[0]))
    turns = _group([row[1:2] + row[3:] for row in rows if row[0] == 1],
                   [message_id for message_id, _ in matches], max_len=MAX_TURN)
    return matches, turns


def _matches_statement(
    session_key: str, text: str, *, before_id: int, limit: int, expand: int = 0
) -> tuple[str, tuple[object, ...]]:
    """The words' search with the session's turn starts (`lexical_matches`), or the starts alone."""
    terms = search_terms(session_key, text, expand=expand) if limit > 0 else []
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
