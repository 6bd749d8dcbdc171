"""Privacy at every boundary (issue 31): what a tool returns in a chat is only what every participant
of that chat may already see, over random users, private chats, groups, notes and reminders."""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from bot.config import Config, parse_config
from bot.context.embed_worker import embed_backlog
from bot.core.messages import ChatRef, InboundMessage, StoredMessage
from bot.core.session_key import SessionKey, build
from bot.ranking.embedding import Embedder, load_embedder, unavailable_reason
from bot.ranking.lexical import MAX_TERMS, query_terms
from bot.schedule.reminder_tools import ReminderTools
from bot.store import Store
from bot.tools.base import ToolContext, ToolResult
from bot.tools.builtins import BuiltinTools
from bot.turn.tools import TurnTools

NOW = datetime(2025, 3, 31, 12, 0, tzinfo=UTC).timestamp()
WORDS = ("garden", "meeting", "invoice", "holiday", "bicycle", "concert", "recipe", "dentist")
DATES: tuple[dict[str, str], ...] = (
    {}, {"since": "2025-03-22"}, {"until": "2025-03-22"}, {"since": "2000-01-01", "until": "2100-01-01"},
)
NO_BRAIN: Any = None  # TurnTools' contexts and notes never ask the model
SCOPES = pytest.mark.parametrize("scope", [None, "user"], ids=["default-scope", "user-scope"])
_examples = itertools.count(1)  # each example's users and groups have ids of their own in the store


def make_config(scope: str | None) -> Config:
    """The tools' config: `[tools] search_scope` only when given (else the default), room for all."""
    tools: dict[str, Any] = {"search_results": 50}
    if scope is not None:
        tools["search_scope"] = scope
    return parse_config({"tools": tools, "reminders": {"max_pending": 1000}}, "<privacy test>")


@dataclass(frozen=True, slots=True)
class Chat:
    """A session and the people in it: a private chat's user, or a group's members."""

    key: SessionKey
    members: tuple[str, ...]

    @property
    def ref(self) -> ChatRef:
        return ChatRef("telegram", self.key.peer)


def dm(user: str) -> Chat:
    return Chat(build("main", "telegram", "direct", user), (user,))


def group(group_id: str, *members: str) -> Chat:
    return Chat(build("main", "telegram", "group", group_id), members)


@dataclass(frozen=True, slots=True)
class Secret:
    word: str
    chat: Chat
    author: str  # who wrote it: a user, or "agent" for a reply
    via: str  # "message", "reply", "note" or "reminder"
    owner: str  # whose it is: the author, or for a reply the sender of the request it answers


def may_read(chat: Chat, user: str, secret: Secret, scope: str | None, *, prompt: bool = False) -> bool:
    """The rule: a chat reads what was written among exactly its people; with scope "user" a
    private chat also reads its user's own messages elsewhere. The notes block of the prompt shows
    only the asker's own notes, in their private chat."""
    if prompt:
        return chat.key.is_direct and secret.via == "note" and secret.author == user
    if set(secret.chat.members) == set(chat.members):
        return True
    return scope == "user" and chat.key.is_direct and secret.via == "message" and secret.author == user


class Turn(NamedTuple):
    inbound: InboundMessage
    context: ToolContext


