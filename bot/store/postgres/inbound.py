"""PostgreSQL's `append_inbound`: a platform message stored in one statement, one round trip.

The transaction it replaces was a round trip per statement, BEGIN and COMMIT included (seven for a
message with a platform id and words to recall): here the message's id is drawn first, its platform
id claimed with it (ON CONFLICT DO NOTHING: a copy seen before, or stored meanwhile by another
writer, claims nothing), and the session's count, the message and its recall terms are written
only when the claim was made, as data-modifying WITH parts of one statement.
"""

from __future__ import annotations

import time

from bot.core.media import encode
from bot.core.messages import InboundMessage, StoredMessage
from bot.ranking.budget import estimate_tokens
from bot.ranking.lexical import index_terms
from bot.store.database import Database

# ?1 session, ?2 now, ?3 created_at, ?4 sender, ?5 sender's name, ?6 text, ?7 platform id, ?8 reply
# to, ?9 tokens, ?10 awaiting a reply, ?11 chat, ?12 thread, ?13 media, ?14 provider, ?15 terms.
_NEW_ID = "new AS (SELECT nextval(pg_get_serial_sequence('messages', 'id')) AS id)"
_CLAIMED = (
    "claimed AS (INSERT INTO provider_messages (provider, chat_id, provider_message_id, message_id) "
    "SELECT ?14, ?11, ?7, id FROM new ON CONFLICT DO NOTHING RETURNING message_id AS id)"
)
_WRITES = (
    "counted AS (INSERT INTO sessions (key, created_at, updated_at, message_count, user_turns) "
    "SELECT ?1, ?2, ?2, 1, 1 FROM {0} ON CONFLICT(key) DO UPDATE SET updated_at = excluded.updated_at, "
    "message_count = sessions.message_count + 1, user_turns = sessions.user_turns + 1), "
    "stored AS (INSERT INTO messages (id, session_key, role, origin, sender_id, sender_name, text, "
    "provider_message_id, reply_to_id, created_at, token_estimate, awaiting_reply, chat_id, thread_id, "
    "fallback, media) SELECT id, ?1, 'user', 'interactive', ?4, ?5, ?6, ?7, ?8, ?3, ?9, ?10, ?11, ?12, "
    "0, ?13 FROM {0} RETURNING id)"
)
_TERMS = ", terms AS (INSERT INTO recall_terms (message_id, terms) SELECT id, ?15 FROM stored)"
_SEEN = ("new AS (SELECT nextval(pg_get_serial_sequence('messages', 'id')) AS id WHERE NOT EXISTS ("
         "SELECT 1 FROM provider_messages WHERE provider = ?14 AND chat_id = ?11 "
         "AND provider_message_id = ?7))")


def _statement(platform_id: bool, terms: bool) -> str:
    # A platform id seen before draws no id (a duplicate delivery is common: a webhook retried).
    head = f"WITH {_SEEN}, {_CLAIMED}, {_WRITES.format('claimed')}" if platform_id else (
        f"WITH {_NEW_ID}, {_WRITES.format('new')}")
    return head + (_TERMS if terms else "") + " SELECT id FROM stored"


_STATEMENTS = {(platform_id, terms): _statement(platform_id, terms)
               for platform_id in (False, True) for terms in (False, True)}


class PgInbound(Database):
    """The one statement that stores a platform message."""

    async def append_inbound(self, msg: InboundMessage) -> StoredMessage | None:
        """See `Messages.append_inbound`: None when the same platform message was stored before."""
        now = time.time()
        created_at = msg.sent_at or now
        session_key = str(msg.session_key)
        tokens = estimate_tokens(msg.text)
        terms = index_terms(session_key, msg.text)
        rows = list(await self._conn.execute_fetchall(
            _STATEMENTS[msg.provider_message_id is not None, bool(terms)],
            (session_key, now, created_at, msg.sender_id, msg.sender_name, msg.text,
             msg.provider_message_id, msg.reply_to_id, tokens, int(msg.starts_turn), msg.chat.chat_id,
             msg.chat.thread_id, encode(msg.media), msg.chat.provider, terms or None),
        ))
        if not rows:
            return None
        return StoredMessage(
            id=int(rows[0][0]), session_key=session_key, role="user", origin="interactive",
            text=msg.text, created_at=created_at, sender_id=msg.sender_id, sender_name=msg.sender_name,
            provider_message_id=msg.provider_message_id, reply_to_id=msg.reply_to_id,
            token_estimate=tokens, media=msg.media,
        )
