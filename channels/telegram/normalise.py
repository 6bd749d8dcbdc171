"""Telegram messages into our shape: who may be heard, sessions, mentions and commands; pure functions
over real `telegram.Message` objects, testable without the Bot API.

Sessions: a private chat is `…:telegram:direct:<userId>`, a group `…:telegram:group:<chatId>`, a
forum topic `…:telegram:group:<chatId>:topic:<threadId>` (a message without a thread id is in the
General topic, 1). A reply to a topic's creation notice is no reply: inside a topic every message
carries one. "telegram" in a key is the channel's name: an extra bot's ("telegram.work") keys and
chat references carry its own, so the same user's chats with two bots are two sessions.

A message starts a turn in a private chat, when it mentions the bot or replies to it, or where the
chat's settings need no mention. Commands are `/word` at the start of the text; in a group a bare
`/word` is taken only when it is one of ours (or addressed `/word@bot`), since it may be meant for
another bot. Channel posts and messages without a sender are ignored; text is the message's text or
caption.

Senders: a person is their user id. A group message sent on behalf of a chat (an anonymous admin,
a channel posting in a group, a linked channel's automatic forward) arrives from a user id Telegram
shares between all such messages everywhere (GroupAnonymousBot, Channel_Bot, 777000), so its sender
is the chat in `sender_chat`: `chat:<chatId>`, named by the chat's title. The core knows such
identities by that prefix; no allowlist or admin entry can name one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from telegram import Message, MessageEntity
from telegram.constants import ChatType

from bot.config import TelegramConfig
from bot.core.messages import ChatRef, InboundMessage
from bot.core.session_key import build
from bot.intake.access import allows
from bot.intake.commands import is_known, parse_command
from bot.tools.scope import CHAT_SENDER_PREFIX

PLATFORM = "telegram"  # the default bot's channel name; extra accounts are "telegram.<name>"
GENERAL_TOPIC = "1"  # a forum message without a thread id belongs to the General topic

# "pair": a stranger in a private chat under dm_policy = "pairing"; the core's store decides.
Verdict = Literal["accept", "refuse", "ignore", "pair"]


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """The bot's own id and username, to recognise mentions of it, replies to it and its commands."""

    id: int
    username: str


def admit(message: Message, config: TelegramConfig) -> Verdict:
    """Whether a message may be stored and answered; a refused DM may get one polite line."""
    if message.chat.type == ChatType.PRIVATE:
        sender = message.from_user
        if sender is None:
            return "ignore"
        if allows(config.dm_policy, config.allow_from, str(sender.id)):
            return "accept"
        return "pair" if config.dm_policy == "pairing" else "refuse"
    if message.chat.type in (ChatType.GROUP, ChatType.SUPERGROUP):
        if sender_of(message) is None:
            return "ignore"
        return "accept" if allows(config.group_policy, config.groups, str(message.chat.id)) else "ignore"
    return "ignore"  # channel posts


def sender_of(message: Message) -> tuple[str, str] | None:
    """(sender id, name) of a message: the chat it was sent on behalf of, outside private chats,
    else the user; None without either."""
    on_behalf = message.sender_chat
    if on_behalf is not None and message.chat.type != ChatType.PRIVATE:
        name = on_behalf.title or on_behalf.username or on_behalf.full_name
        chat_sender = f"{CHAT_SENDER_PREFIX}{on_behalf.id}"
        return chat_sender, name or chat_sender
    user = message.from_user
    if user is None:
        return None
    return str(user.id), user.full_name or user.username or str(user.id)


def message_text(message: Message) -> tuple[str, dict[MessageEntity, str]]:
    """The text (or caption) and its entities, with offsets already resolved from UTF-16."""
    if message.text is not None:
        return message.text, message.parse_entities()
    if message.caption is not None:
        return message.caption, message.parse_caption_entities()
    return "", {}


def to_inbound(
    message: Message, *, agent_id: str, bot: BotIdentity, config: TelegramConfig, media: bool = False,
    provider: str = PLATFORM,
) -> InboundMessage | None:
    """Normalise an admitted message; None when it has no text to read and (`media`) no attachment.
    `provider` is the name of the channel (bot) it came through."""
    sender = sender_of(message)
    text, entities = message_text(message)
    if sender is None or not (text.strip() or media):
        return None
    chat = message.chat
    private = chat.type == ChatType.PRIVATE
    thread: str | None = None
    if private:
        key = build(agent_id, provider, "direct", sender[0])
    elif chat.is_forum:
        thread = str(message.message_thread_id) if message.is_topic_message else None
        key = build(agent_id, provider, "group", chat.id, topic=thread or GENERAL_TOPIC)
    else:
        key = build(agent_id, provider, "group", chat.id)

    replied = message.reply_to_message
    # Inside a forum topic every message "replies" to the topic's creation notice; that is no reply.
    if replied is not None and replied.forum_topic_created is not None:
        replied = None
    reply_to_bot = replied is not None and replied.from_user is not None and replied.from_user.id == bot.id

    command = _command(text, entities, bot, private=private)
    mentioned = any(_mentions(entity, value, bot) for entity, value in entities.items())
    starts_turn = private or mentioned or reply_to_bot or not config.requires_mention(key)
    return InboundMessage(
        session_key=key,
        chat=ChatRef(provider, str(chat.id), thread),
        sender_id=sender[0],
        sender_name=sender[1],
        text=text,
        provider_message_id=str(message.message_id),
        reply_to_id=str(replied.message_id) if replied is not None else None,
        starts_turn=starts_turn,
        sent_at=message.date.timestamp(),
        command=command,
    )


def _mentions(entity: MessageEntity, value: str, bot: BotIdentity) -> bool:
    if entity.type == MessageEntity.MENTION:
        return value[1:].lower() == bot.username.lower()
    if entity.type == MessageEntity.TEXT_MENTION:
        return entity.user is not None and entity.user.id == bot.id
    return False


def _command(text: str, entities: dict[MessageEntity, str], bot: BotIdentity, *, private: bool) -> str | None:
    if not any(e.type == MessageEntity.BOT_COMMAND and e.offset == 0 for e in entities):
        return None
    name = parse_command(text, bot.username)
    if name is None:
        return None
    explicit = text.split(maxsplit=1)[0].lower().endswith(f"@{bot.username.lower()}")
    # In a group a bare /foo may be meant for another bot; only ours are taken.
    return name if private or explicit or is_known(name) else None
