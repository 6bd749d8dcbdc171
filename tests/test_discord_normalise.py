"""Discord gating and normalisation over plain message facts (a discord.Message needs library state)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from bot.config import DiscordConfig
from channels.discord.catch_up import catch_up_since
from channels.discord.normalise import (
    DiscordMessage,
    admit,
    command_of,
    requires_mention,
    session_key_of,
    to_inbound,
)
from channels.discord.preview import nonce_of

BOT = 900
ALICE, BOB = 1, 2
GUILD, GENERAL, RANDOM, THREAD, ADMINS = 100, 101, 103, 102, 110


def config(**values: Any) -> DiscordConfig:
    return DiscordConfig.model_validate({"allow_from": [ALICE], "guilds": {str(GUILD): {}}, **values})


def dm(text: str = "hi", **changes: Any) -> DiscordMessage:
    base = DiscordMessage(id=5, channel_id=201, guild_id=None, author_id=ALICE, author_name="Alice",
                          text=text, content=text, created_at=1_700_000_000.0)
    return dataclasses.replace(base, **changes)


def guild(text: str = "hello", *, channel: int = GENERAL, **changes: Any) -> DiscordMessage:
    base = DiscordMessage(id=6, channel_id=channel, guild_id=GUILD, author_id=ALICE, author_name="Alice",
                          text=text, content=text, created_at=1_700_000_000.0)
    return dataclasses.replace(base, **changes)


def mentioning(text: str, **changes: Any) -> DiscordMessage:
    """A guild message starting with a mention of the bot, as written (`content`) and shown (`text`)."""
    return guild(f"@switchboard {text}", content=f"<@{BOT}> {text}", mentions=frozenset({BOT}), **changes)


def normalise(msg: DiscordMessage, **values: Any) -> Any:
    return to_inbound(msg, agent_id="main", bot_id=BOT, config=config(**values))


def test_a_dm_is_a_direct_session_in_its_dm_channel_that_always_starts_a_turn() -> None:
    """A DM becomes `…:discord:direct:<userId>`, answered in the DM channel, with its id and time."""
    inbound = normalise(dm("hi there"))
    assert str(inbound.session_key) == "agent:main:discord:direct:1"
    assert (inbound.chat.provider, inbound.chat.chat_id, inbound.chat.thread_id) == ("discord", "201", None)
    assert (inbound.sender_id, inbound.sender_name, inbound.text) == ("1", "Alice", "hi there")
    assert (inbound.provider_message_id, inbound.sent_at, inbound.starts_turn) == ("5", 1_700_000_000.0, True)
    assert (inbound.reply_to_id, inbound.command) == (None, None)


def test_a_thread_is_keyed_under_its_parent_and_answered_in_the_thread_itself() -> None:
    """A thread message gets `…:channel:<parentId>:thread:<threadId>`; the chat is the thread's own id."""
    inbound = normalise(guild(channel=THREAD, parent_id=GENERAL))
    assert str(inbound.session_key) == f"agent:main:discord:channel:{GENERAL}:thread:{THREAD}"
    assert (inbound.chat.chat_id, inbound.chat.thread_id) == (str(THREAD), None)
    assert str(normalise(guild()).session_key) == f"agent:main:discord:channel:{GENERAL}"


def test_a_guild_message_names_its_guild_and_a_dm_none() -> None:
    """Guild messages carry their guild's id (for guild bindings); DMs carry none."""
    assert normalise(guild()).guild_id == str(GUILD)
    assert normalise(guild(channel=THREAD, parent_id=GENERAL)).guild_id == str(GUILD)
    assert normalise(dm()).guild_id is None


def test_an_extra_bot_keys_its_sessions_and_chats_by_its_own_channel_name() -> None:
    """Through the account "discord.work" the same chats are other sessions, answered by that bot."""
    inbound = to_inbound(guild(), agent_id="work", bot_id=BOT, config=config(), provider="discord.work")
    assert str(inbound.session_key) == f"agent:work:discord.work:channel:{GENERAL}"
    assert (inbound.chat.provider, inbound.chat.chat_id) == ("discord.work", str(GENERAL))
    direct = to_inbound(dm(), agent_id="work", bot_id=BOT, config=config(), provider="discord.work")
    assert str(direct.session_key) == "agent:work:discord.work:direct:1"


