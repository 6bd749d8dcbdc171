"""Model choice and model spending: the model a session switched to, every call's tokens, and
their sums per day, model, agent, user, session or kind, summed by the database."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo

from bot.store.database import Database

EPOCH = date(1970, 1, 1)
DAY = 86_400
# A call's group by each name a sum can take (`usage_summed`): the columns it adds to `calls` (name,
# SQL) and the SQL of the group from them. `agent` and `provider` are the session key's parts,
# generated columns of `model_usage` (migration 25), NULL where the key has none. The names and
# groups are `switchboard usage --by`'s.
_KEYS: dict[str, tuple[tuple[tuple[str, str], ...], str]] = {
    "day": ((("k_day", "{day}"),), "k_day"),
    "model": ((), "model"),
    "agent": ((("k_agent", "COALESCE(agent, '?')"),), "k_agent"),
    # A user across platforms (`telegram:42`), grouped by its two parts before they are joined.
    "user": ((("k_user", "COALESCE(user_id, '')"),
              ("k_provider", "CASE WHEN user_id IS NULL OR user_id = '' THEN '' "
                             "ELSE COALESCE(provider, '?') END")),
             "CASE WHEN k_user = '' THEN '-' ELSE k_provider || ':' || k_user END"),
    "session": ((("k_session", "session_key"),), "k_session"),
    "kind": ((("k_kind", "kind"),), "k_kind"),
}
# Names with a few groups each: summed together first, each name then from those few rows.
_FEW = ("day", "model", "agent", "kind")
USAGE_KEYS = tuple(_KEYS)
_WINDOW = "#window"  # the summing statement's row of what the window holds (not a name of `_KEYS`)
_KEPT_WINDOWS = 32  # windows whose last sums are kept (per day, month, session: a page, the CLI, /usage)


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One model call's tokens, as the API reported them (cache writes and reads apart)."""

    session_key: str
    user_id: str | None
    kind: str  # reply, triage, compaction, flush (before a compaction), scheduled
    model: str
    input_tokens: int
    output_tokens: int
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    created_at: float = 0.0


@dataclass(frozen=True, slots=True)
class UsageSum:
    """The calls of one model in one group of a sum (`by` "day" and `key` "2026-11-28", say)."""

    by: str
    key: str
    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int
    cache_hits: int  # calls that read from the prompt cache


def offset_changes(zone: tzinfo, since: float, until: float) -> tuple[float, list[tuple[int, float]]]:
    """The zone's UTC offset (seconds) at `since`, and each change up to `until`: (the instant it
    takes effect, the new offset). Looked for day by day, each change found to the second."""

    def offset(at: float) -> float:
        shift = datetime.fromtimestamp(at, zone).utcoffset()
        return shift.total_seconds() if shift is not None else 0.0

    first = offset(since)
    changes: list[tuple[int, float]] = []
    current, at = first, math.floor(since)
    while at < until:
        step = at + DAY
        if offset(step) != current:
            low, high = at, step  # offset(low) is the current one, offset(high) is not
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (middle, high) if offset(middle) == current else (low, middle)
            current = offset(high)
            changes.append((high, current))
        at = step
    return first, changes


def local_day(changes: tuple[float, list[tuple[int, float]]], whole: str) -> tuple[str, list[float]]:
    """SQL of a `model_usage` row's local day (whole days since 1970-01-01) and its parameters: its
    instant shifted by the zone's offset at that instant."""
    first, later = changes
    if not later:
        return whole.format(number="(created_at + ?) / 86400"), [first]
    shift = "CASE " + " ".join("WHEN created_at < ? THEN ?" for _ in later) + " ELSE ? END"
    params: list[float] = []
    offset = first
    for instant, after in later:
        params += [float(instant), offset]
        offset = after
    return whole.format(number=f"(created_at + {shift}) / 86400"), [*params, offset]


