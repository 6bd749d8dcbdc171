"""A turn's third phase, commit: the answer kept, with its outbox row, its usage and its snapshot.

`Committer` leaves the chat alone when another instance took it over while this turn stalled,
settles what is sent (the compaction notice, the preview message the reply takes over) and stores
the reply with its outbox row, the tokens the turn spent, its tool calls linked and the snapshot
rendered from the `TurnRecord` in one write (`commit_turn`); a retry stores the reply alone (the
records then follow apart, each failure of theirs only logged). `Committed` is what the deliver
phase sends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from bot.config import Config
from bot.context.compaction import NOTICE
from bot.context.replay_settings import selection_settings
from bot.core.errors import AlreadyAnsweredError, describe
from bot.core.messages import OutboundMessage, StoredMessage
from bot.delivery.preview import PreviewRecords, finish_preview, withdraw_preview
from bot.intake.channel import ReplyPreview
from bot.intake.session_lease import lease_retaken
from bot.models.brain import Completion
from bot.models.usage import UsageLedger, record_usage
from bot.store import CompactionRecord, UsageRecord
from bot.turn.compose import ModelNames
from bot.turn.record import TurnRecord

log = structlog.get_logger("switchboard.turn")


class TurnLedger(PreviewRecords, UsageLedger, Protocol):
    """What committing a turn writes and reads in the store."""

    async def take_compaction_notice(self, session_key: str) -> CompactionRecord | None: ...

    async def append_reply(
        self, session_key: str, text: str, *, actions: Sequence[str] = (), request_id: int | None = None,
        deliver: OutboundMessage | None = None, fallback: bool = False,
    ) -> StoredMessage: ...

    async def commit_turn(
        self, session_key: str, text: str, *, request_id: int, deliver: OutboundMessage,
        fallback: bool, actions: Sequence[str], usage: Sequence[UsageRecord], link_tool_calls: bool,
        snapshot: dict[str, Any] | None, snapshot_hash: str,
    ) -> StoredMessage: ...

    async def attach_tool_calls(self, request_id: int, reply_id: int) -> None: ...

    async def record_snapshot(
        self, session_key: str, request_message_id: int, reply_message_id: int | None,
        snapshot: dict[str, Any], snapshot_hash: str,
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class Committed:
    """The reply as it goes out: `reply` None when the database would not take it (it is sent
    unstored: a restart may answer the request again, which beats silence)."""

    outbound: OutboundMessage
    reply: StoredMessage | None
    store_started: float  # time.perf_counter() before the reply was stored (the log's send_ms)


class Committer:
    """Commits each answered turn of one agent."""

    def __init__(
        self, config: Config, ledger: TurnLedger, names: ModelNames, *, attempts: int, retry_delay: float,
    ) -> None:
        self._config = config
        self._ledger = ledger
        self._names = names
        self._attempts = attempts
        self._retry_delay = retry_delay

    async def __call__(self, record: TurnRecord, preview: ReplyPreview | None = None) -> Committed | None:
        """The reply committed; None when it is dropped (another instance answers the chat now)."""
        usage = await self.usage_of(record)
        if not await lease_retaken():
            await self._keep_usage(usage)
            # This turn stalled past its lease and another instance holds the chat now: it answers
            # the request (streaming into the same preview message), so this reply touches nothing.
            if preview is not None:
                preview.abandon()
            log.warning("session taken over by another instance while this turn stalled; "
                        "its reply dropped, the request left to that instance",
                        session_key=record.session_key, request_id=record.request.id)
            return None
        text = await self._with_notice(record)
        # A preview message becomes the reply's first chunk; a half answer in it (the model failed
        # mid-stream) is replaced by whatever is sent instead.
        preview_id = (await finish_preview(preview, text, record.request.id, self._ledger)
                      if preview is not None else None)
        outbound = OutboundMessage(record.chat, text, record.reply_to, preview_id=preview_id)
        started = time.perf_counter()
        try:
            reply, recorded = await self.store_reply(record, outbound, usage)
        except AlreadyAnsweredError:
            await self._keep_usage(usage)
            # Another instance took the chat over (this one stalled past its lease) and answered:
            # one answer reaches the user, not two; a preview message this reply was shown in goes
            # too, unless that instance's reply took it over.
            log.warning("request answered by another instance meanwhile; this reply dropped",
                        session_key=record.session_key, request_id=record.request.id)
            if preview is not None and preview_id is not None:
                await withdraw_preview(preview, record.chat, preview_id, self._ledger)
            return None
        if not recorded:
            await self._keep_usage(usage)
            if reply is not None:
                if record.tools_offered:
                    await self._attach_tool_calls(record.request.id, reply.id)
                await self._snapshot(record, reply)
        return Committed(outbound, reply, started)

    async def usage_of(self, record: TurnRecord) -> list[UsageRecord]:
        """The triage's tokens and the reply's, in the order they were spent, for /usage (as
        `record_usage` keeps them: calls that report no tokens are left out)."""
        kept = _Kept()
        triage, key = record.context.triage, record.session_key
        if triage.input_tokens or triage.output_tokens:
            model = self._names.model_for(self._config.conversation.selection_model)
            if self._config.uses_providers():  # "local:qwen3" → the model id, as replies record it
                model = model.partition(":")[2] or model
            await record_usage(kept, key, record.user_id, "triage",
                               Completion("", model, triage.input_tokens, triage.output_tokens))
        await record_usage(kept, key, record.user_id, "reply", record.answer.completion)
        return kept.records

    async def store_reply(
        self, record: TurnRecord, outbound: OutboundMessage, usage: Sequence[UsageRecord] = (),
    ) -> tuple[StoredMessage | None, bool]:
        """Store the reply, clearing the requests it answers, with its outbox row; None when the
        database refused it every time (a locked or full disk clears in moments, or not at all).
        The first attempt writes the turn's records with it (then True); a retry, the reply alone."""
        answer, request = record.answer, record.request
        for attempt in range(1, self._attempts + 1):
            try:
                if attempt == 1:
                    return await self._ledger.commit_turn(
                        record.session_key, answer.text, request_id=request.id, deliver=outbound,
                        fallback=not answer.written, actions=answer.actions, usage=usage,
                        link_tool_calls=record.tools_offered, snapshot=self._rendered(record),
                        snapshot_hash=record.context.input_hash,
                    ), True
                return await self._ledger.append_reply(
                    record.session_key, answer.text, request_id=request.id, deliver=outbound,
                    fallback=not answer.written, actions=answer.actions,
                ), False
            except AlreadyAnsweredError:
                raise
            except Exception as exc:
                if attempt == self._attempts:
                    log.error("reply not stored; delivering it anyway", session_key=record.session_key,
                              request_id=request.id, error=describe(exc), exc_info=True)
                    return None, False
                await asyncio.sleep(self._retry_delay * attempt)
        return None, False

    async def _keep_usage(self, usage: Sequence[UsageRecord]) -> None:
        """Usage written apart from a reply (none was stored, or not with it)."""
        for each in usage:
            try:
                await self._ledger.record_usage(each)
            except Exception as exc:
                log.warning("usage not recorded", session_key=each.session_key, kind=each.kind,
                            error=describe(exc), exc_info=True)

    def _rendered(self, record: TurnRecord) -> dict[str, Any] | None:
        """The snapshot stored with the reply; None (logged) when it cannot be rendered."""
        try:
            return record.snapshot(selection_settings(self._config))
        except Exception as exc:  # the reply matters more than its explanation
            log.error("context snapshot not stored", session_key=record.session_key,
                      request_id=record.request.id, error=describe(exc), exc_info=True)
            return None

    async def _with_notice(self, record: TurnRecord) -> str:
        """The text sent: told once, under the first reply after the session was compacted (the
        note is not stored as conversation: it is about the chat, not part of it). Not looked for
        when the turn's opening read found none untold."""
        if not record.composed.notice_due:
            return record.answer.text
        try:
            notice = await self._ledger.take_compaction_notice(record.session_key) is not None
        except Exception as exc:  # a note about the chat is not worth failing the reply for
            log.warning("compaction notice unreadable", session_key=record.session_key,
                        error=describe(exc), exc_info=True)
            notice = False
        return f"{record.answer.text}\n\n{NOTICE}" if notice else record.answer.text

    async def _attach_tool_calls(self, request_id: int, reply_id: int) -> None:
        try:
            await self._ledger.attach_tool_calls(request_id, reply_id)
        except Exception as exc:  # the calls stay with their request; the reply still goes out
            log.error("tool calls not linked to their reply", request_id=request_id,
                      error=describe(exc), exc_info=True)

    async def _snapshot(self, record: TurnRecord, reply: StoredMessage) -> None:
        try:
            await self._ledger.record_snapshot(
                record.session_key, record.request.id, reply.id,
                record.snapshot(selection_settings(self._config)), record.context.input_hash,
            )
        except Exception as exc:  # the reply matters more than its explanation
            log.error("context snapshot not stored", session_key=record.session_key,
                      request_id=record.request.id, error=describe(exc), exc_info=True)


class _Kept:
    """A usage ledger that keeps the records it is given, to be written with the reply."""

    def __init__(self) -> None:
        self.records: list[UsageRecord] = []

    async def record_usage(self, record: UsageRecord) -> None:
        self.records.append(record)
