"""One turn: context, model reply (or a short fallback), store, deliver, snapshot, one log line."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping

import structlog

from bot.brain import Brain, Completion, ReplyRequest
from bot.channel import Channel
from bot.config import Config
from bot.context_builder import ContextBuilder
from bot.errors import DeliveryError, ModelError
from bot.messages import InboundMessage, OutboundMessage, StoredMessage
from bot.prompt import conversation_turns, stable_system_prompt, turn_system_prompt
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
        # Soul and memory files are read once per start, not once per turn.
        self._system_stable = stable_system_prompt(config)

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
            context = await self._context.build(key, request, inbound.chat)
            context_ms = (time.perf_counter() - started) * 1000
            call = ReplyRequest(
                system_stable=self._system_stable,
                system_turn=turn_system_prompt(self._config, key, time.time()),
                messages=conversation_turns(context, request, group=not key.is_direct),
                deadline=time.monotonic() + self._config.anthropic.timeout,
            )
            model_started = time.perf_counter()
            try:
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
        if channel is not None:
            reply_to = inbound.provider_message_id if not key.is_direct else None
            try:
                delivered = await channel.send(OutboundMessage(inbound.chat, text, reply_to))
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
            request_id=request.id,
            reply_id=reply.id,
            context_messages=len(context.entries),
            scheduled_block=len(context.scheduled),
            reply_to=context.reply_to.id if context.reply_to else None,
            history_limit=context.history_limit,
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
