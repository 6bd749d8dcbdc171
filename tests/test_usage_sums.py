"""The store sums model calls per day, model, agent, user, session and kind in one read: the same
totals as summing the stored rows one by one, on SQLite and on PostgreSQL, days in a zone that
changes its offset (DST) inside the window."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from bot.config import ModelPrice
from bot.core.messages import ChatRef, InboundMessage, OutboundMessage
from bot.core.session_key import parse
from bot.models.usage import UsageTotal, usage_report
from bot.store import USAGE_KEYS, Store, UsageRecord, UsageSum
from tests import sql

BERLIN = ZoneInfo("Europe/Berlin")
SINCE = datetime(2026, 3, 20, tzinfo=BERLIN).timestamp()
# Calls on either side of local midnights and of both 2026 changes (29 March, 25 October).
EDGES = [datetime(*fields, tzinfo=BERLIN, fold=fold).timestamp() for *fields, fold in [
    (2026, 3, 28, 23, 59, 59, 0), (2026, 3, 29, 0, 0, 0, 0), (2026, 3, 29, 1, 59, 59, 0),
    (2026, 3, 29, 3, 0, 0, 0), (2026, 3, 29, 23, 59, 59, 0), (2026, 3, 30, 0, 0, 0, 0),
    (2026, 10, 24, 23, 59, 59, 0), (2026, 10, 25, 2, 30, 0, 0), (2026, 10, 25, 2, 30, 0, 1),
    (2026, 10, 25, 23, 59, 59, 0), (2026, 10, 26, 0, 0, 0, 0),
]]
SESSIONS = [("agent:main:telegram:direct:42", "42"), ("agent:main:telegram:group:-100", "7"),
            ("agent:helper:web:direct:alice", "alice"), ("agent:main:telegram:direct:42", None),
            ("agent:helper:discord:direct:9", ""), ("cron-job", "5"), ("agent:solo", "3"),
            ("agent::slack:x", "8"), ("legacy:web:direct:ada", "ada"),
            ("agent:main:matrix:direct:@bo:example.org", "@bo:example.org"), ("agent:x:", "x")]
PRICES = {"model-a": ModelPrice(input=3.0, output=15.0), "model-b": ModelPrice(input=1.0, output=5.0)}


def stored_calls(count: int) -> list[UsageRecord]:
    """Calls spread over the window (and a few before it, which no sum may count)."""
    rng = random.Random(35)
    instants = EDGES + [rng.uniform(SINCE - 5 * 86400, datetime(2026, 11, 20).timestamp())
                        for _ in range(count)]
    calls = []
    for at in instants:
        session, user = rng.choice(SESSIONS)
        calls.append(UsageRecord(session, user, rng.choice(["reply", "triage"]),
                                 rng.choice(["model-a", "model-b", "model-c"]), rng.randrange(1, 5000),
                                 rng.randrange(400), rng.choice([0, 0, 1200]), rng.choice([0, 900, 0]), at))
    return calls


def group_of(call: UsageRecord, by: str) -> str:
    """A call's group by each name, worked out here from the row itself."""
    parts = call.session_key.split(":")
    return {
        "day": datetime.fromtimestamp(call.created_at, BERLIN).date().isoformat(),
        "model": call.model,
        "agent": parts[1] if parts[0] == "agent" else "?",
        "user": f"{parts[2] if len(parts) > 2 else '?'}:{call.user_id}" if call.user_id else "-",
        "session": call.session_key,
        "kind": call.kind,
    }[by]


def figures(summed: UsageSum | UsageTotal) -> list[int]:
    return [summed.calls, summed.input_tokens, summed.output_tokens, summed.cache_write_tokens,
            summed.cache_read_tokens, summed.cache_hits]


