"""Recall on PostgreSQL: the same per-session terms, postings and ranking as `recall`, searched in
`recall_terms.tsv` (a tsvector of the tagged terms, GIN-indexed) instead of an FTS5 table.

A term is a tsquery lexeme taken verbatim ('tag+word', or 'tag+word':* for a prefix): its postings
hold one session's messages, as in SQLite. Weights are `recall_weight` (bot.lexical.term_weight as
a SQL function), scores BM25's length factor, ties to the newer message: the same doubles as the
SQLite store computes, so both find and rank the same messages.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.lexical import SearchTerm, search_terms
from bot.messages import StoredMessage
from bot.store.history_search import TERM_HITS, HistorySearch
from bot.store.messages import MESSAGE_COLUMNS, qualified_columns
from bot.store.recall import SEARCHED_CAP, Recall, _group, _scored_parameters

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
_TURN_ROWS = (
    "FROM turns t JOIN messages m ON m.session_key = ?1 AND m.origin = 'interactive' "
    "AND m.id >= t.start AND m.id < t.stop WHERE m.fallback = 0"
)


def tsquery(term: SearchTerm) -> str:
    """The term as a tsquery of one verbatim lexeme (the tokens are hex and ASCII letters only)."""
    return f"'{term.token}'" + (":*" if term.prefix else "")


def _scored(term_count: int) -> str:
    """`recall._scored` in PostgreSQL's terms (same parameters, same CTEs, same arithmetic)."""
    arms = " UNION ALL ".join(
        f"SELECT {index} AS k, id FROM (SELECT message_id AS id FROM recall_terms "
        f"WHERE tsv @@ CAST(?{9 + index} AS tsquery) AND message_id > (SELECT floor FROM f) "
        f"AND message_id < ?2 ORDER BY message_id DESC LIMIT ?3 + 1) AS arm{index}"
        for index in range(term_count)
    )
    return (
        f"WITH f(floor) AS MATERIALIZED (SELECT {_FLOOR}), hits(k, id) AS MATERIALIZED ({arms}), "
        "counted(k, n) AS MATERIALIZED (SELECT k, COUNT(*) FROM hits GROUP BY k), "
        "searched(n) AS MATERIALIZED (SELECT COUNT(*) FROM (SELECT 1 FROM f CROSS JOIN messages "
        "WHERE session_key = ?1 AND origin = 'interactive' AND id > f.floor AND id < ?2 "
        f"LIMIT {SEARCHED_CAP}) AS searchable), "
        "weights(k, w) AS MATERIALIZED (SELECT c.k, recall_weight(c.n, s.n) FROM searched s "
        "CROSS JOIN counted c WHERE c.n <= ?3), "
        "best(id, w) AS MATERIALIZED (SELECT h.id, SUM(g.w ORDER BY h.k) AS summed FROM hits h "
        "JOIN weights g ON g.k = h.k GROUP BY h.id ORDER BY summed DESC, h.id DESC LIMIT ?8), "
        "scored(id, score) AS MATERIALIZED (SELECT m.id, b.w * ?4 / (?5 + ?6 * m.token_estimate) "
        "AS score FROM best b JOIN messages m ON m.id = b.id WHERE m.session_key = ?1 "
        "AND m.origin = 'interactive' AND m.fallback = 0 ORDER BY score DESC, m.id DESC LIMIT ?7)"
    )


class PgRecall(Recall, HistorySearch):
    """Lexical recall and history search over `recall_terms.tsv`."""

    async def lexical_turns(
        self, session_key: str, text: str, *, before_id: int, limit: int, also: Sequence[int] = ()
    ) -> tuple[list[tuple[int, float]], dict[int, list[StoredMessage]]]:
        """See `Recall.lexical_turns`: the same matches, scores and turns."""
        terms = search_terms(session_key, text)
        if limit <= 0 or not terms:
            return [], await self.turns_of(session_key, also, before_id=before_id)
        blank = ", ".join(["NULL"] * len(MESSAGE_COLUMNS.split(",")))
        extra = sorted({message_id for message_id in also if message_id < before_id})
        parameters = (*_scored_parameters(session_key, before_id, limit, terms)[:8],
                      *(tsquery(term) for term in terms))
        values = ", ".join(f"(?{len(parameters) + 1 + index})" for index in range(len(extra)))
        asked = "SELECT id FROM scored" + (
            f" UNION SELECT column1 FROM (VALUES {values}) AS also_asked" if extra else "")
        rows = await self._conn.execute_fetchall(
            f"{_scored(len(terms))}, asked(id) AS ({asked}), {_TURNS} "
            f"SELECT 0, id, score, {blank} FROM scored UNION ALL "
            f"SELECT 1, t.start, NULL, {qualified_columns('m')} {_TURN_ROWS} ORDER BY 1, 4",
            (*parameters, *extra),
        )
        matches = sorted(((int(r[1]), float(r[2])) for r in rows if r[0] == 0), key=lambda m: (-m[1], -m[0]))
        turns = _group([row[1:2] + row[3:] for row in rows if row[0] == 1],
                       [message_id for message_id, _ in matches] + extra, max_len=6)
        return matches, turns

    async def turns_of(
        self, session_key: str, message_ids: Sequence[int], *, before_id: int, max_len: int = 6
    ) -> dict[int, list[StoredMessage]]:
        """See `Recall.turns_of`."""
        asked = sorted({message_id for message_id in message_ids if message_id < before_id})
        if not asked:
            return {}
        values = ", ".join(f"(CAST(?{3 + index} AS BIGINT))" for index in range(len(asked)))
        rows = await self._conn.execute_fetchall(
            f"WITH asked(id) AS (VALUES {values}), {_TURNS} "
            f"SELECT t.start, {qualified_columns('m')} {_TURN_ROWS} ORDER BY m.id",
            (session_key, before_id, *asked),
        )
        return _group(list(rows), asked, max_len=max_len)

    async def merge_recall_index(self) -> None:
        """Nothing to do: GIN merges its pending entries itself (on vacuum, or when they fill)."""

    async def _optimize_recall_index(self) -> None:
        """Nothing to do (see merge_recall_index)."""

    async def _term_hits(self, term: SearchTerm) -> list[tuple[int]]:
        return [(int(row[0]),) for row in await self._conn.execute_fetchall(
            "SELECT message_id FROM recall_terms WHERE tsv @@ CAST(? AS tsquery) "
            "ORDER BY message_id DESC LIMIT ?",
            (tsquery(term), TERM_HITS),
        )]
