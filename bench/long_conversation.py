"""A 500-turn chat: tokens sent per turn against sending everything, and whether one early fact is kept.

Usage: .venv/bin/python -m bench.long_conversation [--turns 500] [--seed 3] [--only NAME ...]

A seeded, generated chat of `--turns` turns (user and assistant messages of varied length over a
dozen topics) states a fact once, at turn 3 ("my new gym locker code is 4417"); no other message
holds it, and the last user message asks for it with overlapping words. Every turn runs through
the real `Daemon` (inbox, router, `TurnRunner`, `ContextBuilder`, `Compactor`, SQLite `Store` in a
temp dir) and the real SDK brain against the Anthropic API stand-in (bot/testing), in-process.
The stand-in is scripted: the reply model answers with the generated assistant message of that
turn (so the stored history is the generated chat); the fast model answers triage by picking the
earlier turns that share at least two content words with the new message, and writes compaction
summaries that keep every user sentence with a number in it (as SUMMARY_SYSTEM asks: exact
identifiers verbatim) plus a topics line.

Per turn, the reply request the stand-in received (system + every message) is measured with
`bot.ranking.budget.estimate_tokens`, next to "send everything" (OpenClaw style: the same system prompt,
every earlier message and the request). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.config import parse_config
from bot.context.compaction import MERGE_SYSTEM, SUMMARY_SYSTEM
from bot.context.triage import TRIAGE_SYSTEM, reply_head, said
from bot.core.log import configure_logging
from bot.daemon.assembly import Daemon
from bot.daemon.notify import Notifier
from bot.models.brain import AnthropicBrain
from bot.ranking.budget import estimate_tokens
from bot.ranking.lexical import STOPWORDS, query_terms
from bot.ranking.lexical import content_words as lexical_words
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest, Response, Text
from bot.testing.fake_channel import FakeChannel

TARGET_RATIO = 0.20
MAIN, FAST, API_KEY = "bench-main", "bench-fast", "bench-key"
FACT = "4417"
FACT_TURN = 3
FACT_USER = f"Oh, before I forget: my new gym locker code is {FACT}. Can you keep that somewhere for me?"
FACT_REPLY = "Noted! I'll keep it for you, just ask whenever you need it."
QUESTION = "Quick one before I head into the gym: what's my locker code again?"
# Near misses: the same words without the fact, and another code.
DISTRACTORS = {
    0.3: ("The gym is redoing the locker room next month, so the showers will be closed for a week. "
          "Annoying.", "That is annoying. Maybe shower at home that week, or try the pool's changing "
          "rooms if your membership covers them."),
    0.55: ("Facilities sent a mail: the office door code changes to 5902 on Monday.",
           "Good to know, I'll keep that in mind if you ask about the office door."),
}

# -- the generated conversation -----------------------------------------------------------------

_V: dict[str, list[str]] = {
    "name": ["Marta", "Jonas", "Priya", "Tom", "Lena", "Sam", "Keiko", "Oscar", "my sister", "Dad",
             "my neighbour", "Aunt Rosa"],
    "day": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday",
            "tomorrow", "next week", "the weekend"],
    "time": ["7:40", "9:15", "noon", "half past six", "18:30", "8 in the evening", "10:05"],
    "city": ["Lisbon", "Porto", "Vienna", "Kyoto", "Edinburgh", "Ghent", "Trieste", "Seville"],
    "dish": ["risotto", "shakshuka", "lentil soup", "green curry", "lasagne", "dal", "paella",
             "a tray bake", "dumplings", "chili"],
    "book": ["Piranesi", "Middlemarch", "The Left Hand of Darkness", "A Gentleman in Moscow",
             "Klara and the Sun", "The Dispossessed", "Stoner", "The Remains of the Day"],
    "service": ["payments", "billing", "search", "auth", "notifications", "export", "the importer"],
    "plant": ["monstera", "fiddle-leaf fig", "basil", "pothos", "lemon tree", "orchid"],
    "thing": ["the heating", "the kitchen tap", "the wifi router", "the dishwasher", "the bike",
              "the washing machine", "the front door"],
    "mood": ["tired", "weirdly cheerful", "a bit flat", "restless", "pretty good", "stressed"],
    "weather": ["grey and drizzly", "finally sunny", "windy", "freezing", "muggy", "foggy"],
    "feeling": ["honestly", "to be fair", "weirdly", "for what it's worth", "annoyingly"],
    "show": ["the detective series", "that baking show", "the documentary about octopuses",
             "the new sci-fi thing", "the old sitcom"],
}
_N: dict[str, Callable[[random.Random], str]] = {
    "num": lambda r: str(r.randint(2, 12)),
    "km": lambda r: r.choice(["5", "8", "10", "12", "16", "21"]),
    "amount": lambda r: f"€{r.choice([12, 35, 48, 80, 120, 260, 1250])}",
    "pr": lambda r: str(r.randint(120, 980)),
    "ms": lambda r: str(r.randint(1200, 9000)),
    "hh": lambda r: f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}",
    "pace": lambda r: f"{r.randint(4, 6)}:{r.randint(0, 59):02d}",
}

TOPICS: dict[str, dict[str, list[str]]] = {
    "work": {
        "user": [
            "The {service} service fell over again this morning, right before the standup.",
            "Can you help me word a message to {name} about the code review? I don't want to sound "
            "annoyed.",
            "We have a code freeze from {day}, so PR {pr} has to land before then.",
            "The deploy failed twice today. I think the pipeline caches are stale.",
            "I keep getting timeouts from {service} after about {ms} ms, no idea why.",
            "Sprint planning ran two hours over. How do I push back on that politely?",
            "{name} wants the migration done by {day} but nobody has tested the rollback.",
            "What's a good way to split a big refactor into reviewable pieces?",
            "My manager asked for a written update on {service} every Friday, which feels like overkill.",
            "I spent the whole afternoon in meetings and wrote zero lines of code.",
            "The on-call pager went off at night for {service}, false alarm of course.",
            "Should I volunteer to lead the incident review or is that a trap?",
            "Our staging environment is broken again and nobody owns it.",
            "{name} left a review comment that just says 'hmm'. What does that even mean?",
        ],
        "reply": [
            "A timeout that lands at the same number every time usually means a pool or proxy limit "
            "rather than slow code.",
            "I'd keep the message short: say what you need from {name}, by when, and why it matters.",
            "Splitting the refactor by layer tends to work better than splitting by file, and each "
            "piece can be reviewed on its own.",
            "Before the freeze, it's worth asking the reviewers to block out time on {day}.",
            "If the caches are stale, clearing them once and keying them to the lockfile hash "
            "usually fixes it for good.",
            "For the rollback, even one dry run on staging would make the migration a lot safer.",
            "Pushing back works best with a concrete proposal, like a hard stop at the hour and a "
            "parking lot for the rest.",
            "A weekly update can be three bullet points: what moved, what's blocked, what's next.",
            "Meeting-heavy days happen; blocking two focus hours in your calendar protects the rest "
            "of the week.",
            "Leading the incident review is usually a good look, as long as it stays blameless.",
            "A broken shared environment with no owner is worth raising once, in writing, with a "
            "suggestion of who could own it.",
            "A one-word review comment is best answered with a question: ask what they would change.",
            "False alarms at night are worth fixing quickly; tune the alert threshold or add a "
            "short delay before paging.",
        ],
        "items": [
            "check the connection pool size", "look at the proxy's idle timeout",
            "add a request id to every log line", "write down the rollback steps first",
            "ask for a second reviewer", "keep each PR small enough to read in one sitting",
            "move the flaky test into quarantine", "agree on a freeze exception process",
            "put the alert thresholds in version control", "timebox the investigation",
        ],
    },
    "cooking": {
        "user": [
            "I'm making {dish} tonight for {num} people, how much rice or pasta should I plan?",
            "Any idea what to cook with leftover chickpeas and half a bag of spinach?",
            "My {dish} came out bland last time. What am I missing?",
            "{name} is vegetarian, can I adapt the {dish} easily?",
            "Shopping list time: what do I need for {dish}?",
            "I burnt the onions again. Is there a trick to it?",
            "Is it worth buying a proper chef's knife or is mine fine?",
            "I have zero energy to cook tonight. Something with five ingredients?",
            "Tried your tip with the lemon at the end and wow, the {dish} was so much better.",
            "How long does cooked rice keep in the fridge, really?",
            "Thinking of batch cooking on {day} so I stop ordering takeaway.",
        ],
        "reply": [
            "For {num} people, about 80 to 100 g dry weight per person is a good rule.",
            "Bland usually means salt and acid: season in layers and finish with lemon or vinegar.",
            "Chickpeas and spinach are great with garlic, cumin and a spoon of tomato paste.",
            "Most recipes adapt well; swap the stock for a vegetable one and add mushrooms for depth.",
            "Onions burn when the pan is too hot at the start; go medium-low and give them time.",
            "A good knife makes a real difference, but a sharpened cheap one beats a blunt expensive one.",
            "Pasta with garlic, chili, lemon and parmesan is about as low-effort as dinner gets.",
            "Cooked rice is best eaten within a day or so, and cooled quickly before it goes in the "
            "fridge.",
            "Batch cooking works best with two or three dishes that reheat well, like soups and stews.",
            "Glad the lemon trick worked, acid at the end lifts almost everything.",
        ],
        "items": [
            "onions and garlic", "a tin of tomatoes", "fresh herbs", "a lemon", "good olive oil",
            "stock cubes", "parmesan or a vegetarian hard cheese", "crusty bread", "chili flakes",
            "a bag of spinach",
        ],
    },
    "travel": {
        "user": [
            "Thinking about a long weekend in {city}. Is {day} too soon to book?",
            "My train to {city} leaves at {time}, how early should I be at the station?",
            "What should I not miss in {city} if I only have two days?",
            "The hotel in {city} wants {amount} a night. Is that normal?",
            "Can you remind me what I still need to pack for {city}?",
            "My flight got moved, which ruins the first evening.",
            "Is it rude to take a call on a quiet carriage if I whisper?",
            "I always overpack. Help me pack for {city} with just a backpack?",
            "Do I need cash in {city} or is card fine everywhere?",
            "The trip to {city} is starting to feel real. Slightly nervous, mostly excited.",
        ],
        "reply": [
            "Booking a week or two ahead is usually fine outside the holidays.",
            "Fifteen minutes is plenty for most trains; give yourself more if you need to buy a ticket.",
            "{city} is very walkable, so a rough plan for each morning and a free afternoon works well.",
            "That price is on the high side for {city}, but not unusual near the centre.",
            "If the flight is later, you could move dinner to the second night and keep the first "
            "one easy.",
            "On a quiet carriage it's kinder to step into the vestibule, even for a whispered call.",
            "For a backpack trip, plan outfits around two pairs of shoes and things that layer.",
            "Card works in most places, but a little cash helps for markets and small cafés.",
            "Nerves before a trip are normal; having the first evening planned takes the edge off.",
        ],
        "items": [
            "passport and a copy of it", "charger and adapter", "rain jacket", "comfortable shoes",
            "the booking confirmations", "a small first-aid kit", "snacks for the train",
            "a reusable water bottle", "earplugs",
        ],
    },
    "fitness": {
        "user": [
            "Did {km} km this morning at {pace} per km. Legs are dead.",
            "The gym was packed again, I waited ages for the squat rack.",
            "Should I run on rest days if I feel fine?",
            "My knee hurts a bit after long runs. Worth worrying about?",
            "I'm thinking of signing up for the half marathon in {city}.",
            "Went to the gym before work, felt great for once.",
            "How do I fit strength training around my runs?",
            "Skipped the gym all week. Motivation is at zero.",
            "New running shoes arrived, they feel like clouds.",
            "Is stretching before a run actually useful or a myth?",
            "The gym changed its opening hours and now it's only open late on {day}.",
        ],
        "reply": [
            "Nice pace! Keep the easy days really easy so the hard ones count.",
            "Rest days matter more than they feel like they do; a short walk is a good middle ground.",
            "A bit of knee soreness after a long run is common, but pain that lingers is worth "
            "getting checked.",
            "A half marathon is a great goal; about twelve weeks of build-up is typical.",
            "Going to the gym at off-peak hours, early or mid-afternoon, avoids the queue for racks.",
            "Two short strength sessions a week on your easy-run days usually fit well.",
            "Motivation comes and goes; a tiny session still keeps the habit alive.",
            "New shoes are lovely, just ease into them with a couple of shorter runs first.",
            "Dynamic warm-ups like leg swings help more than static stretching before a run.",
        ],
        "items": [
            "one long run a week", "one session with intervals", "easy runs at chatting pace",
            "squats and lunges", "core work twice a week", "a proper warm-up", "enough sleep",
            "a rest day after the long run",
        ],
    },
    "reading": {
        "user": [
            "Just finished {book}. Still thinking about the ending.",
            "What should I read after {book}?",
            "Book club picked {book}, is it a slog?",
            "I only read on the train now, a few pages a day.",
            "Started {book} and I can't tell if I like it yet.",
            "Do audiobooks count as reading? Asking for myself.",
        ],
        "reply": [
            "{book} stays with people; the ending is meant to be turned over for a while.",
            "If you liked {book}, something with a similar quiet, strange mood would suit you.",
            "It starts slowly, but most people find it picks up after the first few chapters.",
            "A few pages a day adds up to a surprising number of books a year.",
            "Audiobooks absolutely count; the story gets in either way.",
            "Giving a book fifty pages before deciding is a fair rule.",
        ],
        "items": [],
    },
    "home": {
        "user": [
            "{thing} is making a weird noise again.",
            "My {plant} has yellow leaves. Too much water?",
            "The landlord still hasn't fixed {thing}, it's been weeks.",
            "Should I repot the {plant} now or wait until spring?",
            "Rent is going up by {amount}. Ugh.",
            "The flat is a mess and guests come on {day}.",
            "Is it worth getting a robot vacuum or are they gimmicks?",
            "The neighbours are drilling again, on a Sunday.",
        ],
        "reply": [
            "Yellow leaves are most often overwatering; let the top few centimetres dry out first.",
            "It's worth putting the request to the landlord in writing, with the date you first "
            "reported it.",
            "Spring is the easiest time to repot, when the plant is starting to grow again.",
            "A noise that comes and goes is often something loose rather than something broken.",
            "Fifteen-minute bursts, one room at a time, get a flat guest-ready faster than it seems.",
            "Robot vacuums are good at daily crumbs, less so at corners and stairs.",
            "Weekend drilling is often against house rules; a friendly note usually works first.",
        ],
        "items": [],
    },
    "money": {
        "user": [
            "I spent {amount} on takeaway this month, which is embarrassing.",
            "Help me set up a simple budget? Rent, groceries, fun money.",
            "Is it worth paying for the streaming bundle if I only watch one show?",
            "I want to save for the trip to {city} by {day}.",
            "Got a small bonus. Save it or treat myself?",
        ],
        "reply": [
            "A simple split that works for many people is needs, wants and savings, adjusted to rent.",
            "Tracking only the two or three biggest categories is usually enough to change habits.",
            "Divide the yearly price by the months you actually use it; that makes the call easier.",
            "Splitting it works: most into savings, a small part for something you'll enjoy.",
        ],
        "items": ["rent and bills", "groceries", "transport", "fun money", "savings", "gifts"],
    },
    "family": {
        "user": [
            "{name}'s birthday is on {day} and I have no gift ideas.",
            "Talked to {name} for an hour last night, it was really nice.",
            "Can you help me plan a small dinner for {num} people on {day}?",
            "{name} keeps sending me voice notes that are ten minutes long.",
            "Family group chat is on fire again about the holiday plans.",
        ],
        "reply": [
            "A shared experience often lands better than a thing: a class, a concert, a good meal.",
            "That sounds lovely. Regular calls like that are worth protecting.",
            "For a small dinner, one main dish, a salad and a simple dessert keeps it relaxed.",
            "Long voice notes are easier at walking speed; maybe save them for your commute.",
            "Group chats about holidays settle down once someone proposes concrete dates.",
        ],
        "items": ["a cooking class", "concert tickets", "a good book", "a plant", "a photo album"],
    },
    "chat": {
        "user": [
            "It's {weather} again today. Feeling {mood}.",
            "Watched {show} last night, {feeling} it was better than expected.",
            "Slept terribly. Any tricks that actually work?",
            "What's a good podcast for a long walk?",
            "I think I need a hobby that doesn't involve a screen.",
            "Random question: why do cats knock things off tables?",
            "Feeling {mood} today, not sure why.",
        ],
        "reply": [
            "Days like that are easier with one small thing to look forward to in the evening.",
            "{show} has a way of sneaking up on people, glad it landed.",
            "A fixed wake-up time, even on weekends, helps sleep more than most tricks.",
            "Something narrative works well for walks; pick one with episodes about your walk length.",
            "Sketching, a musical instrument or a pottery class are nice ways to use your hands.",
            "Cats knock things over partly out of curiosity and partly because it gets attention.",
            "Moods drift sometimes; a walk and some daylight often help more than thinking about it.",
        ],
        "items": [],
    },
}
SHORT_USER = ["thanks!", "ok, makes sense", "haha fair", "perfect", "got it, thank you",
              "hmm, let me think about it", "yes please", "that helps a lot", "sounds good", "lol",
              "oh nice", "ugh, ok", "true"]
SHORT_REPLY = ["You're welcome!", "Anytime.", "Glad it helps.", "Sure thing, just say when.",
               "Take your time.", "Happy to help."]
OPENERS = ["", "", "", "Good question.", "Sure.", "Happy to help.", "Here's what I'd suggest.",
           "Ah, yes.", "That makes sense."]
CLOSERS = ["", "", "Let me know how it goes.", "Want me to remind you later?", "Anything else on this?",
           "Hope that helps!"]
USER_EXTRAS = ["No rush.", "Just thinking out loud.", "Also, it's raining again.",
               "Sorry for the wall of text.", "I'll check later.", "Anyway.", "Long day."]


class _Slots(dict[str, str]):
    """Fills template fields with seeded random choices, one per field per message."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self._rng = rng

    def __missing__(self, key: str) -> str:
        value = _N[key](self._rng) if key in _N else self._rng.choice(_V[key])
        self[key] = value
        return value


