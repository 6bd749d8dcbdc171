"""One turn: context, model reply (or a short fallback), store with its outbox row, snapshot,
deliver, one log line."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from zoneinfo import ZoneInfo

import structlog

from bot.brain import Brain, Completion, ReplyRequest, TextSink
from bot.channel import Channel
from bot.compaction import NOTICE, Compactor
from bot.config import Config
from bot.config.provider_check import reply_timeout
from bot.context import REPLY_CALL, Context
from bot.context_builder import ContextBuilder
from bot.embedding import Embedder
from bot.errors import AlreadyAnsweredError, DeliveryError, MissingApiKeyError, ModelError
from bot.media import MAX_INLINE_BYTES
from bot.messages import AGENT_PROVIDER, InboundMessage, OutboundMessage, StoredMessage
from bot.misconfiguration import Misconfigurations
from bot.outbox import Outbox
from bot.preview import finish_preview, open_preview, typing_until, withdraw_preview
from bot.prompt import PromptFiles, conversation_turns, media_hashes, system_parts, turn_system_prompt
from bot.replay_settings import selection_settings
from bot.semantic_recall import SemanticRecall
from bot.session_lease import lease_retaken
from bot.store import Store, delivery_key
from bot.tool_loop import ToolLoop
from bot.tools.toolbox import ToolBox
from bot.turn_tools import TurnTools, partial_reply
from bot.usage import record_usage

log = structlog.get_logger("switchboard.turn")

# What the user gets when the model failed in a way that may pass (an outage, a timeout); a
# misconfiguration (a refused key, an unknown model, no credit) says so instead (`Misconfiguration.reply`).
FALLBACK_REPLY = "I couldn't reach the model, try again in a moment."
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
        self._config = config
        self._store = store
        self._brain = brain
        self._channels = channels
        self._misconfigured = misconfigured or Misconfigurations(channels)
        self._outbox = outbox or Outbox(store, channels)
        semantic = SemanticRecall(store, embedder) if embedder is not None else None
        self._context = ContextBuilder(config, store, brain, semantic=semantic)
        self.compactor = Compactor(config, store, brain, self._context.budget)
        # Soul and memory files are cached and read again only when they change on disk.
        self._prompt_files = PromptFiles(config)
        self._files = store.kept_files()
        self._tools = TurnTools(config, store, brain, tools)

    async def __call__(self, request: StoredMessage, inbound: InboundMessage) -> None:
        started = time.perf_counter()
        key = inbound.session_key
        bound = log.bind(session_key=str(key))
        channel = self._channels.get(inbound.chat.provider)
        # Groups quote the message answered; between agents the reply says which message it
        # answers, so the agent channel knows its hop and who waits for it.
        quotes = not key.is_direct or key.provider == AGENT_PROVIDER
        reply_to = inbound.provider_message_id if quotes else None
        # The reply shown while it is written, where the channel can (None: sent when complete).
        preview = await open_preview(channel, inbound.chat, reply_to, self._store, request.id)
        # "typing…" from the start (triage is model work the user waits for too) to the first text.
        typing = (typing_until(channel.typing(inbound.chat), preview) if channel is not None
                  else contextlib.nullcontext())
        completion: Completion | None = None
        error: str | None = None
        apology = FALLBACK_REPLY  # the reply when the model gave none
        call: ReplyRequest | None = None
        loop: ToolLoop | None = None
        parts: list[tuple[str, int]] = []  # the per-turn system prompt's parts, for the snapshot
        model = await self._session_model(str(key))
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
                    files = await self._read_files(media_hashes(context, request))
                    # The asker's own timezone, read once for the tools and the prompt.
                    zone = await self._tools.user_zone(inbound)
                    loop = await self._tools.loop(inbound, request, zone)
                    where = turn_system_prompt(self._config, key, time.time(), inbound.sender_name)
                    personal = await self._tools.notes(inbound, zone)
                    parts = [("where and when (this chat, the time)", len(where)),
                             *((label, len(text)) for label, text in personal)]
                    if loop is not None:
                        parts.append((f"tool definitions ({loop.offered} offered)",
                                      loop.definitions_chars))
                    call = ReplyRequest(
                        system_stable=self._prompt_files.stable_prompt(),
                        system_turn=where + "".join("\n\n" + text for _, text in personal),
                        messages=conversation_turns(context, request, group=not key.is_direct,
                                                    zone=ZoneInfo(self._config.agent.timezone),
                                                    files=files),
                        deadline=time.monotonic() + reply_timeout(self._config),
                        model=model,
                    )
                    completion = await self._reply_with_files(
                        call, bool(files), lambda: conversation_turns(
                            context, request, group=not key.is_direct,
                            zone=ZoneInfo(self._config.agent.timezone)),
                        on_text=preview.update if preview is not None else None, loop=loop,
                    )
                    text = completion.text.strip() or "(no reply)"
            except ModelError as exc:
                error = str(exc)
                if exc.problem is not None:  # "not set up", not "try again"; the admin is told the fix
                    apology = exc.problem.reply()
                    await self._misconfigured.report(exc.problem)
                # On the console the admin is the user: say what to set. Chats get the apology
                # (no configuration detail reaches a chat).
                local = inbound.chat.provider == "console"
                text = error if local and isinstance(exc, MissingApiKeyError) else apology
            except Exception as exc:  # a bug or surprise in the provider path still gets a reply
                bound.exception("model call crashed")
                error = f"{type(exc).__name__}: {exc}"
                text = FALLBACK_REPLY
        model_ms = (time.perf_counter() - model_started) * 1000
        fallback = completion is None and text == apology
        facts = self._reply_facts(call, completion, error, fallback=fallback, model_ms=model_ms,
                                  turn_parts=parts)
        facts["model"] = completion.model if completion else model
        facts["provider"] = completion.provider if completion else None
        # Which message this answers, as its channel named it (a message between agents carries its
        # hop there: "h2-…").
        facts["request"] = {"provider_message_id": request.provider_message_id,
                            "reply_to_id": request.reply_to_id, "sender_id": request.sender_id}
        outcome = loop.outcome if loop is not None else None
        if outcome is not None:
            facts["tools"] = outcome.snapshot()
        # Tools acted but the model never answered: the user (and the next turn) learn what was done.
        partial = partial_reply(outcome) if completion is None and context.status == "ok" else None
        text = partial or text
        facts["fallback"] = fallback and partial is None
        await self._record_usage(str(key), inbound.sender_id, completion, context)

        if not await lease_retaken():
            # This turn stalled past its lease and another instance holds the chat now: it answers
            # the request (streaming into the same preview message), so this reply touches nothing.
            if preview is not None:
                preview.abandon()
            bound.warning("session taken over by another instance while this turn stalled; "
                          "its reply dropped, the request left to that instance", request_id=request.id)
            return
        # Told once, under the first reply after the session was compacted (the note is not
        # stored as conversation: it is about the chat, not part of it).
        notice = await self._compaction_notice(str(key))
        full_text = f"{text}\n\n{NOTICE}" if notice else text
        # A preview message becomes the reply's first chunk; a half answer in it (the model failed
        # mid-stream) is replaced by whatever is sent instead.
        preview_id = (await finish_preview(preview, full_text, request.id, self._store)
                      if preview is not None else None)
        outbound = OutboundMessage(inbound.chat, full_text, reply_to, preview_id=preview_id)
        send_started = time.perf_counter()
        windows: list[float] = []
        # A reply the model did not write (the apology, a missing-key notice) is delivered and
        # kept, but never sent back to the model as something the agent said.
        try:
            reply = await self._store_reply(
                str(key), text, request, outbound, fallback=completion is None and partial is None,
                actions=outcome.actions if outcome and (completion or partial) else ())
        except AlreadyAnsweredError:
            # Another instance took the chat over (this one stalled past its lease) and answered:
            # one answer reaches the user, not two; a preview message this reply was shown in goes
            # too, unless that instance's reply took it over.
            bound.warning("request answered by another instance meanwhile; this reply dropped",
                          request_id=request.id)
            if preview is not None and preview_id is not None:
                await withdraw_preview(preview, inbound.chat, preview_id, self._store)
            return
        if reply is None:
            # The model answered but the database would not take it: the user still gets the
            # answer (a restart may answer the request again, which beats silence).
            delivered = await self._deliver_unstored(outbound)
        else:
            if loop is not None:
                await self._attach_tool_calls(request.id, reply.id)
            await self._snapshot(str(key), request, reply, context, facts)
            delivered = await self._outbox.deliver(
                reply.id, dataclasses.replace(outbound, delivery_key=delivery_key(reply.id)), windows
            )

        triage = context.triage
        bound.info(
            "turn",
            channel=inbound.chat.provider,
            model=completion.model if completion else model,
            provider=completion.provider if completion else None,
            send_ms=round((time.perf_counter() - send_started) * 1000, 1),
            # The longest of its chunks' send windows (platform answered → id committed).
            record_ms=round(max(windows), 2) if windows else None,
            request_id=request.id,
            reply_id=reply.id if reply is not None else None,
            context_messages=len(context.entries),
            scheduled_block=len(context.scheduled),
            reply_to=context.reply_to.id if context.reply_to else None,
            history_limit=context.history_limit,
            context_tokens=context.token_estimate,
            trimmed=len(context.trimmed),
            candidates=len(context.candidates),
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
            tool_rounds=outcome.rounds if outcome else 0,
            tool_calls=len(outcome.calls) if outcome else 0,
            actions=outcome.actions if outcome else [],
        )
        # After the reply, still holding the session's turn: the user never waits for it, and
        # the session's next turn (queued behind) already sees the summary.
        if context.status == "ok" and reply is not None:
            await self.compactor.maybe_compact(str(key))

    async def _session_model(self, key: str) -> str:
        """The model this session chose with /model (if still allowed), else the configured one."""
        allowed = self._config.anthropic.models
        try:
            chosen = await self._store.session_model(key)
        except Exception as exc:  # the default model beats no reply
            log.warning("session model unreadable", session_key=key, error=f"{type(exc).__name__}: {exc}")
            chosen = None
        # The main role's model ("provider:model" when the brain routes by role).
        return allowed[chosen] if chosen in allowed else self._brain.model_for("main")

    async def _record_usage(
        self, key: str, user_id: str, completion: Completion | None, context: Context
    ) -> None:
        """The triage's tokens and the reply's, in the order they were spent, for /usage."""
        triage = context.triage
        if triage.input_tokens or triage.output_tokens:
            model = self._brain.model_for(self._config.conversation.selection_model)
            if self._config.uses_providers():  # "local:qwen3" → the model id, as replies record it
                model = model.partition(":")[2] or model
            await record_usage(self._store, key, user_id, "triage",
                               Completion("", model, triage.input_tokens, triage.output_tokens))
        await record_usage(self._store, key, user_id, "reply", completion)

    async def _reply_with_files(
        self, call: ReplyRequest, with_files: bool, placeholders_only: Callable[[], list[dict[str, Any]]],
        *, on_text: TextSink | None = None, loop: ToolLoop | None = None,
    ) -> Completion:
        """The model's reply (through the tool loop when tools are offered); when the API refuses
        the request for what a file became (a damaged picture, a PDF it cannot read), asked again
        with the placeholders rather than failing every turn while the file is recent (tool rounds
        already run are sent again from the store, not run again)."""
        try:
            return await self._ask(call, on_text, loop)
        except ModelError as exc:
            if not with_files or exc.retryable or exc.problem or isinstance(exc, MissingApiKeyError):
                raise
            log.warning("the model refused the files; answering from their placeholders", error=str(exc))
            return await self._ask(dataclasses.replace(call, messages=placeholders_only()), on_text, loop)

    async def _ask(self, call: ReplyRequest, on_text: TextSink | None, loop: ToolLoop | None) -> Completion:
        if loop is None:
            return await self._brain.reply(call, on_text=on_text)
        return (await loop.run(call, on_text)).completion

    async def _attach_tool_calls(self, request_id: int, reply_id: int) -> None:
        try:
            await self._store.attach_tool_calls(request_id, reply_id)
        except Exception as exc:  # the calls stay with their request; the reply still goes out
            log.error("tool calls not linked to their reply", request_id=request_id,
                      error=f"{type(exc).__name__}: {exc}")

    async def _read_files(self, hashes: list[str]) -> dict[str, bytes]:
        """The kept files this turn sends in full, newest first up to MAX_INLINE_BYTES; one gone
        from disk, or beyond that total, shows as its placeholder."""
        files: dict[str, bytes] = {}
        total = 0
        for sha256 in hashes:
            data = await self._files.read(sha256)
            if data is None:
                log.warning("a kept file is missing; the model sees its placeholder", sha256=sha256)
            elif total + len(data) <= MAX_INLINE_BYTES:
                files[sha256] = data
                total += len(data)
        return files

    async def _compaction_notice(self, key: str) -> bool:
        try:
            return await self._store.take_compaction_notice(key) is not None
        except Exception as exc:  # a note about the chat is not worth failing the reply for
            log.warning("compaction notice unreadable", session_key=key, error=f"{type(exc).__name__}: {exc}")
            return False

    async def _store_reply(
        self, key: str, text: str, request: StoredMessage, outbound: OutboundMessage, *, fallback: bool,
        actions: Sequence[str] = (),
    ) -> StoredMessage | None:
        """Store the reply, clearing the requests it answers, with its outbox row; None when the
        database refused it every time (a locked or full disk clears in moments, or not at all)."""
        for attempt in range(1, STORE_ATTEMPTS + 1):
            try:
                return await self._store.append_reply(
                    key, text, request_id=request.id, deliver=outbound, fallback=fallback, actions=actions,
                )
            except AlreadyAnsweredError:
                raise
            except Exception as exc:
                if attempt == STORE_ATTEMPTS:
                    log.error("reply not stored; delivering it anyway", session_key=key,
                              request_id=request.id, error=f"{type(exc).__name__}: {exc}")
                    return None
                await asyncio.sleep(STORE_RETRY_DELAY * attempt)
        return None

    def _reply_facts(
        self, call: ReplyRequest | None, completion: Completion | None, error: str | None, *,
        fallback: bool, model_ms: float, turn_parts: Sequence[tuple[str, int]] = (),
    ) -> dict[str, Any]:
        """What the reply call did, recorded beside the context so an admin can see why a turn
        said what it said. Not part of selection: replay leaves it out of the comparison."""
        return {
            "called": call is not None,
            "model": completion.model if completion else self._config.anthropic.model,
            "system_prompt_chars": len(call.system_stable) + len(call.system_turn) if call else None,
            "prompt_files": self._prompt_files.included() if call else [],
            # Every part of the system prompt with its size, the prompt files' apart (above).
            "system_parts": system_parts(len(call.system_stable), self._prompt_files.included(),
                                         turn_parts) if call else [],
            "tokens_in": completion.input_tokens if completion else 0,
            "tokens_out": completion.output_tokens if completion else 0,
            "cache_write_tokens": completion.cache_write_tokens if completion else 0,
            "cache_read_tokens": completion.cache_read_tokens if completion else 0,
            "attempts": completion.attempts if completion else None,
            "stop_reason": completion.stop_reason if completion else None,
            "model_ms": round(model_ms, 1),
            "error": error,
            "fallback": fallback,
        }

    async def _snapshot(
        self, key: str, request: StoredMessage, reply: StoredMessage, context: Context,
        facts: dict[str, Any],
    ) -> None:
        try:
            await self._store.record_snapshot(
                key, request.id, reply.id,
                {**context.snapshot(), REPLY_CALL: facts, "settings": selection_settings(self._config)},
                context.input_hash,
            )
        except Exception as exc:  # the reply matters more than its explanation
            log.error("context snapshot not stored", session_key=key, request_id=request.id,
                      error=f"{type(exc).__name__}: {exc}")

    async def _deliver_unstored(self, outbound: OutboundMessage) -> list[str]:
        channel = self._channels.get(outbound.chat.provider)
        if channel is None:
            return []
        try:
            return await channel.send(outbound)
        except DeliveryError as exc:
            log.error("delivery failed", error=str(exc), permanent=exc.permanent)
            return exc.sent_ids
        except Exception as exc:
            log.error("delivery failed", error=f"{type(exc).__name__}: {exc}")
            return []
