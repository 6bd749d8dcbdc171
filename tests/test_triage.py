"""Unit tests of fast-model triage: the numbered prompt, answer parsing and the triage call."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from bot.context.triage import TRIAGE_SYSTEM, parse_triage_answer, triage, triage_prompt
from bot.core.errors import ModelError
from bot.core.messages import Role, StoredMessage
from bot.models.brain import Completion
from bot.ranking.stages import group_turns

SESSION = "agent:main:fake:group:7"
T0 = datetime(2024, 3, 1, 9, 30, tzinfo=UTC).timestamp()


def msg(
    id: int,
    role: Role = "user",
    text: str | None = None,
    *,
    name: str | None = "Ada",
    actions: tuple[str, ...] = (),
    at: float | None = None,
) -> StoredMessage:
    return StoredMessage(
        id=id,
        session_key=SESSION,
        role=role,
        origin="interactive",
        text=text if text is not None else f"{role} message {id}",
        created_at=at if at is not None else T0 + id * 60,
        sender_id="100" if role == "user" else None,
        sender_name=name if role == "user" else None,
        actions=actions,
    )


@dataclass
class Call:
    prompt: str
    system: str
    model: str
    deadline: float
    called_at: float


@dataclass
class FastCompleter:
    """A scripted fast completer: answers `text`, raises `error`, or hangs for `delay` seconds."""

    text: str = '{"relevant": []}'
    error: Exception | None = None
    delay: float = 0.0
    input_tokens: int = 120
    output_tokens: int = 9
    calls: list[Call] = field(default_factory=list)

    async def complete(self, prompt: str, *, system: str, model: str, deadline: float) -> Completion:
        self.calls.append(Call(prompt, system, model, deadline, time.monotonic()))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return Completion(self.text, model, self.input_tokens, self.output_tokens)


def older_history() -> list[StoredMessage]:
    """Three units: [1] u1 a2 a3, [2] u4, [3] u5 a6."""
    return [
        msg(1, "user", "what's the weather in Oslo?"),
        msg(2, "assistant", "Rainy, 8°C.", actions=("weather(Oslo)",)),
        msg(3, "assistant", "Take an umbrella."),
        msg(4, "user", "thanks", name="Grace"),
        msg(5, "user", "remind me about the dentist"),
        msg(6, "assistant", "Done.", actions=("reminder(dentist, 9:00)",)),
    ]


# --- triage_prompt -------------------------------------------------------------------------------


def test_prompt_numbers_units_with_speaker_and_text() -> None:
    """Each unit gets a short index [1]..[n] with the speaker's name (several people speak) and
    the text, the date once above the day's turns."""
    prompt = triage_prompt(group_turns(older_history()), "when is the dentist?")
    assert "\n2024-03-01\n[1] Ada: what's the weather in Oslo?\n" in prompt
    assert "\n[2] Grace: thanks\n" in prompt
    assert "\n[3] Ada: remind me about the dentist\n" in prompt
    assert prompt.count("2024-03-01") == 1
    assert "[4]" not in prompt
    assert "[1]..[3]" in prompt


def test_prompt_writes_each_date_once_above_its_days_turns() -> None:
    """Turns on another UTC day go under that day's date: the year once, then month-day."""
    units = group_turns([msg(1, "user", "monday's question", name="Ada"),
                         msg(2, "assistant", "monday's answer"),
                         msg(3, "user", "tuesday's question", name="Grace", at=T0 + 86400 + 120),
                         msg(4, "user", "later on tuesday", name="Grace", at=T0 + 86400 + 3600)])
    lines = triage_prompt(units, "x").splitlines()
    at = lines.index("2024-03-01")
    assert lines[at:at + 6] == ["2024-03-01", "[1] Ada: monday's question", " A: monday's answer",
                                "03-02", "[2] Grace: tuesday's question", "[3] Grace: later on tuesday"]


def test_prompt_writes_the_year_again_when_it_changes() -> None:
    new_year = datetime(2025, 1, 2, 8, 0, tzinfo=UTC).timestamp()
    units = group_turns([msg(1, "user", "december"), msg(2, "user", "january", at=new_year)])
    lines = triage_prompt(units, "x").splitlines()
    assert lines[1:5] == ["2024-03-01", "[1] december", "2025-01-02", "[2] january"]