class Usage(Database):
    """Writes and reads of `session_models` and `model_usage`."""

    _usage_windows: OrderedDict[tuple[float, tuple[str, ...], str, str | None], _SummedWindow] | None = None

    async def session_model(self, session_key: str) -> str | None:
        """The model name a session chose with /model, or None for the configured default."""
        rows = await self._conn.execute_fetchall(
            "SELECT model FROM session_models WHERE session_key = ?", (session_key,)
        )
        row = next(iter(rows), None)
        return str(row[0]) if row is not None else None

    async def set_session_model(self, session_key: str, model: str | None, set_by: str | None) -> None:
        """Choose a session's model by name; None goes back to the configured default."""
        async with self._transaction():
            if model is None:
                await self._conn.execute("DELETE FROM session_models WHERE session_key = ?", (session_key,))
                return
            await self._conn.execute(
                "INSERT INTO session_models (session_key, model, set_by, set_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (session_key) DO UPDATE SET model = excluded.model, "
                "set_by = excluded.set_by, set_at = excluded.set_at",
                (session_key, model, set_by, time.time()),
            )

    async def record_usage(self, record: UsageRecord) -> None:
        async with self._one_write():
            await self._conn.execute(
                "INSERT INTO model_usage (session_key, user_id, kind, model, input_tokens, output_tokens, "
                "cache_write_tokens, cache_read_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record.session_key, record.user_id, record.kind, record.model, record.input_tokens,
                 record.output_tokens, record.cache_write_tokens, record.cache_read_tokens,
                 record.created_at or time.time()),
            )

    async def usage_since(self, since: float, session_key: str | None = None) -> list[UsageRecord]:
        """Every call recorded at or after `since` (of one session, or all), oldest first."""
        sql = ("SELECT session_key, user_id, kind, model, input_tokens, output_tokens, cache_write_tokens, "
               "cache_read_tokens, created_at FROM model_usage WHERE created_at >= ?")
        params: list[object] = [since]
        if session_key is not None:
            sql += " AND session_key = ?"
            params.append(session_key)
        rows = await self._conn.execute_fetchall(sql + " ORDER BY id", params)
        return [UsageRecord(*row) for row in rows]

    async def usage_summed(
        self, since: float, by: Sequence[str], zone: tzinfo, session_key: str | None = None
    ) -> list[UsageSum]:
        """The calls recorded at or after `since` (of one session, or all) summed per group of each
        name in `by` (of `USAGE_KEYS`) and per model. Each name's rows hold every call once, so any
        one name's sum to the total. Days are the zone's, as YYYY-MM-DD.

        The last sums of each window are kept (`_SummedWindow`): a read sums only the calls stored
        since (ids above the newest summed) and adds them in, when the window's count and id sum
        (read in the same statement) say those are all that changed; otherwise, as on the first
        read, every call of the window is summed again. Several daemons on one PostgreSQL each
        check against the database at every read, so a call committed out of id order is never
        missed."""
        names = list(dict.fromkeys(by))
        unknown = set(names) - set(_KEYS)
        if unknown or not names:
            raise ValueError(f"usage is summed by {', '.join(USAGE_KEYS)}, not {sorted(unknown)}")
        if self._usage_windows is None:
            self._usage_windows = OrderedDict()
        windows = self._usage_windows
        cache_key = (since, tuple(names), str(zone), session_key)
        kept = windows.get(cache_key)
        summed = await self._summed_window(since, names, zone, session_key, kept)
        if summed is None:  # the calls stored since are not all that changed: sum them all
            summed = await self._summed_window(since, names, zone, session_key, None)
            assert summed is not None
        windows[cache_key] = summed
        windows.move_to_end(cache_key)
        while len(windows) > _KEPT_WINDOWS:
            windows.popitem(last=False)
        return list(summed.sums.values())

    async def _summed_window(
        self, since: float, names: list[str], zone: tzinfo, session_key: str | None,
        kept: _SummedWindow | None,
    ) -> _SummedWindow | None:
        """`kept` with the calls above its newest id added in, or (`kept` None) the whole window's
        sums; None when the window holds other calls than `kept`'s and those (one stored out of id
        order, or removed)."""
        after = kept.newest if kept is not None else 0
        sql, params = self._summing_sql(since, names, zone, session_key, after)
        rows = await self._conn.execute_fetchall(sql, params)
        sums = dict(kept.sums) if kept is not None else {}
        window = (0, 0, 0)
        added = (0, 0)
        for name, group, model, calls, tokens_in, tokens_out, written, read, hits in rows:
            if name == _WINDOW:  # the window's count, id sum and newest id; the new calls' count and id sum
                window = (int(calls), int(tokens_in or 0), int(tokens_out or 0))
                added = (int(written or 0), int(read or 0))
                continue
            part = UsageSum(str(name), day_text(group) if name == "day" else str(group), str(model),
                            int(calls), int(tokens_in or 0), int(tokens_out or 0), int(written or 0),
                            int(read or 0), int(hits or 0))
            key = (part.by, part.key, part.model)
            sums[key] = part if key not in sums else _added(sums[key], part)
        before = (kept.calls, kept.ids) if kept is not None else (0, 0)
        if (before[0] + added[0], before[1] + added[1]) != window[:2]:
            return None
        return _SummedWindow(window[0], window[1], window[2], sums)

    def _summing_sql(
        self, since: float, names: list[str], zone: tzinfo, session_key: str | None, after: int
    ) -> tuple[str, list[object]]:
        """One statement: the calls of the window with ids above `after` summed per group and model
        (`calls`, read from the index `model_usage_sums` alone but for `session`, each call's
        groups worked out once; the names of a few groups summed together first, `few`), and one
        `_WINDOW` row with the whole window's count, id sum and newest id, and the count and id sum
        of the calls above `after`: both from the same snapshot of the table."""
        params: list[object] = []
        parts = {"day": ""}
        if "day" in names:
            changes = offset_changes(zone, since, max(since, time.time()) + 2 * DAY)
            parts["day"], shifts = local_day(changes, self.dialect.whole)
            params += shifts
        columns = "".join(f"{expression.format(**parts)} AS {column}, " for name in names
                          for column, expression in _KEYS[name][0])
        window = "created_at >= ?" + (" AND session_key = ?" if session_key is not None else "")
        scope = [since, *([session_key] if session_key is not None else [])]
        # Without `after` the ids are not named: SQLite would walk the whole table by id.
        newer = " AND id > ?" if after else ""
        params += [*scope, *([after] if after else [])]
        sql = (f"WITH calls AS NOT MATERIALIZED (SELECT {columns}model, input_tokens AS i, "
               "output_tokens AS o, cache_write_tokens AS w, cache_read_tokens AS r, "
               "CASE WHEN cache_read_tokens > 0 THEN 1 ELSE 0 END AS h FROM model_usage "
               f"WHERE {window}{newer})")
        few = [name for name in names if name in _FEW]
        if few:
            grouped = "".join(f"{_KEYS[name][1]}, " for name in few if name != "model")
            sql += (f", few AS MATERIALIZED (SELECT {grouped}model, COUNT(*) AS n, SUM(i) AS i, SUM(o) AS o, "
                    f"SUM(w) AS w, SUM(r) AS r, SUM(h) AS h FROM calls GROUP BY {grouped}model)")
        picks = []
        for name in names:
            group, source = _KEYS[name][1], "few" if name in few else "calls"
            calls = "SUM(n)" if source == "few" else "COUNT(*)"
            picks.append(f"SELECT '{name}', CAST({group} AS TEXT), model, {calls}, SUM(i), SUM(o), SUM(w), "
                         f"SUM(r), SUM(h) FROM {source} GROUP BY "
                         + "".join(f"{column}, " for column, _ in _KEYS[name][0]) + "model")
        picks.append(f"SELECT '{_WINDOW}', '', '', COUNT(*), SUM(id), MAX(id), "
                     "SUM(CASE WHEN id > ? THEN 1 ELSE 0 END), SUM(CASE WHEN id > ? THEN id ELSE 0 END), 0 "
                     f"FROM model_usage WHERE {window}")
        params += [after, after, *scope]
        return f"{sql} {' UNION ALL '.join(picks)}", params


@dataclass(frozen=True, slots=True)
class _SummedWindow:
    """A window's sums as last read, and which calls they hold: how many, their ids' sum, the newest."""

    calls: int
    ids: int
    newest: int
    sums: dict[tuple[str, str, str], UsageSum]


def _added(one: UsageSum, other: UsageSum) -> UsageSum:
    return UsageSum(one.by, one.key, one.model, one.calls + other.calls,
                    one.input_tokens + other.input_tokens, one.output_tokens + other.output_tokens,
                    one.cache_write_tokens + other.cache_write_tokens,
                    one.cache_read_tokens + other.cache_read_tokens, one.cache_hits + other.cache_hits)


def day_text(days: str) -> str:
    """Whole days since 1970-01-01 as YYYY-MM-DD."""
    return (EPOCH + timedelta(days=int(days))).isoformat()
