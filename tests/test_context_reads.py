"""A context build's history and lexical recall read together: the same answers as the two reads
apart, on both backends, one hand-off to SQLite's thread, and a build that reads them apart (with
the same context) when the joint read fails."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from bot.config import Config, parse_config
from bot.context.builder import ContextBuilder
from bot.context.reads import Pin, read_history, read_with_recall
from bot.core.messages import ChatRef, InboundMessage, StoredMessage
from bot.core.session_key import build
from bot.models.brain import AnthropicBrain
from bot.store import Store
from tests.sql import hand_offs, traced

DM = build("main", "telegram", "direct", 42)
CHAT = ChatRef("telegram", "42")
FAR = 2**62
FACT = "the lighthouse keeper painted the stairs blue"
CHATTER = ["the train was late again", "made lasagne for dinner", "the heating is broken",
           "watched a film about volcanoes", "bought new curtains", "the printer jammed twice"]


def inbound(text: str) -> InboundMessage:
    return InboundMessage(session_key=DM, chat=CHAT, sender_id="42", sender_name="Ada", text=text)


async def conversation(store: Store, exchanges: int = 30) -> tuple[list[StoredMessage], StoredMessage]:
    """The fact's exchange, `exchanges` of chatter, a briefing, a compaction, then the request:
    every part the joint read returns is there. Gives the fact's exchange and the request."""
    first = await store.append_inbound(inbound(FACT))
    assert first is not None
    fact = [first, await store.append_reply(str(DM), "noted: the stairs are blue")]
    for n in range(exchanges):
        asked = await store.append_inbound(inbound(f"{CHATTER[n % len(CHATTER)]} ({n})"))
        assert asked is not None
        await store.append_reply(str(DM), f"noted ({n})")
    await store.append_reply(str(DM), "morning briefing", origin="scheduled", job_id="b")
    await store.record_compaction(str(DM), summary="chatter", last_summarised_id=fact[1].id,
                                  first_kept_message_id=fact[1].id + 1, tokens_before=10,
                                  tokens_after=2, model="m", replaces=None)
    request = await store.append_inbound(inbound("what colour did the keeper paint the stairs?"))
    assert request is not None
    return fact, request


async def apart(store: Store, request: StoredMessage, text: str, limit: int) -> tuple[Any, Any]:
    reads = await store.context_reads(str(DM), before_id=FAR, limit=21, request_id=request.id,
                                      scheduled=3, compaction=True)
    return reads, await store.lexical_turns(str(DM), text, before_id=request.id, limit=limit)


async def together(store: Store, request: StoredMessage, text: str, limit: int) -> tuple[Any, Any]:
    return await store.context_and_recall(
        str(DM), before_id=FAR, limit=21, request_id=request.id, scheduled=3, compaction=True,
        text=text, recall_before=request.id, recall_limit=limit)


async def test_the_joint_read_answers_as_the_two_reads(store: Store) -> None:
    """History, compaction, scheduled block, recall's matches and their turns: as `context_reads`
    and `lexical_turns` give them; nothing found for a text without words or a limit of 0."""
    fact, request = await conversation(store)
    joint = await together(store, request, request.text, 8)
    assert joint == await apart(store, request, request.text, 8)
    (compaction, block, history, before), (matches, turns) = joint
    assert before in ([], None)  # nothing after the request: no read of what came before it
    assert compaction is not None and [m.text for m in block] == ["morning briefing"]
    assert history[-1].id == request.id and len(history) == 21
    assert matches and matches[0][0] == fact[0].id and turns[fact[0].id] == fact
    for text, limit in (("?!", 8), (request.text, 0)):
        nothing = await together(store, request, text, limit)
        assert nothing == await apart(store, request, text, limit) and nothing[1] == ([], {})


async def test_sqlite_answers_both_in_one_hand_off(tmp_path: Path) -> None:
    """Two statements, one item of SQLite's thread: the event loop waits once, not twice."""
    async with Store.open(tmp_path / "switchboard.db") as store:
        _, request = await conversation(store, exchanges=3)
        async with traced(store) as statements, hand_offs(store) as items:
            await together(store, request, request.text, 8)
        assert len(items) == 1
        assert len([sql for sql in statements if sql.lstrip().upper().startswith(("SELECT", "WITH"))]) == 2
        async with hand_offs(store) as items:
            await apart(store, request, request.text, 8)
        assert len(items) == 2