def _paste(topic: str, rng: random.Random) -> str:
    """A pasted block: log lines, a recipe or a plan."""
    if topic == "work":
        service = rng.choice(_V["service"])
        lines = [f"2025-03-{rng.randint(1, 28):02d} {_N['hh'](rng)} ERROR {service} "
                 f"upstream timed out after {_N['ms'](rng)}ms request_id={rng.getrandbits(40):010x}"
                 for _ in range(rng.randint(4, 10))]
        return "Here's the log from this morning:\n" + "\n".join(lines) + "\nAny idea?"
    if topic == "cooking":
        items = rng.sample(TOPICS["cooking"]["items"], 6)
        return "This is the recipe I found:\n" + "\n".join(f"- {item}" for item in items) + \
            "\nDoes that look complete?"
    days = rng.sample(_V["day"][:7], 3)
    places = rng.sample(["the old town", "a museum", "the market", "the beach", "a day trip",
                         "the castle", "a food tour"], 3)
    return "Plan so far: " + "; ".join(f"{d}: {p}" for d, p in zip(days, places, strict=True)) + \
        ". Too packed?"


def _user_text(topic: str, rng: random.Random, slots: _Slots) -> str:
    kind = rng.random()
    if kind < 0.18:
        return rng.choice(SHORT_USER)
    if kind > 0.92 and topic in ("work", "cooking", "travel"):
        return _paste(topic, rng)
    count = rng.choice([1, 1, 2, 2, 3])
    parts = [t.format_map(slots) for t in rng.sample(TOPICS[topic]["user"], count)]
    if rng.random() < 0.3:
        parts.insert(rng.randint(0, len(parts)), rng.choice(USER_EXTRAS))
    return " ".join(part[0].upper() + part[1:] for part in parts)


