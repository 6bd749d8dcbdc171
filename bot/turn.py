"""One turn: context, model reply (or a short fallback), store, deliver, snapshot, one log line."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping

import structlog

from bot.brain import Brain, Completion, ReplyRequest
from bot.channel import Channel
from bot.compaction import NOTICE, Compactor
from bot.config import Config
from bot.context import Context
from bot.context_builder import ContextBuilder
from bot.errors import DeliveryError, ModelError
from bot.messages import InboundMessage, OutboundMessage, StoredMessage
from bot.prompt import PromptFiles, conversation_turns, turn_system_prompt
from bot.store import Store

log = structlog.get_logger("switchboard.turn")

FALLBACK_REPLY = "I couldn't reach the model, try again in a moment."


class TurnRunner:
    """Answers one stored inbound message; the router calls it one turn at a time per session."""

    def __init__(
        self, config: Config, store: Store, brain: Brain, channels: Mapping[str, Channel]
    ) -> None:
        self._config = config
        self._store = store
        self._brain = brain
        self._channels = channels
        self._context = ContextBuilder(config, store, brain)
        self.compactor = Compactor(config, store, brain, self._context.budget)
        # Soul and memory files are cached and read again only when they change on disk.
        self._prompt_files = PromptFiles(config)

    async def __call__(self, request: StoredMessage, inbound: InboundMessage) -> None:
        started = time.perf_counter()
        key = inbound.session_key
        bound = log.bind(session_key=str(key))
        channel = self._channels.get(inbound.chat.provider)
        # "typing…" from the start: triage is model work the user waits for too.
        typing = channel.typing(inbound.chat) if channel is not None else contextlib.nullcontext()
        completion: Completion | None = None
        error: str | None = None
        async with typing:
            try:
                context = await self._context.build(key, request, inbound.chat)
            except Exception as exc:  # a store or pipeline failure still gets the fallback reply
                error = f"context_build_error: {type(exc).__name__}: {exc}"
                bound.exception("context build failed", error_class="context_build_error")
                context = Context.failed(error, inbound.chat)
            context_ms = (time.perf_counter() - started) * 1000
            model_started = time.perf_counter()
            try:
                if context.status == "failed":
                    text = FALLBACK_REPLY
                else:
                    call = ReplyRequest(
                        system_stable=self._prompt_files.stable_prompt(),
                        system_turn=turn_system_prompt(self._config, key, time.time()),
                        messages=conversation_turns(context, request, group=not key.is_direct),
                        deadline=time.monotonic() + self._config.anthropic.timeout,
                    )
                    completion = await self._brain.reply(call)
                    text = completion.text.strip() or "(no reply)"
            except ModelError as exc:
                error = str(exc)
                text = FALLBACK_REPLY
            except Exception as exc:  # a bug or surprise in the provider path still gets a reply
                bound.exception("model call crashed")
                error = f"{type(exc).__name__}: {exc}"
                text = FALLBACK_REPLY
        model_ms = (time.perf_counter() - model_started) * 1000

        reply = await self._store.append_reply(str(key), text, request_id=request.id)
        await self._store.record_snapshot(
            str(key), request.id, reply.id, context.snapshot(), context.input_hash
        )
        delivered: list[str] = []
        send_started = time.perf_counter()
        if channel is not None:
            reply_to = inbound.provider_message_id if not key.is_direct else None
            # Told once, under the first reply after the session was compacted (the note is not
            # stored: it is about the chat, not part of it).
            notice = await self._store.take_compaction_notice(str(key))
            sent_text = f"{text}\n\n{NOTICE}" if notice is not None else text
            try:
                delivered = await channel.send(OutboundMessage(inbound.chat, sent_text, reply_to))
            except DeliveryError as exc:
                delivered = exc.sent_ids
                bound.error("delivery failed", error=str(exc), permanent=exc.permanent,
                            chunks_delivered=len(delivered))
            except Exception as exc:  # a send failure must not lose the stored reply
                bound.error("delivery failed", error=f"{type(exc).__name__}: {exc}")
            await self._store.mark_delivered(reply.id, inbound.chat, delivered)

        triage = context.triage
        bound.info(
            "turn",
            channel=inbound.chat.provider,
            send_ms=round((time.perf_counter() - send_started) * 1000, 1),
            request_id=request.id,
            reply_id=reply.id,
            context_messages=len(context.entries),
            scheduled_block=len(context.scheduled),
            reply_to=context.reply_to.id if context.reply_to else None,
            history_limit=context.history_limit,
            context_tokens=context.token_estimate,
            trimmed=len(context.trimmed),
            recalled=len(context.recalled),
            compaction=context.compaction_id,
            triage=triage.outcome,
            triage_candidates=triage.candidates,
            triage_selected=triage.selected,
            triage_ms=round(triage.latency_ms, 1),
            triage_tokens_in=triage.input_tokens,
            triage_tokens_out=triage.output_tokens,
            tokens_in=completion.input_tokens if completion else 0,
            tokens_out=completion.output_tokens if completion else 0,
            attempts=completion.attempts if completion else None,
            context_ms=round(context_ms, 1),
            model_ms=round(model_ms, 1),
            total_ms=round((time.perf_counter() - started) * 1000, 1),
            delivered=len(delivered),
            error=error,
        )
        # After the reply, still holding the session's turn: the user never waits for it, and
        # the session's next turn (queued behind) already sees the summary.
        if context.status == "ok":
            await self.compactor.maybe_compact(str(key))
