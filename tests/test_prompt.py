"""Unit tests of prompt assembly: conversation turns and the stable and per-turn system prompts."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from bot.context.prompt import conversation_turns, stable_system_prompt, turn_system_prompt
from bot.core.messages import Origin, Role, StoredMessage
from bot.core.session_key import build
from bot.ranking.stages import Context, ContextEntry, Reason, TriageReport

SESSION = "agent:main:fake:group:7"
T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC).timestamp()
DAY = "[Friday 2024-03-01]\n"  # the date line before the first stamped message (T0's day, UTC)


def msg(
    id: int,
    role: Role = "user",
    text: str | None = None,
    *,
    name: str | None = "Ada",
    sender_id: str = "100",
    origin: Origin = "interactive",
    actions: tuple[str, ...] = (),
    job_id: str | None = None,
) -> StoredMessage:
    return StoredMessage(
        id=id,
        session_key=SESSION,
        role=role,
        origin=origin,
        text=text if text is not None else f"{role} message {id}",
        created_at=T0 + id * 60,
        sender_id=sender_id if role == "user" else None,
        sender_name=name if role == "user" else None,
        actions=actions,
        job_id=job_id,
    )


def context(
    messages: list[StoredMessage],
    *,
    reason: Reason = "recent",
    scheduled: list[StoredMessage] | None = None,
    reply_to: StoredMessage | None = None,
) -> Context:
    entries = [ContextEntry(m, reason) for m in messages]
    if reply_to is not None and all(m.id != reply_to.id for m in messages):
        entries = sorted([*entries, ContextEntry(reply_to, "reply_to")], key=lambda e: e.message.id)
    return Context(entries, scheduled or [], reply_to, TriageReport("skipped"), None)


def roles(turns: list[dict[str, str]]) -> list[str]:
    return [turn["role"] for turn in turns]


# --- conversation_turns --------------------------------------------------------------------------


def test_turns_alternate_and_merge_same_role_neighbours() -> None:
    """Consecutive messages of one role become one turn, so roles strictly alternate."""
    history = [
        msg(1, "user", "first"),
        msg(2, "assistant", "reply A"),
        msg(3, "assistant", "reply B"),
        msg(4, "user", "second"),
        msg(5, "user", "third"),
    ]
    turns = conversation_turns(context(history), msg(6, "user", "now"), group=False)
    assert turns == [
        {"role": "user", "content": f"{DAY}[12:01] first"},
        {"role": "assistant", "content": "reply A\n\nreply B"},
        {"role": "user", "content": "[12:04] second\n\n[12:05] third\n\n[12:06] now"},
    ]


def test_turns_with_empty_context_are_just_the_request() -> None:
    """With nothing selected, the model gets one user turn holding the current message."""
    turns = conversation_turns(context([]), msg(1, "user", "hello"), group=False)
    assert turns == [{"role": "user", "content": f"{DAY}[12:01] hello"}]


def test_first_turn_is_always_a_user_turn() -> None:
    """Context that starts with an assistant message gets a user turn in front of it."""
    history = [msg(1, "assistant", "earlier answer"), msg(2, "user", "q"), msg(3, "assistant", "a")]
    turns = conversation_turns(context(history), msg(4, "user", "next"), group=False)
    assert turns[0]["role"] == "user"
    assert roles(turns) == ["user", "assistant", "user", "assistant", "user"]
    assert turns[1]["content"] == "earlier answer"
    assert turns[-1]["content"] == "[12:04] next"


def test_group_user_lines_carry_the_sender_name() -> None:
    """In a group each user line starts with who said it, the current message included."""
    history = [
        msg(1, "user", "hi all", name="Ada"),
        msg(2, "user", "hello", name="Grace"),
        msg(3, "assistant", "Hi both!"),
    ]
    turns = conversation_turns(context(history), msg(4, "user", "what's up?", name="Linus"), group=True)
    assert turns[0]["content"] == f"{DAY}[12:01] [Ada]: hi all\n\n[12:02] [Grace]: hello"
    assert turns[1]["content"] == "Hi both!"
    assert turns[2]["content"] == "[12:04] [Linus]: what's up?"


def test_group_user_without_display_name_shows_sender_id() -> None:
    """A group member without a display name is shown by sender id."""
    turns = conversation_turns(context([]), msg(1, "user", "hey", name=None, sender_id="555"), group=True)
    assert turns[-1]["content"] == f"{DAY}[12:01] [555]: hey"


def test_direct_chat_user_lines_have_no_sender_name() -> None:
    """In a one-to-one chat the user's text goes in as is, without a name prefix."""
    history = [msg(1, "user", "hi", name="Ada"), msg(2, "assistant", "hello")]
    turns = conversation_turns(context(history), msg(3, "user", "bye", name="Ada"), group=False)
    assert turns[0]["content"] == f"{DAY}[12:01] hi"
    assert turns[-1]["content"] == "[12:03] bye"
    assert all("Ada" not in turn["content"] for turn in turns)


