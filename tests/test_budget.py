"""Token budget: estimates, the model's window, trimming oldest-first, and a turn that must trim."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.config import Config
from bot.context.builder import ContextBuilder
from bot.core.messages import ChatRef, StoredMessage
from bot.models.brain import AnthropicBrain
from bot.ranking.budget import (
    Budget,
    context_window,
    cost,
    estimate_tokens,
    fit_budget,
    message_cost,
)
from bot.ranking.stages import ContextEntry
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.fake_channel import FakeChannel
from tests.harness import config_data, daemon_with, reply_requests, say, unstamped

MakeConfig = Callable[[dict[str, Any]], Config]

# 40 characters: 10 estimated tokens, 12 with the 1.2 safety margin.
FORTY = "x" * 40
COST_40 = 12


def _message(message_id: int, text: str = FORTY, role: str = "user") -> StoredMessage:
    return StoredMessage(
        id=message_id, session_key="agent:main:fake:direct:42", role=role,  # type: ignore[arg-type]
        origin="interactive", text=text, created_at=1_700_000_000.0 + message_id,
        token_estimate=estimate_tokens(text),
    )


def _entries(*ids: int) -> list[ContextEntry]:
    return [ContextEntry(_message(i), "all") for i in ids]


def _ids(entries: list[ContextEntry]) -> list[int]:
    return [entry.message.id for entry in entries]


# -- estimates --------------------------------------------------------------------------------


def test_estimates_are_four_characters_a_token_with_a_safety_margin() -> None:
    """A message counts a token per four characters, plus 20 % so the real tokenizer cannot overflow."""
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert cost(FORTY) == COST_40 == math.ceil(10 * 1.2)
    assert message_cost(_message(1)) == COST_40


def test_a_cut_reply_costs_only_what_is_left_of_it() -> None:
    """A reply shortened by context_truncation counts its shortened text, never more than it stored."""
    long = _message(1, "y" * 400, role="assistant")
    assert message_cost(long) == math.ceil(100 * 1.2)
    cut = replace(long, text="y" * 40)
    assert message_cost(cut) == COST_40


# -- the model's window and the history share ----------------------------------------------------


@pytest.mark.parametrize(
    ("model", "override", "expected"),
    [
        ("claude-sonnet-9", 0, 200_000),
        ("gpt-4o-mini", 0, 128_000),
        ("gpt-4.1-nano", 0, 1_047_576),
        ("llama3.1:8b", 0, 128_000),  # the longer prefix wins over "llama3"
        ("llama3:8b", 0, 8_192),
        ("made-up-model", 0, 200_000),
        ("gpt-4o", 5_000, 5_000),  # the configured override beats the table
        ("made-up-model", 64_000, 64_000),
    ],
)
def test_context_window_is_override_then_known_model_then_default(
    model: str, override: int, expected: int
) -> None:
    """The window is `[conversation].context_window` when set, else the known model's, else 200 000."""
    assert context_window(model, override) == expected


def test_the_builder_takes_its_window_from_config_and_model(make_config: MakeConfig) -> None:
    """The budget a turn uses follows the configured model and the context_window override."""
    for conversation, model, window in [
        ({}, "gpt-4o", 128_000),
        ({"context_window": 9_000}, "gpt-4o", 9_000),
        ({}, "some-new-model", 200_000),
    ]:
        config = make_config({"anthropic": {"model": model}, "conversation": conversation})
        builder = ContextBuilder(config, None, AnthropicBrain(config.anthropic, None))  # type: ignore[arg-type]
        assert builder.budget.window == window
        assert builder.budget.reserve == 20_000
        assert builder.budget.history_share == 0.5


@pytest.mark.parametrize(
    ("window", "reserve", "share", "expected"),
    [
        (200_000, 20_000, 0.5, 100_000),  # the share binds
        (30_000, 20_000, 0.5, 10_000),  # the reserve binds: history never eats into it
        (200_000, 20_000, 1.0, 180_000),
        (10_000, 20_000, 0.5, 0),  # a reserve larger than the window leaves no history
    ],
)
def test_history_tokens_is_the_share_but_never_the_reserve(
    window: int, reserve: int, share: float, expected: int
) -> None:
    """History gets `history_share` of the window, capped so the reserve stays free."""
    assert Budget(window, reserve, share).history_tokens == expected


# -- fitting ------------------------------------------------------------------------------------


def test_a_context_that_fits_exactly_keeps_everything() -> None:
    """When history plus the fixed part is exactly the budget, nothing is trimmed."""
    fitted = fit_budget(_entries(1, 2, 3, 4, 5), limit=5 * COST_40 + 7, fixed=7)
    assert _ids(fitted.kept) == [1, 2, 3, 4, 5]
    assert fitted.trimmed == []
    assert fitted.used == fitted.limit
    assert not fitted.over


def test_one_token_over_drops_exactly_the_oldest() -> None:
    """One token over the budget drops the single oldest message and nothing else."""
    fitted = fit_budget(_entries(1, 2, 3, 4, 5), limit=5 * COST_40 + 7 - 1, fixed=7)
    assert _ids(fitted.kept) == [2, 3, 4, 5]
    assert fitted.trimmed == [1]
    assert fitted.used == 4 * COST_40 + 7
    assert not fitted.over


def test_protected_messages_survive_even_when_older() -> None:
    """A protected message (the reply-to target) stays even when it is the oldest; the next oldest go."""
    fitted = fit_budget(_entries(1, 2, 3, 4, 5), limit=3 * COST_40, fixed=0, protected={1})
    assert _ids(fitted.kept) == [1, 4, 5]
    assert fitted.trimmed == [2, 3]
    assert not fitted.over