def test_prompt_leaves_a_lone_users_turns_unmarked_and_names_them_once() -> None:
    """With one person speaking, their turns carry no mark and the header says whose they are."""
    units = group_turns([msg(1, "user", "first", name="Ada"), msg(2, "assistant", "reply"),
                         msg(3, "user", "second", name="Ada")])
    prompt = triage_prompt(units, "x")
    assert "what Ada said, then A: the assistant's reply" in prompt.splitlines()[0]
    assert "[1] first\n A: reply\n[2] second\n" in prompt
    assert prompt.count("Ada") == 1


def test_the_models_answer_picks_the_turns_shown_under_those_numbers() -> None:
    """Read back from the compact prompt, each number names the turn printed beside it."""
    units = group_turns([msg(1, "user", "weather?"), msg(2, "assistant", "rain"),
                         msg(3, "user", "dentist?", at=T0 + 86400),
                         msg(4, "assistant", "at 9", at=T0 + 86460),
                         msg(5, "user", "cats?", at=T0 + 2 * 86400)])
    prompt = triage_prompt(units, "x")
    shown = dict(re.findall(r"^\[(\d+)\] (.*)$", prompt, re.MULTILINE))
    wanted = [int(n) for n, text in shown.items() if text in ("dentist?", "cats?")]
    chosen = parse_triage_answer(f'{{"relevant": {wanted}}}', len(units))
    assert chosen == [2, 3]
    assert [m.text for index in chosen for m in units[index - 1]] == ["dentist?", "at 9", "cats?"]


def test_prompt_shows_a_persons_words_whole_and_only_a_replys_opening() -> None:
    """What the person said is shown whole (to 40 words); of the reply only its first words,
    more of them the less the person said, and "…" marks the cut."""
    said = " ".join(f"s{n}" for n in range(20))
    reply = " ".join(f"r{n}" for n in range(50))
    units = group_turns([msg(1, "user", said), msg(2, "assistant", reply),
                         msg(3, "user", "ok do it"), msg(4, "assistant", reply),
                         msg(5, "user", "a b c d e f g h i j"), msg(6, "assistant", "Sure thing.")])
    lines = triage_prompt(units, "x").splitlines()
    assert lines[2:8] == [f"[1] {said}", " A: r0 r1…", "[2] ok do it",
                          " A: r0 r1 r2 r3 r4 r5 r6 r7 r8…", "[3] a b c d e f g h i j",
                          " A: Sure thing."]


def test_prompt_cuts_a_long_message_to_its_head_and_tail() -> None:
    words = [f"w{n}" for n in range(100)]
    prompt = triage_prompt([[msg(1, "user", " ".join(words))]], "x")
    assert f"[1] {' '.join(words[:30])} … {' '.join(words[-8:])}\n" in prompt
    assert "w30 " not in prompt and "w91" not in prompt


def test_prompt_includes_replies_and_actions_and_the_new_message() -> None:
    """The assistant's replies, their recorded actions and the new message are all in the prompt."""
    prompt = triage_prompt(group_turns(older_history()), "when is the dentist?")
    assert "Rainy, 8°C." in prompt
    assert "Take an umbrella." in prompt
    assert "weather(Oslo)" in prompt
    assert "reminder(dentist, 9:00)" in prompt
    assert "New message: when is the dentist?" in prompt
    assert prompt.index("Done.") < prompt.index("reminder(dentist, 9:00)") < prompt.index("New message")


def test_prompt_puts_actions_after_the_reply_they_belong_to() -> None:
    """With several replies in a unit, each reply's actions follow that reply, not a later one."""
    unit = [
        msg(1, "user", "check both"),
        msg(2, "assistant", "first reply", actions=("first_tool()",)),
        msg(3, "assistant", "second reply", actions=("second_tool()",)),
    ]
    prompt = triage_prompt([unit], "ok?")
    assert (
        prompt.index("first reply")
        < prompt.index("first_tool()")
        < prompt.index("second reply")
        < prompt.index("second_tool()")
    )


