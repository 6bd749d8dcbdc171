"""Telegram normalisation and gating over real `telegram.Message` objects built from Bot API JSON."""

from __future__ import annotations

from typing import Any

import pytest
from telegram import Bot, Message

from bot.config import TelegramConfig
from channels.telegram_html import telegram_chunks
from channels.telegram_normalise import BotIdentity, admit, to_inbound
from tests.standins.telegram_api import (
    command_entities,
    group_chat,
    mention_entities,
    message,
    private_chat,
    user,
)

BOT = BotIdentity(1000, "switchboard_bot")
BOT_USER = user(1000, "Switchboard", "switchboard_bot", is_bot=True)
ADA = user(42, "Ada", "ada")
GROUP = group_chat(-100123, "Friends", supergroup=True)
FORUM = group_chat(-100777, "Forum", forum=True)


def tg(data: dict[str, Any]) -> Message:
    parsed = Message.de_json(data, Bot("123456:TEST"))
    assert parsed is not None
    return parsed


def config(**values: Any) -> TelegramConfig:
    return TelegramConfig.model_validate({"allow_from": [42], "groups": [-100123, -100777], **values})


def normalise(data: dict[str, Any], **values: Any) -> Any:
    return to_inbound(tg(data), agent_id="main", bot=BOT, config=config(**values))


def test_private_chat_is_a_direct_session_that_always_starts_a_turn() -> None:
    """A private message becomes `…:telegram:direct:<userId>` with its sender, id and time."""
    inbound = normalise(message(private_chat(ADA), ADA, "hi", message_id=5, date=1_700_000_000))
    assert str(inbound.session_key) == "agent:main:telegram:direct:42"
    assert (inbound.chat.chat_id, inbound.chat.thread_id) == ("42", None)
    assert (inbound.sender_id, inbound.sender_name, inbound.text) == ("42", "Ada", "hi")
    assert (inbound.provider_message_id, inbound.sent_at, inbound.starts_turn) == ("5", 1_700_000_000.0, True)


def test_an_extra_bot_keys_its_sessions_and_chats_by_its_own_channel_name() -> None:
    """Through the account "telegram.work" the same user's chat is another session, answered there."""
    inbound = to_inbound(tg(message(private_chat(ADA), ADA, "hi")), agent_id="work", bot=BOT,
                         config=config(), provider="telegram.work")
    assert str(inbound.session_key) == "agent:work:telegram.work:direct:42"
    assert (inbound.chat.provider, inbound.chat.chat_id) == ("telegram.work", "42")


@pytest.mark.parametrize(
    ("text", "entities", "reply_to", "starts"),
    [
        ("just chatting", None, None, False),
        ("hey @switchboard_bot what now?", "mention", None, True),
        ("hey @Switchboard_Bot", "mention", None, True),
        ("hey @someone_else", "other", None, False),
        ("that's right", None, "bot", True),
        ("that's right", None, "human", False),
    ],
)
def test_group_messages_start_a_turn_only_when_addressed(
    text: str, entities: str | None, reply_to: str | None, starts: bool
) -> None:
    """In a group every message is kept, but only a mention or a reply to the bot starts a turn."""
    found = None
    if entities == "mention":
        found = mention_entities(text, "switchboard_bot")
    elif entities == "other":
        found = mention_entities(text, "someone_else")
    replied = None
    if reply_to == "bot":
        replied = message(GROUP, BOT_USER, "an earlier answer", message_id=3)
    elif reply_to == "human":
        replied = message(GROUP, user(7, "Bea"), "an earlier remark", message_id=4)
    inbound = normalise(message(GROUP, ADA, text, entities=found, reply_to=replied))
    assert str(inbound.session_key) == "agent:main:telegram:group:-100123"
    assert inbound.starts_turn is starts
    assert inbound.reply_to_id == (str(replied["message_id"]) if replied else None)


def test_a_group_can_drop_the_mention_requirement() -> None:
    """`group_settings."<id>".require_mention = false` answers every message in that group."""
    data = message(GROUP, ADA, "anyone?")
    assert normalise(data).starts_turn is False
    assert normalise(data, group_settings={"-100123": {"require_mention": False}}).starts_turn is True
    assert normalise(data, require_mention=False).starts_turn is True