class Scene:
    """Users and the agent writing through the store as the daemon does, the daemon's tools over
    it, and every secret written, with where, by whom and how."""

    def __init__(self, store: Store, config: Config, embedder: Embedder | None = None) -> None:
        self.store = store
        sources = (BuiltinTools(store, lambda: config, embedder),
                   ReminderTools(store, lambda: config.reminders))
        self.tools = {tool.name: tool for source in sources for tool in source.tools()}
        self.turns = TurnTools(config, store, NO_BRAIN, None, clock=lambda: NOW)
        self.secrets: list[Secret] = []
        self.reminder_ids: set[int] = set()
        self.note_ids: set[int] = set()
        self.example = next(_examples)
        self._serial = itertools.count()
        self._times = itertools.count()

    def secret(self, chat: Chat, author: str, via: str, owner: str | None = None) -> str:
        """A new word no one else writes, recorded with where, by whom and how it was written."""
        word = f"zq{self.example:03x}{next(self._serial):04x}"
        self.secrets.append(Secret(word, chat, author, via, owner or author))
        return word

    def inbound(self, chat: Chat, sender: str, text: str, *, starts_turn: bool = True) -> InboundMessage:
        # Five hours apart, from 20 days before NOW: `since`/`until` split the history.
        sent_at = NOW - 20 * 86400 + 5 * 3600 * next(self._times)
        return InboundMessage(chat.key, chat.ref, sender, f"user {sender}", text,
                              starts_turn=starts_turn, sent_at=sent_at)

    async def say(self, chat: Chat, sender: str, text: str = "hello", *, secret: bool = False,
                  starts_turn: bool = True) -> StoredMessage:
        if secret:
            text = f"{text} {self.secret(chat, sender, 'message')}"
        stored = await self.store.append_inbound(self.inbound(chat, sender, text, starts_turn=starts_turn))
        assert stored is not None
        return stored

    async def reply(self, chat: Chat, request: StoredMessage, text: str = "noted", *,
                    secret: bool = False) -> None:
        if secret:
            text = f"{text} {self.secret(chat, 'agent', 'reply', request.sender_id)}"
        await self.store.append_reply(str(chat.key), text, request_id=request.id)

    async def turn(self, chat: Chat, user: str, text: str = "what do you know?") -> Turn:
        """A request stored and its tools' context, as the daemon makes them."""
        inbound = self.inbound(chat, user, text)
        request = await self.store.append_inbound(inbound)
        assert request is not None
        return Turn(inbound, self.turns.context(inbound, request, None))

    async def run(self, name: str, arguments: dict[str, Any], turn: Turn) -> ToolResult:
        return await self.tools[name].run(arguments, turn.context)

    async def remember(self, chat: Chat, user: str, words: str = "keep") -> ToolResult:
        turn = await self.turn(chat, user, "please remember this")
        kept = await self.run("remember", {"note": f"{words} {self.secret(chat, user, 'note')}"}, turn)
        self.note_ids.update(int(n) for n in re.findall(r"#(\d+)", kept.summary))
        await self.store.append_reply(str(chat.key), "kept", request_id=turn.context.request_id)
        return kept

    async def remind(self, chat: Chat, user: str, words: str = "call") -> ToolResult:
        turn = await self.turn(chat, user, "remind me later")
        text = f"{words} {self.secret(chat, user, 'reminder')}"
        set_ = await self.run("set_reminder", {"text": text, "when": "in 2 hours"}, turn)
        self.reminder_ids.update(int(n) for n in re.findall(r"#(\d+)", set_.summary))
        await self.store.append_reply(str(chat.key), "set", request_id=turn.context.request_id)
        return set_

    async def probe(self, chats: list[Chat], scope: str | None, *, thorough: bool = True) -> list[str]:
        """Every participant of every chat asks every tool with every argument it can name (not
        `thorough`: search_history only, for all the secrets at once and for common words: the
        other tools read nothing by meaning); the leaks found, as "what, where, as whom: which
        secret of whom from where"."""
        leaks: list[str] = []
        turns: dict[tuple[SessionKey, str], Turn] = {}
        people = sorted({user for chat in chats for user in chat.members})
        words = [secret.word for secret in self.secrets]
        combined = _packed(words)
        for chat in chats:
            for user in chat.members:
                turn = turns[chat.key, user] = await self.turn(chat, user)
                queries: list[tuple[str, dict[str, str]]] = [(q, {}) for q in combined]
                if thorough:
                    queries += [(query, dates) for query in combined for dates in DATES[1:]]
                    queries += [(q, {}) for q in _packed([*WORDS, *people, *(str(c.key) for c in chats)])]
                    queries += [(s.word, {}) for s in self.secrets if not may_read(chat, user, s, scope)]
                else:
                    queries.append((" ".join(WORDS), {}))
                for query, dates in queries:
                    leaks += await self.check("search_history", {"query": query, **dates}, turn, chat, scope)
                if not thorough:
                    continue
                for name in ("list_reminders", "current_time"):
                    leaks += await self.check(name, {}, turn, chat, scope)
                block = _prompt_text(await self.turns.notes(turn.inbound, None))
                leaks += self.leaks("the notes block", block, chat, user, scope, prompt=True)
        # Writes last, so they take nothing away from the reads above.
        for chat in chats if thorough else []:
            for user in chat.members:
                turn = turns[chat.key, user]
                numbers = _around(self.reminder_ids)
                for raw in (*numbers, f"#{numbers[-1]}"):
                    leaks += await self.check("cancel_reminder", {"id": raw}, turn, chat, scope)
                for number in _around(self.note_ids):
                    leaks += await self.check("forget", {"note_id": number}, turn, chat, scope)
        return leaks

    async def check(self, name: str, arguments: dict[str, Any], turn: Turn, chat: Chat,
                    scope: str | None) -> list[str]:
        """Run one call; the leaks in what its result tells beyond the call's own arguments (a
        summary may quote the query back)."""
        result = await self.run(name, arguments, turn)
        content, summary = result.content, result.summary
        for value in arguments.values():
            if isinstance(value, str):
                content = content.replace(repr(value), "").replace(f'"{value}"', "")
                summary = summary.replace(value, "")
        return self.leaks(f"{name}({arguments})", f"{content}\n{summary}", chat, turn.context.user_id,
                          scope)

    def leaks(self, what: str, shown: str, chat: Chat, user: str, scope: str | None, *,
              prompt: bool = False) -> list[str]:
        return [f"{what} in {chat.key} as {user}: {s.word}, a {s.via} of {s.author} in {s.chat.key} "
                f"(members {sorted(s.chat.members)})" for s in self.secrets
                if s.word in shown and not may_read(chat, user, s, scope, prompt=prompt)]


    async def unfound(self) -> list[str]:
        """The secrets of messages and replies that their owner, searching for them in the chat they
        were written in, does not get back: the reads above must not pass by finding nothing."""
        missing = []
        for secret in self.secrets:
            if secret.via in ("message", "reply"):
                found = await self.run("search_history", {"query": secret.word},
                                       await self.turn(secret.chat, secret.owner))
                if secret.word not in found.content:
                    missing.append(f"{secret} not found by its owner: {found.content}")
        return missing