async def test_the_sums_per_day_model_agent_and_user_are_the_stored_rows_summed(store: Store) -> None:
    """Each name's groups hold exactly the calls since the start of the window, summed as the rows
    one by one give them (days in Berlin's time, either side of its DST changes), and priced the
    same: the page's, the CLI's and /usage's one read."""
    calls = stored_calls(300)
    for call in calls:
        await store.record_usage(call)
    counted = [call for call in calls if call.created_at >= SINCE]

    sums = await store.usage_summed(SINCE, USAGE_KEYS, BERLIN)
    report = await usage_report(store, SINCE, BERLIN, USAGE_KEYS, PRICES)

    for by in USAGE_KEYS:
        expected: dict[str, list[int]] = defaultdict(lambda: [0] * 6)
        cost: dict[str, float] = defaultdict(float)
        for call in counted:
            group = expected[group_of(call, by)]
            for index, value in enumerate((1, call.input_tokens, call.output_tokens, call.cache_write_tokens,
                                           call.cache_read_tokens, call.cache_read_tokens > 0)):
                group[index] += value
            price = PRICES.get(call.model)
            if price is not None:
                cost[group_of(call, by)] += price.cost(call.input_tokens, call.output_tokens,
                                                       call.cache_write_tokens, call.cache_read_tokens)
        summed: dict[str, list[int]] = defaultdict(lambda: [0] * 6)
        for part in sums:
            if part.by == by:
                for index, value in enumerate(figures(part)):
                    summed[part.key][index] += value
        assert summed == expected, by
        groups = report.groups[by]
        assert {key: figures(summed) for key, summed in groups.items()} == expected
        assert {key: t.cost for key, t in groups.items() if t.cost is not None} == pytest.approx(dict(cost))
        assert all(t.unpriced <= {"model-c"} for t in groups.values())
    assert report.total.calls == len(counted) and report.total.unpriced == {"model-c"}
    assert report.total.cost == pytest.approx(sum(cost.values()))
    # The days either side of each change: the 29th of March began at 00:00 CET, the 30th at 00:00 CEST.
    days = report.groups["day"]
    assert {"2026-03-28", "2026-03-29", "2026-03-30", "2026-10-24", "2026-10-25", "2026-10-26"} <= set(days)


async def test_one_session_and_the_window_start_narrow_the_sums(store: Store) -> None:
    """A session's sums hold only its calls, and a call just before `since` is in none."""
    key = "agent:main:telegram:direct:42"
    await store.record_usage(UsageRecord(key, "42", "reply", "model-a", 10, 1, created_at=SINCE - 0.5))
    await store.record_usage(UsageRecord(key, "42", "reply", "model-a", 20, 2, created_at=SINCE))
    await store.record_usage(UsageRecord("agent:main:telegram:direct:7", "7", "reply", "model-a", 40, 4,
                                         created_at=SINCE + 60))

    mine = await usage_report(store, SINCE, BERLIN, ("day", "user"), PRICES, key)
    everyone = await usage_report(store, SINCE, BERLIN, ("user",), PRICES)

    assert {day: t.input_tokens for day, t in mine.groups["day"].items()} == {"2026-03-20": 20}
    assert {user: t.calls for user, t in mine.groups["user"].items()} == {"telegram:42": 1}
    assert {user: t.input_tokens for user, t in everyone.groups["user"].items()} == {
        "telegram:42": 20, "telegram:7": 40}
    assert everyone.total.input_tokens == 60 and everyone.total.output_tokens == 6
    with pytest.raises(ValueError, match="summed by"):
        await store.usage_summed(SINCE, ("colour",), BERLIN)


def expected_sums(calls: list[UsageRecord], by: str) -> dict[str, list[int]]:
    """Each group's figures worked out here from the calls at or after SINCE, one by one."""
    expected: dict[str, list[int]] = defaultdict(lambda: [0] * 6)
    for call in calls:
        if call.created_at >= SINCE:
            group = expected[group_of(call, by)]
            for index, value in enumerate((1, call.input_tokens, call.output_tokens, call.cache_write_tokens,
                                           call.cache_read_tokens, call.cache_read_tokens > 0)):
                group[index] += value
    return expected


