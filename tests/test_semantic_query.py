"""What a request is searched by in meaning (issue 38): with the static table, whose vector of a text
is the mean of its words', the request's vector plus that of its content and question words, so
the words around its subject ("have I been", "this") pull it less towards every other question;
with MiniLM, the request's own vector as stored. Real encoders, real SQLite files."""

from __future__ import annotations

from collections.abc import Sequence
from operator import add
from typing import Any

import pytest

from bot.config import parse_config
from bot.context.embed_worker import embed_backlog
from bot.context.semantic_recall import SemanticRecall
from bot.core.messages import ChatRef, InboundMessage, StoredMessage
from bot.core.session_key import build
from bot.ranking.embedding import Embedder, embedding_text, load_embedder, unavailable_reason
from bot.ranking.lexical import content_text
from bot.store import Store

SESSION = build("main", "telegram", "direct", "42")


def test_content_text_keeps_the_subject_and_what_is_asked() -> None:
    """Content words as written (names too, not stemmed) and the question words; the rest goes,
    and a text of stopwords alone has none."""
    assert content_text("Which medical problems have I been through?") == "Which medical problems through"
    assert content_text("What do Maya and Jonas have in common?") == "What Maya Jonas common"
    assert content_text("How much is still owed on the 2024 loan?") == "How much still owed 2024 loan"
    assert content_text("Café près de la gare") == "Café près gare"
    assert content_text("what about that?") == ""
    assert content_text("") == ""


class Recording:
    """A real encoder, recording the texts it encodes (and whether it averages words)."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
        self.model_id = embedder.model_id
        self.mean_of_words = embedder.mean_of_words
        self.texts: list[str] = []

    def encode(self, texts: Sequence[str]) -> Any:
        self.texts.extend(texts)
        return self._embedder.encode(texts)


def encoder(name: str) -> Embedder:
    config = parse_config({"semantic": {"encoder": name}}, "<test>")
    if unavailable_reason(config) is not None:
        pytest.skip(f"the {name} encoder is not installed (`make semantic`)")
    loaded = load_embedder(config)
    assert loaded is not None
    return loaded


async def say(store: Store, text: str) -> StoredMessage:
    stored = await store.append_inbound(InboundMessage(
        session_key=SESSION, chat=ChatRef("telegram", "42"), sender_id="42", sender_name="", text=text))
    assert stored is not None
    return stored


HISTORY = ("The GP says tonsillitis, antibiotics for a week.", "Have I been here before?",
           "Which one have I not read yet?", "What a day I have had!")
REQUEST = "Which medical problems have I been through?"


async def test_the_static_table_searches_the_request_with_its_content_words(store: Store) -> None:
    """By its own vector the request's nearest message is another question ("Have I been here
    before?"); it is searched by that vector plus its content words' (encoded on the spot), which
    lean to the illness: its gap to the other question narrows. The request's stored vector is not
    what is searched, and nothing is stored for it. (The table fitted before WordNet's glosses
    joined its corpus ranked the illness first by the sum; today's weighs "have I been" more.)"""
    static = encoder("static")
    assert static.mean_of_words
    said = [await say(store, text) for text in HISTORY]
    request = await say(store, REQUEST)
    assert await embed_backlog(store, static, batch_size=8) == len(HISTORY) + 1
    words, whole = static.encode(["Which medical problems through", embedding_text(request)])
    by_itself = dict(await store.semantic_matches(str(SESSION), whole, model=static.model_id,
                                                  before_id=request.id, limit=4))
    assert max(by_itself, key=by_itself.__getitem__) == said[1].id
    recording = Recording(static)
    recall = SemanticRecall(store, recording)  # type: ignore[arg-type]
    found = await recall.early_matches(str(SESSION), request, limit=4, window=100)
    assert found is not None
    assert found == await store.semantic_matches(str(SESSION), list(map(add, words, whole)),
                                                 model=static.model_id, before_id=request.id, limit=4)
    scores, illness, other = dict(found), said[0].id, said[1].id
    assert scores[illness] - scores[other] > by_itself[illness] - by_itself[other]
    assert sorted(message_id for message_id, _ in found) == [message.id for message in said]
    assert recording.texts == ["Which medical problems through", REQUEST]
    assert await recall.matches(str(SESSION), request, limit=4) == found


async def test_minilm_searches_the_request_as_stored(store: Store) -> None:
    """MiniLM reads words in their context: the request's stored vector is searched, and nothing
    is encoded."""
    minilm = encoder("minilm")
    assert not minilm.mean_of_words
    for text in HISTORY:
        await say(store, text)
    request = await say(store, REQUEST)
    await embed_backlog(store, minilm, batch_size=8)
    recording = Recording(minilm)
    found = await SemanticRecall(store, recording).matches(  # type: ignore[arg-type]
        str(SESSION), request, limit=4)
    assert len(found) == 4 and recording.texts == []


async def test_a_request_without_content_words_is_searched_as_stored(store: Store) -> None:
    """Under the static table too, a request of stopwords alone is searched by its stored vector."""
    static = encoder("static")
    for text in HISTORY:
        await say(store, text)
    bare = await say(store, "what about that?")
    await embed_backlog(store, static, batch_size=8)
    recording = Recording(static)
    found = await SemanticRecall(store, recording).matches(  # type: ignore[arg-type]
        str(SESSION), bare, limit=4)
    assert len(found) == 4 and recording.texts == []
