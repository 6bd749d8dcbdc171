"""Unit tests of the pure context-selection stages and the Context result shape."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from bot.core.messages import Role, StoredMessage
from bot.ranking.stages import (
    Context,
    ContextEntry,
    Explanation,
    TriageReport,
    apply_recency,
    group_turns,
    input_hash,
    limit_history_turns,
    merge_entries,
    split_recent,
    tag,
    truncate_replies,
)

SESSION = "agent:main:fake:direct:42"
T0 = 1_700_000_000.0
HOUR = 3600.0


def msg(
    id: int,
    role: Role = "user",
    text: str | None = None,
    *,
    at: float | None = None,
    tokens: int = 5,
) -> StoredMessage:
    return StoredMessage(
        id=id,
        session_key=SESSION,
        role=role,
        origin="interactive",
        text=text if text is not None else f"{role} message {id}",
        created_at=at if at is not None else T0 + id * 60,
        sender_id="42" if role == "user" else None,
        sender_name="Ada" if role == "user" else None,
        token_estimate=tokens,
    )


def conversation(roles: str, start: int = 1) -> list[StoredMessage]:
    """Messages from a role string: 'u' user, 'a' assistant, ids increasing from `start`."""
    return [msg(start + i, "user" if r == "u" else "assistant") for i, r in enumerate(roles)]


def ids(messages: Sequence[StoredMessage]) -> list[int]:
    return [m.id for m in messages]


# --- limit_history_turns -------------------------------------------------------------------------


def test_history_limit_keeps_newest_user_turns_with_their_replies() -> None:
    """A limit of 2 keeps the last two user messages and everything that followed each of them."""
    history = conversation("uauaua")  # ids 1..6
    assert ids(limit_history_turns(history, 2)) == [3, 4, 5, 6]


def test_history_limit_counts_user_turns_not_messages() -> None:
    """A turn with several replies still counts as one turn."""
    history = conversation("uaauaaa")  # turns: [1,2,3], [4,5,6,7]
    assert ids(limit_history_turns(history, 1)) == [4, 5, 6, 7]


def test_history_limit_counts_consecutive_user_messages_as_separate_turns() -> None:
    """Two user messages in a row are two turns (the second has no reply yet)."""
    history = conversation("uauu")  # ids 1..4
    assert ids(limit_history_turns(history, 2)) == [3, 4]


def test_history_limit_none_keeps_everything() -> None:
    """No limit keeps the whole history."""
    history = conversation("auaua")
    assert ids(limit_history_turns(history, None)) == [1, 2, 3, 4, 5]


def test_history_limit_larger_than_history_keeps_everything() -> None:
    """A limit larger than the number of turns keeps all messages, leading replies included."""
    history = conversation("auaua")  # a leading reply, then two turns
    assert ids(limit_history_turns(history, 3)) == [1, 2, 3, 4, 5]
    assert ids(limit_history_turns(history, 50)) == [1, 2, 3, 4, 5]


def test_history_limit_drops_leading_reply_whose_turn_is_outside_the_limit() -> None:
    """A leading assistant message belongs to an older turn, so a limit covering every full turn drops it."""
    history = conversation("aaua")  # two orphaned replies, then one turn
    assert ids(limit_history_turns(history, 1)) == [3, 4]


def test_history_limit_with_only_assistant_messages_keeps_them() -> None:
    """History with no user message at all (only replies) is kept, since no turn is counted."""
    history = conversation("aa")
    assert ids(limit_history_turns(history, 1)) == [1, 2]


def test_history_limit_reached_at_the_first_two_messages() -> None:
    """A limit met by the very first message keeps everything; met by the second, the first (a
    leading reply) is dropped."""
    assert ids(limit_history_turns(conversation("uaua"), 2)) == [1, 2, 3, 4]
    assert ids(limit_history_turns(conversation("uu"), 2)) == [1, 2]
    assert ids(limit_history_turns(conversation("aua"), 1)) == [2, 3]
    assert ids(limit_history_turns(conversation("auau"), 2)) == [2, 3, 4]


def test_history_limit_of_zero_or_less_keeps_nothing() -> None:
    """A limit of 0 (or below) keeps no message at all; only None means unlimited."""
    assert limit_history_turns(conversation("uaua"), 0) == []
    assert limit_history_turns(conversation("uaua"), -1) == []


def test_history_limit_on_empty_history() -> None:
    """An empty history stays empty under any limit."""
    assert limit_history_turns([], 3) == []
    assert limit_history_turns([], None) == []


# --- apply_recency -------------------------------------------------------------------------------


def test_recency_zero_hours_is_off() -> None:
    """With the window at 0 hours, even very old messages are kept."""
    history = [msg(i, at=T0 - 1000 * HOUR) for i in range(1, 4)]
    kept = apply_recency(history, now=T0, hours=0, min_messages=0)
    assert ids(kept) == [1, 2, 3]


def test_recency_drops_messages_older_than_the_window() -> None:
    """Messages older than the window are dropped once more than the minimum remain."""
    history = [
        msg(1, at=T0 - 10 * HOUR),
        msg(2, "assistant", at=T0 - 9 * HOUR),
        msg(3, at=T0 - 1 * HOUR),
        msg(4, "assistant", at=T0 - 0.5 * HOUR),
        msg(5, at=T0 - 60),
    ]
    kept = apply_recency(history, now=T0, hours=2, min_messages=1)
    assert ids(kept) == [3, 4, 5]


def test_recency_keeps_minimum_even_when_all_messages_are_old() -> None:
    """When everything is older than the window, the newest `min_messages` are still kept."""
    history = [msg(i, at=T0 - (100 - i) * HOUR) for i in range(1, 8)]
    kept = apply_recency(history, now=T0, hours=1, min_messages=3)
    assert ids(kept) == [5, 6, 7]


def test_recency_minimum_tops_up_a_small_recent_window() -> None:
    """If fewer than `min_messages` are recent, older ones fill up to the minimum."""
    history = [msg(i, at=T0 - 50 * HOUR) for i in range(1, 6)] + [msg(6, at=T0 - 60)]
    kept = apply_recency(history, now=T0, hours=1, min_messages=3)
    assert ids(kept) == [4, 5, 6]


def test_recency_minimum_larger_than_history_keeps_all() -> None:
    """A minimum larger than the history keeps every message."""
    history = [msg(i, at=T0 - 100 * HOUR) for i in range(1, 4)]
    kept = apply_recency(history, now=T0, hours=1, min_messages=10)
    assert ids(kept) == [1, 2, 3]


def test_recency_keeps_a_message_exactly_at_the_cutoff() -> None:
    """A message sent exactly `hours` ago is inside the window; one a second older is not."""
    history = [
        msg(1, at=T0 - 2 * HOUR - 1),
        msg(2, "assistant", at=T0 - 2 * HOUR),
        msg(3, at=T0 - 60),
    ]
    assert ids(apply_recency(history, now=T0, hours=2, min_messages=0)) == [2, 3]
    assert ids(apply_recency(history[:1], now=T0, hours=2, min_messages=0)) == []
    assert ids(apply_recency(history[1:], now=T0, hours=2, min_messages=0)) == [2, 3]


def test_recency_with_zero_minimum_can_drop_everything() -> None:
    """With no minimum and only old messages, nothing is kept."""
    history = [msg(i, at=T0 - 100 * HOUR) for i in range(1, 4)]
    assert apply_recency(history, now=T0, hours=1, min_messages=0) == []


# --- split_recent --------------------------------------------------------------------------------


def test_split_recent_guarantees_the_newest() -> None:
    """The newest `always_include_recent` messages are split off from the older ones."""
    history = conversation("uauaua")
    older, recent = split_recent(history, 2)
    assert ids(older) == [1, 2, 3, 4]
    assert ids(recent) == [5, 6]


def test_split_recent_larger_than_history_makes_everything_recent() -> None:
    """When the guarantee covers more than the history, nothing is left to triage."""
    older, recent = split_recent(conversation("uau"), 10)
    assert older == []
    assert ids(recent) == [1, 2, 3]


def test_split_recent_zero_makes_everything_older() -> None:
    """With no guaranteed recent messages, all of them go to triage."""
    older, recent = split_recent(conversation("uau"), 0)
    assert ids(older) == [1, 2, 3]
    assert recent == []


# --- group_turns ---------------------------------------------------------------------------------


def test_group_turns_puts_replies_with_their_user_message() -> None:
    """Each unit is a user message followed by the replies that came after it."""
    units = group_turns(conversation("uaauua"))
    assert [ids(unit) for unit in units] == [[1, 2, 3], [4], [5, 6]]


def test_group_turns_leading_reply_forms_its_own_unit() -> None:
    """Assistant messages before the first user message form a unit of their own."""
    units = group_turns(conversation("aaua"))
    assert [ids(unit) for unit in units] == [[1, 2], [3, 4]]


def test_group_turns_of_nothing_is_nothing() -> None:
    """No messages give no units."""
    assert group_turns([]) == []


# --- truncate_replies ----------------------------------------------------------------------------


def test_truncate_cuts_only_assistant_messages() -> None:
    """Long replies are cut to the limit while long user messages stay whole."""
    long_user = msg(1, "user", "u" * 50)
    long_reply = msg(2, "assistant", "a" * 50)
    short_reply = msg(3, "assistant", "short")
    result = truncate_replies([long_user, long_reply, short_reply], 10)
    assert result[0].text == "u" * 50
    assert result[1].text.startswith("a" * 10)
    assert "a" * 11 not in result[1].text
    assert len(result[1].text) < 50
    assert result[2].text == "short"
    assert ids(result) == [1, 2, 3]


def test_truncate_leaves_reply_of_exactly_the_limit() -> None:
    """A reply exactly as long as the limit is not cut."""
    reply = msg(1, "assistant", "x" * 10)
    assert truncate_replies([reply], 10)[0].text == "x" * 10


def test_truncate_zero_means_no_cut() -> None:
    """A limit of 0 leaves every reply whole."""
    reply = msg(1, "assistant", "a" * 5000)
    assert truncate_replies([reply], 0)[0].text == "a" * 5000


# --- merge_entries -------------------------------------------------------------------------------


def test_merge_orders_chronologically_and_includes_each_message_once() -> None:
    """Entries from several groups come out in id order with duplicates removed."""
    m = conversation("uauaua")
    merged = merge_entries(
        tag([m[5], m[4]], "recent"),
        tag([m[0], m[4], m[2]], "triaged"),
        [ContextEntry(m[2], "reply_to")],
    )
    assert [e.message.id for e in merged] == [1, 3, 5, 6]


def test_merge_first_reason_wins() -> None:
    """A message chosen for several reasons keeps the reason of the first group that chose it."""
    m = conversation("uau")
    merged = merge_entries(
        [ContextEntry(m[0], "reply_to")],
        tag([m[0], m[1]], "triaged"),
        tag([m[1], m[2]], "recent"),
    )
    assert [(e.message.id, e.reason) for e in merged] == [(1, "reply_to"), (2, "triaged"), (3, "recent")]


def test_merge_applies_truncation_to_replies_and_keeps_reasons() -> None:
    """Truncation during the merge cuts replies only and keeps each entry's reason."""
    user = msg(1, "user", "q" * 40)
    reply = msg(2, "assistant", "r" * 40)
    merged = merge_entries(tag([reply], "recent"), tag([user], "triaged"), truncation=8)
    assert [(e.message.id, e.reason) for e in merged] == [(1, "triaged"), (2, "recent")]
    assert merged[0].message.text == "q" * 40
    assert merged[1].message.text.startswith("r" * 8)
    assert "r" * 9 not in merged[1].message.text