def test_actions_follow_the_reply_they_belong_to() -> None:
    """Recorded actions appear right after the assistant reply that took them."""
    history = [
        msg(1, "user", "remind me"),
        msg(2, "assistant", "Done.", actions=("reminder(dentist, 9:00)", "calendar(add)")),
        msg(3, "assistant", "Anything else?"),
        msg(4, "user", "no"),
    ]
    turns = conversation_turns(context(history), msg(5, "user", "thanks"), group=False)
    reply = turns[1]["content"]
    assert turns[1]["role"] == "assistant"
    assert reply.startswith("Done.")
    assert "reminder(dentist, 9:00); calendar(add)" in reply
    assert reply.index("Done.") < reply.index("reminder(dentist") < reply.index("Anything else?")
    assert "reminder" not in turns[0]["content"] + turns[2]["content"]


def test_scheduled_outputs_come_in_a_labelled_block_before_the_message() -> None:
    """Scheduled outputs since the user's last message are in a labelled block ahead of the message."""
    scheduled = [
        msg(3, "assistant", "Morning briefing: 3 meetings.", origin="scheduled", job_id="briefing"),
        msg(4, "assistant", "Stand-up in 5 minutes.", origin="scheduled"),
    ]
    history = [msg(1, "user", "hi"), msg(2, "assistant", "hello")]
    turns = conversation_turns(
        context(history, scheduled=scheduled), msg(5, "user", "move the 10:00 one"), group=False
    )
    assert roles(turns) == ["user", "assistant", "user"]
    final = turns[-1]["content"]
    assert "Scheduled messages" in final
    assert "briefing" in final
    assert final.index("Morning briefing") < final.index("Stand-up in 5 minutes.")
    assert final.index("Stand-up in 5 minutes.") < final.index("move the 10:00 one")
    assert final.endswith("move the 10:00 one")
    assert "2024-03-01 12:03" in final
    # The block belongs to the current turn, not to the earlier conversation.
    assert "Morning briefing" not in turns[0]["content"] + turns[1]["content"]


def test_reply_to_target_is_quoted_with_the_message() -> None:
    """The message the user replied to is quoted in the current turn, ahead of the user's text."""
    target = msg(2, "assistant", "The meeting is at\n10:00 in room B.")
    history = [msg(1, "user", "when?"), target, msg(3, "user", "ok")]
    turns = conversation_turns(
        context(history, reply_to=target), msg(4, "user", "can we move it?"), group=False
    )
    final = turns[-1]["content"]
    assert "replying to" in final
    assert "The meeting is at 10:00 in room B." in final
    assert final.index("The meeting is at") < final.index("can we move it?")


def test_reply_to_long_target_is_clipped_in_the_quote() -> None:
    """A long replied-to message is quoted only in part."""
    long_text = "x" * 1000
    target = msg(1, "assistant", long_text)
    turns = conversation_turns(context([], reply_to=target), msg(2, "user", "this"), group=False)
    final = turns[-1]["content"]
    assert "x" * 100 in final
    assert final.count("x") < 1000


