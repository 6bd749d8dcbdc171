"""The labelled set of bench/context_quality.py: deterministic, well formed, and honest about words."""

from __future__ import annotations

import itertools
import statistics

from bench.labelled_set import (
    FAMILIES,
    HARD_KINDS,
    HARD_MIX,
    KINDS,
    MIX,
    PER_CONVERSATION,
    WORDINGS,
    Family,
    content_words,
    describe,
    families,
    fts5_by_kind,
    fts5_top,
    generate,
    overlap,
    render,
    semantic_top,
    shared_words,
    turn_text,
    word_reachable,
)


def test_the_same_seed_gives_the_same_set_and_another_seed_another() -> None:
    """Generating twice with one seed gives equal conversations; a different seed differs; a
    conversation does not depend on how many are generated."""
    assert generate(2, seed=5) == generate(2, seed=5)
    assert generate(2, seed=5) != generate(2, seed=6)
    assert generate(3, seed=5)[:2] == generate(2, seed=5)


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


def test_wordings_are_mixed_as_declared_for_every_kind() -> None:
    """Every 20 questions of a kind hold 10 anchored, 6 topical and 4 paraphrased ones (50 / 30 /
    20 %), another mix when asked for, and the mix is not one fixed order."""
    conversations = generate(20, seed=13)
    for kind in KINDS:
        wordings = [q.wording for c in conversations for q in sorted(c.questions, key=lambda q: q.turn)
                    if q.kind == kind]
        counts = {wording: wordings.count(wording) for wording in WORDINGS}
        assert counts == {w: MIX[w] * len(wordings) // sum(MIX.values()) for w in WORDINGS}
    d = describe(conversations)
    assert (d["wording_anchor"], d["wording_topical"], d["wording_paraphrase"]) == (0.5, 0.3, 0.2)
    hard = describe(generate(20, seed=13, mix=HARD_MIX))
    assert (hard["wording_anchor"], hard["wording_topical"], hard["wording_paraphrase"]) == \
        (0.45, 0.25, 0.30)
    other = generate(20, seed=14)
    assert [q.wording for c in conversations for q in c.questions] != \
        [q.wording for c in other for q in c.questions]


def test_questions_share_little_with_their_evidence_and_more_with_distractors() -> None:
    """Over the set: a question's content words are few in its evidence turns (at most two shared
    words, a quarter of the question's words on average, none at all for at least a fifth of the
    questions) and clearly more in its distractor turns, every one of which shares some."""
    evidence: list[float] = []
    distractor: list[float] = []
    shared: list[int] = []
    for conversation in generate(20, seed=13):
        for q in conversation.questions:
            texts = [turn_text(conversation.turns[i]) for i in q.evidence]
            evidence += [overlap(q.text, text) for text in texts]
            shared.append(len(shared_words(q.text, texts)))
            near = [overlap(q.text, turn_text(conversation.turns[i])) for i in q.distractors]
            assert all(value > 0 for value in near), q
            distractor += near
    assert max(shared) <= 2
    assert sum(1 for n in shared if n == 0) / len(shared) >= 0.20
    assert statistics.fmean(evidence) <= 0.25
    assert statistics.fmean(distractor) >= statistics.fmean(evidence) + 0.15


def test_plain_bm25_finds_no_more_than_it_does_in_real_chats() -> None:
    """The set is at least as hard for word matching as the issue's judge, whose real chats let
    plain FTS5 bm25 rank 65 % of the evidence in its top 20; the harder mix is harder still."""
    calibrated = fts5_top(generate(20, seed=13))
    assert 0.50 <= calibrated <= 0.65
    assert fts5_top(generate(20, seed=13, mix=HARD_MIX)) < calibrated


def _anchors(family: Family, slots: dict[str, str]) -> frozenset[str]:
    """The words an anchored question may share with its evidence: those of the slot values
    (names, titles, numbers) and of the family's distinctive nouns; not the diet's {ev} and {ev2},
    which hold whole messages."""
    values = [render(value, slots) for name, value in slots.items() if name not in ("ev", "ev2")]
    return frozenset().union(*(content_words(text) for text in [*values, *family.nouns]))


def test_every_question_template_shares_only_what_its_wording_allows() -> None:
    """Across every family, slot bundle, question template and combination of evidence variants: a
    paraphrase shares no content word with its evidence, a topical question one ordinary word (no
    name or number), an anchored one one or two words all of a name, number, title or distinctive
    noun; and every template has at least two distractors sharing its words, one of them sharing
    the anchor or topical word."""
    for family in (f for kind in KINDS for f in FAMILIES[kind]):
        for values in family.options:
            slots = {"friend": "Maya", "colleague": "Derek", **values}
            anchors = _anchors(family, slots)
            pool = [render(user, slots) for user, _ in family.distractors]
            for wording in WORDINGS:
                for template in family.questions[wording]:
                    asked = render(template, slots)
                    for variants in itertools.product(*family.steps):
                        said = [render(f"{user}\n{reply}", slots) for user, reply in variants]
                        shared = shared_words(asked, said)
                        context = (family.name, wording, asked, shared)
                        if wording == "paraphrase":
                            assert not shared, context
                        elif wording == "topical":
                            assert len(shared) == 1 and not shared & anchors, context
                        else:
                            assert 1 <= len(shared) <= 2 and shared <= anchors, context
                        near = [text for text in pool if content_words(asked) & content_words(text)]
                        assert len(near) >= 2, context
                        if shared:
                            assert any(shared & content_words(text) for text in near), context


def test_filler_is_varied() -> None:
    """Almost every small-talk message of a conversation is different from the others."""
    for conversation in generate(4, seed=9):
        filler = [t.user for t in conversation.turns if t.role == "filler"]
        assert len(set(filler)) >= 0.95 * len(filler)


def test_the_extended_set_asks_multi_hop_and_inference_questions_over_months() -> None:
    """With `extended`, every conversation also asks four multi-hop questions (2-4 evidence turns,
    days to weeks apart, two weeks at the median) and four inference ones, over 8-16 weeks of up
    to 700 turns; without it the set is what it was."""
    extended = generate(20, seed=13, extended=True)
    gaps = []
    for conversation in extended:
        kinds = [q.kind for q in conversation.questions]
        assert kinds.count("multihop") == kinds.count("inference") == 4
        assert 300 <= len(conversation.turns) <= 700
        for q in conversation.questions:
            if q.kind == "multihop":
                assert 2 <= len(q.evidence) <= 4
                times = [conversation.turns[i].at for i in q.evidence]
                gaps += [(b - a) / 86_400 for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 2 and statistics.median(gaps) >= 10
    assert describe(extended)["weeks_mean"] >= 8
    assert all(q.kind not in HARD_KINDS for c in generate(20, seed=13) for q in c.questions)


def test_hard_questions_share_no_word_with_their_evidence_but_names() -> None:
    """Every multi-hop and inference question, under every slot bundle and evidence variant,
    shares with its evidence at most the names of people and things it asks about (no other
    content word), and has at least two distractors sharing its words."""
    for family in (f for kind in HARD_KINDS for f in families(kind)):
        for values in family.options:
            slots = {"friend": "Maya", "friend2": "Jonas", "colleague": "Derek", **values}
            names = frozenset().union(*(content_words(slots[name]) for name in slots
                                        if name in ("friend", "friend2", "colleague")
                                        or len(slots[name].split()) <= 3))
            pool = [render(user, slots) for user, _ in family.distractors]
            asked_any = False
            for template in (t for w in WORDINGS for t in family.questions[w]):
                asked = render(template, slots)
                asked_any = True
                for variants in itertools.product(*family.steps):
                    said = [render(f"{user}\n{reply}", slots) for user, reply in variants]
                    assert shared_words(asked, said) <= names, (family.name, asked)
                near = [text for text in pool if content_words(asked) & content_words(text)]
                assert len(near) >= 2, (family.name, asked)
            assert asked_any, family.name


def test_plain_bm25_and_plain_cosine_find_less_of_the_hard_kinds() -> None:
    """Plain FTS5 bm25 (top 20) finds under a quarter of the multi-hop and inference evidence, and
    less than of the original kinds; a plain cosine (top 40, the shipped static encoder) finds less
    of them than of the single-hop questions' evidence."""
    from bot.ranking.embedding import ModelFiles
    from bot.ranking.static_embedding import MODEL_NAME, PACKAGED, StaticEncoder

    extended = generate(6, seed=13, extended=True)
    words = fts5_by_kind(extended)
    assert words["multihop"] < 0.25 and words["inference"] < 0.25
    assert max(words["multihop"], words["inference"]) < min(words["fact"], words["temporal"])
    encoder = StaticEncoder.load(ModelFiles(MODEL_NAME, directory=PACKAGED, encoder="static"))
    meaning = semantic_top(extended, encoder.encode)
    assert max(meaning["multihop"], meaning["inference"]) < meaning["fact"]


def test_word_reachable_is_the_ceiling_plain_bm25_cannot_pass() -> None:
    """The share of evidence holding one of its question's words bounds what bm25 finds, per kind,
    and the hard kinds' evidence mostly holds none (names aside, their questions share nothing)."""
    extended = generate(6, seed=13, extended=True)
    ceiling = word_reachable(extended)
    found = fts5_by_kind(extended)
    for kind, share in found.items():
        assert share <= ceiling[kind] + 1e-9, kind
    assert ceiling["multihop"] < 0.25 and ceiling["inference"] < 0.3
    assert ceiling["fact"] > 0.5