@pytest.mark.parametrize(
    ("msg", "starts"),
    [
        (guild("just chatting"), False),
        (mentioning("what now?"), True),
        (guild("@everyone look", content="@everyone look"), False),  # not a user mention
        (guild("@admins look", content=f"<@&{ADMINS}> look"), False),  # a role mention
        (guild("hi @bob", content=f"hi <@{BOB}>", mentions=frozenset({BOB})), False),
        (guild("that's right", reply_to_id=77, replied_author_id=BOT), True),
        (guild("that's right", reply_to_id=78, replied_author_id=BOB), False),
    ],
)
def test_guild_messages_start_a_turn_only_when_the_bot_is_addressed(
    msg: DiscordMessage, starts: bool
) -> None:
    """Every guild message is kept, but only a mention of the bot or a reply to it starts a turn."""
    inbound = normalise(msg)
    assert inbound.starts_turn is starts
    assert inbound.reply_to_id == (str(msg.reply_to_id) if msg.reply_to_id else None)


def test_require_mention_goes_thread_then_channel_then_guild_then_section() -> None:
    """The most specific `require_mention` wins: thread, its channel, the guild, `[channels.discord]`."""
    in_thread = guild(channel=THREAD, parent_id=GENERAL)
    key = session_key_of(in_thread, "main")

    def needs(**values: Any) -> bool:
        return requires_mention(config(**values), key, GUILD)

    assert needs() is True
    assert needs(require_mention=False) is False
    assert needs(require_mention=False, guilds={str(GUILD): {"require_mention": True}}) is True
    assert needs(guilds={str(GUILD): {"require_mention": False}}) is False
    channel_off = {str(GENERAL): {"require_mention": False}}
    assert needs(guilds={str(GUILD): {"require_mention": True}}, channel_settings=channel_off) is False
    thread_on = {**channel_off, str(THREAD): {"require_mention": True}}
    assert needs(channel_settings=thread_on) is True
    assert normalise(guild("anyone?"), guilds={str(GUILD): {"require_mention": False}}).starts_turn is True


def test_other_bots_are_stored_but_start_nothing_unless_allowed() -> None:
    """Another bot's mention is context only; `allow_bots = true` lets it start turns and commands."""
    from_bot = mentioning("ping", author_is_bot=True, author_id=50)
    assert normalise(from_bot).starts_turn is False
    assert normalise(from_bot, allow_bots=True).starts_turn is True
    command = mentioning("/status", author_is_bot=True, author_id=50)
    assert normalise(command).command is None
    assert normalise(command, allow_bots=True).command == "status"


def test_messages_without_text_or_attachments_are_unreadable() -> None:
    """A message of only whitespace normalises to None (DMs then get a short note); one with an
    attachment is kept, its files to be taken in by the channel."""
    assert normalise(dm("  \n")) is None
    kept = normalise(dm("", attachments=1))
    assert kept is not None and kept.text == "" and kept.starts_turn
    assert normalise(guild("  \n", attachments=2)) is not None


@pytest.mark.parametrize(
    ("msg", "expected"),
    [
        (dm("/reset"), "reset"),
        (dm("/Status please"), "status"),
        (dm("/frobnicate"), "frobnicate"),
        (guild("/help"), "help"),
        (guild("/frobnicate"), None),  # may be meant for another bot
        (mentioning("/frobnicate"), "frobnicate"),
        (mentioning("/status"), "status"),
        (guild("@switchboard /status", content=f"<@!{BOT}>/status", mentions=frozenset({BOT})), "status"),
        (guild("@bob /status", content=f"<@{BOB}> /status", mentions=frozenset({BOB})), None),
        (guild("please /status"), None),
        (guild("/status@otherbot"), None),
        (dm("/ status"), None),
    ],
)
def test_commands_are_read_at_the_start_or_after_a_leading_mention(
    msg: DiscordMessage, expected: str | None
) -> None:
    """`/name` opens the message, or follows a leading mention of the bot; a bare unknown one in a
    guild is left alone."""
    assert command_of(msg, bot_id=BOT) == expected
    assert normalise(msg).command == expected