def _reply_text(topic: str, user: str, rng: random.Random, slots: _Slots) -> str:
    """A reply on the same topic, naming the same things (`slots`) as the message it answers."""
    if user in SHORT_USER:
        return rng.choice(SHORT_REPLY)
    data = TOPICS[topic]
    parts = [rng.choice(OPENERS)]
    count = rng.randint(2, min(5, len(data["reply"])))
    parts += [t.format_map(slots) for t in rng.sample(data["reply"], count)]
    if data["items"] and rng.random() < 0.35:
        items = rng.sample(data["items"], rng.randint(3, min(6, len(data["items"]))))
        parts.append("\n\nA few things that help:\n" + "\n".join(f"- {item}" for item in items) + "\n\n")
    parts.append(rng.choice(CLOSERS))
    return " ".join(part for part in parts if part).replace("\n ", "\n").replace(" \n", "\n").strip()


def generate(turns: int, seed: int) -> list[tuple[str, str]]:
    """`turns` (user, assistant) pairs: the fact at FACT_TURN, near misses, the question last."""
    rng = random.Random(seed)
    planted = {FACT_TURN: (FACT_USER, FACT_REPLY)}
    for share, pair in DISTRACTORS.items():
        planted.setdefault(max(FACT_TURN + 1, round(turns * share)), pair)
    names = list(TOPICS)
    topic = rng.choice(names)
    seen: set[str] = set()
    pairs: list[tuple[str, str]] = []
    for turn in range(1, turns + 1):
        if rng.random() < 0.3:  # conversations drift between topics
            topic = rng.choice(names)
        if turn == turns:
            pairs.append((QUESTION, ""))  # answered by the stand-in from what it was sent
        elif turn in planted:
            pairs.append(planted[turn])
        else:
            # People rarely send the very same long message twice.
            slots = _Slots(rng)
            user = _user_text(topic, rng, slots)
            for _ in range(20):
                if user in SHORT_USER or user not in seen:
                    break
                slots = _Slots(rng)
                user = _user_text(topic, rng, slots)
            seen.add(user)
            pairs.append((user, _reply_text(topic, user, rng, slots)))
    holders = [t for t, pair in enumerate(pairs, 1) if any(FACT in text for text in pair)]
    if holders != [FACT_TURN]:
        raise RuntimeError(f"the fact must be in turn {FACT_TURN} only, found in turns {holders}")
    return pairs


