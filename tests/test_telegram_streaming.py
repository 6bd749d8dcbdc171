"""Streamed replies on Telegram: the real python-telegram-bot against the Bot API stand-in, with a
model stand-in that writes slowly. A private chat's reply grows as a draft and lands once as a
message; a group's grows in one message edited in place, within the group's budget."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from telegram import Bot
from telegram.ext import ExtBot

from bot.config import Config
from bot.core.messages import ChatRef, OutboundMessage
from bot.daemon.assembly import Daemon
from bot.store import Store
from bot.store.postgres import PostgresStore
from bot.testing.anthropic_api import AnthropicStandIn, Error, Text
from bot.testing.telegram_api import (
    TelegramStandIn,
    group_chat,
    mention_entities,
    private_chat,
)
from bot.turn.runner import FALLBACK_REPLY
from channels.telegram.html import telegram_chunks
from channels.telegram.preview import TelegramPreview, edit_into
from channels.telegram.request import default_rate_limiter
from channels.telegram.send import send_reply
from tests.fakes import MovedClock
from tests.harness import config_data, router_of
from tests.test_telegram import ADA, BOT, telegram_daemon

MakeConfig = Callable[[dict[str, Any]], Config]
GROUP = group_chat(-100123, "Friends", supergroup=True)
FORUM = group_chat(-100777, "Forum", forum=True)
DM_KEY = "agent:main:telegram:direct:42"
GROUP_KEY = "agent:main:telegram:group:-100123"
ANSWER = ("Tides follow the moon. The moon pulls the sea toward it, and the earth turning under "
          "that bulge gives two high tides a day. The sun adds a smaller pull of its own.")


def slowly(text: str, seconds: float, parts: int = 25) -> Text:
    """The model writing `text` over about `seconds`, in `parts` deltas."""
    return Text(text, parts=parts, delta_delay=seconds / parts)



@pytest.fixture
def telegram_config(
    api: AnthropicStandIn, tg: TelegramStandIn, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Config]:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)

    def make(**telegram: Any) -> Config:
        router = telegram.pop("router", {})
        section = {"enabled": True, "base_url": tg.base_url, "allow_from": [42], "groups": [-100123, -100777],
                   **telegram}
        # One retry and room for a slow stream: the model here takes seconds on purpose.
        anthropic = {"timeout": 20.0, "max_retries": 1}
        return make_config(config_data(api, channels={"telegram": section}, anthropic=anthropic,
                                       router=router))

    return make


async def answered(tg: TelegramStandIn, daemon: Daemon, chat: dict[str, Any], text: str) -> None:
    """Push a message and wait until its turn is over (reply stored and delivered)."""
    entities = mention_entities(text, BOT) if chat["type"] != "private" else None
    pushed = tg.push_message(chat, ADA, text, entities=entities)
    await tg.wait_for(lambda: tg.confirmed_offset > pushed["update_id"])
    await router_of(daemon).idle()


def final_text(tg: TelegramStandIn, chat_id: int, message_id: int) -> str:
    """What a bot message shows now, after every edit."""
    edits = [e.visible_text for e in tg.edits if (e.chat_id, e.message_id) == (chat_id, message_id)]
    (sent,) = [m for m in tg.sent if (m.chat_id, m.message_id) == (chat_id, message_id)]
    return edits[-1] if edits else sent.visible_text


async def stored_reply(config: Config, key: str, chat_id: int, message_ids: list[int]) -> str:
    """The stored reply's text, once every given platform message is linked to it and the outbox
    is empty (nothing left to send)."""
    async with Store.open(config.database_path()) as store:
        assert await store.pending_deliveries() == []
        reply = (await store.history(key, 10))[-1]
        for message_id in message_ids:
            found = await store.message_by_provider_id(ChatRef("telegram", str(chat_id)), str(message_id))
            assert found is not None and found.id == reply.id
    assert reply.role == "assistant"
    return reply.text


async def test_a_private_reply_grows_as_a_draft_then_lands_once_as_a_message(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """While the model writes, the private chat sees one draft growing (several updates, each
    longer, fewer than the model's deltas), typing stops at the first text, and the finished reply
    arrives exactly once as a message, stored as it was sent."""
    config = telegram_config()
    api.script(slowly(ANSWER, 5.0))
    async with telegram_daemon(config) as daemon:
        await answered(tg, daemon, private_chat(ADA), "why are there tides?")

    drafts = [d for d in tg.drafts if d.chat_id == 42]
    assert len(drafts) >= 3
    assert len(drafts) < 25  # paced: not one update per delta
    assert len({d.draft_id for d in drafts}) == 1
    texts = [d.visible_text for d in drafts]
    assert all(len(a) < len(b) for a, b in itertools.pairwise(texts))
    assert all(ANSWER.startswith(t) for t in texts)
    assert [(m.chat_id, m.visible_text) for m in tg.sent] == [(42, ANSWER)]
    assert tg.edits == []
    first_draft = drafts[0].time
    assert [c for c in tg.calls_of("sendChatAction") if c.time > first_draft] == []
    assert tg.sent[0].time > drafts[-1].time
    assert await stored_reply(config, DM_KEY, 42, [tg.sent[0].message_id]) == ANSWER


async def test_a_reply_complete_before_the_first_draft_is_due_sends_no_draft(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """A reply the model streams at once is sent as one message with no draft before it: a draft
    would only cost a slot of the send budget the replies need."""
    config = telegram_config()
    api.script(Text(ANSWER))
    async with telegram_daemon(config) as daemon:
        await answered(tg, daemon, private_chat(ADA), "why are there tides?")

    assert tg.calls_of("sendMessageDraft") == []
    assert [(m.chat_id, m.visible_text) for m in tg.sent] == [(42, ANSWER)]


async def test_with_the_send_budget_spent_a_reply_goes_before_any_preview(tg: TelegramStandIn) -> None:
    """With Telegram's 30 a second spent and replies waiting for their turn, previews asked for
    meanwhile (drafts, a group's preview message) are skipped, not queued: a reply asked for after
    them waits for no preview, and no preview arrives late."""
    async with ExtBot(tg.token, base_url=tg.base_url, rate_limiter=default_rate_limiter()) as bot:
        earlier = [asyncio.create_task(bot.send_message(1000 + n, f"reply {n}")) for n in range(90)]
        await tg.wait_for(lambda: len(tg.sent) >= 30)  # the second's budget: the rest wait
        surfaces = [TelegramPreview(bot, ChatRef("telegram", str(2000 + n)), None, private=True,
                                    no_drafts=set(), chunks=telegram_chunks) for n in range(10)]
        surfaces.append(TelegramPreview(bot, ChatRef("telegram", "-100123"), None, private=False,
                                        no_drafts=set(), chunks=telegram_chunks))
        previews = [asyncio.create_task(surface.show("Tides follow the moon.")) for surface in surfaces]
        await asyncio.sleep(0)
        await send_reply(bot, OutboundMessage(ChatRef("telegram", "3000"), "The answer."))
        await asyncio.gather(*earlier)
        await asyncio.gather(*previews, return_exceptions=True)

    # No preview went before the answer, nor after it: the replies, and nothing else.
    assert tg.calls_of("sendMessageDraft") == []
    replies = [f"reply {n}" for n in range(90)] + ["The answer."]
    assert sorted(m.visible_text for m in tg.sent) == sorted(replies)


async def test_a_group_keeps_the_last_of_its_minute_s_budget_for_replies(tg: TelegramStandIn) -> None:
    """In a group that has used 14 of its 20 messages this minute, a reply's preview message is not
    posted (the rest is kept for replies), and the reply itself still goes out."""
    group = ChatRef("telegram", "-100123")
    async with ExtBot(tg.token, base_url=tg.base_url, rate_limiter=default_rate_limiter()) as bot:
        await asyncio.gather(*(bot.send_message(-100123, f"reply {n}") for n in range(14)))
        preview = TelegramPreview(bot, group, None, private=False, no_drafts=set(), chunks=telegram_chunks)
        with contextlib.suppress(Exception):  # a preview that shows nothing may say so
            await preview.show("Tides follow the moon.")
        await send_reply(bot, OutboundMessage(group, "The answer."))

    assert [m.visible_text for m in tg.sent][14:] == ["The answer."]


async def test_refused_drafts_fall_back_to_one_edited_message_without_losing_the_reply(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """Where Telegram refuses drafts, the reply grows in one message edited in place instead, which
    becomes the reply (nothing sent twice); the chat's next reply goes straight to that path."""
    tg.refuse_drafts(42)
    config = telegram_config()
    api.script(slowly(ANSWER, 4.0), slowly("Second answer. It is shorter.", 2.5, parts=10))
    async with telegram_daemon(config) as daemon:
        await answered(tg, daemon, private_chat(ADA), "why are there tides?")
        (first,) = tg.sent
        assert final_text(tg, 42, first.message_id) == ANSWER
        assert first.visible_text != ANSWER  # it was posted as a preview, then edited
        assert await stored_reply(config, DM_KEY, 42, [first.message_id]) == ANSWER

        await answered(tg, daemon, private_chat(ADA), "and another?")

    assert len(tg.calls_of("sendMessageDraft")) == 1  # refused once, then not asked again
    assert all(call.failed for call in tg.calls_of("sendMessageDraft"))
    assert len(tg.sent) == 2
    assert final_text(tg, 42, tg.sent[1].message_id) == "Second answer. It is shorter."


async def test_a_group_reply_is_one_message_edited_in_place_within_the_group_budget(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """In a group the reply is posted (as a reply to the mention) once it has a first sentence and
    edited as it grows, never more than the group's 20 messages a minute; a reply longer than one
    message keeps the preview as its first chunk and sends only the rest as new messages."""
    long_answer = "\n\n".join(f"Paragraph {n}." + " The sea rises and falls." * 12 for n in range(16))
    assert len(long_answer) > 4096
    config = telegram_config()
    api.script(slowly(long_answer, 8.0, parts=40))
    async with telegram_daemon(config) as daemon:
        await answered(tg, daemon, GROUP, f"@{BOT} tell me about tides at length")

    sent = [m for m in tg.sent if m.chat_id == -100123]
    assert len(sent) == 2
    preview = sent[0]
    assert preview.reply_to_message_id is not None
    edits = [e for e in tg.edits if e.message_id == preview.message_id]
    assert len(edits) >= 2
    texts = [preview.visible_text] + [e.visible_text for e in edits]
    assert all(len(a) < len(b) for a, b in itertools.pairwise(texts))
    # The preview ends as the first chunk, the rest follows: the whole reply, once.
    assert (texts[-1] + " " + sent[1].visible_text).split() == long_answer.split()
    budget = [c.time for c in tg.calls if c.method in ("sendMessage", "editMessageText")
              and c.params.get("chat_id") == -100123]
    assert max(sum(1 for t in budget if start <= t < start + 60) for start in budget) <= 20
    assert len(budget) < 40  # paced: not one edit per delta
    ids = [preview.message_id, sent[1].message_id]
    assert await stored_reply(config, GROUP_KEY, -100123, ids) == long_answer


async def test_a_forum_topic_reply_grows_in_its_topic(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """In a forum topic the preview message is posted in that topic and becomes the reply."""
    config = telegram_config()
    api.script(slowly(ANSWER, 3.0, parts=15))
    async with telegram_daemon(config) as daemon:
        text = f"@{BOT} why are there tides?"
        pushed = tg.push_message(FORUM, ADA, text, entities=mention_entities(text, BOT), thread_id=7,
                                 is_topic_message=True)
        await tg.wait_for(lambda: tg.confirmed_offset > pushed["update_id"])
        await router_of(daemon).idle()

    (sent,) = tg.sent
    assert (sent.chat_id, sent.message_thread_id) == (-100777, 7)
    assert sent.visible_text != ANSWER and final_text(tg, -100777, sent.message_id) == ANSWER
    key = "agent:main:telegram:group:-100777:topic:7"
    assert await stored_reply(config, key, -100777, [sent.message_id]) == ANSWER


@pytest.mark.parametrize("chat", [private_chat(ADA), GROUP], ids=["draft", "edited message"])
async def test_a_model_failure_mid_stream_leaves_the_fallback_not_half_an_answer(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config], chat: dict[str, Any]
) -> None:
    """When the model fails half-way (and again on the retry), what the chat shows at the end is the
    apology, not the half answer: the edited preview becomes the apology, a draft says it too."""
    half = "Tides follow the moon. The moon pulls the sea toward it, and"
    failing = Error(200, "overloaded_error", mid_stream=True, partial=half, parts=10, delta_delay=0.25)
    config = telegram_config()
    api.script(failing, failing)
    async with telegram_daemon(config) as daemon:
        await answered(tg, daemon, chat, f"@{BOT} why are there tides?")

    (sent,) = [m for m in tg.sent if m.chat_id == chat["id"]]
    assert final_text(tg, chat["id"], sent.message_id) == FALLBACK_REPLY
    if chat["type"] == "private":
        assert tg.drafts and tg.drafts[-1].visible_text == FALLBACK_REPLY
        assert any(d.visible_text.startswith("Tides follow") for d in tg.drafts)
    else:
        assert sent.visible_text.startswith("Tides follow")  # the preview, since replaced
    key = DM_KEY if chat["type"] == "private" else GROUP_KEY
    assert await stored_reply(config, key, chat["id"], [sent.message_id]) == FALLBACK_REPLY


async def test_a_retried_attempt_starts_the_preview_over(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """A stream cut half-way and retried shows the new attempt's text, and the message ends as the
    answer the retry wrote, with nothing of the first attempt left."""
    first = "Something else entirely. This attempt will be cut"
    config = telegram_config()
    api.script(Error(200, "overloaded_error", mid_stream=True, partial=first, parts=8, delta_delay=0.25),
               slowly(ANSWER, 3.0, parts=15))
    async with telegram_daemon(config) as daemon:
        await answered(tg, daemon, GROUP, f"@{BOT} why are there tides?")

    (sent,) = [m for m in tg.sent if m.chat_id == -100123]
    shown = [sent.visible_text] + [e.visible_text for e in tg.edits if e.message_id == sent.message_id]
    assert shown[0].startswith("Something else")
    retry = next(i for i, text in enumerate(shown) if text.startswith("Tides"))
    assert all(first.startswith(text) for text in shown[:retry])
    assert all(ANSWER.startswith(text) for text in shown[retry:])  # never the old words again
    assert shown[-1] == ANSWER


async def test_streaming_off_sends_the_reply_once_complete_as_before(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """With `streaming = "off"` nothing is shown before the reply is complete: typing, then one
    message, in private chats and groups alike."""
    config = telegram_config(streaming="off")
    api.script(slowly(ANSWER, 2.0, parts=10), slowly(ANSWER, 2.0, parts=10))
    async with telegram_daemon(config) as daemon:
        await answered(tg, daemon, private_chat(ADA), "why are there tides?")
        await answered(tg, daemon, GROUP, f"@{BOT} why are there tides?")

    assert tg.calls_of("sendMessageDraft") == [] and tg.edits == []
    assert [(m.chat_id, m.visible_text) for m in tg.sent] == [(42, ANSWER), (-100123, ANSWER)]


async def test_a_reply_cut_off_mid_stream_by_a_stop_is_finished_in_its_preview_after_the_restart(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """A daemon stopped (its turn abandoned) while the model was still writing leaves a half
    answer in the group only until the restart: the request is answered again into that same
    message, and no second message is posted."""
    config = telegram_config(router={"shutdown_grace": 0.2})
    api.script(slowly(ANSWER, 20.0, parts=40))
    async with telegram_daemon(config):
        pushed = tg.push_message(GROUP, ADA, f"@{BOT} why are there tides?",
                                 entities=mention_entities(f"@{BOT} why are there tides?", BOT))
        (preview,) = await tg.wait_for(lambda: tg.sent, timeout=10)
    assert preview.visible_text != ANSWER and ANSWER.startswith(preview.visible_text)

    api.script(Text(ANSWER))
    async with telegram_daemon(config) as daemon:
        await tg.wait_for(lambda: [m for m in [*tg.sent, *tg.edits] if m.visible_text == ANSWER])
        await router_of(daemon).idle()  # the resumed turn has ended: nothing more is on its way

    assert tg.sent == [preview]
    assert final_text(tg, -100123, preview.message_id) == ANSWER
    assert await stored_reply(config, GROUP_KEY, -100123, [preview.message_id]) == ANSWER
    async with Store.open(config.database_path()) as store:
        question = await store.message_by_provider_id(
            ChatRef("telegram", "-100123"), str(pushed["message"]["message_id"]))
    assert question is not None and question.unanswered is None


async def test_a_preview_not_yet_recorded_as_the_first_chunk_is_edited_after_a_restart(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """A run that stored its reply but stopped before the preview message became its first chunk
    leaves no half answer: the next start edits that message into the reply and sends only the
    missing chunks, without asking the model again."""
    config = telegram_config()
    async with Bot(tg.token, base_url=tg.base_url) as bot:
        partial = await bot.send_message(-100123, "Tides follow the moon. The")
    chat = ChatRef("telegram", "-100123")
    async with Store.open(config.database_path()) as store:
        reply = await store.append_reply(
            GROUP_KEY, ANSWER, deliver=OutboundMessage(chat, ANSWER, preview_id=str(partial.message_id)),
        )
    tg.sent.clear()

    async with telegram_daemon(config) as daemon:
        await tg.wait_for(lambda: tg.edits)
        await router_of(daemon).idle()  # the resumed delivery has ended: nothing more is on its way

    assert tg.sent == []
    assert [e.visible_text for e in tg.edits if e.message_id == partial.message_id] == [ANSWER]
    assert api.count == 0
    async with Store.open(config.database_path()) as store:
        assert await store.pending_deliveries() == []
        found = await store.message_by_provider_id(chat, str(partial.message_id))
    assert found is not None and found.id == reply.id


async def test_the_final_edit_accepts_not_modified_and_reposts_a_preview_someone_deleted(
    tg: TelegramStandIn,
) -> None:
    """Editing a preview into its final text succeeds when it already shows it (Telegram's "message
    is not modified"), and says so when the message is gone, so the chunk is posted instead."""
    chat = ChatRef("telegram", "-100123")
    async with Bot(tg.token, base_url=tg.base_url) as bot:
        preview = await bot.send_message(-100123, "All of it.")
        assert await edit_into(bot, chat, preview.message_id, "All of it.")
        assert await edit_into(bot, chat, preview.message_id, "All of it, **bold**.")
        assert not await edit_into(bot, chat, preview.message_id + 50, "Lost.")
    (not_modified, changed, missing) = tg.calls_of("editMessageText")
    assert not_modified.failed and missing.failed and not changed.failed
    assert [e.visible_text for e in tg.edits] == ["All of it, bold."]


async def test_a_draft_answered_429_is_skipped_and_the_reply_lands_once(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """Telegram's flood control on a draft (429 with retry_after) holds requests back for its wait
    but does not end the preview: the draft goes on growing after it and the reply still arrives
    exactly once."""
    tg.fail_next("sendMessageDraft", retry_after=1)
    config = telegram_config()
    api.script(slowly(ANSWER, 4.0))
    async with telegram_daemon(config) as daemon:
        await answered(tg, daemon, private_chat(ADA), "why are there tides?")

    assert tg.calls_of("sendMessageDraft")[0].failed
    assert len(tg.drafts) >= 2
    assert [(m.chat_id, m.visible_text) for m in tg.sent] == [(42, ANSWER)]


async def _answered_elsewhere(config: Config, *, adopt: str | None) -> None:
    """Another instance answers the group's waiting request (it took the chat over while this one
    stalled), its reply taking over the preview message `adopt` when given."""
    chat = ChatRef("telegram", "-100123")
    async with Store.open(config.database_path()) as other:
        (waiting,) = await other.awaiting_requests(GROUP_KEY)
        await other.append_reply(GROUP_KEY, "Because of the moon (from the other instance).",
                                 request_id=waiting.message.id, deliver=OutboundMessage(
                                     chat, "Because of the moon (from the other instance).",
                                     preview_id=adopt))


@pytest.mark.parametrize("adopted", [False, True], ids=["its own preview", "preview taken over"])
async def test_a_reply_dropped_as_answered_elsewhere_takes_its_preview_back(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config], adopted: bool,
) -> None:
    """While this instance streams its reply into a preview message, another instance answers the
    request: the reply is dropped, and its preview message is deleted, so the group shows one
    answer, not a second, half one; unless the other instance's reply took that message over
    (it picked up the preview this one recorded), which then stays."""
    config = telegram_config()
    api.script(slowly(ANSWER, 4.0, parts=40))
    async with telegram_daemon(config) as daemon:
        tg.push_message(GROUP, ADA, f"@{BOT} why are there tides?",
                        entities=mention_entities(f"@{BOT} why are there tides?", BOT))
        (preview,) = await tg.wait_for(lambda: tg.sent, timeout=10)
        await _answered_elsewhere(config, adopt=str(preview.message_id) if adopted else None)
        await tg.wait_for(lambda: api.count == 1 and not router_of(daemon).sessions(), timeout=10)
        await router_of(daemon).idle()

    assert tg.sent == [preview]  # nothing more sent by this instance
    assert tg.deleted == ([] if adopted else [(-100123, preview.message_id)])
    async with Store.open(config.database_path()) as store:
        replies = [m.text for m in await store.history(GROUP_KEY, 10) if m.role == "assistant"]
    assert replies == ["Because of the moon (from the other instance)."]


OTHER_REPLY = "Because of the moon (from the other instance)."
# How long a stalled instance's loop stands still: past its 1 s lease.
STALL = 3.0


def _takes_over(url: str, state: Path, now: float, preview_id: str | None, done: list[str],
                took: threading.Event, answer_when: threading.Event | None = None) -> None:
    """Another instance on the shared database, in a thread of its own, whose clock reads `now`
    (the stalled one's lease on the group has expired by then): it takes the chat over and answers
    the waiting request (once `answer_when` is set, if given: until then it holds the chat), its
    reply taking over the preview message (it found it recorded for the request), then lets go."""

    async def run() -> None:
        chat = ChatRef("telegram", "-100123")
        async with PostgresStore.connect(url, state_path=state, label="other") as other:
            assert await other.take_lease(GROUP_KEY, "other:2:b", 15.0, now=now), \
                "the stalled instance's lease has not expired"
            done.append("took the chat")
            took.set()
            if answer_when is not None:
                assert await asyncio.to_thread(answer_when.wait, 15)
            (waiting,) = await other.awaiting_requests(GROUP_KEY)
            await other.append_reply(GROUP_KEY, OTHER_REPLY, request_id=waiting.message.id,
                                     deliver=OutboundMessage(chat, OTHER_REPLY, preview_id=preview_id))
            await other.drop_lease(GROUP_KEY, "other:2:b")
        done.append("answered")

    asyncio.run(run())


async def test_a_turn_that_stalled_past_its_lease_leaves_the_preview_the_chat_s_new_holder_took(
    tg: TelegramStandIn, api: AnthropicStandIn, make_config: MakeConfig, pg_url: str,
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """Two instances on PostgreSQL. One streams its reply into a group's preview message and stalls
    (its whole loop blocked: its lease renewals too) past the lease's ttl; meanwhile the other takes
    the chat over and answers, its reply taking that preview message. Awake again, the first writes
    none of its own text into the message (no edit, no final edit over the other's reply) and its
    reply is dropped: the group sees one answer, the one stored."""
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)
    section = {"enabled": True, "base_url": tg.base_url, "allow_from": [42], "groups": [-100123]}
    config = make_config(config_data(api, channels={"telegram": section}, anthropic={"timeout": 20.0},
                                     database={"url": pg_url, "lease_ttl": 1.0}))
    api.script(slowly(ANSWER, 4.0, parts=40))
    done: list[str] = []
    clock = MovedClock()
    async with telegram_daemon(config, lease_clock=clock) as daemon:
        tg.push_message(GROUP, ADA, f"@{BOT} why are there tides?",
                        entities=mention_entities(f"@{BOT} why are there tides?", BOT))
        (preview,) = await tg.wait_for(lambda: tg.sent, timeout=10)
        # The stall: the loop blocked (the clock moved without awaiting) past the lease's ttl, and
        # still blocked while the other instance takes the chat over and answers.
        clock.advance(STALL)
        other = threading.Thread(target=_takes_over, args=(
            pg_url, tmp_path / "other.db", clock.time(), str(preview.message_id), done, threading.Event()))
        other.start()
        other.join(10)
        assert done == ["took the chat", "answered"]
        await tg.wait_for(lambda: api.count == 1 and not router_of(daemon).sessions(), timeout=10)
        await router_of(daemon).idle()

    mine = [e.visible_text for e in tg.edits if e.message_id == preview.message_id
            and e.visible_text != OTHER_REPLY]
    assert mine == []  # nothing of this instance's reply written over the other's
    assert tg.sent == [preview] and tg.deleted == []
    async with PostgresStore.connect(pg_url, state_path=tmp_path / "view.db", label="view") as store:
        replies = [m.text for m in await store.history(GROUP_KEY, 10) if m.role == "assistant"]
    assert replies == [OTHER_REPLY]


@pytest.mark.parametrize("streaming", ["auto", "off"])
async def test_a_turn_that_stalled_past_its_lease_leaves_the_chat_to_the_instance_holding_it(
    tg: TelegramStandIn, api: AnthropicStandIn, make_config: MakeConfig, pg_url: str,
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, streaming: str,
) -> None:
    """As above, but the other instance still holds the chat, not yet answered, when the stalled one
    finishes its reply: that reply is neither written into the preview message (which the holder
    streams into) nor stored nor sent, and takes nothing meant for the reply that is (the notice
    of a compaction written meanwhile); the holder's answer is the one the group keeps. The same
    with streaming off (no preview)."""
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)
    section = {"enabled": True, "base_url": tg.base_url, "allow_from": [42], "groups": [-100123],
               "streaming": streaming}
    config = make_config(config_data(api, channels={"telegram": section}, anthropic={"timeout": 20.0},
                                     database={"url": pg_url, "lease_ttl": 1.0}))
    api.script(slowly(ANSWER, 4.0, parts=40))
    done: list[str] = []
    answer_now, took = threading.Event(), threading.Event()
    clock = MovedClock()
    async with telegram_daemon(config, lease_clock=clock) as daemon:
        tg.push_message(GROUP, ADA, f"@{BOT} why are there tides?",
                        entities=mention_entities(f"@{BOT} why are there tides?", BOT))
        if streaming == "auto":
            (preview,) = await tg.wait_for(lambda: tg.sent, timeout=10)
            preview_id = str(preview.message_id)
        else:
            await tg.wait_for(lambda: api.count == 1, timeout=10)  # the reply is being written
            await clock.asleep(3)  # under the lease: its renewal waits, beside heartbeat and looking
            preview_id = None
        async with PostgresStore.connect(pg_url, state_path=tmp_path / "c.db", label="c") as store:
            (request,) = [m for m in await store.history(GROUP_KEY, 10) if m.role == "user"]
            assert await store.record_compaction(
                GROUP_KEY, summary="tides", last_summarised_id=request.id, first_kept_message_id=request.id,
                tokens_before=10, tokens_after=2, model="m", replaces=None) is not None
        clock.advance(STALL)  # the stall, as above: blocked until the other holds the chat
        other = threading.Thread(target=_takes_over, args=(
            pg_url, tmp_path / "other.db", clock.time(), preview_id, done, took, answer_now))
        other.start()
        assert took.wait(10)
        assert done == ["took the chat"]
        await tg.wait_for(lambda: api.count == 1 and not router_of(daemon).sessions(), timeout=10)
        await router_of(daemon).idle()
        async with PostgresStore.connect(pg_url, state_path=tmp_path / "look.db", label="look") as store:
            assert [m.role for m in await store.history(GROUP_KEY, 10)] == ["user"]  # nothing stored
            assert await store.take_compaction_notice(GROUP_KEY) is not None  # still to be told
        answer_now.set()
        await asyncio.to_thread(other.join, 10)
        assert done == ["took the chat", "answered"]

    if streaming == "auto":
        mine = [e.visible_text for e in tg.edits if e.message_id == preview.message_id
                and e.visible_text != OTHER_REPLY]
        assert mine == []  # nothing of this instance's reply in the message the holder answers in
        assert tg.sent == [preview] and tg.deleted == []
    else:
        assert tg.sent == [] and tg.edits == []  # this instance sent nothing
    async with PostgresStore.connect(pg_url, state_path=tmp_path / "view.db", label="view") as store:
        replies = [m.text for m in await store.history(GROUP_KEY, 10) if m.role == "assistant"]
    assert replies == [OTHER_REPLY]
