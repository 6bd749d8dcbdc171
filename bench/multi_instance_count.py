"""What the multi-instance bench counts from outside: each marker stored, answered once or more, in
order; what the database still holds; what the daemons logged; and the block it prints per run."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.testing.telegram_api import TelegramStandIn

MARKER = re.compile(r"\bm(\d+)-(\d+)\b")
WARM = (0.10, 0.45)  # the share of the answers the warm throughput is counted over


@dataclass
class Outcome:
    label: str
    pushed: list[str]
    stored: Counter[str]
    replies: Counter[str]  # marker → stored replies carrying it
    delivered: Counter[str]
    out_of_order: int
    awaiting: int
    outbox: int
    leases: int
    elapsed: float  # first push → last answer
    answered_before_kill: int = 0
    until_kill: float = 0.0
    failovers: int = 0
    # Replies Telegram had when the SIGKILL came while the outbox still held them (the dead
    # instance had not recorded them sent): sent again on takeover, as nothing can tell it not to.
    in_window: set[str] = field(default_factory=set)
    forwarded: list[int] = field(default_factory=list)
    log_events: Counter[str] = field(default_factory=Counter)
    end: str = ""
    answer_times: list[float] = field(default_factory=list)  # when each reply reached Telegram
    cpu: list[float] = field(default_factory=list)  # capped runs: each instance's CPU-seconds under load

    @property
    def lost(self) -> int:
        return sum(1 for m in self.pushed if not self.stored[m])

    @property
    def once(self) -> int:
        return sum(1 for m in self.pushed if self.delivered[m] == 1)

    @property
    def twice(self) -> int:
        return sum(1 for m in self.pushed if self.delivered[m] > 1)

    @property
    def never(self) -> int:
        return sum(1 for m in self.pushed if not self.delivered[m])

    @property
    def doubled(self) -> list[str]:
        return [m for m in self.pushed if self.delivered[m] > 1]

    @property
    def resent(self) -> int:
        return sum(1 for m in self.pushed if self.delivered[m] > 1 and self.replies[m] <= 1)

    @property
    def two_turns(self) -> int:
        return sum(1 for m in self.pushed if self.replies[m] > 1)

    def rate(self) -> float:
        return sum(1 for m in self.pushed if self.delivered[m]) / self.elapsed if self.elapsed else 0.0

    def warm_rate(self, window: tuple[float, float] = WARM) -> float:
        """Answers/s between the 10th and the 45th percent of the answers (or `window`): past the
        start (the burst being stored, each daemon's first turns), before the SIGKILL at half."""
        times = sorted(self.answer_times)
        first, last = int(len(times) * window[0]), int(len(times) * window[1])
        span = times[last] - times[first] if last < len(times) else 0.0
        return (last - first) / span if span > 0 else 0.0


def database_counts(database: str) -> tuple[list[str], int, int, int, list[str]]:
    """User texts, requests awaiting a reply, outbox rows, leases still held (not expired), reply
    texts: read as any client would."""
    queries = ("SELECT text FROM messages WHERE role = 'user'",
               "SELECT COUNT(*) FROM messages WHERE awaiting_reply = 1",
               "SELECT COUNT(*) FROM outbox",
               f"SELECT COUNT(*) FROM session_leases WHERE expires_at > {time.time()}",
               "SELECT text FROM messages WHERE role = 'assistant'")
    if database.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(database) as conn:
            rows = [conn.execute(q).fetchall() for q in queries]
    else:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as lite:
            rows = [lite.execute(q).fetchall() for q in queries]
    return ([str(r[0]) for r in rows[0]], int(rows[1][0][0]), int(rows[2][0][0]), int(rows[3][0][0]),
            [str(r[0]) for r in rows[4]])


def in_send_window(database: str, tg: TelegramStandIn) -> set[str]:
    """Markers of replies in the outbox that Telegram already shows (read right after a SIGKILL)."""
    import psycopg

    with psycopg.connect(database) as conn:
        left = [str(r[0]) for r in conn.execute("SELECT text FROM outbox").fetchall()]
    shown = {f"m{a}-{b}" for m in tg.sent for a, b in MARKER.findall(m.visible_text)}
    return {f"m{a}-{b}" for t in left for a, b in MARKER.findall(t)} & shown


def out_of_order(sent: list[tuple[int, str]]) -> int:
    """Chats where a reply arrived after the reply to a later message of the same user."""
    newest: dict[int, int] = {}
    bad: set[int] = set()
    for chat_id, text in sent:
        for _, n in MARKER.findall(text):
            if int(n) < newest.get(chat_id, -1):
                bad.add(chat_id)
            newest[chat_id] = max(newest.get(chat_id, -1), int(n))
    return len(bad)


EVENTS = ("older request of the session answered first", "request already answered; skipped",
          "newer request of the session answered in the same lease",
          "request left to the instance holding the session", "reply left in the outbox sent first",
          "redelivered message still unanswered; queued", "session lease lost while its work ran",
          "resumed from the last run", "waiting requests taken over",
          "command already run elsewhere; skipped")


def log_events(workdir: Path) -> Counter[str]:
    """Lease and resume events, warnings and errors the daemons logged."""
    seen: Counter[str] = Counter()
    for path in workdir.glob("*.log"):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                seen["non-JSON lines"] += 1
                continue
            event, level = str(entry.get("event", "")), entry.get("level")
            if event in EVENTS:
                seen[event] += 1
            elif level in ("warning", "error", "critical") and "voice will NOT be supported" not in event:
                seen[f"{level}: {event}"] += 1
    return seen


def markers(texts: list[str]) -> Counter[str]:
    return Counter(f"m{a}-{b}" for t in texts for a, b in MARKER.findall(t))


def count(label: str, pushed: list[str], database: str, sent: list[tuple[int, str, float]], workdir: Path,
          started: float, **more: Any) -> Outcome:
    """The outcome of a run whose daemons have stopped, read from the database and from what the
    platform was sent: (chat id, text as seen, time.monotonic()) each, in order."""
    texts, awaiting, outbox, leases, replies = database_counts(database)
    (workdir / "sent.json").write_text(json.dumps(sent))
    last_answer = max((t for _, _, t in sent), default=started)
    return Outcome(
        label, pushed, stored=markers(texts), replies=markers(replies),
        delivered=markers([t for _, t, _ in sent]), out_of_order=out_of_order([(c, t) for c, t, _ in sent]),
        awaiting=awaiting, outbox=outbox, leases=leases, elapsed=last_answer - started,
        log_events=log_events(workdir), answer_times=[t for _, _, t in sent], **more)


def telegram_sent(tg: TelegramStandIn) -> list[tuple[int, str, float]]:
    return [(m.chat_id, m.visible_text, m.time) for m in tg.sent]


# -- printing --------------------------------------------------------------------------------------


def block(o: Outcome) -> list[str]:
    lines = [
        f"{o.label}: {o.end}",
        f"  updates sent {len(o.pushed)}, stored {sum(1 for m in o.pushed if o.stored[m])}"
        f" (stored twice {sum(1 for m in o.pushed if o.stored[m] > 1)})",
        f"  answered once {o.once}, answered twice {o.twice}, never answered {o.never}",
        f"    of the doubles: one stored reply sent twice {o.resent} ({len(o.in_window & set(o.doubled))} of "
        f"them in Telegram's send window at the SIGKILL), two stored replies {o.two_turns}",
        f"  sessions with replies out of order {o.out_of_order}",
        f"  left: awaiting a reply {o.awaiting}, in the outbox {o.outbox}, leases still held {o.leases}",
        f"  throughput {o.rate():.0f} updates/s answered ({o.elapsed:.1f} s from the first push to the "
        "last answer)",
    ]
    lines.append(f"  warm throughput {o.warm_rate():.0f} updates/s answered (from {WARM[0]:.0%} to "
                 f"{WARM[1]:.0%} of the answers: past the start, before any kill)")
    if o.until_kill:
        lines.append(f"  before the SIGKILL: {o.answered_before_kill / o.until_kill:.0f} updates/s answered "
                     f"({o.answered_before_kill} in {o.until_kill:.1f} s)")
    if o.forwarded:
        lines.append(f"  webhook POSTs per instance {o.forwarded}, moved to the next instance {o.failovers}")
    if o.log_events:
        lines.append("  logged: " + "; ".join(f"{k} ×{v}" for k, v in sorted(o.log_events.items())))
    return lines