# -- the scripted model ---------------------------------------------------------------------------

_UNIT = re.compile(r"^\[(\d+)\] (A: )?(.*)$")  # one person speaks here: no name before the text
_REPLIED = " A: "
_CHAT_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d\] ([^:]+): (.*)$")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


@dataclass
class Unit:
    """One numbered turn of a triage prompt: who spoke first, and every text shown in it."""

    speaker: str
    texts: list[str]


def parse_triage_prompt(prompt: str) -> tuple[list[Unit], str]:
    units: list[Unit] = []
    request = ""
    for line in prompt.splitlines():
        if match := _UNIT.match(line):
            units.append(Unit("A" if match.group(2) else "U", [match.group(3)]))
        elif line.startswith(_REPLIED) and units:
            units[-1].texts.append(line.removeprefix(_REPLIED))
        elif line.startswith("New message: "):
            request = line.removeprefix("New message: ")
    return units, request


def content_words(text: str) -> set[str]:
    """Every content word, as written (for the summary's topics line)."""
    return {w for w in re.findall(r"\w+", text.lower()) if len(w) >= 3 and w not in STOPWORDS}


def triage_answer(units: list[Unit], request: str) -> str:
    """Pick the earlier turns sharing at least two content words (recall's stems) with the new message."""
    wanted = set(query_terms(request))
    picked = [index for index, unit in enumerate(units, start=1)
              if len(wanted & set(lexical_words(" ".join(unit.texts)))) >= 2]
    return '{"relevant": [' + ", ".join(map(str, picked)) + "]}"