async def read_sums(store: Store, session_key: str | None = None) -> dict[str, dict[str, list[int]]]:
    summed: dict[str, dict[str, list[int]]] = {by: defaultdict(lambda: [0] * 6) for by in USAGE_KEYS}
    for part in await store.usage_summed(SINCE, USAGE_KEYS, BERLIN, session_key):
        for index, value in enumerate(figures(part)):
            summed[part.by][part.key][index] += value
    return summed


async def test_sums_read_again_hold_every_call_stored_since_by_any_way(store: Store) -> None:
    """The window's sums are kept between reads and only the calls stored since are added in; what
    each later read gives is still the stored rows summed one by one, whichever way a call was
    stored: `record_usage`, a turn's commit, a row written with an id below the newest already
    summed (as a second daemon's transaction committing late on PostgreSQL leaves it), one before
    the window, and a row removed. Fails if a read returned the kept sums unchanged or counted a
    call twice."""
    calls = stored_calls(120)
    for call in calls:
        await store.record_usage(call)
    again_for_nothing = await read_sums(store)
    assert await read_sums(store) == again_for_nothing == {by: expected_sums(calls, by) for by in USAGE_KEYS}

    single = UsageRecord("agent:main:telegram:direct:42", "42", "reply", "model-a", 77, 7, 0, 5, SINCE + 3600)
    await store.record_usage(single)
    calls.append(single)
    assert await read_sums(store) == {by: expected_sums(calls, by) for by in USAGE_KEYS}

    request = await store.append_inbound(InboundMessage(
        session_key=parse("agent:main:telegram:direct:42"), chat=ChatRef("telegram", "42"), sender_id="42",
        sender_name="Ada", text="hello", provider_message_id="1"))
    assert request is not None
    turn = [UsageRecord("agent:main:telegram:direct:42", "42", kind, "model-b", 30, 3, 1200, 0, SINCE + 7200)
            for kind in ("triage", "reply")]
    await store.commit_turn("agent:main:telegram:direct:42", "hi", request_id=request.id,
                            deliver=OutboundMessage(ChatRef("telegram", "42"), "hi", None), fallback=False,
                            actions=(), usage=turn, link_tool_calls=False, snapshot=None, snapshot_hash="")
    calls += turn
    assert await read_sums(store) == {by: expected_sums(calls, by) for by in USAGE_KEYS}

    # Ids below the newest summed: one in the window, one before it (no sum counts that one).
    newest = await sql.value(store, "SELECT MAX(id) FROM model_usage")
    gaps = [row[0] for row in await sql.rows(store, "SELECT id FROM model_usage ORDER BY id LIMIT 2")]
    await sql.execute(store, "DELETE FROM model_usage WHERE id IN (?, ?)", gaps)
    assert newest not in gaps
    calls = calls[2:]  # the first two stored
    assert await read_sums(store) == {by: expected_sums(calls, by) for by in USAGE_KEYS}
    alice = "agent:helper:web:direct:alice"
    late = [UsageRecord(alice, "alice", "reply", "model-a", 11, 1, 0, 0, SINCE + 60),
            UsageRecord(alice, "alice", "reply", "model-a", 13, 1, 0, 0, SINCE - 60)]
    for gap, call in zip(gaps, late, strict=True):
        await sql.execute(store, "INSERT INTO model_usage (id, session_key, user_id, kind, model, "
                          "input_tokens, output_tokens, cache_write_tokens, cache_read_tokens, created_at) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                          (gap, call.session_key, call.user_id, call.kind, call.model, call.input_tokens,
                           call.output_tokens, call.cache_write_tokens, call.cache_read_tokens,
                           call.created_at))
    calls += late
    assert await read_sums(store) == {by: expected_sums(calls, by) for by in USAGE_KEYS}
    one = [call for call in calls if call.session_key == alice]
    assert await read_sums(store, alice) == {
        by: expected_sums(one, by) for by in USAGE_KEYS}
