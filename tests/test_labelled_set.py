"""The labelled set of bench/context_quality.py: deterministic, well formed, and honest about words."""

from __future__ import annotations

import statistics

from bench.labelled_set import FAMILIES, KINDS, PER_CONVERSATION, generate, overlap, turn_text


def test_the_same_seed_gives_the_same_set_and_another_seed_another() -> None:
    """Generating twice with one seed gives equal conversations; a different seed differs."""
    assert generate(2, seed=5) == generate(2, seed=5)
    assert generate(2, seed=5) != generate(2, seed=6)


def test_conversations_are_long_and_spread_over_weeks() -> None:
    """Each conversation has 300-600 turns in time order, over at least four weeks."""
    for conversation in generate(4, seed=2):
        turns = conversation.turns
        assert 300 <= len(turns) <= 600
        assert [t.index for t in turns] == list(range(len(turns)))
        times = [time for t in turns for time in (t.at, t.reply_at)]
        assert times == sorted(times)
        assert times[-1] - times[0] >= 4 * 7 * 86_400


def test_every_question_points_at_existing_earlier_evidence() -> None:
    """Evidence and distractor indices name turns of that role before the question, far enough back
    that the lookback window does not hold them, and every kind is asked in every conversation."""
    for conversation in generate(4, seed=2):
        turns = conversation.turns
        kinds = [q.kind for q in conversation.questions]
        assert {kind: kinds.count(kind) for kind in KINDS} == PER_CONVERSATION
        for q in conversation.questions:
            assert turns[q.turn].role == "question" and turns[q.turn].user == q.text
            assert q.evidence and all(turns[i].role == "evidence" for i in q.evidence)
            assert all(turns[i].role == "distractor" for i in q.distractors)
            assert max(q.evidence + q.distractors) < q.turn - 15
            assert (1 if q.kind != "multi" else 2) <= len(q.evidence) <= (1 if q.kind != "multi" else 4)
            assert len(q.distractors) >= 2


def test_questions_share_few_words_with_their_evidence_and_many_with_distractors() -> None:
    """Question content words are rare in the evidence turns and common in the distractor turns."""
    evidence: list[float] = []
    distractor: list[float] = []
    for conversation in generate(10, seed=13):
        for q in conversation.questions:
            evidence += [overlap(q.text, turn_text(conversation.turns[i])) for i in q.evidence]
            shared = [overlap(q.text, turn_text(conversation.turns[i])) for i in q.distractors]
            assert all(value > 0 for value in shared)
            distractor += shared
    assert statistics.fmean(evidence) <= 0.10
    assert max(evidence) <= 0.5  # at most a name in common
    assert statistics.fmean(distractor) >= 0.35


def test_no_question_variant_shares_a_word_with_evidence_beyond_names() -> None:
    """Across every template and slot bundle, a question shares no content word with its evidence
    turns but the name of the friend it is about."""
    for family in (f for kind in KINDS for f in FAMILIES[kind]):
        for values in family.options:
            slots = {"friend": "Maya", "colleague": "Derek", **values}
            for question in family.questions:
                asked = question.format_map(slots).replace("Maya", "")
                for user, reply in (pair for step in family.steps for pair in step):
                    said = f"{user}\n{reply}".format_map(slots).replace("Maya", "")
                    assert overlap(asked, said) == 0, (family.name, asked, said)


def test_filler_is_varied() -> None:
    """Almost every small-talk message of a conversation is different from the others."""
    for conversation in generate(4, seed=9):
        filler = [t.user for t in conversation.turns if t.role == "filler"]
        assert len(set(filler)) >= 0.95 * len(filler)
