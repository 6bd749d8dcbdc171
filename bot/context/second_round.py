"""Triage's second round: when the first picks only a few turns, the turns nearest them in meaning
are offered in a second, smaller pool, and what either round picks goes in (issue 38).

A question whose answer is spread over several turns ("what do A and B have in common", "would she
like …") often shares its words and meaning with one of them only; the others are close to that
one rather than to the question. So each turn the first round picked seeds a search by its own
stored vector (its first message's) through the session's vectors, older and newer turns alike;
the nearest turns not offered already are shown to the fast model in one more call. Off unless
`[conversation] triage_second_round` is set, and only with semantic recall (its vectors). Should
the second call fail, the first round's answer stands.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from bot.core.messages import StoredMessage
from bot.ranking.candidates import Candidate, Hit, chronological
from bot.ranking.stages import TriageReport

if TYPE_CHECKING:
    from bot.context.semantic_recall import SemanticRecall
    from bot.context.triage import Triager
    from bot.store.seams import TurnReads

# A second round when the first picks at least one turn (a seed) and at most this many (enough
# said with more: the question's evidence was found where the pool looked).
FEW = 3


async def second_round(
    triager: Triager, recall: SemanticRecall, store: TurnReads, request: StoredMessage, *,
    session: str, pool: Sequence[Candidate], chosen: set[int], selected: list[StoredMessage],
    report: TriageReport, exclude: Iterable[int], size: int,
) -> tuple[list[StoredMessage], TriageReport, list[Candidate]]:
    """The first round's picks (`selected`, of the candidates `chosen` in `pool`) with those of a
    second round over up to `size` neighbours of them; the two calls' report summed; and the
    second pool (ranked after the first). The first round's alone when it picked none or more
    than `FEW`, when the picks have no neighbours to offer, or when the second call fails.
    `exclude`: the messages already in the context."""
    seeds = [candidate.messages[0].id for candidate in pool if candidate.id in chosen]
    if not 1 <= len(seeds) <= FEW or size <= 0:
        return selected, report, []
    offered = {message.id for candidate in pool for message in candidate.messages}
    excluded = set(exclude)
    known = offered | excluded
    # Each search gets past what the first pool and the context hold: the rest are new.
    found = await recall.neighbours(session, seeds, before_id=request.id, limit=len(known) + 2 * size)
    nearest = _interleaved(found, known, wanted=2 * size)
    if not nearest:
        return selected, report, []
    turns = await store.turns_of(session, list(nearest), before_id=request.id)
    second: list[Candidate] = []
    starts: set[int] = set()
    for message_id, score in nearest.items():
        turn = turns.get(message_id)
        if not turn or turn[0].id in starts or any(message.id in offered for message in turn):
            continue
        starts.add(turn[0].id)
        kept = tuple(message for message in turn if message.id not in excluded)
        if kept:
            rank = len(second) + 1
            second.append(Candidate(kept, {"neighbour": Hit(rank, score)}, score, len(pool) + rank))
            if len(second) == size:
                break
    if not second:
        return selected, report, []
    more, again = await triager(chronological(second), request.text)
    summed = TriageReport(
        report.outcome, candidates=report.candidates + again.candidates,
        selected=report.selected + (again.selected if more is not None else 0),
        latency_ms=report.latency_ms + again.latency_ms,
        input_tokens=report.input_tokens + again.input_tokens,
        output_tokens=report.output_tokens + again.output_tokens,
        error=None if more is not None else f"second round {again.outcome}: {again.error}",
    )
    return [*selected, *(more or [])], summed, second


def _interleaved(
    found: Sequence[Sequence[tuple[int, float]]], known: set[int], *, wanted: int
) -> dict[int, float]:
    """Up to `wanted` message ids not in `known`, taken rank by rank from each seed's matches in
    turn (so one seed's neighbours do not crowd out another's), each with the score it came with."""
    nearest: dict[int, float] = {}
    for rank in range(max(map(len, found), default=0)):
        for matches in found:
            if rank < len(matches):
                message_id, score = matches[rank]
                if message_id not in known and message_id not in nearest:
                    nearest[message_id] = score
        if len(nearest) >= wanted:
            break
    return nearest