class StoreAround:
    """The real store, but for the methods a subclass answers itself."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class JointReadFails(StoreAround):
    """A store whose joint read fails (its other methods are the real store's)."""

    async def context_and_recall(self, *args: Any, **kwargs: Any) -> Any:
        raise sqlite3.OperationalError("disk I/O error")


def recall_config(tmp_path: Path) -> Config:
    return parse_config({
        "database": {"path": str(tmp_path / "switchboard.db")},
        "conversation": {"lookback_count": 20, "always_include_recent": 4},
        "semantic": {"enabled": "off"}, "compaction": {"enabled": False},
    }, str(tmp_path / "config.toml"))


async def test_a_failed_joint_read_is_read_apart_into_the_same_context(store: Store, tmp_path: Path) -> None:
    """The build recalls the fact beyond the window through the joint read; when that read fails
    it says so and reads history and recall apart, building the same context, replay's too."""
    fact, request = await conversation(store)
    config = recall_config(tmp_path)
    brain = AnthropicBrain(config.anthropic, None)
    joint = await ContextBuilder(config, store, brain).build(DM, request, CHAT)
    assert fact[0].id in joint.recalled and joint.counts["found_lexical"] >= 1
    assert joint.summary == "chatter" and [m.text for m in joint.scheduled] == ["morning briefing"]
    with capture_logs() as logs:
        failing = ContextBuilder(config, JointReadFails(store), brain)  # type: ignore[arg-type]
        read_apart = await failing.build(DM, request, CHAT)
    assert [log["event"] for log in logs if log["log_level"] == "warning"] == [
        "context and recall not read together; read apart"]
    assert {**read_apart.snapshot(), "built_at": None} == {**joint.snapshot(), "built_at": None}
    pin = Pin(joint.as_of, joint.built_at, joint.compaction_id)
    replayed = await ContextBuilder(config, store, brain).build(DM, request, CHAT, pin=pin)
    replayed_apart = await failing.build(DM, request, CHAT, pin=pin)
    assert replayed.snapshot() == replayed_apart.snapshot() == joint.snapshot()


class ReadsNothingAhead(StoreAround):
    """A store that never reads the history before the request with the rest (as PostgreSQL)."""

    async def context_and_recall(self, *args: Any, **kwargs: Any) -> Any:
        (compaction, block, history, _), found = await self._store.context_and_recall(*args, **kwargs)
        return (compaction, block, history, None), found

    async def context_reads(self, *args: Any, **kwargs: Any) -> Any:
        compaction, block, history, _ = await self._store.context_reads(*args, **kwargs)
        return compaction, block, history, None


async def test_a_request_queued_behind_others_sees_the_same_history_in_one_hand_off(
    tmp_path: Path,
) -> None:
    """Requests stored before the replies to the earlier ones (queued behind them): each one's
    history (the replies stored after it, not the requests) is the one the separate read of what
    came before it gives, and on SQLite it comes with the rest, in one hand-off."""
    conv = recall_config(tmp_path).conversation
    async with Store.open(tmp_path / "switchboard.db") as store:
        _, first = await conversation(store, exchanges=12)
        second, third = [await store.append_inbound(inbound(text)) for text in ("and?", "hello?")]
        assert second is not None and third is not None
        await store.append_reply(str(DM), "the stairs are blue", request_id=first.id)
        for request in (first, second, third):
            read, _ = await store.context_and_recall(
                str(DM), before_id=FAR, limit=conv.lookback_count + 1, request_id=request.id,
                scheduled=3, compaction=True, text="", recall_before=request.id, recall_limit=0)
            assert read[3] == await store.recent_messages(
                str(DM), before_id=request.id, limit=conv.lookback_count + 1)
            async with hand_offs(store) as items:
                seen = await read_history(store, conv, str(DM), request, None, compaction=True)
                (joint, _) = await read_with_recall(store, conv, str(DM), request, None)
            assert len(items) == 2  # one per read, none for what came before the request
            apart = ReadsNothingAhead(store)
            assert seen == joint == await read_history(apart, conv, str(DM), request, None, compaction=True)  # type: ignore[arg-type]
            texts = [m.text for m in seen[2]]
            assert texts[-1] == "the stairs are blue"  # the reply, stored after the request
            assert not {m.text for m in (first, second, third) if m.id >= request.id} & set(texts)
