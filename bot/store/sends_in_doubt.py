"""What the store knows around a send in doubt: the ids a reply's next chunk must come after, the
platform ids recorded near it, and the other sends of its chat whose arrival is unknown too
(`bot.delivery.sent_probe` asks the platform about the rest)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.core.session_key import parse as parse_session_key
from bot.store.database import Database, like_prefix

# How far back (in stored messages) a recorded platform id may belong to a message sent after the
# reply's request: further back, only replies held back for minutes, whose chat is not this one.
REACH = 1000


@dataclass(frozen=True, slots=True)
class SendsNearby:
    """`floor`: the platform id the chunk in doubt came after (its reply's last recorded chunk, else
    its request's); `known`: (chat, id) of every numeric platform id recorded near it; `doubts`:
    other sends of the same chat with no recorded id (replies and scheduled outputs
    stored but not known delivered, chat commands received but not answered) besides this one."""

    floor: int | None
    known: frozenset[tuple[str, int]]
    doubts: int


class SendsInDoubt(Database):
    """The reads behind finding a send in doubt."""

    async def sends_nearby(self, reply_id: int, provider: str, chat_id: str) -> SendsNearby:
        rows = await self._conn.execute_fetchall(
            "SELECT m.session_key, m.created_at, m.request_id, (SELECT r.provider_message_id "
            "FROM messages r WHERE r.id = m.request_id) FROM messages m WHERE m.id = ?", (reply_id,))
        if not rows:
            return SendsNearby(None, frozenset(), 0)
        session_key, created_at, request_id, request_platform_id = next(iter(rows))
        recorded = await self._conn.execute_fetchall(
            "SELECT chat_id, provider_message_id, message_id FROM provider_messages "
            "WHERE provider = ? AND message_id >= ?", (provider, reply_id - REACH))
        known: set[tuple[str, int]] = set()
        chunks: list[int] = []
        for chat, platform_id, message_id in recorded:
            number = _number(platform_id)
            if number is None:
                continue
            known.add((str(chat), number))
            if message_id == reply_id and str(chat) == chat_id:
                chunks.append(number)
        previews = await self._conn.execute_fetchall(
            "SELECT chat_id, preview_id FROM messages WHERE id >= ? AND preview_id IS NOT NULL "
            "AND chat_id IS NOT NULL", (reply_id - REACH,))
        known.update((str(chat), number) for chat, preview in previews
                     if (number := _number(preview)) is not None)
        floor = max(chunks) if chunks else _number(request_platform_id)
        # The chat's sessions: the reply's, and a forum's other topics (one id sequence per chat).
        base = str(parse_session_key(str(session_key)).base())
        found = await self._conn.execute_fetchall(
            "SELECT COUNT(*) FROM messages WHERE id >= ? AND id <> ? AND role = 'assistant' "
            "AND provider_message_id IS NULL AND created_at >= ? AND (session_key = ? "
            "OR session_key LIKE ? ESCAPE '\\')",
            (reply_id - REACH, reply_id, float(created_at) - 600, base, like_prefix(base + ":")))
        unsent = int(next(iter(found))[0])
        # After a failed send of the reply, the chat's next turns may have run: a request still
        # waiting may have a preview message posted whose id was not recorded yet.
        found = await self._conn.execute_fetchall(
            "SELECT COUNT(*) FROM messages WHERE awaiting_reply = 1 AND id <> COALESCE(?, 0) "
            "AND (session_key = ? OR session_key LIKE ? ESCAPE '\\') AND EXISTS (SELECT 1 FROM "
            "outbox WHERE message_id = ? AND failed_at IS NOT NULL)",
            (request_id, base, like_prefix(base + ":"), reply_id))
        waiting = int(next(iter(found))[0])
        found = await self._conn.execute_fetchall(
            "SELECT COUNT(*) FROM chat_commands WHERE status = 'pending' AND provider = ? "
            "AND chat_id = ?", (provider, chat_id))
        commands = int(next(iter(found))[0])
        return SendsNearby(floor, frozenset(known), unsent + waiting + commands)


def _number(platform_id: object) -> int | None:
    text = str(platform_id) if platform_id is not None else ""
    return int(text) if text.isdigit() else None