def test_prompt_marks_leading_replies_and_unknown_senders() -> None:
    """A unit the assistant opened shows as A; a user without a display name, alone, is "the
    user", and among named people is U."""
    units = group_turns([msg(1, "assistant", "earlier answer"), msg(2, "user", "hey", name=None)])
    prompt = triage_prompt(units, "hello")
    assert re.search(r"^\[1\] A: earlier answer$", prompt, re.MULTILINE)
    assert re.search(r"^\[2\] hey$", prompt, re.MULTILINE)
    assert "what the user said" in prompt
    units = group_turns([msg(1, "user", "hi", name="Ada"), msg(2, "user", "hey", name=None)])
    assert "\n[2] U: hey\n" in triage_prompt(units, "hello")


def test_prompt_flattens_and_clips_long_text() -> None:
    """Multi-line text is put on one line and very long text is clipped."""
    long_text = "word " * 500
    prompt = triage_prompt([[msg(1, "user", "line one\nline two")], [msg(2, "user", long_text)]], "x")
    assert "line one line two" in prompt
    assert long_text.strip() not in prompt
    assert len(prompt) < len(long_text)


# --- parse_triage_answer -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('{"relevant": [1, 3]}', [1, 3]),
        ("[2, 1]", [1, 2]),
        ('```json\n{"relevant": [2]}\n```', [2]),
        ("```\n[1, 2]\n```", [1, 2]),
        ('Looking at these, the relevant ones are:\n{"relevant": [1, 4]}\nHope that helps.', [1, 4]),
        ("I would say [3, 1] are relevant.", [1, 3]),
        ('Sure!\n```json\n{"relevant": [4]}\n```\nThe others are small talk.', [4]),
        ('{"indices": [2, 3]}', [2, 3]),
        ('{"reasoning": "the dentist", "relevant_messages": [1]}', [1]),
        ('{"relevant": [1, 1, 2]}', [1, 2]),
        ('Units [1] and [3] matter: {"relevant": [1, 3]}', [1, 3]),
    ],
)
def test_parse_accepts_json_in_many_shapes(answer: str, expected: list[int]) -> None:
    """Objects, bare lists, fenced JSON, JSON inside prose and other key names are all understood."""
    assert parse_triage_answer(answer, 4) == expected


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('{"relevant": [0, 1, 5, 99, -2]}', [1]),
        ('{"relevant": ["2", 3]}', [3]),
        ('{"relevant": [2.0, 2.5, 4]}', [4]),
        ('{"relevant": [true, false, 2]}', [2]),
        ('{"relevant": [null, {"id": 1}, [1], 3]}', [3]),
    ],
)
def test_parse_ignores_out_of_range_and_non_integer_entries(answer: str, expected: list[int]) -> None:
    """Indices outside 1..n and entries that are strings, floats, bools or other values are ignored."""
    assert parse_triage_answer(answer, 4) == expected


@pytest.mark.parametrize("answer", ['{"relevant": []}', "[]", "```json\n[]\n```", "None are relevant: []"])
def test_parse_empty_list_is_a_valid_answer(answer: str) -> None:
    """An empty list means 'nothing relevant', which is different from no answer at all."""
    assert parse_triage_answer(answer, 4) == []