def test_forum_topics_are_their_own_sessions_and_general_is_topic_one() -> None:
    """A forum topic gets `:topic:<threadId>`; a message without a thread id is the General topic."""
    created = message(FORUM, ADA, message_id=10, thread_id=10)
    created["forum_topic_created"] = {"name": "Plans", "icon_color": 0}
    mention = mention_entities("@switchboard_bot", "switchboard_bot")
    in_topic = normalise(message(FORUM, ADA, "@switchboard_bot plan?", thread_id=10, is_topic_message=True,
                                 reply_to=created, entities=mention))
    general = normalise(message(FORUM, ADA, "in general"))
    assert str(in_topic.session_key) == "agent:main:telegram:group:-100777:topic:10"
    assert in_topic.chat.thread_id == "10"
    assert in_topic.reply_to_id is None  # the topic's creation notice is no reply
    assert in_topic.starts_turn is True
    assert str(general.session_key) == "agent:main:telegram:group:-100777:topic:1"
    assert general.chat.thread_id is None


def test_captions_count_as_text_and_media_without_text_is_unreadable() -> None:
    """A photo's caption is its text; a sticker, voice note or bare photo has none."""
    chat = private_chat(ADA)
    assert normalise(message(chat, ADA, caption="look at this", photo=True)).text == "look at this"
    for kind in ("photo", "sticker", "voice"):
        assert normalise(message(chat, ADA, **{kind: True})) is None


@pytest.mark.parametrize(
    ("chat", "text", "expected"),
    [
        (private_chat(ADA), "/reset", "reset"),
        (private_chat(ADA), "/frobnicate", "frobnicate"),
        (GROUP, "/status@switchboard_bot", "status"),
        (GROUP, "/status", "status"),
        (GROUP, "/status@other_bot", None),
        (GROUP, "/frobnicate", None),
        (GROUP, "/frobnicate@switchboard_bot", "frobnicate"),
    ],
)
def test_commands_are_recognised_by_their_entity(
    chat: dict[str, Any], text: str, expected: str | None
) -> None:
    """Commands need a bot_command entity; in groups, unknown bare ones may belong to other bots."""
    inbound = normalise(message(chat, ADA, text, entities=command_entities(text)))
    assert inbound.command == expected
    assert normalise(message(chat, ADA, text)).command is None  # no entity, no command


def test_a_mention_after_an_emoji_is_found_despite_utf16_offsets() -> None:
    """Entity offsets count UTF-16 units; a mention after an emoji is still recognised."""
    text = "🎉🎉 @switchboard_bot party?"
    inbound = normalise(message(GROUP, ADA, text, entities=mention_entities(text, "switchboard_bot")))
    assert inbound.starts_turn is True


@pytest.mark.parametrize(
    ("values", "chat", "sender", "verdict"),
    [
        ({}, private_chat(ADA), ADA, "accept"),
        ({}, private_chat(user(7, "Bea")), user(7, "Bea"), "refuse"),
        ({"dm_policy": "open"}, private_chat(user(7, "Bea")), user(7, "Bea"), "accept"),
        ({"dm_policy": "disabled"}, private_chat(ADA), ADA, "refuse"),
        ({}, GROUP, user(7, "Bea"), "accept"),
        ({}, group_chat(-100999, "Strangers"), ADA, "ignore"),
        ({"group_policy": "open"}, group_chat(-100999, "Strangers"), ADA, "accept"),
        ({"group_policy": "disabled"}, GROUP, ADA, "ignore"),
        ({"allow_from": [], "groups": []}, private_chat(ADA), ADA, "refuse"),
        ({"dm_policy": "pairing"}, private_chat(ADA), ADA, "accept"),
        ({"dm_policy": "pairing"}, private_chat(user(7, "Bea")), user(7, "Bea"), "pair"),
        ({"dm_policy": "pairing"}, group_chat(-100999, "Strangers"), ADA, "ignore"),
    ],
)
def test_access_policies_fail_closed(
    values: dict[str, Any], chat: dict[str, Any], sender: dict[str, Any], verdict: str
) -> None:
    """Allowlists are the default and fail closed; a refused DM may be told, a refused group is not."""
    section = TelegramConfig.model_validate({"allow_from": [42], "groups": [-100123], **values})
    assert admit(tg(message(chat, sender, "hi")), section) == verdict


def test_chunks_fit_telegram_counting_utf16_units_after_rendering() -> None:
    """Emoji count twice in Telegram's limit, so a reply of 6 000 of them still fits every message."""
    reply = ("😀" * 100 + "\n") * 60
    chunks = telegram_chunks(reply)
    assert len(chunks) >= 3
    for chunk in chunks:
        visible = chunk  # plain text renders as itself
        assert len(visible.encode("utf-16-le")) // 2 <= 4096
    assert "".join(chunks).replace("\n", "") == reply.replace("\n", "")
