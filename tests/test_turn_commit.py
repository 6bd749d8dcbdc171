"""The commit phase: the reply kept with its outbox row, its usage and its snapshot, with a fake ledger."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from structlog.testing import capture_logs

from bot.context.compaction import NOTICE
from bot.core.errors import AlreadyAnsweredError
from bot.core.messages import ChatRef, OutboundMessage, StoredMessage
from bot.ranking.stages import REPLY_CALL, TriageReport
from bot.store import CompactionRecord, UsageRecord
from bot.turn.answer import FALLBACK_REPLY, Answer, ToolUse
from bot.turn.commit import Committer
from bot.turn.compose import Composed
from tests.turn_fakes import FakeBrain, FakeLoop, FakePreview, completion, composed, context, record


class Ledger:
    """The store as commit sees it: refuses the first `refusals` replies (an exception each)."""

    def __init__(self, *refusals: Exception, notice: bool = False, snapshot_fails: bool = False) -> None:
        self.refusals = list(refusals)
        self.notice = notice
        self.snapshot_fails = snapshot_fails
        self.replies: list[dict[str, Any]] = []
        self.snapshots: list[tuple[int, int | None, dict[str, Any], str]] = []
        self.usage: list[UsageRecord] = []
        self.attached: list[tuple[int, int]] = []
        self.taken: set[str] = set()

    async def take_compaction_notice(self, session_key: str) -> CompactionRecord | None:
        if not self.notice:
            return None
        self.notice = False
        return CompactionRecord(1, session_key, "summary", 10, 11, 4000, 500, "claude-test", 0.0, 0)

    async def append_reply(
        self, session_key: str, text: str, *, actions: Sequence[str] = (), request_id: int | None = None,
        deliver: OutboundMessage | None = None, fallback: bool = False,
    ) -> StoredMessage:
        if self.refusals:
            raise self.refusals.pop(0)
        self.replies.append({"text": text, "request_id": request_id, "deliver": deliver, "fallback": fallback,
                             "actions": list(actions)})
        return StoredMessage(100 + len(self.replies), session_key, "assistant", "interactive", text, 0.0)

    async def commit_turn(
        self, session_key: str, text: str, *, request_id: int, deliver: OutboundMessage,
        fallback: bool, actions: Sequence[str], usage: Sequence[UsageRecord], link_tool_calls: bool,
        snapshot: dict[str, Any] | None, snapshot_hash: str,
    ) -> StoredMessage:
        """All of it or (as the store's one transaction) none."""
        if self.snapshot_fails and snapshot is not None:
            raise OSError("disk full")
        reply = await self.append_reply(session_key, text, actions=actions, request_id=request_id,
                                        deliver=deliver, fallback=fallback)
        self.usage.extend(usage)
        if link_tool_calls:
            self.attached.append((request_id, reply.id))
        if snapshot is not None:
            self.snapshots.append((request_id, reply.id, snapshot, snapshot_hash))
        return reply

    async def attach_tool_calls(self, request_id: int, reply_id: int) -> None:
        self.attached.append((request_id, reply_id))

    async def record_snapshot(
        self, session_key: str, request_message_id: int, reply_message_id: int | None,
        snapshot: dict[str, Any], snapshot_hash: str,
    ) -> None:
        if self.snapshot_fails:
            raise OSError("disk full")
        self.snapshots.append((request_message_id, reply_message_id, snapshot, snapshot_hash))

    async def record_usage(self, record: UsageRecord) -> None:
        self.usage.append(record)

    async def preview_of(self, request_id: int) -> str | None:
        return None

    async def still_awaiting(self, message_id: int) -> bool:
        return True

    async def preview_taken(self, chat: ChatRef, provider_message_id: str) -> bool:
        return provider_message_id in self.taken


# A turn the model answered.
HI = Answer("hi", completion(), written=True)


def committer(config: Any, ledger: Ledger) -> Committer:
    return Committer(config, ledger, FakeBrain(), attempts=3, retry_delay=0.0)


async def test_the_reply_is_stored_with_its_outbox_row_usage_and_snapshot(make_config: Any) -> None:
    """One answered turn: the reply stored for its request with what is sent, its tokens and its snapshot."""
    ledger = Ledger()
    turn = record(Answer("hi there", completion(), written=True))

    committed = await committer(make_config(), ledger)(turn)

    assert committed is not None and committed.reply is not None
    assert committed.outbound == OutboundMessage(ChatRef("fake", "42"), "hi there", None)
    assert ledger.replies == [{"text": "hi there", "request_id": 7, "deliver": committed.outbound,
                               "fallback": False, "actions": []}]
    assert [(u.kind, u.model, u.input_tokens) for u in ledger.usage] == [("reply", "claude-test", 120)]
    ((request_id, reply_id, snapshot, _),) = ledger.snapshots
    assert (request_id, reply_id) == (7, committed.reply.id)
    assert snapshot[REPLY_CALL] == turn.reply_facts() and "settings" in snapshot
    assert ledger.attached == []


async def test_triage_tokens_are_recorded_before_the_reply(make_config: Any) -> None:
    """The fast model's tokens come first, under its model's name."""
    ledger = Ledger()
    triage = TriageReport("selected", input_tokens=50, output_tokens=3)
    triaged = Composed("k", context("a", "b", triage=triage), "claude-test")
    await committer(make_config(), ledger)(record(HI, triaged))

    assert [(u.kind, u.model, u.input_tokens) for u in ledger.usage] == [
        ("triage", "claude-fast", 50), ("reply", "claude-test", 120)]


async def test_an_apology_is_stored_as_a_fallback_without_actions(make_config: Any) -> None:
    """A reply the model did not write is kept, but marked so the model never reads it as its own."""
    ledger = Ledger()
    tools = ToolUse({}, 1, 1, ("did a thing",))
    await committer(make_config(), ledger)(record(Answer(FALLBACK_REPLY, fallback=True, tools=tools)))

    assert ledger.replies[0]["fallback"] and ledger.replies[0]["actions"] == []
    assert ledger.usage == []


async def test_the_compaction_notice_is_sent_but_not_stored(make_config: Any) -> None:
    """The first reply after a compaction tells the chat; the note is not part of the conversation."""
    ledger = Ledger(notice=True)
    committed = await committer(make_config(), ledger)(record(HI))

    assert committed is not None and committed.outbound.text == f"hi\n\n{NOTICE}"
    assert ledger.replies[0]["text"] == "hi"


async def test_no_notice_is_looked_for_when_the_opening_found_none_untold(make_config: Any) -> None:
    """A turn whose opening read found every compaction told sends its reply as it is."""
    ledger = Ledger(notice=True)
    told = dataclasses.replace(composed(), notice_due=False)
    committed = await committer(make_config(), ledger)(record(HI, told))

    assert committed is not None and committed.outbound.text == "hi" and ledger.notice


async def test_a_reply_stored_on_a_retry_has_its_records_written_after_it(make_config: Any) -> None:
    """The first write (the reply with its records) refused: the retry stores the reply alone,
    then its usage and snapshot apart."""
    ledger = Ledger(OSError("database is locked"))
    committed = await committer(make_config(), ledger)(record(HI))

    assert committed is not None and committed.reply is not None and len(ledger.replies) == 1
    assert [u.kind for u in ledger.usage] == ["reply"] and len(ledger.snapshots) == 1


async def test_a_preview_message_becomes_the_replys_first_chunk(make_config: Any) -> None:
    """The preview is finished with the text sent, and the outbox row names its message."""
    preview = FakePreview("p1")
    committed = await committer(make_config(), Ledger())(record(HI), preview)

    assert preview.finished == ["hi"]
    assert committed is not None and committed.outbound.preview_id == "p1"


async def test_the_tool_calls_are_linked_to_the_reply_when_tools_were_offered(make_config: Any) -> None:
    """The calls stored with the request belong to the reply that answered it."""
    ledger = Ledger()
    tools = ToolUse({}, 1, 1, ("set the timezone",))
    answer = Answer("done", completion(), written=True, tools=tools)
    turn = record(answer, composed(loop=FakeLoop(completion())))

    committed = await committer(make_config(), ledger)(turn)

    assert committed is not None and committed.reply is not None
    assert ledger.attached == [(7, committed.reply.id)]
    assert ledger.replies[0]["actions"] == ["set the timezone"]


async def test_a_reply_refused_once_is_stored_by_the_retry(make_config: Any) -> None:
    """A locked database clears in moments: the second attempt stores the reply."""
    ledger = Ledger(OSError("database is locked"))
    committed = await committer(make_config(), ledger)(record(HI))

    assert committed is not None and committed.reply is not None and len(ledger.replies) == 1


async def test_a_reply_refused_every_time_goes_out_unstored(make_config: Any) -> None:
    """After the last attempt the reply is committed without a stored row (and without a snapshot)."""
    ledger = Ledger(*(OSError("disk full") for _ in range(3)))
    with capture_logs() as logs:
        committed = await committer(make_config(), ledger)(record(HI))

    assert committed is not None and committed.reply is None and committed.outbound.text == "hi"
    assert ledger.snapshots == []
    assert [e["event"] for e in logs] == ["reply not stored; delivering it anyway"]


async def test_a_request_answered_elsewhere_drops_the_reply_and_its_preview(make_config: Any) -> None:
    """Another instance answered meanwhile: nothing is committed, and the preview message is withdrawn."""
    preview = FakePreview("p1")
    committed = await committer(make_config(), Ledger(AlreadyAnsweredError("answered")))(
        record(HI), preview)

    assert committed is None and preview.withdrawn


async def test_a_preview_the_other_reply_took_over_is_left_in_place(make_config: Any) -> None:
    """The reply of the instance that answered became that preview message: it stays."""
    ledger = Ledger(AlreadyAnsweredError("answered"))
    ledger.taken.add("p1")
    preview = FakePreview("p1")

    assert await committer(make_config(), ledger)(record(HI), preview) is None
    assert not preview.withdrawn


async def test_a_snapshot_that_cannot_be_stored_leaves_the_reply_committed(make_config: Any) -> None:
    """The reply matters more than its explanation: the failure is logged, the reply goes out."""
    with capture_logs() as logs:
        committed = await committer(make_config(), Ledger(snapshot_fails=True))(
            record(HI))

    assert committed is not None and committed.reply is not None
    assert [e["event"] for e in logs] == ["context snapshot not stored"]
