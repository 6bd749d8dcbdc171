"""Lexical recall's thesaurus: a request's words also search for their neighbours from the static table."""

from __future__ import annotations

from bot.core.messages import StoredMessage
from bot.ranking.lexical import PREFIX_MIN, score, search_terms, session_tag, term_weight
from bot.ranking.thesaurus import PATH, expansions, neighbours
from bot.store import Store
from bot.testing.fake_channel import FakeChannel

FAR = 10**9


def test_the_shipped_thesaurus_holds_stems_and_their_nearest_stems() -> None:
    """Each line is a stem and its neighbours, nearest first, similarities in hundredths; "cat"
    has "kitten" among its neighbours and never itself."""
    lines = PATH.read_text(encoding="ascii").splitlines()
    assert len(lines) > 10_000
    found = dict(neighbours("cat"))
    assert "kitten" in found and "cat" not in found
    similarities = [similarity for _, similarity in neighbours("cat")]
    assert similarities == sorted(similarities, reverse=True) and all(0 < s < 1 for s in similarities)
    assert neighbours("no-such-stem") == ()


def test_expansions_leave_out_the_request_s_words_and_what_their_prefixes_find() -> None:
    """Neighbours come most similar first, up to the limit; none is a word of the request or a
    word one of its longer stems begins as a prefix."""
    found = expansions(["cat", "photo"], 24, prefix_min=PREFIX_MIN)
    words = [word for word, _ in found]
    assert "kitten" in words and "cat" not in words and "photo" not in words
    assert not any(word.startswith("photo") for word in words)
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
    assert expansions(["cat", "photo"], 2, prefix_min=PREFIX_MIN) == found[:2]
    assert expansions(["cat"], 0, prefix_min=PREFIX_MIN) == []


def test_search_terms_add_neighbours_after_the_words_at_their_similarity() -> None:
    """Without `expand` a request searches its own words at full weight; with it, its neighbours
    follow, each weighing its similarity."""
    plain = search_terms("k", "photo of the cat")
    assert [term.factor for term in plain] == [1.0, 1.0]
    expanded = search_terms("k", "photo of the cat", expand=3)
    assert expanded[:2] == plain and len(expanded) == 5
    tag = session_tag("k")
    neighbouring = expansions(["photo", "cat"], 3, prefix_min=PREFIX_MIN)
    for term, (word, similarity) in zip(expanded[2:], neighbouring, strict=True):
        assert term.token == tag + "x" + word and term.factor == similarity < 1


async def chat(store: Store, *texts: str) -> tuple[str, list[StoredMessage]]:
    """A new chat's session key and its messages of `texts`, stored in order."""
    channel = FakeChannel()
    stored = [await store.append_inbound(channel.message(text)) for text in texts]
    assert all(stored)
    return str(channel.key()), [message for message in stored if message is not None]


async def test_a_neighbour_finds_its_message_below_the_word_itself(store: Store) -> None:
    """"cats" finds the message saying "kitten" only with expansion, ranked below the message with
    the word itself, scored as the neighbour's similarity times its idf; on both stores."""
    key, (kitten, cat, _) = await chat(
        store, "we adopted a tiny kitten today", "the cat slept all day", "the weather was grey")
    plain, _ = await store.lexical_turns(key, "how are the cats?", before_id=FAR, limit=10)
    assert [message_id for message_id, _ in plain] == [cat.id]
    found, turns = await store.lexical_turns(key, "how are the cats?", before_id=FAR, limit=10, expand=24)
    assert [message_id for message_id, _ in found] == [cat.id, kitten.id]
    assert kitten.id in turns
    similarity = dict(neighbours("cat"))["kitten"]
    assert dict(found)[kitten.id] == score(term_weight(1, 3) * similarity, kitten.token_estimate)
    matches, _ = await store.lexical_matches(key, "how are the cats?", before_id=FAR, limit=10, expand=24)
    assert matches == found


async def test_without_neighbours_found_the_words_score_as_with_them(store: Store) -> None:
    """The words' search without thesaurus neighbours scores exactly as with neighbours that find
    nothing, and as BM25's idf by length says; the words' search with the turn starts
    (`lexical_matches`) agrees; both stores."""
    key, (cat, photo, _) = await chat(
        store, "the cat slept all day", "a photo of the garden", "the weather was grey")
    question = "a photo of the cat?"
    plain, _ = await store.lexical_turns(key, question, before_id=FAR, limit=10)
    assert dict(plain) == {cat.id: score(term_weight(1, 3), cat.token_estimate),
                           photo.id: score(term_weight(1, 3), photo.token_estimate)}
    assert len(search_terms(key, question, expand=2)) == 4  # two neighbours, found nowhere here
    expanded, _ = await store.lexical_turns(key, question, before_id=FAR, limit=10, expand=2)
    assert expanded == plain
    for expand in (0, 2):
        matches, _ = await store.lexical_matches(key, question, before_id=FAR, limit=10, expand=expand)
        assert matches == plain