def test_merge_of_nothing_is_empty() -> None:
    """Merging no entries gives no entries."""
    assert merge_entries() == []
    assert merge_entries([], []) == []


# --- Context.snapshot ----------------------------------------------------------------------------


def test_snapshot_records_what_went_in_and_why() -> None:
    """The snapshot lists entry ids, roles and reasons, the scheduled block, reply-to, counts and triage."""
    m = conversation("uaua")
    scheduled = StoredMessage(
        id=10, session_key=SESSION, role="assistant", origin="scheduled", text="briefing",
        created_at=T0 + 5000, job_id="morning",
    )
    report = TriageReport(
        "selected", candidates=4, selected=1, latency_ms=12.345, input_tokens=300, output_tokens=7
    )
    context = Context(
        entries=[ContextEntry(m[0], "reply_to"), ContextEntry(m[1], "triaged"), ContextEntry(m[3], "recent")],
        scheduled=[scheduled],
        reply_to=m[0],
        triage=report,
        history_limit=5,
        counts={"fetched": 4, "included": 3},
        explanation=Explanation("abc123"),
    )
    snap = context.snapshot()
    assert snap["entries"] == [
        {"id": 1, "role": "user", "reason": "reply_to"},
        {"id": 2, "role": "assistant", "reason": "triaged"},
        {"id": 4, "role": "assistant", "reason": "recent"},
    ]
    assert snap["scheduled_block"] == [10]
    assert snap["reply_to"] == 1
    assert snap["history_limit"] == 5
    assert snap["counts"] == {"fetched": 4, "included": 3}
    assert snap["hash"] == "abc123"
    assert snap["triage"] == {
        "outcome": "selected",
        "ran": True,
        "candidates": 4,
        "selected": 1,
        "latency_ms": 12.3,
        "input_tokens": 300,
        "output_tokens": 7,
        "error": None,
    }


