"""Telegram end to end: the daemon with the real python-telegram-bot against the Bot API stand-in."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from structlog.testing import capture_logs

from bot.config import Config
from bot.core.errors import ConfigError, DeliveryError
from bot.core.messages import ChatRef, InboundMessage, OutboundMessage
from bot.core.session_key import build
from bot.daemon.assembly import Daemon, build_channels
from bot.intake.access import refused_dm_reply
from bot.intake.commands import COMMANDS
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest, Response, Slow, Text
from bot.testing.recording_intake import RecordingIntake
from bot.testing.telegram_api import (
    TelegramStandIn,
    command_entities,
    group_chat,
    mention_entities,
    message,
    private_chat,
    user,
)
from channels.telegram.channel import TelegramChannel
from tests.harness import (
    API_KEY,
    FAST,
    config_data,
    last_user_line,
    reply_requests,
    request_text,
    router_of,
    running,
)
from tests.test_telegram_intake import running as channel_running

MakeConfig = Callable[[dict[str, Any]], Config]
ADA = user(42, "Ada", "ada")
BEA = user(7, "Bea")
STRANGER = user(666, "Mallory")
OTHER_STRANGER = user(667, "Trudy")
GROUP = group_chat(-100123, "Friends", supergroup=True)
FORUM = group_chat(-100777, "Forum", forum=True)
BOT = "switchboard_bot"



@pytest.fixture
def telegram_config(
    api: AnthropicStandIn, tg: TelegramStandIn, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Config]:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)

    def make(**telegram: Any) -> Config:
        router = telegram.pop("router", {})
        section = {"enabled": True, "base_url": tg.base_url, "allow_from": [42, 7],
                   "groups": [-100123, -100777], **telegram}
        return make_config(config_data(api, channels={"telegram": section}, router=router))

    return make


@asynccontextmanager
async def telegram_daemon(config: Config, **options: Any) -> AsyncIterator[Daemon]:
    """The daemon as `switchboard run` assembles it (`options` go to `Daemon`), with Telegram as
    its only channel."""
    channels = build_channels(config, console=False)
    (channel,) = channels
    assert isinstance(channel, TelegramChannel)
    async with running(config, channels, AnthropicBrain(config.anthropic, API_KEY), **options) as daemon:
        # A bound on a wait, not a speed: a start with failed polls takes seconds under load.
        await asyncio.wait_for(channel.ready.wait(), 20)
        yield daemon


def texts_to(tg: TelegramStandIn, chat_id: int) -> list[str]:
    return [m.visible_text for m in tg.sent if m.chat_id == chat_id]


async def settled(tg: TelegramStandIn, daemon: Daemon, last: dict[str, Any]) -> None:
    """Return once the daemon has committed every update up to `last`, run every turn and command
    they queued, and finished sending its notices: after this, nothing more is on its way."""
    # The poller confirms an offset only once the updates before it are committed.
    await tg.wait_for(lambda: tg.confirmed_offset > last["update_id"])
    await router_of(daemon).idle()
    notices = [t for t in asyncio.all_tasks() if t.get_name().startswith("notice ")]
    await asyncio.gather(*notices, return_exceptions=True)


async def store_view(config: Config) -> AsyncIterator[Store]:
    async with Store.open(config.database_path()) as store:
        yield store


async def test_a_dm_is_answered_with_typing_first_and_stored_with_its_telegram_ids(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """A private message gets typing, then the model's reply (no quote), stored with both ids."""
    config = telegram_config()
    async with telegram_daemon(config):
        pushed = tg.push_message(private_chat(ADA), ADA, "hello there")
        await tg.wait_for(lambda: tg.sent)

    (sent,) = tg.sent
    assert (sent.chat_id, sent.visible_text, sent.reply_to_message_id) == (42, "re: hello there", None)
    (typing, *_) = tg.calls_of("sendChatAction")
    assert typing.params["action"] == "typing" and typing.time < sent.time
    assert len(tg.calls_of("setMyCommands")) == 1
    (commands,) = tg.commands.values()
    assert [c["command"] for c in commands] == [c.name for c in COMMANDS]
    async with Store.open(config.database_path()) as store:
        history = await store.history("agent:main:telegram:direct:42", 10)
        chat = ChatRef("telegram", "42")
        by_id = await store.message_by_provider_id(chat, str(sent.message_id))
    assert [(m.role, m.text, m.sender_name) for m in history] == [
        ("user", "hello there", "Ada"), ("assistant", "re: hello there", None)]
    assert history[0].provider_message_id == str(pushed["message"]["message_id"])
    assert by_id is not None and by_id.id == history[1].id