def test_parse_prefers_the_relevant_key() -> None:
    """When an object holds several lists, the `relevant` one is used."""
    assert parse_triage_answer('{"irrelevant": [1, 2], "relevant": [3]}', 4) == [3]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('{"chosen": [2], "rejected": [1, 3]}', [2]),
        ('{"note": "see ids", "meta": {"ids": [4]}, "picks": [3]}', [3]),
        ('{"relevant": "two and three", "ids": [2, 3]}', [2, 3]),
        ('{"relevant": {"ids": [1]}, "picked": [4]}', [4]),
    ],
)
def test_parse_without_a_relevant_list_takes_the_first_list_value(answer: str, expected: list[int]) -> None:
    """With no `relevant` list, the first value that is a list is read; other values are skipped."""
    assert parse_triage_answer(answer, 4) == expected


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('Here you go: {"relevant": [2, 3], "why": {"2": [1]}} as asked.', [2, 3]),
        ('My pick: {"why": {"3": "the dentist"}, "relevant": [3]}.', [3]),
        ("Relevant: [[1, 2], 4] (the nested one is a guess)", [4]),
        ('{"relevant": [1]} is what I would have said, but {"relevant": [2]}', None),
    ],
)
def test_parse_json_inside_prose_runs_from_the_first_opener_to_the_last_closer(
    answer: str, expected: list[int] | None
) -> None:
    """Within prose the JSON read spans the first `{` (or `[`) to the last `}` (or `]`), nested
    values included; two separate objects make no valid JSON and give None."""
    assert parse_triage_answer(answer, 4) == expected


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "I am not sure.",
        "1, 3",
        "null",
        "42",
        '"relevant"',
        '{"relevant": "1,3"}',
        '{"relevant": null}',
        "{relevant: [1, 2",
        "```json\nnot json\n```",
    ],
)
def test_parse_garbage_returns_none(answer: str) -> None:
    """Text with no usable JSON list gives None, so the caller can fall back."""
    assert parse_triage_answer(answer, 4) is None


# --- triage() ------------------------------------------------------------------------------------


async def test_triage_maps_selected_units_back_to_all_their_messages() -> None:
    """Choosing a unit brings back its user message and every reply that followed it."""
    completer = FastCompleter(text='{"relevant": [1, 3]}', input_tokens=321, output_tokens=12)
    selected, report = await triage(
        completer, older_history(), "when is the dentist?", model="test-fast", timeout=5
    )
    assert selected is not None
    assert [m.id for m in selected] == [1, 2, 3, 5, 6]
    assert report.outcome == "selected"
    assert report.candidates == 3
    assert report.selected == 2
    assert report.input_tokens == 321
    assert report.output_tokens == 12
    assert report.latency_ms > 0
    assert report.error is None
    assert report.ran


async def test_triage_empty_answer_selects_nothing() -> None:
    """An empty list from the model is a successful triage that keeps no older message."""
    completer = FastCompleter(text='{"relevant": []}')
    selected, report = await triage(completer, older_history(), "hi", model="test-fast", timeout=5)
    assert selected == []
    assert report.outcome == "selected"
    assert report.selected == 0
    assert report.candidates == 3


async def test_triage_sends_prompt_system_and_model() -> None:
    """The fast model gets the numbered prompt, the triage instructions, the chosen model and a deadline."""
    completer = FastCompleter(text="[2]")
    await triage(completer, older_history(), "when is the dentist?", model="test-fast", timeout=5)
    assert len(completer.calls) == 1
    call = completer.calls[0]
    assert call.model == "test-fast"
    assert call.system == TRIAGE_SYSTEM
    assert call.prompt == triage_prompt(group_turns(older_history()), "when is the dentist?")
    assert call.called_at < call.deadline <= call.called_at + 5


async def test_triage_timeout_gives_none() -> None:
    """A fast model that does not answer within the timeout gives outcome 'timeout' and no list."""
    completer = FastCompleter(text="[1]", delay=60)
    selected, report = await triage(completer, older_history(), "hi", model="test-fast", timeout=0.05)
    assert selected is None
    assert report.outcome == "timeout"
    assert report.candidates == 3
    assert report.error
    assert report.ran


async def test_triage_model_error_gives_none() -> None:
    """A model error gives outcome 'error', no list, and the error text in the report."""
    completer = FastCompleter(error=ModelError("overloaded after 3 attempts"))
    selected, report = await triage(completer, older_history(), "hi", model="test-fast", timeout=5)
    assert selected is None
    assert report.outcome == "error"
    assert report.error is not None and "overloaded" in report.error
    assert report.candidates == 3


async def test_triage_unparseable_answer_gives_none_but_records_tokens() -> None:
    """An answer with no usable list gives outcome 'unparseable', still recording tokens spent."""
    completer = FastCompleter(text="Messages one and three.", input_tokens=200, output_tokens=5)
    selected, report = await triage(completer, older_history(), "hi", model="test-fast", timeout=5)
    assert selected is None
    assert report.outcome == "unparseable"
    assert report.input_tokens == 200
    assert report.output_tokens == 5
    assert report.error is not None and "Messages one and three." in report.error
