"""Discord messages into our shape: the plain facts of a `discord.Message`, who may be heard, sessions
and commands; pure functions, testable without a gateway.

Sessions: a DM is `…:discord:direct:<userId>`, a guild text channel `…:discord:channel:<channelId>`,
a thread `…:discord:channel:<parentId>:thread:<threadId>`. On Discord a thread is itself a
channel, so a ChatRef's `chat_id` is the channel the message was posted in (the thread's own id,
or the DM channel's id) and `thread_id` is always None: replies, typing and the store's
provider-message-id lookups all key on that one id. "discord" there is the channel's name: an extra
bot's ("discord.work") keys and chat references carry its own.

Commands are plain messages, not application commands: `/help`, `/reset`, `/stop`, `/status`,
`/whoami` and `/start` at the start of a message, or right after a leading mention of the bot
("@Switchboard /status"). In DMs and after a mention any `/word` is taken (an unknown one gets the
core's "Unknown command" answer); a bare `/word` in a guild channel is taken only when it is one
of ours, since it may be meant for another bot. Other bots' commands are ignored unless
`allow_bots`.

Stored text is Discord's rendering of the message (`clean_content`: `<@id>` shown as `@name`).
Edits, reactions and system messages (joins, pins, thread notices) are ignored: only new messages
are read, so what the model saw is what was stored.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Literal

from bot.config import DiscordConfig
from bot.core.messages import ChatRef, InboundMessage
from bot.core.session_key import SessionKey, build
from bot.intake.access import allows
from bot.intake.commands import is_known, parse_command

with warnings.catch_warnings():
    # discord.py imports the stdlib audioop (deprecated since 3.11) for voice, which we never use.
    warnings.simplefilter("ignore", DeprecationWarning)
    import discord

PLATFORM = "discord"  # the default bot's channel name; extra accounts are "discord.<name>"

# "pair": a stranger's DM under dm_policy = "pairing"; the core's store decides.
Verdict = Literal["accept", "refuse", "ignore", "pair"]
_LEADING_MENTION = re.compile(r"\s*<@!?(\d+)>\s*")


@dataclass(frozen=True, slots=True)
class DiscordMessage:
    """The plain facts of a `discord.Message` that gating and normalisation read."""

    id: int
    channel_id: int
    guild_id: int | None  # None in DMs
    author_id: int
    author_name: str
    text: str  # mentions shown as @name, as Discord renders them
    content: str = ""  # the raw text, with <@id> mentions (commands are read from it)
    author_is_bot: bool = False
    parent_id: int | None = None  # a thread's parent channel
    role_ids: frozenset[int] = frozenset()
    mentions: frozenset[int] = frozenset()  # user ids only: @everyone and roles are not listed
    reply_to_id: int | None = None
    replied_author_id: int | None = None
    attachments: int = 0
    created_at: float | None = None


def read_message(message: discord.Message) -> DiscordMessage | None:
    """The facts of a user message; None for system messages and channels we cannot place."""
    if message.is_system():
        return None
    channel = message.channel
    author = message.author
    direct = isinstance(channel, discord.DMChannel)
    guild_id = None if direct else message.guild.id if message.guild else getattr(channel, "guild_id", None)
    if not direct and guild_id is None:
        return None  # a group DM: bots are never in one
    reference = message.reference
    replied = reference.resolved if reference is not None else None
    is_reply = reference is not None and reference.type != discord.MessageReferenceType.forward
    return DiscordMessage(
        id=message.id,
        channel_id=channel.id,
        guild_id=guild_id,
        author_id=author.id,
        author_name=author.display_name,
        text=message.clean_content,
        content=message.content,
        author_is_bot=author.bot,
        parent_id=channel.parent_id if isinstance(channel, discord.Thread) else None,
        role_ids=frozenset(r.id for r in author.roles) if isinstance(author, discord.Member) else frozenset(),
        mentions=frozenset(user.id for user in message.mentions),
        reply_to_id=reference.message_id if is_reply and reference is not None else None,
        replied_author_id=replied.author.id if is_reply and isinstance(replied, discord.Message) else None,
        attachments=len(message.attachments) + len(message.stickers),
        created_at=message.created_at.timestamp(),
    )


def admit(msg: DiscordMessage, config: DiscordConfig, *, bot_id: int) -> Verdict:
    """Whether a message may be stored and answered; a refused DM may get one polite line."""
    if msg.author_id == bot_id:
        return "ignore"  # Discord echoes our own messages back
    if msg.guild_id is None:
        if allows(config.dm_policy, config.allow_from, str(msg.author_id)):
            return "accept"
        if msg.author_is_bot:
            return "ignore"  # never start a chat between two bots
        return "pair" if config.dm_policy == "pairing" else "refuse"
    return "accept" if guild_allows(msg, config) else "ignore"


def guild_allows(msg: DiscordMessage, config: DiscordConfig) -> bool:
    """The guild policy, then the guild's channel list (a thread goes by its parent), users and roles."""
    guild = config.guilds.get(str(msg.guild_id))
    if config.guild_policy == "disabled" or (guild is None and config.guild_policy == "allowlist"):
        return False
    if guild is None:
        return True  # open policy, no entry for this guild: no further restriction
    if guild.channels:
        places = {str(msg.channel_id)} | ({str(msg.parent_id)} if msg.parent_id is not None else set())
        if not places & set(guild.channels):
            return False
    if guild.users or guild.roles:
        return str(msg.author_id) in guild.users or any(str(r) in guild.roles for r in msg.role_ids)
    return True


