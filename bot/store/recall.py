"""Recall: a session's older messages found by the words of a new one, and the turns they belong to.

What both backends share: the ranking's parameters, turns grouped from rows, the terms written
with each message and the backlog of older ones. Each backend searches its own index
(`sqlite.recall`: FTS5 tables; `postgres.recall`: a posting table), finding and ranking the same
messages with the same doubles.
"""

from __future__ import annotations

import bisect
import time
from abc import abstractmethod
from collections.abc import Awaitable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from bot.core.messages import Origin, StoredMessage
from bot.ranking.lexical import LENGTH, SearchTerm, index_terms
from bot.store.database import Database
from bot.store.messages import rows_to_messages
from bot.store.turn_starts import P, Planner, TurnStarts

if TYPE_CHECKING:
    import aiosqlite

log = structlog.get_logger("switchboard.store")

RECALL_COMMON = 250  # a term found in more of the searched messages than this is left out
POOL = 2  # matches per wanted one ranked by summed weight before lengths are read
SEARCHED_CAP = 10_000  # the searched messages counted for idf: bounds the count in huge sessions
MAX_TURN = 6  # messages of a recalled turn (its user message and the first replies)
BACKLOG_BATCH = 5_000  # older messages given their terms per transaction when the store opens


def _scored_parameters(
    session_key: str, before_id: int, limit: int, terms: Sequence[SearchTerm]
) -> tuple[object, ...]:
    return (session_key, before_id, RECALL_COMMON, *LENGTH, limit, POOL * limit,
            *(term.match() for term in terms), *(term.factor for term in terms))


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
    """Lexical recall over per-session postings (`recall_terms` and the backend's index), ranked by
    `bot.ranking.lexical`.

    Opening the store finishes the index first: interactive messages stored before migration 6
    (up to `index_backlog.upto`) get their terms, newest first, a batch per transaction, and the
    index is optimized once they all have.
    """

    async def _migrate(self) -> None:
        """Migrations, then recall's part of opening: the backlog's terms."""
        await super()._migrate()
        await self._fill_backlog()

    @abstractmethod
    async def lexical_turns(
        self, session_key: str, text: str, *, before_id: int, limit: int, expand: int = 0
    ) -> tuple[list[tuple[int, float]], dict[int, list[StoredMessage]]]:
        """(message id, score) of up to `limit` messages sharing words with `text`, best first,
        and each one's whole turn (as `turns_of` gives it), in one read. `expand`: up to this many
        thesaurus neighbours of its words searched too, at lower weights (`lexical.search_terms`).

        Searched: the session's interactive messages above its context floor and below
        `before_id`, fallback replies left out. Each of the request's terms weighs its idf among
        the searched messages (`bot.ranking.lexical.term_weight`; a term in more than RECALL_COMMON of
        them is left out); the POOL x `limit` messages with the largest summed weight are scored
        with BM25's length factor (`bot.ranking.lexical.score`), ties going to the newer message. Nothing
        outside the session's searched range moves a score, so a replayed turn finds what it
        found. Each term's postings are walked once. (`lexical_matches` and `turns_at` give the
        same in two reads, for when the turns wanted are known only once another source answers.)
        """

    @abstractmethod
    async def lexical_matches(
        self, session_key: str, text: str, *, before_id: int, limit: int, expand: int = 0
    ) -> tuple[list[tuple[int, float]], TurnStarts]:
        """The matches `lexical_turns` finds, and where the session's turns start (see TurnStarts),
        in one read: the turns are read once it is known which are wanted (`turns_at`)."""

    async def lexical_then_turns(
        self, session_key: str, text: str, *, before_id: int, limit: int,
        plan: Awaitable[Planner[P]], expand: int = 0,
    ) -> tuple[list[tuple[int, float]], TurnStarts, P, dict[int, list[StoredMessage]]]:
        """`lexical_matches`, then the planner `plan` gives (called with the matches and the
        starts) and the turns it wants (`turns_at`). Here the search runs while the planner is
        awaited (beside the event loop's work: the server's, or SQLite's thread on another CPU),
        the turns read after it; SQLite on one CPU does it all in one hand-off instead (issue 38:
        one core has nothing to run beside the search, and a hand-off of its own for the turns
        cost more than the search's head start saved). Gives the matches, the starts, the plan
        and its turns by start."""
        matches, starts = await self.lexical_matches(session_key, text, before_id=before_id, limit=limit,
                                                     expand=expand)
        planned = (await plan)(matches, starts)
        spans = sorted(planned.wanted)
        turns = await self.turns_at(session_key, spans)
        return matches, starts, planned, {start: turns.get(start, []) for start, _ in spans}

    async def turns_at(
        self, session_key: str, spans: Sequence[tuple[int, int]]
    ) -> dict[int, list[StoredMessage]]:
        """The turns [start, stop) (as `TurnStarts.span` gives them) by their start, in one read:
        their messages as `turns_of` gives them."""
        if not spans:
            return {}
        return _turns_from_rows(await self._turn_rows(session_key, spans))

    @abstractmethod
    async def merge_recall_index(self) -> None:
        """One bounded step of merging the index's segments towards one.

        Every message written adds a small segment that FTS5 merges only now and then, and a
        search looks each term up in every segment (about 2.5 µs each): a few steps a minute keep
        a busy index at one or two segments. Nothing to merge costs almost nothing.
        """

    @abstractmethod
    async def turns_of(
        self, session_key: str, message_ids: Sequence[int], *, before_id: int, max_len: int = MAX_TURN
    ) -> dict[int, list[StoredMessage]]:
        """For each id, the turn it belongs to, oldest first, in one read.

        A turn is the interactive user message an id is or answers, and the replies after it up
        to the next user message and `before_id` (fallback replies left out), at most `max_len`
        messages. An id whose user message is not above the context floor (or not below
        `before_id`) is absent.
        """

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
