"""Slack's shapes without a daemon: Markdown to mrkdwn, chunking, reading events, and the stand-in's
strictness as slack_sdk sees it."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import SlackConfig
from bot.core.errors import ConfigError, SessionKeyError
from bot.core.log import configure_logging
from bot.core.messages import ChatRef
from bot.schedule.triggers import delivery_chat, delivery_key
from bot.testing.recording_intake import RecordingIntake
from bot.testing.slack_api import SlackStandIn
from channels.slack.channel import SlackChannel
from channels.slack.mrkdwn import slack_chunks, to_mrkdwn
from channels.slack.normalise import admit, read_event, readable, session_key_of, to_inbound

BOT = "U0BOT"


@pytest.mark.parametrize(("markdown", "mrkdwn"), [
    ("**bold** and __bold__", "*bold* and *bold*"),
    ("*italic* and _italic_", "_italic_ and _italic_"),
    ("~~struck~~", "~struck~"),
    ("`a < b`", "`a &lt; b`"),
    ("[the docs](https://example.com/a?b=1&c=2)", "<https://example.com/a?b=1&amp;c=2|the docs>"),
    ("## Plan", "*Plan*"),
    ("- one\n- two\n  * nested", "• one\n• two\n  • nested"),
    ("1. first\n2. second", "1. first\n2. second"),
    ("> quoted **words**", "> quoted *words*"),
    ("---", "───"),
    ("```python\nif a < b: print('**x**')\n```", "```\nif a &lt; b: print('**x**')\n```"),
    ("snake_case and 2*3*4", "snake_case and 2*3*4"),
    ("tell <!channel> and <!here> and <@U0BOB>",
     "tell &lt;!channel&gt; and &lt;!here&gt; and &lt;@U0BOB&gt;"),
    ("fish & chips", "fish &amp; chips"),
])
def test_markdown_becomes_mrkdwn(markdown: str, mrkdwn: str) -> None:
    """Each Markdown form has its mrkdwn, and what could ping is escaped into plain text."""
    assert to_mrkdwn(markdown) == mrkdwn


def test_a_long_reply_is_cut_under_the_limit_without_splitting_a_code_block() -> None:
    """A 12 000-character reply with a long code block comes in pieces under the limit, every piece
    with balanced fences, all the code there."""
    code = "\n".join(f"print({n})  # {'x' * 50}" for n in range(120))
    reply = "Here:\n\n```python\n" + code + "\n```\n\n" + ("More words. " * 400).strip()
    chunks = slack_chunks(reply)
    assert len(chunks) >= 3
    assert all(len(c) <= 3_600 and c.count("```") % 2 == 0 for c in chunks)
    assert all(f"print({n})" in "\n".join(chunks) for n in range(120))


def test_reading_events_skips_edits_and_keeps_threads() -> None:
    """A plain message and a thread reply are read; an edit and a join are not; a DM is direct."""
    base = {"type": "message", "channel": "C0GENERAL", "user": "U0ALICE", "text": "hi",
            "ts": "1700000000.000200"}
    assert read_event({**base, "subtype": "message_changed"}) is None
    assert read_event({**base, "subtype": "channel_join"}) is None
    msg = read_event({**base, "thread_ts": "1700000000.000100"})
    assert msg is not None and msg.thread_ts == "1700000000.000100" and not msg.direct
    parent = read_event({**base, "thread_ts": base["ts"]})  # a thread's first message is top level
    assert parent is not None and parent.thread_ts is None
    direct = read_event({**base, "channel": "D0ALICE", "channel_type": "im"})
    assert direct is not None and direct.direct
    assert str(session_key_of(direct, "main")) == "agent:main:slack:direct:U0ALICE"
    assert str(session_key_of(msg, "main")) == "agent:main:slack:channel:C0GENERAL:thread:1700000000.000100"


def test_gating_and_what_the_model_reads() -> None:
    """Channels need a mention (as `<@bot>` or app_mention); DMs go by the allowlist; mentions,
    channel references and links read as a person reads them."""
    config = SlackConfig(enabled=True, allow_from=["U0ALICE"], channels=["C0GENERAL"])
    event: dict[str, Any] = {"type": "message", "channel": "C0GENERAL", "user": "U0ALICE",
                             "ts": "1700000000.000300",
                             "text": "see <#C0RANDOM|random> and <https://x.io|x> &amp; ask <@U0BOB>"}
    msg = read_event(event)
    assert msg is not None and admit(msg, config, bot_user_id=BOT) == "accept"
    inbound = to_inbound(msg, agent_id="main", bot_user_id=BOT, config=config, sender_name="alice",
                         names={"U0BOB": "bob"})
    assert inbound is not None and not inbound.starts_turn
    assert inbound.text == "see #random and x (https://x.io) & ask @bob"
    assert inbound.chat == ChatRef("slack", "C0GENERAL") and inbound.provider_message_id == event["ts"]
    mention = read_event({**event, "text": f"<@{BOT}> hi"})
    assert mention is not None
    addressed = to_inbound(mention, agent_id="main", bot_user_id=BOT, config=config, sender_name="alice",
                           names={BOT: "switchboard"})
    assert addressed is not None and addressed.starts_turn and addressed.text == "@switchboard hi"
    elsewhere = read_event({**event, "channel": "C0ELSE"})
    stranger = read_event({**event, "channel": "D0MALLORY", "channel_type": "im", "user": "U0MALLORY"})
    assert elsewhere is not None and admit(elsewhere, config, bot_user_id=BOT) == "ignore"
    assert stranger is not None and admit(stranger, config, bot_user_id=BOT) == "refuse"
    assert readable("<!here|@here> now", {}) == "@here now"


async def test_the_standin_refuses_as_slack_does() -> None:
    """Unknown methods, bad tokens, the wrong kind of token, a missing scope and a channel the bot
    is no member of are `ok: false`."""
    async with SlackStandIn(scopes=frozenset({"chat:write"})) as slack:
        bot = AsyncWebClient(token=slack.bot_token, base_url=slack.base_url)
        wrong = AsyncWebClient(token="xoxb-wrong", base_url=slack.base_url)
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "unknown": lambda: bot.api_call("chat.teleport"),
            "bad token": wrong.auth_test,
            "bot token opening a socket": lambda: bot.apps_connections_open(app_token=slack.bot_token),
            "no users:read": lambda: bot.users_info(user="U0BOT"),
            "no text": lambda: bot.api_call("chat.postMessage", json={"channel": "C0GENERAL"}),
            "not a member": lambda: bot.chat_postMessage(channel="C0ELSEWHERE", text="hi"),
        }
        slack.remove_bot("C0ELSEWHERE")
        refused = {}
        for name, call in calls.items():
            with pytest.raises(SlackApiError) as info:
                await call()
            refused[name] = info.value.response["error"]
        posted = await bot.chat_postMessage(channel="C0GENERAL", text="hi")
        again = await bot.chat_postMessage(channel="C0GENERAL", text="hi")
    assert refused == {"unknown": "unknown_method", "bad token": "invalid_auth",
                       "bot token opening a socket": "not_allowed_token_type",
                       "no users:read": "missing_scope", "no text": "no_text",
                       "not a member": "not_in_channel"}
    assert slack.calls_of("users.info")[0].error == "missing_scope"
    assert float(again["ts"]) > float(posted["ts"]) and len(posted["ts"].split(".")[1]) == 6



def test_a_job_names_a_slack_channel_member_or_thread() -> None:
    """`slack:C…` is a channel, `slack:U…` a member's DM, a full key may name a thread; a DM
    channel id, a lowercase name or a thread that is not a ts are refused with what is expected."""
    assert str(delivery_key("slack:C0GENERAL", "main")) == "agent:main:slack:channel:C0GENERAL"
    assert str(delivery_key("slack.work:U0ALICE", "main")) == "agent:main:slack.work:direct:U0ALICE"
    thread = delivery_key("agent:main:slack:channel:C0GENERAL:thread:1700000000.000100", "main")
    assert delivery_chat(thread) == ChatRef("slack", "C0GENERAL", "1700000000.000100")
    for wrong, says in [("slack:D0ALICE", "member's id"), ("slack:general", "Slack id"),
                        ("agent:main:slack:channel:C0GENERAL:thread:first", "ts")]:
        with pytest.raises(SessionKeyError, match=says):
            delivery_key(wrong, "main")


async def test_the_standin_keeps_history_threads_edits_and_rate_tiers() -> None:
    """conversations.history lists a channel's top level newest first, conversations.replies a
    thread oldest first; chat.update edits only the bot's own messages; with tiers enforced a
    second post to a channel within the second is a 429 with Retry-After."""
    async with SlackStandIn(enforce_tiers=True) as slack:
        bot = AsyncWebClient(token=slack.bot_token, base_url=slack.base_url)
        top = slack.message("C0GENERAL", "U0ALICE", "first")
        slack.message("C0GENERAL", "U0ALICE", "in the thread", thread_ts=top["ts"])
        posted = await bot.chat_postMessage(channel="C0GENERAL", text="second", thread_ts=top["ts"])
        with pytest.raises(SlackApiError) as limited:
            await bot.chat_postMessage(channel="C0GENERAL", text="third")
        history = await bot.conversations_history(channel="C0GENERAL")
        replies = await bot.conversations_replies(channel="C0GENERAL", ts=top["ts"])
        edited = await bot.chat_update(channel="C0GENERAL", ts=posted["ts"], text="second, edited")
        with pytest.raises(SlackApiError) as foreign:
            await bot.chat_update(channel="C0GENERAL", ts=top["ts"], text="not mine")

    assert limited.value.response.status_code == 429 and limited.value.response.headers["Retry-After"] == "1"
    assert [m["text"] for m in history["messages"]] == ["first"]
    assert [m["text"] for m in replies["messages"]] == ["first", "in the thread", "second"]
    assert edited["text"] == "second, edited" and foreign.value.response["error"] == "cant_update_message"


@pytest.mark.parametrize(("bot", "app", "which"), [
    ("xoxb-revoked", "xapp-test-token", "bot token: invalid_auth"),
    ("xoxb-test-token", "xapp-revoked", "app-level token: invalid_auth"),
])
async def test_a_refused_token_leaves_the_channel_off(
    bot: str, app: str, which: str, log_stream: io.StringIO
) -> None:
    """A bot or app-level token Slack refuses ends the channel's run (no retry loop), saying which."""
    configure_logging("INFO", "json", stream=log_stream)
    async with SlackStandIn() as slack:
        channel = SlackChannel(SlackConfig(enabled=True, base_url=slack.base_url), agent_id="main",
                               bot_token=bot, app_token=app)
        await asyncio.wait_for(channel.run(RecordingIntake()), 10)

    assert not channel.ready.is_set() and slack.connections == 0
    assert which in log_stream.getvalue()


def test_slack_ids_are_checked_when_the_config_is_read(make_config: Callable[..., Any]) -> None:
    """A member or channel that is not a Slack id is refused, naming the key."""
    with pytest.raises(ConfigError, match=r"channels\.slack\.allow_from"):
        make_config({"channels": {"slack": {"allow_from": ["alice"]}}})
    with pytest.raises(ConfigError, match=r"channels\.slack\.channel_settings"):
        make_config({"channels": {"slack": {"channel_settings": {"general": {"require_mention": False}}}}})