@pytest.mark.parametrize(
    ("outcome", "ran"),
    [
        ("skipped", False),
        ("disabled", False),
        ("fail_open", False),
        ("selected", True),
        ("error", True),
        ("timeout", True),
        ("unparseable", True),
    ],
)
def test_snapshot_says_whether_triage_ran(outcome: str, ran: bool) -> None:
    """Only outcomes where the fast model was actually called count as triage having run."""
    context = Context([], [], None, TriageReport(outcome), None)  # type: ignore[arg-type]
    snap = context.snapshot()
    assert snap["triage"]["ran"] is ran
    assert snap["triage"]["outcome"] == outcome
    assert snap["reply_to"] is None
    assert snap["history_limit"] is None


def test_a_context_s_explanation_is_worked_out_once_when_first_read() -> None:
    """The candidate records and the hash wait until the snapshot reads them (after the reply),
    then stay what they were worked out as."""
    calls: list[int] = []

    def later() -> tuple[str, list[dict[str, object]]]:
        calls.append(1)
        return "abc", [{"id": 3, "ids": [3, 4], "chosen": True}]

    context = Context([], [], None, TriageReport("skipped"), None, explanation=Explanation(later=later))
    assert calls == []
    assert context.snapshot()["hash"] == "abc"
    assert context.candidates == [{"id": 3, "ids": [3, 4], "chosen": True}]
    assert context.input_hash == "abc"
    assert calls == [1]


