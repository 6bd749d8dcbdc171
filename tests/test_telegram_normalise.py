"""Telegram normalisation and gating over real `telegram.Message` objects built from Bot API JSON."""

from __future__ import annotations

from typing import Any

import pytest
from telegram import Bot, Message

from bot.config import TelegramConfig
from bot.testing.telegram_api import (
    command_entities,
    group_chat,
    mention_entities,
    message,
    private_chat,
    user,
)
from channels.telegram.html import telegram_chunks
from channels.telegram.normalise import BotIdentity, admit, to_inbound

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


# -- messages sent on behalf of a chat: Telegram's shared service senders ----------------------------

ANONYMOUS_ADMIN = user(1087968824, "Group", "GroupAnonymousBot", is_bot=True)
CHANNEL_BOT = user(136817688, "Channel", "Channel_Bot", is_bot=True)
TELEGRAM = user(777000, "Telegram")
NEWS = {"id": -100555, "type": "channel", "title": "News", "username": "news_channel"}
OTHER_GROUP = group_chat(-100999, "Strangers", supergroup=True)


def on_behalf_of(chat: dict[str, Any], sender: dict[str, Any], sender_chat: dict[str, Any], text: str,
                 **fields: Any) -> dict[str, Any]:
    return message(chat, sender, text, **fields) | {"sender_chat": sender_chat}


def automatic_forward(chat: dict[str, Any], text: str) -> dict[str, Any]:
    data = on_behalf_of(chat, TELEGRAM, NEWS, text) | {"is_automatic_forward": True}
    origin = {"type": "channel", "date": data["date"], "chat": NEWS, "message_id": 77}
    return data | {"forward_origin": origin}


@pytest.mark.parametrize(
    ("data", "sender_id", "name"),
    [
        (on_behalf_of(GROUP, ANONYMOUS_ADMIN, GROUP, "hi"), "chat:-100123", "Friends"),
        (on_behalf_of(GROUP, CHANNEL_BOT, NEWS, "hi"), "chat:-100555", "News"),
        (automatic_forward(GROUP, "hi"), "chat:-100555", "News"),
        (on_behalf_of(GROUP, CHANNEL_BOT, {"id": -100556, "type": "channel", "username": "untitled"},
                      "hi"), "chat:-100556", "untitled"),
    ],
    ids=["anonymous-admin", "channel-in-group", "automatic-forward", "channel-without-title"],
)
def test_a_message_sent_on_behalf_of_a_chat_is_that_chats_not_the_shared_service_users(
    data: dict[str, Any], sender_id: str, name: str
) -> None:
    """An anonymous admin, a channel posting in a group or a linked channel's forward is sent by
    `chat:<sender_chat id>`, named by that chat, never by Telegram's shared service user id."""
    section = config()
    assert admit(tg(data), section) == "accept"
    inbound = normalise(data)
    assert (inbound.sender_id, inbound.sender_name) == (sender_id, name)
    assert str(inbound.session_key) == "agent:main:telegram:group:-100123"
    assert inbound.chat.chat_id == "-100123"


def test_anonymous_admins_of_two_groups_are_two_senders() -> None:
    """The same GroupAnonymousBot user in two groups is two identities, one per group."""
    first = normalise(on_behalf_of(GROUP, ANONYMOUS_ADMIN, GROUP, "hi"))
    second = normalise(on_behalf_of(OTHER_GROUP, ANONYMOUS_ADMIN, OTHER_GROUP, "hi"), group_policy="open")
    assert (first.sender_id, second.sender_id) == ("chat:-100123", "chat:-100999")
    assert "1087968824" not in {first.sender_id, second.sender_id}


def test_an_anonymous_admin_is_heard_only_in_allowed_groups_and_starts_turns_when_addressed() -> None:
    """An anonymous admin's message is admitted by the group's allowlist like anyone's, and a mention
    of the bot or a reply to it starts a turn while plain chatter does not."""
    assert admit(tg(on_behalf_of(OTHER_GROUP, ANONYMOUS_ADMIN, OTHER_GROUP, "hi")), config()) == "ignore"
    text = "@switchboard_bot what now?"
    mention = normalise(on_behalf_of(GROUP, ANONYMOUS_ADMIN, GROUP, text,
                                     entities=mention_entities(text, "switchboard_bot")))
    replied = message(GROUP, BOT_USER, "an earlier answer", message_id=3)
    reply = normalise(on_behalf_of(GROUP, ANONYMOUS_ADMIN, GROUP, "and then?", reply_to=replied))
    chatter = normalise(on_behalf_of(GROUP, ANONYMOUS_ADMIN, GROUP, "just chatting"))
    assert (mention.starts_turn, reply.starts_turn, chatter.starts_turn) == (True, True, False)
    command = normalise(on_behalf_of(GROUP, ANONYMOUS_ADMIN, GROUP, "/status",
                                     entities=command_entities("/status")))
    assert command.command == "status" and command.sender_id == "chat:-100123"


def test_a_group_message_with_only_a_sender_chat_is_still_that_chats() -> None:
    """Should Telegram ever leave out the stand-in user, a group message on behalf of a chat is kept
    under that chat; a private message without a user is still ignored."""
    data = on_behalf_of(GROUP, ANONYMOUS_ADMIN, GROUP, "hi")
    del data["from"]
    assert admit(tg(data), config()) == "accept"
    assert normalise(data).sender_id == "chat:-100123"
    dm = message(private_chat(ADA), ADA, "hi")
    del dm["from"]
    assert admit(tg(dm), config()) == "ignore"
    assert normalise(dm) is None


def test_a_private_chat_is_its_user_whatever_else_it_carries() -> None:
    """A private chat is always its user's: the session and the sender are the user id."""
    inbound = normalise(on_behalf_of(private_chat(ADA), ADA, NEWS, "hi"))
    assert (inbound.sender_id, inbound.sender_name) == ("42", "Ada")
    assert str(inbound.session_key) == "agent:main:telegram:direct:42"