def summary_answer(prompt: str) -> str:
    """A topics line and every user sentence with a number in it, clipped."""
    topics: Counter[str] = Counter()
    kept: list[str] = []
    for line in prompt.splitlines():
        match = _CHAT_LINE.match(line)
        if not match or match.group(1) == "assistant":
            continue
        text = match.group(2)
        topics.update(content_words(text))
        kept += [s[:120] for s in _SENTENCE.split(text) if any(c.isdigit() for c in s)]
    head = "Topics: " + ", ".join(word for word, _ in topics.most_common(8))
    return "\n".join([head, *(f"- {s}" for s in dict.fromkeys(kept))])


def merge_answer(prompt: str) -> str:
    """The parts' topic lines merged, their identifier lines kept once each, oldest first."""
    topics: Counter[str] = Counter()
    kept: list[str] = []
    for line in prompt.splitlines():
        if line.startswith("Topics: "):
            topics.update(line.removeprefix("Topics: ").split(", "))
        elif line.startswith("- "):
            kept.append(line)
    head = "Topics: " + ", ".join(word for word, _ in topics.most_common(10))
    return "\n".join([head, *dict.fromkeys(kept)])


def request_text(rec: RecordedRequest) -> str:
    """Everything a request sends the model: its system text and every message, as one string."""
    return "\n\n".join([rec.system_text, *(str(m["content"]) for m in rec.messages)])