def _packed(texts: list[str]) -> list[str]:
    """The texts joined into as few queries as keep every word searched (MAX_TERMS a query). A
    query's candidates are those of each of its words, far fewer than `search_results`, and each is
    kept or dropped on its own, so one query shows what its texts asked apart would: at one read a
    word instead of one a word a text (a chat key apart read the same four words again)."""
    packed: list[list[str]] = []
    for text in texts:
        if packed and len(query_terms(" ".join([*packed[-1], text]))) <= MAX_TERMS:
            packed[-1].append(text)
        else:
            packed.append([text])
    return [" ".join(texts) for texts in packed]


def _around(ids: set[int]) -> range:
    return range(min(ids) - 1, max(ids) + 2) if ids else range(1, 3)


# -- the random worlds ----------------------------------------------------------------------------


class Event(NamedTuple):
    chat: int  # index into the world's chats: its private chats, then its groups
    who: int  # index into that chat's members
    act: str  # "say", "ask" (answered), "remember" or "remind"
    secret: bool  # the message holds a secret
    answer_secret: bool  # the agent's answer holds one
    between: int | None  # a member who writes (a secret) between the request and its answer
    words: str


@dataclass(frozen=True)
class World:
    """Users u0.. with private chats `dms`; groups g0.. with their members (a<n>: group n speaking
    as itself, an anonymous admin; it may post in other groups too, as a channel does)."""

    dms: tuple[str, ...]
    groups: tuple[tuple[str, ...], ...]
    events: tuple[Event, ...]


@st.composite
def worlds(draw: st.DrawFn) -> World:
    """Up to four users, some with a private chat, and up to three groups: two chats at least."""
    users = [f"u{n}" for n in range(draw(st.integers(1, 4)))]
    dms = tuple(draw(st.lists(st.sampled_from(users), unique=True)))
    count = draw(st.integers(max(0, 2 - len(dms)), 3))
    identities = users + [f"a{n}" for n in range(count)]
    groups = tuple(tuple(draw(st.lists(st.sampled_from(identities), min_size=1, max_size=4, unique=True)))
                   for _ in range(count))
    chats = [(user,) for user in dms] + list(groups)
    events = []
    for _ in range(draw(st.integers(1, 14))):
        where = draw(st.integers(0, len(chats) - 1))
        members = chats[where]
        act = draw(st.sampled_from(("say", "ask", "remember", "remind")))
        between = draw(st.none() | st.integers(0, len(members) - 1)) if act == "ask" else None
        who = draw(st.integers(0, len(members) - 1))
        secret, answer_secret = draw(st.booleans()), draw(st.booleans())
        words = " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=3)))
        events.append(Event(where, who, act, secret, answer_secret, between, words))
    return World(dms, groups, tuple(events))