def test_reply_to_scheduled_output_is_shown_as_scheduled() -> None:
    """A scheduled output brought back as reply-to target is marked as scheduled, with its job."""
    target = msg(1, "assistant", "Daily digest", origin="scheduled", job_id="digest")
    turns = conversation_turns(context([], reply_to=target), msg(2, "user", "more on item 2"), group=False)
    assert roles(turns) == ["user", "assistant", "user"]
    assert "scheduled message" in turns[1]["content"]
    assert "digest" in turns[1]["content"]
    assert "Daily digest" in turns[1]["content"]


def test_reply_to_and_scheduled_block_together_keep_the_message_last() -> None:
    """With both a quote and a scheduled block, the user's own text still ends the final turn."""
    target = msg(1, "assistant", "old answer")
    scheduled = [msg(2, "assistant", "Reminder: water plants.", origin="scheduled")]
    turns = conversation_turns(
        context([], reply_to=target, scheduled=scheduled), msg(3, "user", "done!"), group=True
    )
    final = turns[-1]["content"]
    assert "old answer" in final
    assert "Reminder: water plants." in final
    assert final.endswith("[Ada]: done!")


def test_dates_and_times_reach_the_model_in_the_agents_timezone() -> None:
    """Each user message says when it was written, in the agent's timezone, with a date line when
    the day changes (the request included): "when did I…" can be answered from the text. The text
    depends only on the stored times and the zone (exact bytes), so the prompt cache keeps hitting."""
    day = 86_400
    history = [
        msg(1, "user", "I booked the dentist"),
        msg(2, "assistant", "Noted."),
        replace(msg(3, "user", "and paid the rent"), created_at=T0 + 3 * day),
        replace(msg(4, "assistant", "Good."), created_at=T0 + 3 * day + 30),
    ]
    request = replace(msg(5, "user", "when did I book the dentist?"), created_at=T0 + 3 * day + 600)
    turns = conversation_turns(context(history), request, group=False, zone=ZoneInfo("Asia/Tokyo"))
    assert turns == [
        {"role": "user", "content": "[Friday 2024-03-01]\n[21:01] I booked the dentist"},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "[Monday 2024-03-04]\n[21:00] and paid the rent"},
        {"role": "assistant", "content": "Good."},
        {"role": "user", "content": "[21:10] when did I book the dentist?"},
    ]


def test_request_on_a_new_day_gets_its_date_line() -> None:
    """A request written on a later day than the last message in context starts with its date."""
    history = [msg(1, "user", "hi"), msg(2, "assistant", "hello")]
    request = replace(msg(3, "user", "good morning"), created_at=T0 + 86_400)
    turns = conversation_turns(context(history), request, group=False)
    assert turns[-1]["content"] == "[Saturday 2024-03-02]\n[12:00] good morning"


# --- stable_system_prompt ------------------------------------------------------------------------


def test_stable_prompt_names_the_agent(make_config: Any) -> None:
    """The system prompt introduces the agent by its configured name."""
    config = make_config({"agent": {"name": "Jarvis"}})
    prompt = stable_system_prompt(config)
    assert "Jarvis" in prompt
    assert "<soul>" not in prompt
    assert "<memory>" not in prompt


def test_stable_prompt_includes_soul_and_memory_files(make_config: Any, tmp_path: Path) -> None:
    """SOUL and MEMORY files, given relative to the config file, are included in the prompt."""
    (tmp_path / "SOUL.md").write_text("You are kind and brief.\n", encoding="utf-8")
    (tmp_path / "MEMORY.md").write_text("Ada likes tea.\n", encoding="utf-8")
    config = make_config({"agent": {"soul_file": "SOUL.md", "memory_file": "MEMORY.md"}})
    prompt = stable_system_prompt(config)
    assert "You are kind and brief." in prompt
    assert "Ada likes tea." in prompt
    assert prompt.index("You are kind and brief.") < prompt.index("Ada likes tea.")


