"""PostgreSQL's `commit_turn`: an answered turn's whole commit in one statement, one round trip.

On SQLite the commit is one item of the connection's thread. Here the same writes as a transaction
were a round trip each, BEGIN and COMMIT included (seven for a reply with usage and a snapshot);
now they are data-modifying WITH parts of one statement, atomic as a statement is: the requests it
answers cleared, the reply counted in its session and stored, its outbox row, its recall terms, the
usage of its model calls, its tool calls linked to it and its context snapshot. Every write hangs
on the request still waiting (`ok`): when it is not, nothing is written and AlreadyAnsweredError
is raised, as the transaction did.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from bot.core.errors import AlreadyAnsweredError
from bot.core.messages import OutboundMessage, StoredMessage
from bot.ranking.budget import estimate_tokens
from bot.ranking.lexical import index_terms
from bot.store.database import Database
from bot.store.usage import UsageRecord

# ?1 session, ?2 request, ?3 now, ?4 reply text, ?5 actions, ?6 tokens, ?7 fallback; ?8-?13 the
# outbox row (provider, chat, thread, reply to, text, preview). The parts after are added as the
# turn has them, their values numbered on from ?14.
_REPLY = (
    "WITH answered AS (UPDATE messages SET awaiting_reply = 0 WHERE awaiting_reply = 1 "
    "AND session_key = ?1 AND id <= ?2 AND EXISTS (SELECT 1 FROM messages w WHERE w.id = ?2 "
    "AND w.session_key = ?1 AND w.awaiting_reply = 1) RETURNING id), "
    "ok AS (SELECT 1 FROM answered WHERE id = ?2), "
    "counted AS (INSERT INTO sessions (key, created_at, updated_at, message_count, user_turns) "
    "SELECT ?1, ?3, ?3, 1, 0 FROM ok ON CONFLICT(key) DO UPDATE SET updated_at = excluded.updated_at, "
    "message_count = sessions.message_count + 1), "
    "reply AS (INSERT INTO messages (session_key, role, origin, text, actions, created_at, "
    "token_estimate, awaiting_reply, fallback, request_id) "
    "SELECT ?1, 'assistant', 'interactive', ?4, ?5, ?3, ?6, 0, ?7, ?2 FROM ok RETURNING id), "
    "queued AS (INSERT INTO outbox (message_id, provider, chat_id, thread_id, reply_to_id, text, "
    "created_at, preview_id) SELECT id, ?8, ?9, ?10, ?11, ?12, ?3, ?13 FROM reply)"
)
_TERMS = "terms AS (INSERT INTO recall_terms (message_id, terms) SELECT id, ?{0} FROM reply)"
_LINK = ("linked AS (UPDATE tool_calls SET reply_id = (SELECT id FROM reply) "
         "WHERE request_id = ?2 AND reply_id IS NULL AND EXISTS (SELECT 1 FROM reply))")
_SNAPSHOT = ("snapshot AS (INSERT INTO context_snapshots (session_key, request_message_id, "
             "reply_message_id, created_at, hash, snapshot) SELECT ?1, ?2, id, ?3, ?{0}, ?{1} FROM reply)")
# The usage rows in the order the calls were spent (a VALUES list is read in order).
_USAGE = ("usage AS (INSERT INTO model_usage (session_key, user_id, kind, model, input_tokens, "
          "output_tokens, cache_write_tokens, cache_read_tokens, created_at) SELECT * FROM (VALUES {0}) "
          "AS v WHERE EXISTS (SELECT 1 FROM ok))")


class PgTurnCommits(Database):
    """The one statement that commits an answered turn."""

    async def commit_turn(
        self, session_key: str, text: str, *, request_id: int, deliver: OutboundMessage,
        fallback: bool, actions: Sequence[str], usage: Sequence[UsageRecord], link_tool_calls: bool,
        snapshot: dict[str, Any] | None, snapshot_hash: str,
    ) -> StoredMessage:
        """See `TurnCommits.commit_turn`: the same rows, written by one statement."""
        now, tokens = time.time(), estimate_tokens(text)
        chat = deliver.chat
        params: list[Any] = [
            session_key, request_id, now, text, json.dumps(list(actions)) if actions else None,
            tokens, int(fallback), chat.provider, chat.chat_id, chat.thread_id,
            deliver.reply_to_id, deliver.text, deliver.preview_id,
        ]
        parts = [_REPLY]

        def numbered(*values: Any) -> list[int]:
            params.extend(values)
            return list(range(len(params) - len(values) + 1, len(params) + 1))

        terms = "" if fallback else index_terms(session_key, text)
        if terms:
            parts.append(_TERMS.format(*numbered(terms)))
        if link_tool_calls:
            parts.append(_LINK)
        if snapshot is not None:
            parts.append(_SNAPSHOT.format(*numbered(snapshot_hash, json.dumps(snapshot, sort_keys=True))))
        if usage:
            rows = []
            for u in usage:
                places = numbered(u.session_key, u.user_id, u.kind, u.model, u.input_tokens,
                                  u.output_tokens, u.cache_write_tokens, u.cache_read_tokens,
                                  u.created_at or now)
                rows.append("(" + ", ".join(f"?{n}" for n in places) + ")")
            parts.append(_USAGE.format(", ".join(rows)))
        statement = ", ".join(parts) + " SELECT id FROM reply"
        rows_back = list(await self._conn.execute_fetchall(statement, params))
        if not rows_back:
            raise AlreadyAnsweredError(f"request #{request_id} of {session_key} is no longer waiting")
        return StoredMessage(
            id=int(rows_back[0][0]), session_key=session_key, role="assistant", origin="interactive",
            text=text, created_at=now, actions=tuple(actions), token_estimate=tokens,
        )