def test_trimming_is_deterministic_and_keeps_chronological_order() -> None:
    """The same input always trims the same messages and keeps the rest in their order."""
    entries = [ContextEntry(_message(i, "z" * (8 * i)), "all") for i in (3, 8, 11, 20, 21, 40)]
    runs = [fit_budget(entries, limit=100, fixed=10, protected={8}) for _ in range(3)]
    assert all(run == runs[0] for run in runs)
    kept = _ids(runs[0].kept)
    assert kept == sorted(kept)
    assert runs[0].trimmed == sorted(runs[0].trimmed)
    # Trimmed ones are always older than every unprotected kept one: oldest first.
    assert all(t < k for t in runs[0].trimmed for k in kept if k != 8)


def test_over_when_only_protected_remain() -> None:
    """If the protected messages and fixed part alone exceed the budget, all else goes and it says so."""
    fitted = fit_budget(_entries(1, 2, 3), limit=COST_40, fixed=5, protected={2})
    assert _ids(fitted.kept) == [2]
    assert fitted.trimmed == [1, 3]
    assert fitted.used == COST_40 + 5
    assert fitted.over


def test_an_empty_history_fits_when_the_fixed_part_does() -> None:
    """With no history, the result is empty and over only when the request alone is too big."""
    assert not fit_budget([], limit=10, fixed=10).over
    assert fit_budget([], limit=10, fixed=11).over


# -- the budget inside a built context ----------------------------------------------------------


async def test_the_latest_summary_is_never_trimmed(
    make_config: MakeConfig, store: Store
) -> None:
    """With a compaction summary and a tiny budget, history is trimmed but the summary stays in."""
    config = make_config({"conversation": {
        "use_selection": False, "context_window": 200, "reserve_tokens": 0, "history_share": 0.5,
    }})
    channel = FakeChannel()
    key = channel.key()
    stored = []
    for n in range(6):
        inbound = await store.append_inbound(channel.message(f"message {n} " + "m" * 40))
        assert inbound is not None
        stored.append(inbound)
    summary = "s" * 200  # 50 tokens, 60 with the margin: more than the whole budget of 100 with history
    await store.record_compaction(
        str(key), summary=summary, last_summarised_id=stored[1].id,
        first_kept_message_id=stored[2].id, tokens_before=100, tokens_after=60, model="m",
        replaces=None,
    )
    request = await store.append_inbound(channel.message("and now?"))
    assert request is not None
    brain = AnthropicBrain(config.anthropic, None)
    context = await ContextBuilder(config, store, brain).build(key, request, ChatRef("fake", "42"))
    assert context.summary == summary
    assert context.compaction_id is not None
    assert context.trimmed and context.trimmed == sorted(context.trimmed)
    assert context.trimmed[0] == stored[2].id  # summarised messages are not even read
    assert all(entry.message.id > context.trimmed[-1] for entry in context.entries)
    assert context.token_estimate <= context.token_budget == 100


# -- end to end: a small window forces trimming -----------------------------------------------------


async def test_a_small_window_trims_the_oldest_but_keeps_the_request_and_reply_target(
    api: AnthropicStandIn, make_config: MakeConfig, tmp_path: Path
) -> None:
    """With a small context_window the model is sent only the newest history that fits, plus the message
    replied to and the current message, and the turn's snapshot lists what was trimmed for budget."""
    channel = FakeChannel()
    config = make_config(config_data(
        api,
        conversation={"use_selection": False, "context_window": 300, "reserve_tokens": 0,
                      "history_share": 0.5},
        compaction={"enabled": False},
    ))
    key = str(channel.key())
    seeded: list[StoredMessage] = []
    async with Store.open(tmp_path / "switchboard.db") as view:
        for n in range(1, 7):
            # 80 characters each: 20 estimated tokens, 24 with the margin; 12 of them cost 288.
            question = f"question {n} about topic {n} ".ljust(80, ".")
            inbound = await view.append_inbound(channel.message(question, message_id=f"seed-{n}"))
            assert inbound is not None
            seeded.append(inbound)
            seeded.append(await view.append_reply(key, f"answer {n} about topic {n} ".ljust(80, "."),
                                                   request_id=inbound.id))

        # The request (18 characters, cost 6) replies to the oldest question. The history budget is
        # 150 (half of 300): 6 + 288 is 144 over, so the six oldest after the protected one go.
        async with daemon_with(config, channel) as daemon:
            await say(daemon, channel, "and the first one?", message_id="req-1", reply_to="seed-1")

        (request,) = reply_requests(api)
        first, kept = seeded[0], seeded[7:]
        trimmed = seeded[1:7]
        when = datetime.fromtimestamp(first.created_at, UTC).strftime("%Y-%m-%d %H:%M")
        assert [unstamped(m["content"]) for m in request.messages] == [
            first.text, kept[0].text, kept[1].text, kept[2].text, kept[3].text, kept[4].text,
            f"[replying to the message of {when}: «{' '.join(first.text.split())}»]\nand the first one?",
        ]
        sent = "\n".join(str(m["content"]) for m in request.messages)
        assert not any(m.text in sent for m in trimmed)
        assert channel.sent[-1].text == "re: and the first one?"

        (record,) = await view.snapshots(key)
        snap = record.snapshot
        assert snap["trimmed"] == [{"id": m.id, "reason": "budget"} for m in trimmed]
        assert snap["reply_to"] == first.id
        assert [e["id"] for e in snap["entries"]] == [first.id, *(m.id for m in kept)]
        assert snap["tokens"] == {"estimate": 150, "budget": 150}
        assert snap["counts"]["trimmed"] == 6
