"""A turn's opening read and its batched writes: the same answers as the separate reads and writes
they replace, on both backends, in fewer statements and hand-offs."""

from __future__ import annotations

import pytest

from bot.core.errors import AlreadyAnsweredError
from bot.core.messages import ChatRef, InboundMessage, OutboundMessage
from bot.core.session_key import build
from bot.store import Store, TurnOpening, UsageRecord
from tests.sql import traced, value

DM = build("main", "telegram", "direct", 42)
CHAT = ChatRef("telegram", "42")


def inbound(text: str, message_id: str) -> InboundMessage:
    return InboundMessage(session_key=DM, chat=CHAT, sender_id="42", sender_name="Ada", text=text,
                          provider_message_id=message_id)


async def separately(store: Store, request_id: int) -> TurnOpening:
    """The opening as the six reads it replaces give it."""
    return TurnOpening(
        model=await store.session_model(str(DM)), preview_id=await store.preview_of(request_id),
        open_calls=bool(await store.open_tool_calls(request_id)),
        untold_compaction=bool(await value(
            store, "SELECT COUNT(*) FROM compactions WHERE session_key = ? AND notified = 0", (str(DM),))),
        timezone=await store.user_timezone("telegram", "42"),
        notes=tuple(await store.notes_of("telegram", "42")),
    )


async def test_opening_of_a_fresh_session_is_empty(store: Store) -> None:
    """A first message: no model chosen, no preview, no open calls, nothing untold, no zone or notes."""
    request = await store.append_inbound(inbound("hello", "1"))
    assert request is not None
    opening = await store.turn_opening(str(DM), request.id, "telegram", "42", notes=True)
    assert opening == TurnOpening(None, None, False, False, None, ())
    assert opening == await separately(store, request.id)


async def test_opening_reads_what_each_read_reads(store: Store) -> None:
    """Every fact set: the one read answers as the separate reads do, notes in id order."""
    request = await store.append_inbound(inbound("hello", "1"))
    assert request is not None
    await store.set_session_model(str(DM), "opus", "42")
    await store.record_preview(request.id, "p-7")
    await store.begin_tool_round(str(DM), request.id, 1, "looking", [("use-1", "clock", {})])
    await store.record_compaction(str(DM), summary="s", last_summarised_id=request.id,
                                  first_kept_message_id=request.id, tokens_before=10, tokens_after=2,
                                  model="haiku", replaces=None)
    await store.set_user_timezone("telegram", "42", "Europe/Paris")
    for note in ("likes tea", "lives in Lyon"):
        await store.add_note("telegram", "42", note, session_key=str(DM), max_notes=10)
    async with traced(store) as statements:
        opening = await store.turn_opening(str(DM), request.id, "telegram", "42", notes=True)
    assert len(statements) == 1
    assert opening == await separately(store, request.id)
    assert (opening.model, opening.preview_id, opening.open_calls, opening.untold_compaction,
            opening.timezone) == ("opus", "p-7", True, True, "Europe/Paris")
    assert [note.note for note in opening.notes] == ["likes tea", "lives in Lyon"]
    unasked = await store.turn_opening(str(DM), request.id, "telegram", "42", notes=False)
    assert unasked.notes == () and unasked.timezone == "Europe/Paris"


async def test_batched_writes_keep_their_answers(store: Store) -> None:
    """A duplicate inbound is still refused, and a reply to a request no longer waiting stores
    nothing, with the writes run as one batch each."""
    first = await store.append_inbound(inbound("hello", "1"))
    assert first is not None
    assert await store.append_inbound(inbound("hello", "1")) is None
    reply = await store.append_reply(str(DM), "hi", request_id=first.id,
                                     deliver=OutboundMessage(CHAT, "hi", None))
    assert [d.message_id for d in await store.pending_deliveries()] == [reply.id]
    with pytest.raises(AlreadyAnsweredError):
        await store.append_reply(str(DM), "again", request_id=first.id)
    assert [m.text for m in await store.history(str(DM), 10)] == ["hello", "hi"]


async def test_a_turn_commits_its_records_with_its_reply(store: Store) -> None:
    """The reply, its outbox row, its usage, its tool calls and its snapshot in one write; a
    request answered meanwhile leaves none of them."""
    request = await store.append_inbound(inbound("hello", "1"))
    assert request is not None
    await store.begin_tool_round(str(DM), request.id, 1, "", [("use-1", "clock", {})])
    usage = [UsageRecord(str(DM), "42", kind, "m", 10, 2, created_at=1.0) for kind in ("triage", "reply")]
    async with traced(store) as statements:
        reply = await store.commit_turn(
            str(DM), "hi", request_id=request.id, deliver=OutboundMessage(CHAT, "hi", None),
            fallback=False, actions=(), usage=usage, link_tool_calls=True, snapshot={"a": 1},
            snapshot_hash="h")
    assert [d.message_id for d in await store.pending_deliveries()] == [reply.id]
    assert [u.kind for u in await store.usage_since(0)] == ["triage", "reply"]
    assert [call.reply_id for call in await store.tool_calls_of_reply(reply.id)] == [reply.id]
    assert [s.reply_message_id for s in await store.snapshots(str(DM))] == [reply.id]
    records = [sql for sql in statements if "model_usage" in sql or "context_snapshots" in sql]
    assert len(records) == (1 if store.dialect.name == "postgres" else 2)  # one statement there
    with pytest.raises(AlreadyAnsweredError):
        await store.commit_turn(
            str(DM), "again", request_id=request.id, deliver=OutboundMessage(CHAT, "again", None),
            fallback=False, actions=(), usage=usage, link_tool_calls=False, snapshot={"b": 2},
            snapshot_hash="h2")
    assert len(await store.usage_since(0)) == 2 and len(await store.snapshots(str(DM))) == 1


async def test_compaction_state_is_both_reads_in_one(store: Store) -> None:
    """The compaction in use and the history after it, as `latest_compaction` and `history_tokens`
    give them: without a compaction, with one, and after a /reset."""

    async def separately() -> tuple[object, int, int]:
        latest = await store.latest_compaction(str(DM))
        after = latest.first_kept_message_id - 1 if latest else 0
        return (latest, *await store.history_tokens(str(DM), after_id=after))

    ids = []
    for n in range(4):
        stored = await store.append_inbound(inbound(f"message number {n}", str(n)))
        assert stored is not None
        ids.append(stored.id)
    assert await store.compaction_state(str(DM)) == await separately()
    assert (await store.compaction_state(str(DM)))[1] == 4
    await store.record_compaction(str(DM), summary="s", last_summarised_id=ids[1],
                                  first_kept_message_id=ids[2], tokens_before=10, tokens_after=2,
                                  model="haiku", replaces=None)
    state = await store.compaction_state(str(DM))
    assert state == await separately() and state[0] is not None and state[1] == 2
    await store.reset_context(str(DM))
    assert await store.compaction_state(str(DM)) == await separately() == (None, 0, 0)