def session_key_of(msg: DiscordMessage, agent_id: str, provider: str = PLATFORM) -> SessionKey:
    if msg.guild_id is None:
        return build(agent_id, provider, "direct", msg.author_id)
    if msg.parent_id is not None:
        return build(agent_id, provider, "channel", msg.parent_id, thread=msg.channel_id)
    return build(agent_id, provider, "channel", msg.channel_id)


def requires_mention(config: DiscordConfig, key: SessionKey, guild_id: int | None) -> bool:
    """Channel or thread settings first, then the guild's entry, then the section default."""
    for settings in config.settings_for(key):
        if settings.require_mention is not None:
            return settings.require_mention
    guild = config.guilds.get(str(guild_id)) if guild_id is not None else None
    if guild is not None and guild.require_mention is not None:
        return guild.require_mention
    return config.require_mention


def command_of(msg: DiscordMessage, *, bot_id: int) -> str | None:
    """The command in `/name args` or `<@bot> /name args`; see the module docstring for the rules."""
    text = msg.content.lstrip()
    mention = _LEADING_MENTION.match(text)
    explicit = mention is not None and int(mention.group(1)) == bot_id
    if mention is not None:
        if not explicit:
            return None  # "@someone /status" is not for us
        text = text[mention.end():]
    name = parse_command(text)
    if name is None:
        return None
    return name if msg.guild_id is None or explicit or is_known(name) else None


def to_inbound(
    msg: DiscordMessage, *, agent_id: str, bot_id: int, config: DiscordConfig, provider: str = PLATFORM
) -> InboundMessage | None:
    """Normalise an admitted message; None when it has no text to read and no attachment.
    `provider` is the name of the channel (bot) it came through."""
    if not msg.text.strip() and not msg.attachments:
        return None
    key = session_key_of(msg, agent_id, provider)
    direct = msg.guild_id is None
    may_start = not msg.author_is_bot or config.allow_bots
    addressed = (
        direct
        or bot_id in msg.mentions
        or msg.replied_author_id == bot_id
        or not requires_mention(config, key, msg.guild_id)
    )
    return InboundMessage(
        session_key=key,
        chat=ChatRef(provider, str(msg.channel_id)),
        sender_id=str(msg.author_id),
        sender_name=msg.author_name,
        text=msg.text,
        provider_message_id=str(msg.id),
        reply_to_id=str(msg.reply_to_id) if msg.reply_to_id is not None else None,
        starts_turn=addressed and may_start,
        sent_at=msg.created_at,
        command=command_of(msg, bot_id=bot_id) if may_start else None,
        guild_id=str(msg.guild_id) if msg.guild_id is not None else None,
    )


def default_intents() -> discord.Intents:
    """Guilds (channel, thread and role cache), guild and DM messages, and their content; no typing,
    reaction, voice or presence events we would only throw away."""
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = True
    return intents