@pytest.mark.parametrize(
    ("policy", "allow_from", "verdict"),
    [("allowlist", [ALICE], "accept"), ("allowlist", [], "refuse"), ("open", [], "accept"),
     ("disabled", [ALICE], "refuse"), ("pairing", [ALICE], "accept"), ("pairing", [], "pair")],
)
def test_dm_policy(policy: str, allow_from: list[int], verdict: str) -> None:
    """DMs follow `dm_policy`: allowlist (the default, failing closed), open, disabled, or pairing
    (the allowlist, then the store is asked about strangers)."""
    assert admit(dm(), config(dm_policy=policy, allow_from=allow_from), bot_id=BOT) == verdict


def test_own_messages_are_ignored_and_refused_bots_get_no_notice() -> None:
    """The bot's own messages are dropped everywhere; a refused bot DM gets no polite line back."""
    assert admit(dm(author_id=BOT), config(dm_policy="open"), bot_id=BOT) == "ignore"
    assert admit(guild(author_id=BOT), config(), bot_id=BOT) == "ignore"
    assert admit(dm(author_id=50, author_is_bot=True), config(), bot_id=BOT) == "ignore"
    assert admit(dm(author_id=50, author_is_bot=True), config(dm_policy="pairing"), bot_id=BOT) == "ignore"


def test_guild_policy_lists_guilds_and_open_lets_unlisted_ones_in() -> None:
    """By default only listed guilds are served; `open` serves any; `disabled` none."""
    elsewhere = guild(guild_id=300, channel=301)
    assert admit(elsewhere, config(), bot_id=BOT) == "ignore"
    assert admit(elsewhere, config(guild_policy="open"), bot_id=BOT) == "accept"
    assert admit(guild(), config(guild_policy="disabled"), bot_id=BOT) == "ignore"
    assert admit(guild(), config(), bot_id=BOT) == "accept"


def test_guild_channel_lists_admit_threads_of_listed_channels() -> None:
    """A guild's `channels` list admits those channels and threads under them, nothing else."""
    values = {"guilds": {str(GUILD): {"channels": [GENERAL]}}}
    assert admit(guild(), config(**values), bot_id=BOT) == "accept"
    assert admit(guild(channel=THREAD, parent_id=GENERAL), config(**values), bot_id=BOT) == "accept"
    assert admit(guild(channel=RANDOM), config(**values), bot_id=BOT) == "ignore"
    assert admit(guild(channel=104, parent_id=RANDOM), config(**values), bot_id=BOT) == "ignore"
    listed_thread = {"guilds": {str(GUILD): {"channels": [104]}}}
    assert admit(guild(channel=104, parent_id=RANDOM), config(**listed_thread), bot_id=BOT) == "accept"


@pytest.mark.parametrize(
    ("users", "roles", "author", "author_roles", "verdict"),
    [
        ([], [], BOB, (), "accept"),
        ([ALICE], [], ALICE, (), "accept"),
        ([ALICE], [], BOB, (), "ignore"),
        ([], [ADMINS], BOB, (ADMINS,), "accept"),
        ([], [ADMINS], BOB, (GUILD,), "ignore"),
        ([ALICE], [ADMINS], BOB, (ADMINS,), "accept"),
        ([ALICE], [ADMINS], BOB, (), "ignore"),
    ],
)
def test_guild_users_and_roles(
    users: list[int], roles: list[int], author: int, author_roles: tuple[int, ...], verdict: str
) -> None:
    """Empty `users` and `roles` admit everyone; else the author's id or one of their roles must be listed."""
    values = {"guilds": {str(GUILD): {"users": users, "roles": roles}}}
    msg = guild(author_id=author, role_ids=frozenset(author_roles))
    assert admit(msg, config(**values), bot_id=BOT) == verdict


def test_a_chunk_nonce_is_stable_and_fits_discord() -> None:
    """A chunk's nonce is `<key>.<index>`, or a fixed 24-character hash when that would pass 25."""
    assert nonce_of("sb123", 0) == "sb123.0" and nonce_of("sb123", 11) == "sb123.11"
    long_key = "scheduled-job-7-run-20260101"
    assert nonce_of(long_key, 1) == nonce_of(long_key, 1) != nonce_of(long_key, 2)
    assert len(nonce_of(long_key, 1)) == 24


def test_catch_up_looks_back_max_reply_age_or_a_day_without_a_cap() -> None:
    """Chats are caught up when active within `max_reply_age`; with 0 (no cap) within a day."""
    assert catch_up_since(3600, 1_700_000_000.0) == 1_699_996_400.0
    assert catch_up_since(0, 1_700_000_000.0) == 1_700_000_000.0 - 86_400
