"""The turn record: the snapshot's reply facts and the log line rendered from one value."""

from __future__ import annotations

from bot.ranking.stages import REPLY_CALL, TriageReport
from bot.turn.answer import FALLBACK_REPLY, Answer, ToolUse
from bot.turn.compose import Composed
from tests.turn_fakes import FakeLoop, completion, composed, context, record

LOG_LINE = ["channel", "model", "provider", "send_ms", "record_ms", "request_id", "reply_id",
            "context_messages", "scheduled_block", "reply_to", "history_limit", "context_tokens", "trimmed",
            "candidates", "recalled", "compaction", "triage", "triage_candidates", "triage_selected",
            "triage_ms", "triage_tokens_in", "triage_tokens_out", "tokens_in", "tokens_out", "attempts",
            "context_ms", "model_ms", "total_ms", "delivered", "error", "tool_rounds", "tool_calls",
            "actions"]


def _answered() -> Answer:
    answer = completion("hi", cache_read_tokens=100, stop_reason="end_turn", provider="anthropic")
    return Answer("hi", answer, written=True)


def test_the_reply_facts_of_an_answered_turn() -> None:
    """The call's size and parts, the reply's tokens, model and provider, and the request answered."""
    facts = record(_answered()).reply_facts()

    assert list(facts) == ["called", "model", "system_prompt_chars", "prompt_files", "system_parts",
                           "tokens_in", "tokens_out", "cache_write_tokens", "cache_read_tokens", "attempts",
                           "stop_reason", "model_ms", "error", "fallback", "provider", "request"]
    assert facts["called"] and facts["model"] == "claude-test" and facts["provider"] == "anthropic"
    assert facts["system_prompt_chars"] == len("You are Switchboard.This conversation is a private chat.")
    assert facts["prompt_files"] == [{"name": "soul", "file": "/srv/SOUL.md", "chars": 12, "left_out": False}]
    assert [part["part"] for part in facts["system_parts"]] == [
        "the agent's instructions ([agent], prompt files' frame)", "prompt file soul",
        "where and when (this chat, the time)"]
    assert (facts["tokens_in"], facts["tokens_out"], facts["cache_read_tokens"]) == (120, 8, 100)
    assert (facts["attempts"], facts["stop_reason"], facts["model_ms"]) == (1, "end_turn", 40.0)
    assert facts["request"] == {"provider_message_id": "m7", "reply_to_id": None, "sender_id": "42"}


def test_the_reply_facts_of_a_turn_without_a_call() -> None:
    """No call: nothing of a prompt, no tokens, the session's model, the error and the fallback."""
    failed = Answer(FALLBACK_REPLY, error="context_build_error: boom", fallback=True)
    facts = record(failed, composed(with_call=False, error="context_build_error: boom")).reply_facts()

    assert not facts["called"] and facts["system_prompt_chars"] is None
    assert facts["prompt_files"] == [] and facts["system_parts"] == []
    assert (facts["model"], facts["provider"]) == ("claude-test", None)
    assert (facts["tokens_in"], facts["attempts"]) == (0, None)
    assert (facts["error"], facts["fallback"]) == ("context_build_error: boom", True)


def test_what_the_tools_did_is_in_the_facts_and_the_log_line() -> None:
    """A turn with tools records their snapshot; its log line counts rounds and calls and lists actions."""
    loop = FakeLoop(completion())
    tools = ToolUse({"offered": ["get_time"], "rounds": 1}, 1, 1, ("set the timezone",))
    turn = record(Answer("ok", completion(), written=True, tools=tools), composed(loop=loop))

    assert turn.reply_facts()["tools"] == {"offered": ["get_time"], "rounds": 1}
    line = turn.log_fields(reply_id=9, delivered=["a"], send_ms=1.0, record_ms=None, total_ms=50.0)
    assert (line["tool_rounds"], line["tool_calls"], line["actions"]) == (1, 1, ["set the timezone"])
    assert turn.tools_offered


def test_the_snapshot_is_the_context_the_facts_and_the_settings() -> None:
    """The stored snapshot: the context's own record, the reply call under REPLY_CALL, the settings."""
    turn = record(_answered())

    snapshot = turn.snapshot({"conversation": {"lookback_count": 25}})

    assert {key: snapshot[key] for key in turn.context.snapshot()} == turn.context.snapshot()
    assert snapshot[REPLY_CALL] == turn.reply_facts()
    assert snapshot["settings"] == {"conversation": {"lookback_count": 25}}


def test_the_log_line_shows_the_turn_in_its_fields() -> None:
    """Every field of the turn line, in order, with the same model, tokens and error as the snapshot."""
    triage = TriageReport("selected", candidates=6, selected=2, latency_ms=12.345, input_tokens=300,
                          output_tokens=9)
    with_triage = Composed("k", context("a", "b", triage=triage), "claude-test", context_ms=2.26)
    turn = record(_answered(), with_triage, model_ms=40.04)

    line = turn.log_fields(reply_id=9, delivered=["a", "b"], send_ms=3.14159, record_ms=0.123, total_ms=61.06)

    assert list(line) == LOG_LINE
    facts = turn.reply_facts()
    assert all(line[name] == facts[name] for name in ("model", "provider", "tokens_in", "attempts", "error"))
    assert (line["send_ms"], line["record_ms"], line["context_ms"], line["model_ms"], line["total_ms"]) == (
        3.1, 0.12, 2.3, 40.0, 61.1)
    assert (line["triage"], line["triage_ms"], line["triage_tokens_in"]) == ("selected", 12.3, 300)
    assert (line["context_messages"], line["delivered"], line["reply_id"]) == (2, 2, 9)
    assert line["channel"] == "fake"