def test_stable_prompt_caps_file_excerpts(make_config: Any, tmp_path: Path) -> None:
    """File contents beyond `file_excerpt_chars` are left out and the cut is marked."""
    soul = tmp_path / "soul.txt"
    soul.write_text("S" * 300 + "TAIL", encoding="utf-8")
    memory = tmp_path / "memory.txt"
    memory.write_text("short memory", encoding="utf-8")
    config = make_config(
        {"agent": {"soul_file": str(soul), "memory_file": str(memory), "file_excerpt_chars": 100}}
    )
    prompt = stable_system_prompt(config)
    assert "S" * 100 in prompt
    assert "S" * 101 not in prompt
    assert "TAIL" not in prompt
    assert "truncated" in prompt
    assert "short memory" in prompt


def test_stable_prompt_skips_missing_files(make_config: Any, tmp_path: Path) -> None:
    """A configured file that does not exist is skipped without an error."""
    (tmp_path / "MEMORY.md").write_text("remember this", encoding="utf-8")
    config = make_config({"agent": {"soul_file": "NOPE.md", "memory_file": "MEMORY.md"}})
    prompt = stable_system_prompt(config)
    assert "<soul>" not in prompt
    assert "remember this" in prompt


def test_stable_prompt_is_stable(make_config: Any, tmp_path: Path) -> None:
    """The stable part is identical from call to call, so it can be cached."""
    (tmp_path / "SOUL.md").write_text("steady", encoding="utf-8")
    config = make_config({"agent": {"soul_file": "SOUL.md"}})
    assert stable_system_prompt(config) == stable_system_prompt(config)


# --- turn_system_prompt --------------------------------------------------------------------------


def test_turn_prompt_has_chat_kind_provider_and_both_times(make_config: Any) -> None:
    """The per-turn prompt says the chat kind and provider, and the time in the agent's zone and UTC."""
    config = make_config({"agent": {"timezone": "Asia/Tokyo"}})
    key = build("main", "telegram", "group", -100123)
    prompt = turn_system_prompt(config, key, T0)
    assert "group chat" in prompt
    assert "telegram" in prompt
    assert "2024-03-01 21:00" in prompt  # Tokyo, UTC+9
    assert "JST" in prompt
    assert "Friday" in prompt
    assert "2024-03-01 12:00 UTC" in prompt
    assert "speaker" in prompt


def test_turn_prompt_follows_daylight_saving(make_config: Any) -> None:
    """Local time uses the zone's offset on that date (summer time included)."""
    config = make_config({"agent": {"timezone": "Europe/Berlin"}})
    key = build("main", "console", "direct", "local")
    summer = datetime(2024, 7, 1, 12, 0, tzinfo=UTC).timestamp()
    prompt = turn_system_prompt(config, key, summer)
    assert "2024-07-01 14:00 CEST" in prompt
    assert "2024-07-01 12:00 UTC" in prompt


def test_turn_prompt_for_direct_chat(make_config: Any) -> None:
    """A direct chat is described as one-to-one, without the several-speakers note."""
    config = make_config()
    prompt = turn_system_prompt(config, build("main", "console", "direct", "local"), T0)
    assert "one-to-one" in prompt
    assert "console" in prompt
    assert "speaker" not in prompt
    assert "2024-03-01 12:00 UTC" in prompt


def test_turn_prompt_names_who_the_agent_talks_with_one_to_one(make_config: Any) -> None:
    """In a one-to-one chat the agent is told who writes: a person, or another agent, in the same
    words (a group's lines carry their speakers' names instead)."""
    config = make_config()
    person = turn_system_prompt(config, build("main", "telegram", "direct", 42), T0, "Ada")
    agent = turn_system_prompt(config, build("work", "agent", "direct", "main"), T0, "Main")
    group = turn_system_prompt(config, build("main", "telegram", "group", -100), T0, "Ada")
    assert "one-to-one chat on telegram with Ada." in person
    assert "one-to-one chat on agent with Main." in agent
    assert "Ada" not in group


def test_turn_prompt_for_channel_and_topic(make_config: Any) -> None:
    """Channels and forum topics are named as such."""
    config = make_config()
    channel = turn_system_prompt(config, build("main", "discord", "channel", "999", thread="1"), T0)
    assert "a channel on discord" in channel
    assert "thread" in channel
    topic = turn_system_prompt(config, build("main", "telegram", "group", "-100", topic="5"), T0)
    assert "group chat on telegram" in topic
    assert "topic" in topic