class ScriptedModel:
    """The stand-in's answers: the generated reply of the current turn, triage and summaries.

    It also checks each triage prompt: a turn shown as a user message followed by " A: X" (the
    opening of a reply) should show the reply that really answered that message.
    """

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self.pairs = pairs
        self.turn = 0  # 1-based, set by the driver before each message
        self._replies: dict[str, set[str]] = {}
        for user, reply in pairs:
            words = user.split()
            self._replies.setdefault(said(words), set()).add(reply_head(reply, len(words)))
        self.units_with_reply = 0
        self.misattributed: list[tuple[int, str, str]] = []  # (turn, user text, reply shown)

    def __call__(self, rec: RecordedRequest) -> Response:
        sent = request_text(rec)
        prompt = str(rec.messages[-1]["content"])
        if rec.system_text == TRIAGE_SYSTEM:
            units, request = parse_triage_prompt(prompt)
            self._check_units(units)
            answer = triage_answer(units, request)
        elif rec.system_text == SUMMARY_SYSTEM:
            answer = summary_answer(prompt)
        elif rec.system_text == MERGE_SYSTEM:
            answer = merge_answer(prompt)
        else:
            answer = self.pairs[self.turn - 1][1]
            if not answer:  # the final question: answered only if the fact reached the model
                answer = f"It's {FACT}." if FACT in sent else "Sorry, I don't have that in front of me."
        return Text(answer, input_tokens=estimate_tokens(sent), output_tokens=estimate_tokens(answer))

    def _check_units(self, units: list[Unit]) -> None:
        for unit in units:
            if unit.speaker == "A" or len(unit.texts) < 2:
                continue
            self.units_with_reply += 1
            if unit.texts[1] not in self._replies.get(unit.texts[0], ()):
                self.misattributed.append((self.turn, unit.texts[0], unit.texts[1]))


# -- one scenario -------------------------------------------------------------------------------


@dataclass
class Result:
    label: str
    pipeline: list[int] = field(default_factory=list)  # estimated tokens per turn
    everything: list[int] = field(default_factory=list)
    pipeline_chars: int = 0
    everything_chars: int = 0
    triage_calls: int = 0
    triage_tokens: int = 0
    summary_calls: int = 0
    summary_tokens: int = 0
    compactions: int = 0
    summary_tokens_final: int = 0
    fact_in_final: str = "no"
    final_detail: str = ""
    final_reply: str = ""
    wall_s: float = 0.0
    units_with_reply: int = 0
    misattributed: list[tuple[int, str, str]] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return sum(self.pipeline) / sum(self.everything)

    @property
    def ratio_with_fast(self) -> float:
        return (sum(self.pipeline) + self.triage_tokens + self.summary_tokens) / sum(self.everything)

    @property
    def met(self) -> bool:
        return self.ratio <= TARGET_RATIO and self.fact_in_final != "no"