def test_snapshot_is_json_ready() -> None:
    """The snapshot survives a JSON round trip unchanged."""
    m = conversation("ua")
    context = Context(tag(m, "all"), [], None, TriageReport("skipped"), None, {"fetched": 2},
                      Explanation("h"))
    snap = context.snapshot()
    assert json.loads(json.dumps(snap)) == snap


def test_snapshot_counts_are_a_copy() -> None:
    """Changing the snapshot's counts does not change the context it came from."""
    context = Context([], [], None, TriageReport("skipped"), None, {"fetched": 0})
    context.snapshot()["counts"]["fetched"] = 99
    assert context.counts == {"fetched": 0}


# --- input_hash ----------------------------------------------------------------------------------

CONFIG = {"lookback_count": 25, "always_include_recent": 5, "context_truncation": 0}


def test_hash_is_equal_for_equal_inputs() -> None:
    """The same history, config, limit, scheduled block and reply-to give the same hash."""
    first = input_hash(dict(CONFIG), 3, conversation("uaua"), [msg(9, "assistant")], msg(1))
    second = input_hash(dict(CONFIG), 3, conversation("uaua"), [msg(9, "assistant")], msg(1))
    assert first == second
    assert isinstance(first, str) and first


def test_hash_ignores_config_key_order() -> None:
    """Config dicts with the same keys and values in another order give the same hash."""
    reordered = dict(reversed(list(CONFIG.items())))
    history = conversation("ua")
    assert input_hash(CONFIG, None, history, [], None) == input_hash(reordered, None, history, [], None)