async def play(scene: Scene, world: World) -> list[Chat]:
    """The world's chats with ids of this example's own, and its events written into them."""
    base = 10**9 + 1000 * scene.example
    ids = {f"u{n}": str(base + n) for n in range(4)}
    ids |= {f"a{n}": f"chat:-100{base + 100 + n}" for n in range(3)}
    chats = [dm(ids[user]) for user in world.dms]
    chats += [group(f"-100{base + 100 + n}", *(ids[member] for member in members))
              for n, members in enumerate(world.groups)]
    for event in world.events:
        chat = chats[event.chat]
        who = chat.members[event.who]
        text = event.words or "hello"
        if event.act == "say":
            await scene.say(chat, who, text, secret=event.secret, starts_turn=chat.key.is_direct)
        elif event.act == "ask":
            request = await scene.say(chat, who, text, secret=event.secret)
            if event.between is not None:
                await scene.say(chat, chat.members[event.between], text, secret=True, starts_turn=False)
            await scene.reply(chat, request, secret=event.answer_secret)
        elif event.act == "remember":
            await scene.remember(chat, who, text)
        else:
            await scene.remind(chat, who, text)
    note("chats: " + "; ".join(f"{chat.key} {list(chat.members)}" for chat in chats))
    return chats


async def no_leaks(store: Store, scope: str | None, world: World) -> None:
    """Whoever asks whatever in the world's chats, no tool result holds a secret written only among
    other people, and every owner finds their own."""
    scene = Scene(store, make_config(scope))
    chats = await play(scene, world)
    leaks = await scene.probe(chats, scope)
    assert not leaks, f"{len(leaks)} leaks, first: " + "\n".join(leaks[:3])
    assert await scene.unfound() == []


@pytest.mark.sqlite_only
@SCOPES
@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(world=worlds())
async def test_no_tool_returns_what_someone_in_the_chat_could_not_see(
    store: Store, scope: str | None, world: World
) -> None:
    """Whoever asks whatever in a chat, no tool result holds a secret written only among other
    people (with scope "user", in a private chat, also the asker's own messages elsewhere)."""
    await no_leaks(store, scope, world)