async def run_scenario(
    label: str, conversation: dict[str, Any], pairs: list[tuple[str, str]], folder: Path,
) -> Result:
    result = Result(label)
    model = ScriptedModel(pairs)
    db = folder / (re.sub(r"\W+", "-", label) + ".db")
    channel = FakeChannel()
    async with AnthropicStandIn() as api:
        api.default = model
        config = parse_config({
            "database": {"path": str(db)},
            "anthropic": {"base_url": api.base_url, "model": MAIN, "fast_model": FAST},
            "conversation": conversation,
            "semantic": {"enabled": "off"},  # lexical recall only, as the scenarios were written
            # The memory flush is a turn of its own, not part of the context measured here.
            "compaction": {"flush_shares": []},
        }, "<bench>")
        brain = AnthropicBrain(config.anthropic, API_KEY)
        daemon = Daemon(config, [channel], brain=brain, notifier=Notifier(None))
        task = asyncio.create_task(daemon.run())
        started = time.perf_counter()
        try:
            await asyncio.wait_for(daemon.started.wait(), 10)
            assert daemon.router is not None
            for turn, (user, _) in enumerate(pairs, start=1):
                model.turn = turn
                seen = api.count
                await channel.inject(channel.message(user, message_id=f"in-{turn}"))
                await daemon.router.idle()
                sent = everything = 0
                for rec in api.requests[seen:]:
                    text = request_text(rec)
                    if rec.model == MAIN:  # one per turn (a retry would send it again)
                        sent += estimate_tokens(text)
                        result.pipeline_chars += len(text)
                        # Send everything: the same system prompt, every earlier message, the request.
                        whole = "\n\n".join([rec.system_text, *history_texts(pairs, turn)])
                        everything += estimate_tokens(whole)
                        result.everything_chars += len(whole)
                    elif rec.system_text == TRIAGE_SYSTEM:
                        result.triage_calls += 1
                        result.triage_tokens += estimate_tokens(text)
                    else:
                        result.summary_calls += 1
                        result.summary_tokens += estimate_tokens(text)
                result.pipeline.append(sent)
                result.everything.append(everything)
            result.wall_s = time.perf_counter() - started
            final = [r for r in api.requests if r.model == MAIN][-1]
            result.fact_in_final = fact_found(request_text(final))
            result.units_with_reply = model.units_with_reply
            result.misattributed = model.misattributed
            result.final_reply = channel.sent[-1].text if channel.sent else ""
        finally:
            daemon.request_stop()
            await asyncio.wait_for(task, 30)
            await brain.aclose()
    await describe_final(result, db, str(channel.key()))
    return result


def fact_found(text: str) -> str:
    """Where the fact is in a request: the early message itself, a summary block, both or neither."""
    places = []
    if FACT_USER in text:
        places.append("message")
    summary = re.search(r"\[Summary of the earlier part.*?\[End of summary\.\]", text, re.DOTALL)
    if summary and FACT in summary.group(0):
        places.append("summary")
    return f"yes ({' + '.join(places)})" if places else "no"


def history_texts(pairs: list[tuple[str, str]], turn: int) -> list[str]:
    """Every message before `turn`'s request, then the request (the stored replies are the
    generated ones: the scripted model answers with them)."""
    texts = [text for user, reply in pairs[: turn - 1] for text in (user, reply)]
    return [*texts, pairs[turn - 1][0]]


async def describe_final(result: Result, db: Path, session: str) -> None:
    """The final turn's snapshot: what went in, why, and where the fact message went."""
    async with Store.open(db) as store:
        snapshot = (await store.snapshots(session))[-1].snapshot
        fact_id = next(m.id for m in await store.history(session, 10_000) if m.text == FACT_USER)
        compaction = await store.latest_compaction(session)
    if compaction is not None:
        result.summary_tokens_final = estimate_tokens(compaction.summary)
    with sqlite3.connect(db) as conn:
        (result.compactions,) = conn.execute(
            "SELECT COUNT(*) FROM compactions WHERE session_key = ?", (session,)
        ).fetchone()
    conn.close()
    reasons = Counter(entry["reason"] for entry in snapshot["entries"])
    where = next((e["reason"] for e in snapshot["entries"] if e["id"] == fact_id), None)
    triage = snapshot["triage"]
    result.final_detail = (
        f"{len(snapshot['entries'])} messages ({', '.join(f'{k} {v}' for k, v in sorted(reasons.items()))}); "
        f"fetched {snapshot['counts'].get('fetched', 0)}, recalled {len(snapshot['recalled'])} "
        f"(fact {'among them' if fact_id in snapshot['recalled'] else 'not recalled'}), "
        f"triage {triage['outcome']} {triage['selected']}/{triage['candidates']} turns, "
        f"trimmed {len(snapshot['trimmed'])}, fact message: {where or 'not in context'}, "
        f"summary: {'yes' if snapshot['compaction'] else 'none'}"
    )


# -- report -----------------------------------------------------------------------------------