async def test_group_messages_are_stored_and_only_a_mention_is_answered_in_reply(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """In a group the chatter is kept as context, and only the @mention is answered, quoting it."""
    config = telegram_config()
    async with telegram_daemon(config) as daemon:
        tg.push_message(GROUP, BEA, "the meeting moved to Thursday")
        text = f"@{BOT} when is the meeting?"
        asked = tg.push_message(GROUP, ADA, text, entities=mention_entities(text, BOT))
        await tg.wait_for(lambda: tg.sent)
        await settled(tg, daemon, asked)

    (sent,) = tg.sent
    assert sent.chat_id == -100123
    assert sent.reply_to_message_id == asked["message"]["message_id"]
    (request,) = reply_requests(api)
    assert "[Bea]: the meeting moved to Thursday" in request_text(request)


async def test_forum_topics_are_answered_in_their_topic(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """A mention inside a forum topic is answered in that topic; the General topic needs no thread id."""
    config = telegram_config(group_settings={"-100777": {"require_mention": False}})
    async with telegram_daemon(config):
        tg.push_message(FORUM, ADA, "in topic five", thread_id=5, is_topic_message=True)
        await tg.wait_for(lambda: len(tg.sent) == 1)
        tg.push_message(FORUM, ADA, "in general")
        await tg.wait_for(lambda: len(tg.sent) == 2)

    assert [(m.visible_text, m.message_thread_id) for m in tg.sent] == [
        ("re: [Ada]: in topic five", 5), ("re: [Ada]: in general", None)]
    sessions = {m.session_key for m in await _all_messages(config)}
    assert sessions == {"agent:main:telegram:group:-100777:topic:5",
                        "agent:main:telegram:group:-100777:topic:1"}


async def _all_messages(config: Config) -> list[Any]:
    async with Store.open(config.database_path()) as store:
        found = []
        for session in await store.list_sessions():
            found.extend(await store.history(session.key, 100))
        return found


async def test_a_reply_to_an_old_bot_message_brings_it_back(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """Replying to an old answer puts that answer in context even when it is long out of range."""
    config = telegram_config(dm_history_limit=1)
    async with telegram_daemon(config):
        for n in range(4):
            tg.push_message(private_chat(ADA), ADA, f"fact number {n}")
            await tg.wait_for(lambda n=n: len(tg.sent) == n + 1)
        first_answer = tg.sent[0]
        replied = {"message_id": first_answer.message_id, "date": int(time.time()), "chat": private_chat(ADA),
                   "from": tg.bot_user, "text": first_answer.visible_text}
        tg.push_message(private_chat(ADA), ADA, "say that again?", reply_to=replied)
        await tg.wait_for(lambda: len(tg.sent) == 5)

    last = reply_requests(api)[-1]
    assert "re: fact number 0" in request_text(last)
    assert "fact number 1" not in request_text(last)


async def test_a_long_reply_with_code_is_split_into_valid_html_messages_all_stored(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """A 9 000-character answer arrives as several messages within Telegram's limit, the code block
    closed and reopened with its language, and every message id points at the stored reply."""
    code = "\n".join(f"print('line {n}')  # {'x' * 40}" for n in range(120))
    answer = "Here is the **script**:\n\n```python\n" + code + "\n```\n\n" + ("More words. " * 200).strip()
    api.default = lambda rec: Text(answer)
    config = telegram_config()
    async with telegram_daemon(config) as daemon:
        asked = tg.push_message(private_chat(ADA), ADA, "write me a script")
        await tg.wait_for(lambda: len(tg.sent) >= 3)
        await settled(tg, daemon, asked)

    assert len(tg.sent) >= 3
    assert all(m.parse_mode == "HTML" and len(m.visible_text) <= 4096 for m in tg.sent)
    assert tg.sent[0].text.startswith("Here is the <b>script</b>")
    assert '<pre><code class="language-python">' in tg.sent[1].text
    joined = "\n".join(m.visible_text for m in tg.sent)
    assert all(f"print('line {n}')" in joined for n in range(120))
    async with Store.open(config.database_path()) as store:
        chat = ChatRef("telegram", "42")
        found = {(await store.message_by_provider_id(chat, str(m.message_id))).id  # type: ignore[union-attr]
                 for m in tg.sent}
        history = await store.history("agent:main:telegram:direct:42", 5)
    (reply,) = [m for m in history if m.role == "assistant"]
    assert found == {reply.id}
    assert reply.text == answer


async def test_rejected_html_is_resent_as_plain_text_once(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """When Telegram rejects the formatting the same chunk is delivered once as plain text."""
    api.default = lambda rec: Text("**bold** claim")
    config = telegram_config()
    async with telegram_daemon(config) as daemon:
        rejected = "Bad Request: can't parse entities: Unsupported start tag \"b\" at byte offset 0"
        tg.fail_next("sendMessage", status=400, description=rejected)
        asked = tg.push_message(private_chat(ADA), ADA, "claim something")
        await tg.wait_for(lambda: tg.sent)
        await settled(tg, daemon, asked)

    (sent,) = tg.sent
    assert (sent.parse_mode, sent.visible_text) == (None, "**bold** claim")
    assert len(tg.calls_of("sendMessage")) == 2


async def test_a_429_is_waited_out_and_delivered_once(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """A rate-limit answer with retry_after is honoured, then the reply arrives exactly once."""
    config = telegram_config()
    async with telegram_daemon(config) as daemon:
        tg.fail_next("sendMessage", retry_after=1)
        asked = tg.push_message(private_chat(ADA), ADA, "busy?")
        await tg.wait_for(lambda: tg.sent, timeout=5)
        await settled(tg, daemon, asked)

    attempts = tg.calls_of("sendMessage")
    assert len(attempts) == 2 and attempts[0].failed
    assert attempts[1].time - attempts[0].time >= 1.0
    assert texts_to(tg, 42) == ["re: busy?"]


async def test_restart_mid_stream_loses_nothing_and_answers_nothing_twice(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """Updates arriving across a restart, some delivered again after it, are each answered once."""
    config = telegram_config(router={"shutdown_grace": 0.2})
    slow_from = 4

    def model(rec: RecordedRequest) -> Response:
        n = int(last_user_line(rec).split()[-1])
        return Text(f"answer {n}", delay=3.0 if n >= slow_from else 0.0)

    api.default = model
    pushed = []
    async with telegram_daemon(config):
        for n in range(6):
            pushed.append(tg.push_message(private_chat(ADA), ADA, f"message {n}"))
        await tg.wait_for(lambda: len(tg.sent) == slow_from)
        await tg.wait_for(lambda: api.count > slow_from)  # the slow turn is under way: stop abandons it
    assert texts_to(tg, 42) == [f"answer {n}" for n in range(slow_from)]

    api.default = lambda rec: Text(f"answer {int(last_user_line(rec).split()[-1])}")
    async with telegram_daemon(config) as daemon:
        # A crash before the offset was confirmed: Telegram hands every update out again.
        for update in pushed:
            tg.push("message", update["message"])
        last = tg.push_message(private_chat(ADA), ADA, "message 6")
        await tg.wait_for(lambda: len(tg.sent) == 7)
        await settled(tg, daemon, last)

    assert texts_to(tg, 42) == [f"answer {n}" for n in range(7)]
    messages = await _all_messages(config)
    assert [m.text for m in messages if m.role == "user"] == [f"message {n}" for n in range(7)]


async def test_refused_users_get_one_line_and_strange_groups_nothing(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """A DM from someone not allowed gets one polite line ever, naming their id, and so does each
    other stranger; a group not allowed gets silence."""
    config = telegram_config()
    async with telegram_daemon(config) as daemon:
        tg.push_message(private_chat(STRANGER), STRANGER, "let me in")
        tg.push_message(private_chat(OTHER_STRANGER), OTHER_STRANGER, "me too")
        tg.push_message(private_chat(STRANGER), STRANGER, "please?")
        tg.push_message(private_chat(OTHER_STRANGER), OTHER_STRANGER, "pretty please?")
        stranger_group = group_chat(-100999, "Elsewhere")
        text = f"@{BOT} hi"
        tg.push_message(stranger_group, ADA, text, entities=mention_entities(text, BOT))
        last = tg.push_message(private_chat(ADA), ADA, "I am allowed")
        await tg.wait_for(lambda: texts_to(tg, 42))
        await settled(tg, daemon, last)

    assert texts_to(tg, 666) == [refused_dm_reply("666")]
    assert texts_to(tg, 667) == [refused_dm_reply("667")]
    assert "666" in refused_dm_reply("666") and "667" not in refused_dm_reply("666")
    assert texts_to(tg, -100999) == []
    assert {m.session_key for m in await _all_messages(config)} == {"agent:main:telegram:direct:42"}
    assert api.count == 1


async def test_non_text_gets_a_short_note_in_dms_and_silence_in_groups(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """A sticker in a DM is answered with a short note that stickers are not read; a voice note in a
    group is kept for context without a word."""
    config = telegram_config(group_settings={"-100123": {"require_mention": False}})
    async with telegram_daemon(config) as daemon:
        tg.push_message(private_chat(ADA), ADA, sticker=True)
        tg.push_message(GROUP, ADA, voice=True)
        last = tg.push_message(GROUP, ADA, "text after the voice note")
        await tg.wait_for(lambda: texts_to(tg, -100123))
        await settled(tg, daemon, last)

    assert texts_to(tg, 42) == ["I can't take stickers yet; send me text, a picture or a file."]
    assert texts_to(tg, -100123) == ["re: [Ada]: text after the voice note"]
    assert api.count == 1


async def test_group_commands_answer_in_reply_and_stay_out_of_history(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """/status@bot in a group is answered as a reply, and /whoami tells the user their id."""
    config = telegram_config()
    async with telegram_daemon(config):
        status = tg.push_message(GROUP, ADA, f"/status@{BOT}", entities=command_entities(f"/status@{BOT}"))
        tg.push_message(private_chat(BEA), BEA, "/whoami", entities=command_entities("/whoami"))
        await tg.wait_for(lambda: len(tg.sent) == 2)

    by_chat = {m.chat_id: m for m in tg.sent}
    assert by_chat[-100123].reply_to_message_id == status["message"]["message_id"]
    assert "Session: agent:main:telegram:group:-100123" in by_chat[-100123].visible_text
    assert by_chat[7].visible_text == "Your user id is 7 (chat 7)."
    assert api.count == 0
    assert await _all_messages(config) == []


async def test_a_chat_that_blocked_the_bot_is_not_retried_and_others_carry_on(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """A 403 is tried once and logged; the reply stays stored and other chats are still answered."""
    config = telegram_config()
    tg.block(7)
    async with telegram_daemon(config) as daemon:
        tg.push_message(private_chat(BEA), BEA, "bye forever")
        await tg.wait_for(lambda: [c for c in tg.calls_of("sendMessage") if c.params["chat_id"] == 7])
        last = tg.push_message(private_chat(ADA), ADA, "still here")
        await tg.wait_for(lambda: texts_to(tg, 42))
        await settled(tg, daemon, last)

    assert len([c for c in tg.calls_of("sendMessage") if c.params["chat_id"] == 7]) == 1
    texts = [m.text for m in await _all_messages(config)]
    assert "re: bye forever" in texts


async def test_polling_recovers_from_network_errors(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """Dropped getUpdates connections are retried with back-off and messages still arrive."""
    config = telegram_config()
    # Armed before the start: armed after it, a long poll already waiting would take the faults
    # only once it ends, seconds later (the race made this test time out under load).
    tg.drop_next("getUpdates", times=2)
    async with telegram_daemon(config):
        await tg.wait_for(lambda: sum(c.failed for c in tg.calls_of("getUpdates")) == 2, timeout=10)
        tg.push_message(private_chat(ADA), ADA, "anyone?")
        await tg.wait_for(lambda: tg.sent, timeout=10)

    assert texts_to(tg, 42) == ["re: anyone?"]


async def test_an_update_from_hours_ago_is_stored_but_not_answered(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """After a long outage, a two-hour-old message is kept as context but not answered late."""
    config = telegram_config()
    async with telegram_daemon(config) as daemon:
        tg.push_message(private_chat(ADA), ADA, "old news", date=int(time.time()) - 7200)
        last = tg.push_message(private_chat(ADA), ADA, "new question")
        await tg.wait_for(lambda: tg.sent)
        await settled(tg, daemon, last)

    assert texts_to(tg, 42) == ["re: new question"]
    assert "old news" in request_text(reply_requests(api)[0])


def test_a_missing_token_is_a_config_error_naming_the_variable(make_config: MakeConfig) -> None:
    """Enabling Telegram without its token names the key and the environment variable."""
    config = make_config({"channels": {"telegram": {"enabled": True, "token_env": "MY_TG_TOKEN"}}})
    with pytest.raises(ConfigError) as info:
        build_channels(config, console=False)
    assert info.value.key == "channels.telegram.token_env"
    assert "MY_TG_TOKEN" in str(info.value)


async def test_a_stop_during_a_turn_still_delivers_its_reply(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """On shutdown, input stops first and the turn in flight still reaches Telegram within the grace."""
    api.default = lambda rec: Text("worth the wait", delay=0.5)
    config = telegram_config(router={"shutdown_grace": 5.0})
    async with telegram_daemon(config):
        tg.push_message(private_chat(ADA), ADA, "take your time")
        await tg.wait_for(lambda: api.count == 1)

    assert texts_to(tg, 42) == ["worth the wait"]


async def test_an_unparseable_update_is_quarantined_once_and_the_others_are_answered(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A poll the library cannot parse (no `members_only`) between two questions is kept in the
    quarantine with one warning line, fetched once, counted by `status`, and both questions are
    answered."""
    config = telegram_config()
    poll = {"id": "5", "question": "Lunch?", "total_voter_count": 0, "is_closed": False,
            "is_anonymous": True, "type": "regular", "allows_multiple_answers": False,
            "allows_revoting": False, "options": [{"persistent_id": "y", "text": "Yes", "voter_count": 0}]}
    caplog.set_level(logging.WARNING)
    with capture_logs() as logs:
        async with telegram_daemon(config) as running_daemon:
            tg.push_message(private_chat(ADA), ADA, "first question")
            bad_message = message(private_chat(ADA), ADA, message_id=tg.next_message_id(42)) | {"poll": poll}
            bad = tg.push_raw({"message": bad_message})
            last = tg.push_message(private_chat(ADA), ADA, "second question")
            await tg.wait_for(lambda: len(tg.sent) == 2)
            await settled(tg, running_daemon, last)
            status = await running_daemon.status()

    assert texts_to(tg, 42) == ["re: first question", "re: second question"]
    assert status["quarantined"] == 1
    async with Store.open(config.database_path()) as store:
        ((provider, ref, raw, error),) = await store.quarantined()
    assert (provider, ref, json.loads(raw)) == ("telegram", str(bad["update_id"]), bad)
    assert error == "TypeError: `members_only` is a required argument since Bot API 10.0"
    loud = [e for e in logs if e["log_level"] not in ("debug", "info")]
    assert [(e["event"], e["ref"]) for e in loud] == [("update quarantined", ref)]
    assert "exc_info" not in loud[0]
    assert caplog.records == []  # nothing from python-telegram-bot either
    fetched = [c for c in tg.calls_of("getUpdates")
               if any(u["update_id"] == bad["update_id"] for u in c.result or ())]
    assert len(fetched) == 1


async def test_a_stop_right_after_a_batch_arrived_loses_nothing(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """A daemon stopped while it takes a batch of group chatter confirms only what it stored; the
    next run stores the rest, and every message is kept exactly once."""
    config = telegram_config()
    count = 40
    async with telegram_daemon(config) as daemon:
        pushed = [tg.push_message(GROUP, BEA, f"chatter {n}") for n in range(count)]
        ids = {u["update_id"] for u in pushed}
        await tg.wait_for(lambda: [c for c in tg.calls_of("getUpdates")
                                   if ids & {u["update_id"] for u in c.result or ()}])
        daemon.request_stop()
    stored = {m.text for m in await _all_messages(config)}
    assert all(u["message"]["text"] in stored for u in pushed if u["update_id"] < tg.confirmed_offset)

    async with telegram_daemon(config):
        await tg.wait_for(lambda: tg.confirmed_offset > pushed[-1]["update_id"])
    texts = [m.text for m in await _all_messages(config)]
    assert sorted(texts) == sorted(f"chatter {n}" for n in range(count))


async def test_another_chat_is_answered_while_a_compact_waits_on_the_model(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]
) -> None:
    """A /compact held by the model in one chat holds up neither intake nor another chat's answer."""
    config = telegram_config()
    key = build("main", "telegram", "direct", 42)
    async with Store.open(config.database_path()) as store:  # a long chat worth summarising
        for n in range(30):
            said = await store.append_inbound(InboundMessage(
                key, ChatRef("telegram", "42"), "42", "Ada", f"fact {n} " + "x" * 200,
                provider_message_id=f"seed-{n}"))
            assert said is not None
            await store.append_reply(str(key), f"ok {n}", request_id=said.id)

    def held_summary(request: RecordedRequest) -> Response:
        if request.model == FAST:
            return Slow(30, Text("a summary"))  # held until the daemon stops
        return Text(f"re: {last_user_line(request)}")

    api.default = held_summary
    async with telegram_daemon(config):
        tg.push_message(private_chat(ADA), ADA, "/compact", entities=command_entities("/compact"))
        await tg.wait_for(lambda: api.requests_for(FAST))
        tg.push_message(private_chat(BEA), BEA, "hello while Ada waits")
        await tg.wait_for(lambda: texts_to(tg, 7) == ["re: hello while Ada waits"])
        assert texts_to(tg, 42) == []  # the compact is still waiting on the model


async def test_a_chat_id_that_is_no_number_is_refused_as_a_permanent_delivery_error(
    tg: TelegramStandIn,
) -> None:
    """Sending to a Telegram chat id that is no number fails with a permanent DeliveryError naming
    the chat, and nothing reaches Telegram; "typing…" and the streamed preview there do nothing."""
    chat = ChatRef("telegram", "@news")
    async with channel_running(tg, RecordingIntake()) as channel:
        with pytest.raises(DeliveryError) as refused:
            await channel.send(OutboundMessage(chat, "hello"))
        async with channel.typing(chat):
            await asyncio.sleep(0.05)
        preview = channel.preview(chat, None)

    assert refused.value.permanent and refused.value.sent_ids == []
    assert "'@news'" in str(refused.value)
    assert preview is None
    assert tg.calls_of("sendMessage") == [] and tg.calls_of("sendChatAction") == []
