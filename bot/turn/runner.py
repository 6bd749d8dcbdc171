"""One turn, in four phases: compose (context and reply call), answer (the model's reply or a short
fallback), commit (stored with its outbox row, usage, snapshot), deliver; then one log line, and
the memory flush and compaction when the session has grown.

Each phase hands the next a frozen value (`Composed`, `Answer`, `Committed`, `Delivered`), and the
facts the snapshot and the log line show are rendered from one `TurnRecord`. `TurnRunner` builds
the phases from the daemon's collaborators and runs them in order, with the reply's preview and
"typing…" around the first two.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager

import structlog

from bot.config import Config
from bot.context.builder import ContextBuilder
from bot.context.compaction import Compactor
from bot.context.prompt import PromptFiles
from bot.context.semantic_recall import SemanticRecall
from bot.core.errors import describe
from bot.core.messages import AGENT_PROVIDER, InboundMessage, StoredMessage
from bot.core.misconfiguration import Misconfigurations
from bot.delivery.outbox import Outbox
from bot.delivery.preview import open_preview, typing_until
from bot.intake.channel import Channel, ReplyPreview
from bot.models.brain import Brain
from bot.ranking.embedding import Embedder
from bot.store import Store, TurnOpening
from bot.tools.scope import is_person
from bot.tools.toolbox import ToolBox
from bot.turn.answer import FALLBACK_REPLY, Answerer
from bot.turn.commit import Committer
from bot.turn.compose import Composer
from bot.turn.deliver import Deliverer
from bot.turn.flush import MemoryFlush
from bot.turn.record import TurnRecord
from bot.turn.tools import TurnTools

__all__ = ["FALLBACK_REPLY", "STORE_ATTEMPTS", "STORE_RETRY_DELAY", "TurnRunner"]

log = structlog.get_logger("switchboard.turn")

# Storing a reply is retried briefly (a locked database clears in moments) before it is sent unstored.
STORE_ATTEMPTS = 3
STORE_RETRY_DELAY = 0.2


class TurnRunner:
    """Answers one stored inbound message; the router calls it one turn at a time per session."""

    def __init__(
        self, config: Config, store: Store, brain: Brain, channels: Mapping[str, Channel],
        outbox: Outbox | None = None, embedder: Embedder | None = None, tools: ToolBox | None = None,
        misconfigured: Misconfigurations | None = None,
    ) -> None:
        self._store = store
        self._channels = channels
        semantic = SemanticRecall(store, embedder) if embedder is not None else None
        context = ContextBuilder(config, store, brain, semantic=semantic)
        self.compactor = Compactor(config, store, brain, context.budget)
        # Soul and memory files are cached and read again only when they change on disk.
        aids = TurnTools(config, store, brain, tools)
        self.compose = Composer(config, context, store, brain, PromptFiles(config), store.kept_files(), aids)
        self.flush = MemoryFlush(config, store, self.compactor, aids)
        self.answer = Answerer(brain, misconfigured or Misconfigurations(channels))
        self.commit = Committer(config, store, brain, attempts=STORE_ATTEMPTS, retry_delay=STORE_RETRY_DELAY)
        self.deliver = Deliverer(outbox or Outbox(store, channels), channels)

    async def __call__(self, request: StoredMessage, inbound: InboundMessage) -> None:
        started = time.perf_counter()
        key = inbound.session_key
        channel = self._channels.get(inbound.chat.provider)
        # Groups quote the message answered; between agents the reply says which message it
        # answers, so the agent channel knows its hop and who waits for it.
        quotes = not key.is_direct or key.provider == AGENT_PROVIDER
        reply_to = inbound.provider_message_id if quotes else None
        # The reply shown while it is written, where the channel can (None: sent when complete).
        opening = await self._opening(request, inbound)
        preview = await open_preview(channel, inbound.chat, reply_to, self._store, request.id, opening)
        async with self._typing(channel, inbound, preview):
            composed = await self.compose(request, inbound, started, opening)
            answer = await self.answer(composed, local=inbound.chat.provider == "console",
                                       on_text=preview.update if preview is not None else None)
        record = TurnRecord(request, inbound.sender_id, inbound.chat, reply_to, composed, answer,
                            model_ms=(time.perf_counter() - composed.context_done) * 1000)
        committed = await self.commit(record, preview)
        if committed is None:  # another instance answers the chat now
            return
        delivered = await self.deliver(committed)
        reply_id = committed.reply.id if committed.reply is not None else None
        log.info("turn", session_key=str(key), **record.log_fields(
            reply_id=reply_id, delivered=delivered.sent, send_ms=delivered.send_ms,
            record_ms=delivered.record_ms, total_ms=(time.perf_counter() - started) * 1000))
        # After the reply, still holding the session's turn: the user never waits for it, and
        # the session's next turn (queued behind) already sees the notes kept and the summary.
        if record.context.status == "ok" and reply_id is not None:
            fill = await self.flush.before_compaction(composed, answer, request, inbound)
            await self.compactor.maybe_compact(str(key), fill)

    async def _opening(self, request: StoredMessage, inbound: InboundMessage) -> TurnOpening | None:
        """What the turn reads of itself (model, preview, open calls, untold compaction, the
        asker's zone and notes) in one read; None when it fails: each part is then read where it
        is used, each with its own fallback."""
        key, chat = inbound.session_key, inbound.chat
        try:
            return await self._store.turn_opening(
                str(key), request.id, chat.provider, inbound.sender_id,
                notes=key.is_direct and is_person(chat.provider, inbound.sender_id))
        except Exception as exc:
            log.warning("turn opening unreadable; read part by part", session_key=str(key),
                        error=describe(exc), exc_info=True)
            return None

    @staticmethod
    def _typing(
        channel: Channel | None, inbound: InboundMessage, preview: ReplyPreview | None
    ) -> AbstractAsyncContextManager[None]:
        """Shows "typing…" from the start (triage is model work the user waits for too) to the first text."""
        if channel is None:
            return contextlib.nullcontext()
        return typing_until(channel.typing(inbound.chat), preview)