SCENARIOS: list[tuple[str, dict[str, Any]]] = [
    ("default (recall off)", {}),
    ("recall_count=8", {"recall_count": 8}),
    ("use_selection=false", {"use_selection": False}),
    # A small window makes the history outgrow the budget, so compaction runs.
    ("32k window", {"context_window": 32_000}),
    ("32k window, recall_count=8", {"context_window": 32_000, "recall_count": 8}),
]


def print_table(results: list[Result]) -> None:
    print("| scenario | pipeline tokens | send-everything tokens | ratio | ratio incl. fast model "
          "| mean / turn | final turn (pipeline / everything) | fact in final context | triage calls "
          "| compactions | wall s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for r in results:
        print(f"| {r.label} | {sum(r.pipeline):,} | {sum(r.everything):,} | {r.ratio:.1%} "
              f"| {r.ratio_with_fast:.1%} | {statistics.fmean(r.pipeline):,.0f} "
              f"| {r.pipeline[-1]:,} / {r.everything[-1]:,} | {r.fact_in_final} | {r.triage_calls} "
              f"| {r.compactions} | {r.wall_s:.1f} |")


def print_details(results: list[Result]) -> None:
    for r in results:
        print(f"- {r.label}: final turn {r.final_detail}; reply \"{r.final_reply}\"")
        peak = max(range(len(r.pipeline)), key=r.pipeline.__getitem__)
        print(f"    reply request per turn: median {statistics.median(r.pipeline):,.0f}, max "
              f"{r.pipeline[peak]:,} (turn {peak + 1}) tokens; sending everything: median "
              f"{statistics.median(r.everything):,.0f}, mean {statistics.fmean(r.everything):,.0f}")
        print(f"    stand-in input text: {r.pipeline_chars:,} chars vs {r.everything_chars:,} "
              f"sending everything; fast model: {r.triage_calls} triage calls "
              f"({r.triage_tokens:,} tokens in), {r.summary_calls} summary calls "
              f"({r.summary_tokens:,} tokens in)"
              + (f", final summary {r.summary_tokens_final:,} tokens" if r.compactions else ""))
        if r.units_with_reply:
            line = (f"    triage prompts: {r.units_with_reply:,} turns shown with a reply, "
                    f"{len(r.misattributed):,} of them with a reply that did not answer that message")
            if r.misattributed:
                turn, user, reply = r.misattributed[0]
                line += f" (first at turn {turn}: {user[:50]!r} shown with {reply[:50]!r})"
            print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500, help="turns in the conversation (>= 10)")
    parser.add_argument("--seed", type=int, default=3, help="seed of the generated conversation")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="run only scenarios whose name contains NAME (repeatable)")
    args = parser.parse_args()
    if args.turns < 10:
        parser.error("--turns must be at least 10")
    # Warnings (a failed compaction, a crashed turn) still show; the per-turn INFO line does not.
    configure_logging("WARNING", "console", [], stream=sys.stderr)

    pairs = generate(args.turns, args.seed)
    messages = [text for pair in pairs for text in pair if text]
    user_chars = [len(u) for u, _ in pairs]
    reply_chars = [len(a) for _, a in pairs if a]
    print(f"long conversation: {args.turns} turns (seed {args.seed}); the fact is in turn {FACT_TURN} "
          f"only ({FACT_USER!r}), the last turn asks {QUESTION!r}")
    print(f"generated {len(messages)} messages, {estimate_tokens(chr(10).join(messages)):,} tokens "
          f"in all; user messages {min(user_chars)}-{max(user_chars)} chars (mean "
          f"{statistics.fmean(user_chars):.0f}), replies {min(reply_chars)}-{max(reply_chars)} chars "
          f"(mean {statistics.fmean(reply_chars):.0f}); CPUs {sorted(os.sched_getaffinity(0))}")
    chosen = [(label, conv) for label, conv in SCENARIOS
              if not args.only or any(part in label for part in args.only)]
    if not chosen:
        parser.error(f"no scenario matches --only; scenarios: {', '.join(n for n, _ in SCENARIOS)}")
    results = []
    with tempfile.TemporaryDirectory(prefix="sb-bench-") as tmp:
        for label, conversation in chosen:
            results.append(asyncio.run(run_scenario(label, conversation, pairs, Path(tmp))))
    print()
    print_table(results)
    print()
    print_details(results)
    print()
    print(f"target: the pipeline sends <= {TARGET_RATIO:.0%} of send-everything's tokens (reply "
          "calls, whole request) with the needed message kept in the final turn's context")
    for r in results:
        why = []
        if r.ratio > TARGET_RATIO:
            why.append(f"ratio {r.ratio:.1%}")
        if r.fact_in_final == "no":
            why.append("fact not in the final context")
        print(f"  {r.label}: {'target met' if r.met else 'TARGET MISSED (' + ', '.join(why) + ')'}")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
