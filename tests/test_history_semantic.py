"""search_history by meaning, with the semantic extra: a question in other words finds the user's
own message, never someone else's."""

from __future__ import annotations

import time

import pytest

from bot.config import parse_config
from bot.context.embed_worker import embed_backlog
from bot.core.messages import ChatRef, InboundMessage
from bot.core.session_key import build
from bot.ranking.embedding import load_embedder, unavailable_reason
from bot.store import Store
from bot.tools.base import ToolContext
from bot.tools.history import history_tool

pytestmark = pytest.mark.skipif(unavailable_reason(parse_config({}, "<defaults>")) is not None,
                                reason="the semantic extra is not installed (`make semantic`)")

GROUP = build("main", "telegram", "group", "-100")


async def test_search_history_finds_the_users_words_by_meaning_and_only_theirs(store: Store) -> None:
    """"kids and family plans" shares no word with "I looked into adoption agencies" but finds it;
    Bea's message of the same meaning is never returned to Caroline."""
    config = parse_config({"tools": {"search_results": 1}}, "<defaults>")  # only the best match
    embedder = load_embedder(config)
    assert embedder is not None
    said = (("1", "I looked into adoption agencies last week"), ("2", "I checked adoption agencies too"),
            ("1", "The weather was rainy on the coast"))
    for sender, text in said:
        await store.append_inbound(InboundMessage(GROUP, ChatRef("telegram", "-100"), sender,
                                                  {"1": "Caroline", "2": "Bea"}[sender], text))
    await embed_backlog(store, embedder, batch_size=8)
    tool = history_tool(store, lambda: config, embedder)
    asking = ToolContext(GROUP, ChatRef("telegram", "-100"), "1", 99, False, True, time.time(), "UTC")
    found = await tool.run({"query": "kids and family plans"}, asking)
    assert "adoption agencies last week" in found.content
    assert "checked adoption agencies too" not in found.content and "weather" not in found.content
