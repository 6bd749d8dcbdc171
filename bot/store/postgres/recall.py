"""Recall on PostgreSQL: the same per-session terms, postings and ranking as `recall`, searched in
`recall_postings` (a row per term and message, written from `recall_terms` by triggers) instead of
an FTS5 table.

A term is one range of the postings' primary key (the token, or every token it begins for a
prefix): its postings hold one session's messages, as in SQLite, read from the index alone. Weights
are `recall_weight` (bot.ranking.lexical.term_weight as a SQL function), scores BM25's length factor, ties
to the newer message: the same doubles as the SQLite store computes, so both find and rank the
same messages. Each read's text is the same whatever the terms (they are array parameters), so
psycopg prepares it once per connection and the server plans it once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.core.messages import StoredMessage
from bot.ranking.lexical import SearchTerm, search_terms
from bot.store.history_search import TERM_HITS, HistorySearch
from bot.store.messages import MESSAGE_COLUMNS, qualified_columns
from bot.store.recall import SEARCHED_CAP, Recall, _group, _scored_parameters
from bot.store.turn_starts import TURN_STARTS, TurnStarts

_FLOOR = "(SELECT COALESCE((SELECT context_floor FROM sessions WHERE key = ?1), 0))"

# Each asked id's turn start and the next user message, then the turn's messages (see `recall`).
_TURNS = (
    "starts(id) AS MATERIALIZED (SELECT DISTINCT (SELECT u.id FROM messages u WHERE u.session_key = ?1 "
    f"AND u.origin = 'interactive' AND u.id <= asked.id AND u.id > {_FLOOR} "
    "AND u.role = 'user' ORDER BY u.id DESC LIMIT 1) FROM asked), "
    "turns(start, stop) AS MATERIALIZED (SELECT s.id, COALESCE((SELECT n.id FROM messages n "
    "WHERE n.session_key = ?1 AND n.origin = 'interactive' AND n.id > s.id AND n.id < ?2 "
    "AND n.role = 'user' ORDER BY n.id LIMIT 1), ?2) FROM starts s WHERE s.id IS NOT NULL)"
)
# Each turn's rows are a range read of their own: OFFSET 0 keeps the subquery from being merged
# into a join, where a generic plan (the start and stop unknown) read every message of the session.
_TURN_ROWS = (
    "FROM turns t CROSS JOIN LATERAL (SELECT * FROM messages m WHERE m.session_key = ?1 "
    "AND m.origin = 'interactive' AND m.id >= t.start AND m.id < t.stop AND m.fallback = 0 "
    "OFFSET 0) AS m"
)


def term_range(term: SearchTerm) -> tuple[str, str]:
    """[low, high): the posting terms `term` finds, in bytewise order. A token alone: nothing a
    text column can hold sorts between it and itself followed by chr(1). A prefix: every term that
    begins with it, up to the token with its last character (an ASCII letter) one higher."""
    if term.prefix:
        return term.token, term.token[:-1] + chr(ord(term.token[-1]) + 1)
    return term.token, term.token + "\x01"


def _ranges(terms: Sequence[SearchTerm]) -> tuple[list[str], list[str], list[float]]:
    """The terms' ranges as two arrays (lows, highs) and their factors as a third: one parameter
    each, whatever their number."""
    ranges = [term_range(term) for term in terms]
    return [low for low, _ in ranges], [high for _, high in ranges], [term.factor for term in terms]


# `recall._scored` in PostgreSQL's terms: the same CTEs and arithmetic, the terms as arrays (?9
# lows, ?10 highs, ?11 each term's factor; k counts from 1, in the same order) so the text never
# changes and each connection prepares it once. Each term is one range read of the posting
# table's primary key.
_SCORED = (
    f"WITH f(floor) AS MATERIALIZED (SELECT {_FLOOR}), "
    "hits(k, id) AS MATERIALIZED (SELECT t.k, h.id FROM unnest(CAST(?9 AS text[]), "
    "CAST(?10 AS text[])) WITH ORDINALITY AS t(low, high, k) CROSS JOIN LATERAL ("
    "SELECT DISTINCT p.message_id AS id FROM recall_postings p WHERE p.term >= t.low "
    "AND p.term < t.high AND p.message_id > (SELECT floor FROM f) AND p.message_id < ?2 "
    "ORDER BY p.message_id DESC LIMIT ?3 + 1) AS h), "
    "counted(k, n) AS MATERIALIZED (SELECT k, COUNT(*) FROM hits GROUP BY k), "
    "searched(n) AS MATERIALIZED (SELECT COUNT(*) FROM (SELECT 1 FROM f CROSS JOIN messages "
    "WHERE session_key = ?1 AND origin = 'interactive' AND id > f.floor AND id < ?2 "
    f"LIMIT {SEARCHED_CAP}) AS searchable), "
    "factors(k, x) AS MATERIALIZED (SELECT k, x FROM unnest(CAST(?11 AS float8[])) "
    "WITH ORDINALITY AS t(x, k)), "
    "weights(k, w) AS MATERIALIZED (SELECT c.k, recall_weight(c.n, s.n) * x.x FROM searched s "
    "CROSS JOIN counted c JOIN factors x ON x.k = c.k WHERE c.n <= ?3), "
    "best(id, w) AS MATERIALIZED (SELECT h.id, SUM(g.w ORDER BY h.k) AS summed FROM hits h "
    "JOIN weights g ON g.k = h.k GROUP BY h.id ORDER BY summed DESC, h.id DESC LIMIT ?8), "
    "scored(id, score) AS MATERIALIZED (SELECT m.id, b.w * ?4 / (?5 + ?6 * m.token_estimate) "
    "AS score FROM best b JOIN messages m ON m.id = b.id WHERE m.session_key = ?1 "
    "AND m.origin = 'interactive' AND m.fallback = 0 ORDER BY score DESC, m.id DESC LIMIT ?7)"
)
_BLANK = ", ".join(["NULL"] * len(MESSAGE_COLUMNS.split(",")))
# Matches (0, id, score) and their turns' messages (1, turn start, NULL, columns...).
_LEXICAL_TURNS = (
    f"{_SCORED}, asked(id) AS (SELECT id FROM scored), "
    f"{_TURNS} SELECT 0, id, score, {_BLANK} FROM scored UNION ALL "
    f"SELECT 1, t.start, NULL, {qualified_columns('m')} {_TURN_ROWS} ORDER BY 1, 4"
)

_TURNS_OF = (
    f"WITH asked(id) AS (SELECT unnest(CAST(?3 AS BIGINT[]))), {_TURNS} "
    f"SELECT t.start, {qualified_columns('m')} {_TURN_ROWS} ORDER BY m.id"
)

# Every turn [start, stop) given as two arrays (?2 starts, ?3 stops), its messages (see `Recall.turns_at`).
_TURNS_AT = (
    "WITH turns(start, stop) AS (SELECT * FROM unnest(CAST(?2 AS BIGINT[]), CAST(?3 AS BIGINT[]))) "
    f"SELECT t.start, {qualified_columns('m')} {_TURN_ROWS} ORDER BY m.id"
)
# The session's turn starts, newest first, comma-separated (see `recall._STARTS`).
_STARTS = (
    "SELECT string_agg(id::text, ',') FROM (SELECT u.id FROM messages u WHERE u.session_key = ?1 "
    f"AND u.origin = 'interactive' AND u.role = 'user' AND u.id > {_FLOOR} AND u.id < ?2 "
    f"ORDER BY u.id DESC LIMIT {TURN_STARTS}) AS s"
)

# The matches (id, score, NULL) and the starts (NULL, NULL, ids) in one read.
_MATCHES = f"{_SCORED} SELECT id, score, NULL FROM scored UNION ALL SELECT NULL, NULL, ({_STARTS})"


class PgRecall(Recall, HistorySearch):
    """Lexical recall and history search over `recall_postings`."""

    async def lexical_turns(
        self, session_key: str, text: str, *, before_id: int, limit: int, expand: int = 0
    ) -> tuple[list[tuple[int, float]], dict[int, list[StoredMessage]]]:
        """See `Recall.lexical_turns`: the same matches, scores and turns."""
        terms = search_terms(session_key, text, expand=expand)
        if limit <= 0 or not terms:
            return [], {}
        rows = await self._conn.execute_fetchall(_LEXICAL_TURNS, (
            *_scored_parameters(session_key, before_id, limit, terms)[:8], *_ranges(terms)))
        matches = sorted(((int(r[1]), float(r[2])) for r in rows if r[0] == 0), key=lambda m: (-m[1], -m[0]))
        turns = _group([row[1:2] + row[3:] for row in rows if row[0] == 1],
                       [message_id for message_id, _ in matches], max_len=6)
        return matches, turns

    async def lexical_matches(
        self, session_key: str, text: str, *, before_id: int, limit: int, expand: int = 0
    ) -> tuple[list[tuple[int, float]], TurnStarts]:
        """See `Recall.lexical_matches`: the same matches, and the same starts."""
        terms = search_terms(session_key, text, expand=expand) if limit > 0 else []
        if not terms:
            rows = await self._conn.execute_fetchall(
                f"SELECT NULL, NULL, ({_STARTS})", (session_key, before_id))
        else:
            rows = await self._conn.execute_fetchall(_MATCHES, (
                *_scored_parameters(session_key, before_id, limit, terms)[:8], *_ranges(terms)))
        matches = sorted(((int(r[0]), float(r[1])) for r in rows if r[0] is not None),
                         key=lambda m: (-m[1], -m[0]))
        return matches, TurnStarts.of(next((r[2] for r in rows if r[0] is None), None), before_id)

    async def _turn_rows(self, session_key: str, spans: Sequence[tuple[int, int]]) -> list[Any]:
        return list(await self._conn.execute_fetchall(
            _TURNS_AT, (session_key, [start for start, _ in spans], [stop for _, stop in spans])))

    async def turns_of(
        self, session_key: str, message_ids: Sequence[int], *, before_id: int, max_len: int = 6
    ) -> dict[int, list[StoredMessage]]:
        """See `Recall.turns_of`."""
        asked = sorted({message_id for message_id in message_ids if message_id < before_id})
        if not asked:
            return {}
        rows = await self._conn.execute_fetchall(_TURNS_OF, (session_key, before_id, asked))
        return _group(list(rows), asked, max_len=max_len)

    async def merge_recall_index(self) -> None:
        """Nothing to do: the postings' btree has no segments to merge."""

    async def _optimize_recall_index(self) -> None:
        """Nothing to do (see merge_recall_index)."""

    async def _term_hits(self, term: SearchTerm) -> list[tuple[int]]:
        return [(int(row[0]),) for row in await self._conn.execute_fetchall(
            "SELECT DISTINCT message_id FROM recall_postings WHERE term >= ? AND term < ? "
            "ORDER BY message_id DESC LIMIT ?",
            (*term_range(term), TERM_HITS),
        )]