@pytest.fixture
async def postgres_store(pg_url: str, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh store on PostgreSQL, as the `store` fixture makes it."""
    from bot.store.postgres import PostgresStore

    async with PostgresStore.connect(pg_url, state_path=tmp_path / "switchboard.db", label=pg_url) as pg:
        yield pg


# Fewer worlds than on SQLite's thirty (ten others: the seed is the test's own): what PostgreSQL
# adds is its SQL, the same statements whatever the world, and each read is a round trip to the
# server (some 550 an example, under load 5 ms each). The example tests below run every path
# (private chat, group, user scope, anonymous admin, notes, reminders) on it as well.
@SCOPES
@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(world=worlds())
async def test_no_tool_returns_what_someone_in_the_chat_could_not_see_on_postgresql(
    postgres_store: Store, scope: str | None, world: World
) -> None:
    """The same on PostgreSQL: no tool result holds a secret written only among other people."""
    await no_leaks(postgres_store, scope, world)


STATIC = parse_config({"semantic": {"encoder": "static"}}, "<static>")


@pytest.fixture(scope="module")
def static_embedder() -> Iterator[Embedder]:
    """The static encoder, read once for every example. Which encoder does not matter here: search
    by meaning takes a chat's nearest vectors whatever their score, so every message of the chats
    the asker may search is a candidate, and what is kept is the same rule's; MiniLM's own search is
    tests/test_history_semantic.py's (it took a minute under load here, embedding every example)."""
    embedder = load_embedder(STATIC)
    assert embedder is not None
    yield embedder


@pytest.mark.skipif(unavailable_reason(STATIC) is not None,
                    reason="the semantic extra is not installed (`make semantic`)")
# Ten worlds, shrunk as any: with the static encoder an example costs what one without it does.
@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(world=worlds())
async def test_no_search_by_meaning_returns_what_someone_in_the_chat_could_not_see(
    store: Store, static_embedder: Embedder, world: World
) -> None:
    """With the embedder, search by meaning (which finds the nearest messages whatever the words)
    returns no secret written only among other people either."""
    config, embedder = make_config(None), static_embedder
    scene = Scene(store, config, embedder)
    chats = await play(scene, world)
    await embed_backlog(store, embedder, batch_size=64)
    leaks = await scene.probe(chats, None, thorough=False)
    assert not leaks, f"{len(leaks)} leaks, first: " + "\n".join(leaks[:3])


# -- the same property, by example ----------------------------------------------------------------

ADA, BEA = "5550001", "5550002"
GROUP = "-1005550100"


async def test_a_private_chat_secret_is_not_found_from_a_group(store: Store) -> None:
    """What Ada wrote (and was answered) in her private chat is not found when she searches in a group."""
    scene = Scene(store, make_config(None))
    mine, ours = dm(ADA), group(GROUP, ADA, BEA)
    request = await scene.say(mine, ADA, "my locker code", secret=True)
    await scene.reply(mine, request, "it is", secret=True)
    await scene.say(ours, ADA, "hi all")
    assert await scene.probe([mine, ours], None) == []


async def test_a_group_secret_is_not_found_from_the_private_chat_by_default(store: Store) -> None:
    """What Ada, Bea and the agent wrote in a group is not found from Ada's private chat under the
    default scope."""
    scene = Scene(store, make_config(None))
    mine, ours = dm(ADA), group(GROUP, ADA, BEA)
    request = await scene.say(ours, ADA, "the garden plan", secret=True)
    await scene.say(ours, BEA, "and the invoice", secret=True, starts_turn=False)
    await scene.reply(ours, request, "both noted", secret=True)
    await scene.say(mine, ADA, "hello")
    assert await scene.probe([mine, ours], None) == []


async def test_user_scope_brings_the_users_own_group_words_but_no_one_elses(store: Store) -> None:
    """With search_scope "user", Ada's own group message is found from her private chat, Bea's
    message and the agent's answer (even one that follows Bea's message) are not."""
    scene = Scene(store, make_config("user"))
    mine, ours = dm(ADA), group(GROUP, ADA, BEA)
    request = await scene.say(ours, ADA, "the garden plan", secret=True)
    await scene.say(ours, BEA, "the garden invoice", secret=True, starts_turn=False)
    await scene.reply(ours, request, "garden noted", secret=True)
    own, bea, agent = (secret.word for secret in scene.secrets)
    asking = await scene.turn(mine, ADA)
    found = await scene.run("search_history", {"query": f"garden {own} {bea} {agent}"}, asking)
    assert own in found.content
    assert bea not in found.content and agent not in found.content
    assert await scene.probe([mine, ours], "user") == []


async def test_reminders_of_one_chat_are_not_listed_or_cancelled_in_another(store: Store) -> None:
    """Ada's reminders set in her private chat and in a group are listed (and cancellable) only in
    the chat they were set in; Bea sees none of Ada's."""
    scene = Scene(store, make_config(None))
    mine, ours = dm(ADA), group(GROUP, ADA, BEA)
    private, shared = await scene.remind(mine, ADA), await scene.remind(ours, ADA)
    assert not private.is_error and not shared.is_error
    listed = await scene.run("list_reminders", {}, await scene.turn(ours, ADA))
    assert scene.secrets[1].word in listed.content and scene.secrets[0].word not in listed.content
    assert await scene.probe([mine, ours, dm(BEA)], None) == []


async def test_notes_are_shown_only_to_their_owner_in_a_private_chat(store: Store) -> None:
    """Ada's notes appear in her own private chat's prompt only: never in a group's, never in Bea's."""
    scene = Scene(store, make_config(None))
    mine, ours = dm(ADA), group(GROUP, ADA, BEA)
    await scene.remember(mine, ADA)
    await scene.remember(dm(BEA), BEA)
    assert scene.secrets[0].word in _prompt_text(
        await scene.turns.notes((await scene.turn(mine, ADA)).inbound, None))
    assert await scene.turns.notes((await scene.turn(ours, ADA)).inbound, None) == []
    assert await scene.probe([mine, ours, dm(BEA)], None) == []


async def test_an_anonymous_admin_reads_only_the_group_it_speaks_in(store: Store) -> None:
    """A group speaking as itself ("chat:" sender) in two groups finds in each only that group's
    words, and keeps no notes."""
    scene = Scene(store, make_config(None))
    speaker = f"chat:{GROUP}"
    first, second = group(GROUP, speaker, ADA), group("-1005550200", speaker, BEA)
    for chat in (first, second):
        request = await scene.say(chat, speaker, "announcement", secret=True)
        await scene.reply(chat, request, "posted", secret=True)
    assert await scene.probe([first, second], None) == []
    await scene.run("remember", {"note": "a note"}, await scene.turn(first, speaker))
    assert await store.notes_of("telegram", speaker) == []


def _prompt_text(parts: list[tuple[str, str]]) -> str:
    """The asker's part of the system prompt as the model reads it."""
    return "".join("\n\n" + text for _, text in parts)