def test_hash_changes_when_history_changes() -> None:
    """A new message in the history, or a different window of it, changes the hash."""
    base = input_hash(CONFIG, None, conversation("uaua"), [], None)
    assert input_hash(CONFIG, None, conversation("uauau"), [], None) != base
    assert input_hash(CONFIG, None, conversation("uaua", start=2), [], None) != base
    assert input_hash(CONFIG, None, conversation("uaua")[:3], [], None) != base


def test_hash_changes_when_config_or_limit_changes() -> None:
    """A different config value or history limit changes the hash."""
    history = conversation("uaua")
    base = input_hash(CONFIG, None, history, [], None)
    assert input_hash({**CONFIG, "context_truncation": 100}, None, history, [], None) != base
    assert input_hash(CONFIG, 2, history, [], None) != base


def test_hash_changes_when_reply_to_or_scheduled_changes() -> None:
    """Replying to a message, or to a different one, and a different scheduled block change the hash."""
    history = conversation("uaua")
    base = input_hash(CONFIG, None, history, [], None)
    to_first = input_hash(CONFIG, None, history, [], history[0])
    to_second = input_hash(CONFIG, None, history, [], history[1])
    assert len({base, to_first, to_second}) == 3
    assert input_hash(CONFIG, None, history, [msg(20, "assistant")], None) != base


def test_hash_changes_with_each_message_s_role_and_token_estimate() -> None:
    """A fetched message with another role or token estimate changes the hash (both shape the context)."""
    history = conversation("uaua")
    base = input_hash(CONFIG, None, history, [], None)
    retagged = [*history[:3], msg(4, "user")]
    longer = [*history[:3], msg(4, "assistant", tokens=500)]
    hashes = {base, input_hash(CONFIG, None, retagged, [], None), input_hash(CONFIG, None, longer, [], None)}
    assert len(hashes) == 3


def candidate(ids: list[int], rank: int = 1, chosen: bool = True) -> dict[str, Any]:
    return {"id": ids[0], "ids": ids, "rank": rank, "score": 0.016393,
            "sources": {"lexical": {"rank": rank, "score": 2.5}}, "chosen": chosen}


def test_hash_changes_with_the_candidates_and_the_compaction_used() -> None:
    """The candidate pool (what each source found, and what went in) and the compaction summary
    are inputs: changing either changes the hash, and the same ones give the same hash."""
    history = conversation("uaua")
    base = input_hash(CONFIG, None, history, [], None)
    pooled = input_hash(CONFIG, None, history, [], None, candidates=[candidate([30, 31])])
    other_pool = input_hash(CONFIG, None, history, [], None, candidates=[candidate([32, 33])])
    not_chosen = input_hash(CONFIG, None, history, [], None, candidates=[candidate([30, 31], chosen=False)])
    compacted = input_hash(CONFIG, None, history, [], None, compaction_id=7)
    other_compacted = input_hash(CONFIG, None, history, [], None, compaction_id=8)
    assert len({base, pooled, other_pool, not_chosen, compacted, other_compacted}) == 6
    assert pooled == input_hash(CONFIG, None, history, [], None, candidates=[candidate([30, 31])])
    assert compacted == input_hash(CONFIG, None, history, [], None, compaction_id=7)
    assert input_hash(CONFIG, None, history, [], None, candidates=[], compaction_id=None) == base


def test_hash_is_stable_across_releases() -> None:
    """Snapshots store the hash and replay compares it: the same inputs give the value an earlier
    release recorded."""
    history = conversation("uaua")
    assert input_hash(CONFIG, 3, history, [msg(9, "assistant")], history[0]) == "7db702612d0633f5"
    pooled = input_hash(CONFIG, None, history, [], None, candidates=[candidate([30, 31])], compaction_id=7)
    assert pooled == "e5345b5d82509e6e"
