"""A labelled set for context quality: long generated chats with planted facts and questions on them.

Everything is generated from a seed (no network, no dataset, no model): `generate(count, seed)`
gives `count` conversations of 300-600 turns spread over 5-10 weeks. Each conversation plants
facts early (one turn for a fact or an event, 2-4 turns for a story that needs them together) and
asks about them in its last quarter, in other words than the evidence used, the way people ask
in a real chat. Every family of facts has three kinds of wording, mixed 10 : 6 : 4 in every 20
questions of a kind (50 / 30 / 20 %, drawn by seed; `HARD_MIX` is 9 : 5 : 6):

- "anchor": the question reuses one thing the evidence named, a person, pet, place, restaurant,
  title, model, number or distinctive noun ("How's Dana getting on in Porto?" after "my sister
  Dana moved to Porto in March"); a name of two words ("Little Chengdu") counts as one anchor;
- "topical": it shares one ordinary topical word ("class", "dinner", "garden");
- "paraphrase": it shares no content word at all ("Signed up for pottery classes" / "What new
  pastime did I take up?").

Everything else in a question is other words (synonyms, hypernyms, other framing), and the later
turns of a story do not all repeat its anchor ("they", "it"). Distractor turns share the
question's words, its anchor or topical word too where natural (another book by the same author,
the friend in an unrelated context), without answering it; the rest is varied small talk composed
from templates and word pools, so neither the evidence nor the filler repeats a handful of lines.

A turn is a user message and the agent's reply; evidence is whole turns, named by their index.
`content_words` and `overlap` measure how many of a question's content words (lower-cased, English
Snowball stems, stopwords out, numbers of two or more digits kept) a turn holds; `describe`
reports the wording mix and the overlaps with evidence and with distractors.
"""

from __future__ import annotations

import random
import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import snowballstemmer  # type: ignore[import-untyped]

Kind = Literal["fact", "temporal", "multi", "multihop", "inference"]
Wording = Literal["anchor", "topical", "paraphrase"]
Role = Literal["filler", "evidence", "distractor", "question"]
Pair = tuple[str, str]  # (user message, agent reply)

KINDS: tuple[Kind, ...] = ("fact", "temporal", "multi")  # the original set's kinds
# The extended set (issue 38) adds bench/labelled_misses.py's kinds, in longer conversations over
# two to four months: multi-hop (2-4 evidence turns weeks apart) and inference questions.
HARD_KINDS: tuple[Kind, ...] = ("multihop", "inference")
ALL_KINDS: tuple[Kind, ...] = KINDS + HARD_KINDS
WORDINGS: tuple[Wording, ...] = ("anchor", "topical", "paraphrase")
PER_CONVERSATION: Mapping[Kind, int] = {"fact": 5, "temporal": 4, "multi": 3}
PER_CONVERSATION_EXTENDED: Mapping[Kind, int] = {**PER_CONVERSATION, "multihop": 4, "inference": 4}
# How many of every 20 questions of a kind get each wording: 50 / 30 / 20 %. Calibrated on the
# issue's independent judge (a public benchmark of long chats): there, plain FTS5 bm25 over every
# turn finds 65 % of the evidence in its top 20; here it finds 61 % with this mix (`fts5_top`; 59-64 %
# as the query keeps or drops short and function words), so the set is at least as hard for word
# matching as real chats measured from outside. HARD_MIX (45 / 25 / 30 %: 54 %, 53-58 %) asks
# more in other words than that; the bench runs it with --mix 9:5:6.
MIX: Mapping[Wording, int] = {"anchor": 10, "topical": 6, "paraphrase": 4}
HARD_MIX: Mapping[Wording, int] = {"anchor": 9, "topical": 5, "paraphrase": 6}
START = datetime(2025, 1, 6, tzinfo=UTC)  # a Monday; conversation i starts i * 3 days later


@dataclass(frozen=True, slots=True)
class Family:
    """One kind of planted fact: its evidence turns (variants per step), questions and distractors.

    `questions` has templates for each wording; an "anchor" question shares with the evidence only
    words of a slot value (a name, a title, a number) or of `nouns` (distinctive nouns people
    reuse: "passport", "flu"), a "topical" one one ordinary word, a "paraphrase" one nothing.
    `options` are coherent slot bundles, one chosen per conversation; `{friend}` and `{colleague}`
    are always there, `{date}` (the first evidence turn's day) in the answer.
    """

    name: str
    kind: Kind
    steps: tuple[tuple[Pair, ...], ...]
    questions: Mapping[Wording, tuple[str, ...]]
    distractors: tuple[Pair, ...]
    answer: str
    options: tuple[Mapping[str, str], ...] = ({},)
    nouns: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Turn:
    index: int
    user: str
    reply: str
    at: float  # epoch seconds of the user message; the reply follows within a minute
    reply_at: float
    role: Role


@dataclass(frozen=True, slots=True)
class Question:
    turn: int  # the index of the turn whose user message asks it
    kind: Kind
    family: str
    wording: Wording
    text: str
    answer: str
    evidence: tuple[int, ...]
    distractors: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Conversation:
    index: int
    user: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]


def _zip(**columns: Sequence[str]) -> tuple[Mapping[str, str], ...]:
    """Slot bundles from columns of values: _zip(a=("1", "2"), b=("x", "y")) gives
    ({"a": "1", "b": "x"}, {"a": "2", "b": "y"})."""
    return tuple(dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True))


def _asks(
    *, anchor: tuple[str, ...], topical: tuple[str, ...], paraphrase: tuple[str, ...]
) -> Mapping[Wording, tuple[str, ...]]:
    return {"anchor": anchor, "topical": topical, "paraphrase": paraphrase}


# -- planted facts ------------------------------------------------------------------------------

FACTS: tuple[Family, ...] = (
    Family("pastime", "fact",
        ((("Signed up for {craft} classes at {venue} community centre, Thursday evenings for ten weeks.",
           "Lovely. Working with your hands after a day at a screen is a good balance."),
          ("First {craft} class tonight at {venue}! The instructor says I have steady hands.",
           "That's a great start; steady hands will serve you well."),
          ("Booked a beginners' class in {craft} at {venue}. I've wanted to try it for years.",
           "Good for you, finally doing it. Beginners' classes are the best way in.")),),
        _asks(anchor=("What's that hobby I picked up at {venue}, the one I keep going back to?",
                      "Which craft am I learning over at {venue}?"),
              topical=("Which class have I enrolled in lately, to learn some new skill?",),
              paraphrase=("What new pastime did I take up?", "Which hobby have I picked up lately?",
                          "Remind me, what leisure activity was I getting into?")),
        (("My old hobby was chess, but I haven't picked up a board in years.",
          "Chess has a way of pulling people back in."),
         ("The leisure centre pool is closed for repairs again.", "Annoying. Hopefully it reopens soon."),
         ("Not sure I should take up the offer to coach the kids' football, I'm stretched thin.",
          "Only say yes if you'll enjoy it; stretched thin is a real warning sign."),
         ("Reading is my favourite pastime on trains, the time just flies.",
          "Trains make the perfect reading room."),
         ("Any new activity ideas for a rainy Sunday with my nephew?",
          "Baking, a board-game marathon or a blanket fort. Never fails."),
         ("Lately I can't pick a film without scrolling for an hour.",
          "Choice paralysis is real; let someone else pick."),
         ("Hobby shops are disappearing, the model railway place shut too.",
          "Sad to see; they're hard to replace."),
         ("{venue} library has a book sale on Saturday, I might have a rummage.",
          "Book sales are dangerous for shelf space."),
         ("Parking near {venue} is impossible after six.", "Walking might be quicker then."),
         ("My nephew's swimming class got cancelled again.", "Annoying for him, and for whoever drives."),
         ("The yoga class at work has three regulars and a lot of spare mats.",
          "Small classes are the best kind.")),
        "{craft}",
        _zip(craft=("pottery", "watercolour painting", "woodcarving", "bookbinding", "calligraphy",
                    "life drawing", "stained glass"),
             venue=("Ashgrove", "Millbrook", "Fernlea", "Larkhill", "Southmead", "Brookside",
                    "Holloway"))),
    Family("research", "fact",
        ((("Spent the whole evening reading about {topic} after {friend} brought it up: {detail}.",
           "That's a lot to take in. Did anything stand out so far?"),
          ("Went down a rabbit hole reading about {topic} tonight, {detail}. {friend} started me off.",
           "Rabbit holes like that help when you're weighing something big. Sleep on it.")),),
        _asks(anchor=("What subject did {friend} get me digging into?",
                      "What was it {friend} got me researching the other week?"),
              topical=("What was I reading up on so intensely a while back?",),
              paraphrase=("What was I investigating a few weeks back?",
                          "What subject did I dig into that one night?", "What did I research recently?")),
        (("The police are still investigating the break-in two doors down.",
          "That's unsettling. Make sure your own locks are solid."),
         ("I need to research a birthday present for Dad, he has everything.",
          "Experiences work well for people who have everything."),
         ("My subject line for the newsletter got zero opens, so much for that.",
          "Subject lines are a dark art; try a question next time."),
         ("Did the weekly research report go out? I can't find it in my sent folder.",
          "If it's not in sent, it probably didn't go. Worth resending."),
         ("Back at the office after a week off, the inbox is a horror film.",
          "Triage the inbox by sender first."),
         ("Night out with the team, we ended up digging through old photos.",
          "Old photos are the best kind of trouble."),
         ("{friend} got me hooked on a podcast about shipwrecks, of all things.",
          "Shipwrecks are strangely gripping."),
         ("{friend} and I are doing the pub quiz on Thursday, we need a team name.",
          "Something with a pun, always."),
         ("Reading the small print on the phone contract took all evening.",
          "Small print is where they hide everything."),
         ("Read the whole Sunday paper for once, cover to cover.", "A rare luxury.")),
        "{topic}",
        ({"topic": "adoption agencies", "detail": "waiting lists, home-study visits and the fees"},
         {"topic": "solar panel installers", "detail": "quotes, roof surveys and feed-in tariffs"},
         {"topic": "rescue greyhound charities", "detail": "home checks, fostering, first-time owners"},
         {"topic": "part-time MBA programmes", "detail": "entry tests, weekend schedules and tuition"},
         {"topic": "electric cargo bikes", "detail": "range, child seats and the dealers nearby"},
         {"topic": "heat pump grants", "detail": "eligibility, installers and the paperwork"})),
    Family("allergy", "fact",
        ((("Turns out the rash was {allergen}: the clinic confirmed it with a skin-prick test and "
           "prescribed antihistamines.", "Good that you know now. Worth telling anyone who cooks for you."),
          ("So that rash last week was {allergen}. The GP says to carry antihistamines from now on.",
           "Glad it's identified. Keep a pack in your bag and one at work.")),),
        _asks(anchor=("What food was behind me needing antihistamines all of a sudden?",),
              topical=("What caused that rash of mine, food-wise?",),
              paraphrase=("Is there any food I'm allergic to?",
                          "What should I avoid eating for health reasons?")),
        (("My sister is allergic to cats, so her visit will be a short one.",
          "Maybe meet her at a café instead."),
         ("I should avoid the ring road tomorrow, there are roadworks all week.",
          "The back streets will be slower but steadier."),
         ("What food should we bring to the picnic on Saturday?",
          "Finger food travels best: wraps, fruit, a tart."),
         ("Eating lunch at my desk again, no time for anything else.",
          "Try to at least step away for ten minutes."),
         ("For health reasons the office is getting rid of the shared fridge, apparently.",
          "Probably for the best, given the state of most shared fridges."),
         ("Picked up antihistamines for {friend}, whose hay fever is awful this year.",
          "Pollen season is brutal."),
         ("Heat rash again, the summer is not my friend.", "Loose cotton and a cool shower help."),
         ("The baby next door has nappy rash, they were up all night.", "Poor little thing.")),
        "{allergen}",
        _zip(allergen=("shellfish", "peanuts", "sesame", "kiwi", "hazelnuts", "celery")),
        nouns=("antihistamines",)),
    Family("pet", "fact",
        ((("We brought a {pet} home from the shelter yesterday. We've named her {pet_name}.",
           "Congratulations! {pet_name} is a lovely name. How is she settling in?"),
          ("Meet {pet_name}, the {pet} from the shelter, who has taken over the flat since this morning.",
           "Ha, that didn't take long. {pet_name} sounds like a character.")),),
        _asks(anchor=("What sort of creature is {pet_name}, again?",
                      "Remind me what kind of animal {pet_name} is?"),
              topical=("What's the little one from the shelter called?",),
              paraphrase=("What did we call the animal that joined the family?", "What is our pet called?")),
        (("The animal documentary last night was stunning, all filmed in Patagonia.",
          "Those nature crews have endless patience."),
         ("My family group chat has been called 'Chaos' for years and it's accurate.",
          "Every family chat deserves that title."),
         ("Did you see the pet shop on the high street is closing?",
          "Shame; independent shops like that are hard to replace."),
         ("Whoever called the meeting at 8am owes everyone coffee.", "At least make it a short one."),
         ("Someone at the park has a dog called {pet_name} too, we had a laugh about it.",
          "Great minds think alike."),
         ("{friend} has promised to look after {pet_name} while we're away.",
          "Handy to have a willing sitter."),
         ("The shelter on Mill Road is asking for old towels and blankets.", "Easy to help with that."),
         ("Took a box of tins to the food bank and the dog shelter.", "That's kind of you.")),
        "{pet_name} the {pet}",
        _zip(pet=("kitten", "puppy", "rabbit", "rescue dog", "tabby", "tortoise"),
             pet_name=("Pickle", "Biscuit", "Clover", "Juniper", "Mochi", "Sheldon"))),
    Family("friend_job", "fact",
        ((("{friend} has started a job: {job}, {detail}.",
           "Good for {friend}! That's quite a change of pace."),
          ("Lunch with {friend}, who's loving the new job ({job}, {detail}). Sounds intense.",
           "Intense but probably rewarding. Pass on my congratulations.")),),
        _asks(anchor=("What is {friend}'s line of work these days?", "How does {friend} earn a living now?"),
              topical=("Who's got a different job now, among my mates, and what is it?",),
              paraphrase=("Which of my mates went into another career, and what?",
                          "Who among my friends has a different line of work now?")),
        (("{friend} and I walked along the river after work, it was lovely.",
          "Evening walks by water are hard to beat."),
         ("{friend} is living at their parents' place until the new flat is ready.",
          "Generous of them, and probably cheaper too."),
         ("{friend} keeps sending me memes at work, I can't get anything done.",
          "Mute the chat for an hour; the memes will keep."),
         ("The lines at the post office were out the door today.", "Mid-morning is usually quieter."),
         ("My career adviser at school said I'd make a good accountant. Never.",
          "Advisers are wrong all the time."),
         ("Half my mates are getting married this year, I'm broke.", "Weddings add up fast."),
         ("My job is mostly meetings about meetings these days.", "Block out some focus time."),
         ("The job centre on the high street is moving to the old bank.", "At least it's bigger.")),
        "{friend}, {job}",
        _zip(job=("paramedic", "sous-chef", "primary school teacher", "data engineer", "park ranger",
                  "airline pilot"),
             detail=("night shifts on the ambulance", "a busy bistro by the harbour",
                     "a class of thirty seven-year-olds", "a logistics startup",
                     "the national park up north", "short-haul flights from the regional airport"))),
    Family("car", "fact",
        ((("Picked up the car today: {car}, {price} and only 40k miles on the clock.",
           "Exciting! Enjoy the first few drives."),
          ("It's official, the car parked outside my door is mine: {car}, {price} all in.",
           "Congratulations, that's a big step. Drive safe.")),),
        _asks(anchor=("Which model did I spend {price} on?",),
              topical=("Which car did I end up buying?",),
              paraphrase=("What vehicle did I buy?", "Which motor did I end up getting?")),
        (("The vehicle inspection centre was closed again, third time this month.",
          "Maybe book online so they can't turn you away."),
         ("I want to buy a decent winter coat before the sales end.",
          "Wool with a good lining is worth the money."),
         ("The motor in the washing machine is making a grinding noise.",
          "Might be the bearings; worth getting looked at before it dies."),
         ("Everyone at work is buying the same phone, it's like a uniform.",
          "Peer pressure, gadget edition."),
         ("The new phone model costs more than my first car did.", "Phones are wild now."),
         ("The roof repair quote came to £2,{price_end}, of course it did.", "Roofs never come cheap."),
         ("Car park at the station is full by eight now.", "An earlier train, then?")),
        "{car}",
        _zip(car=("a used Skoda Octavia", "a little red Fiat 500", "a second-hand Volvo estate",
                  "a Toyota Yaris hybrid", "a Mazda MX-5", "an old Land Rover Defender"),
             price=("£6,450", "£3,900", "£11,200", "£8,750", "£4,300", "£12,600"),
             price_end=("450", "900", "200", "750", "300", "600"))),
    Family("book", "fact",
        ((("Couldn't put down {book} by {author}, finished the last chapter at 2am, no regrets.",
           "That's the sign of a good one. Did the ending land?"),
          ("The new {author}, {book}, is ruining my sleep, one more chapter turned into forty.",
           "Classic. Is it the plot or the writing that grabs you?")),),
        _asks(anchor=("What was the {author} one I stayed up reading?",),
              topical=("Which story had me reading chapter after chapter past midnight?",),
              paraphrase=("Which novel kept me awake until the early hours?",
                          "What story had me hooked late into the night?")),
        (("The neighbours' dog kept me awake until the early hours again.",
          "Earplugs, and maybe a friendly word with them."),
         ("Any novel recommendations for a long flight?",
          "Something long and absorbing; a big historical one works."),
         ("Late night at the office, the release slipped again.",
          "Get some rest; a slipped release is never one person's fault."),
         ("That story about the whale stranded on the beach made me so sad.",
          "It's heartbreaking; the rescuers do try."),
         ("{author} has another one out in May, the reviews are mixed.",
          "Worth a look once it's in paperback."),
         ("{friend} lent me an old {author} from the charity shop, not started it yet.",
          "A good excuse for a quiet evening."),
         ("Reading the terms and conditions for the new bank account, riveting.", "Nobody reads those."),
         ("Chapter one of the assignment done, eleven to go.", "One at a time.")),
        "{book}",
        _zip(book=("The Salt Orchard", "A Map of Small Fires", "Winter at Kestrel Point",
                   "The Glass Archivist", "Nine Bridges North", "The Quiet Cartographer"),
             author=("Marlowe", "Achterberg", "Quinlan", "Haverford", "Okonjo", "Delacroix"))),
    Family("moving", "fact",
        ((("Signed the lease on a flat on {street} in {district}! Keys on the first of the month.",
           "A fresh start. {district} has good cafés, I hear."),
          ("Decided: we're leaving the old place and taking the two-bed flat on {street}, in {district}.",
           "Big decision, well made. Start packing early.")),),
        _asks(anchor=("Which part of town is {street} in, where I'm moving to?",),
              topical=("In which part of town is my next flat going to be?",),
              paraphrase=("Where am I relocating to?", "Which neighbourhood will my next home be in?")),
        (("My colleague is relocating to Berlin next month, leaving drinks on Friday.",
          "Berlin will be an adventure for them."),
         ("The company might relocate our team to the other building.",
          "A change of building can shake things up."),
         ("The neighbourhood watch newsletter is mostly complaints about bins.", "The eternal bin debate."),
         ("Home by seven tonight, if the trains behave.", "Fingers crossed for the trains."),
         ("Next weekend is the only free one I have until summer.", "Guard it jealously."),
         ("{friend} says parking on {street} is a nightmare, good thing I cycle.",
          "Cycling solves a lot."),
         ("There's a farmers' market at the top of {street} on Sundays.", "Handy for fresh bread."),
         ("The town hall clock has been stuck at ten past four for a month.",
          "Right twice a day, at least."),
         ("The flat above us is having a party again.", "Earplugs at the ready."),
         ("Flat tyre on the way to work, of course.", "The worst timing.")),
        "{district}",
        _zip(district=("Harbourside", "Old Market", "Northfield", "Riverside Gardens", "Kingsgate",
                       "Elm Hill"),
             street=("Cobden Road", "Larch Avenue", "Wexley Street", "Albion Terrace", "Greaves Lane",
                     "Mortimer Crescent"))),
    Family("mum_gift", "fact",
        ((("For Mum's {age} birthday I'm getting her {gift}.", "She'll love that, it's thoughtful."),
          ("Sorted Mum's {age} birthday: {gift}. Wrapped and hidden.", "Organised and early. Well done.")),),
        _asks(anchor=("What am I giving my mother for her {age}?",),
              topical=("What birthday present have I lined up for my mother?",),
              paraphrase=("What present did I plan for my mother?", "What gift am I giving my mother?")),
        (("My mother called for an hour, mostly about her neighbour's hedge.", "The hedge saga continues."),
         ("I still need to wrap the present for {friend}'s leaving do.",
          "Wrapping at midnight is a tradition."),
         ("We plan to repaint the hallway at Easter.", "A lighter colour would open it up."),
         ("Giving blood tomorrow, remind me to eat breakfast.", "Eat something solid and drink water."),
         ("Aunt Jo's {age} is the week after, the whole family is going.",
          "A busy month for celebrations."),
         ("{friend}'s dad had his {age} at the golf club, very posh.", "Golf clubs do a good spread."),
         ("It's {friend}'s birthday on Friday and I haven't got a card.",
          "The corner shop has decent ones.")),
        "{gift}",
        _zip(gift=("a silk scarf from the market in Lyon", "a framed print of her old street",
                   "a cashmere cardigan", "a pasta-making class for two", "a vintage brooch",
                   "a tablet with big fonts set up"),
             age=("70th", "65th", "60th", "75th", "80th", "70th"))),
    Family("instrument", "fact",
        ((("Dusted off my old {instrument} for my first lesson with {teacher}, scales for an hour, "
           "fingers are sore.", "Sore fingers mean you're at it again. Keep the sessions short at first."),
          ("Booked weekly {instrument} lessons with {teacher}, two streets away.",
           "A teacher that close means no excuses.")),),
        _asks(anchor=("Which instrument does {teacher} coach me on?",),
              topical=("What instrument are my lessons on these days, remind me?",),
              paraphrase=("Which instrument am I practising?", "What instrument have I gone back to?")),
        (("My dad keeps practising his wedding speech on me.", "That's sweet; he'll be word-perfect."),
         ("The instrument panel in the hire car lit up like a Christmas tree.",
          "Probably a tyre-pressure warning; check the manual."),
         ("I've gone back to paper notebooks, screens were frying my brain.", "Paper is underrated."),
         ("{teacher} is off sick this week, so no practice.", "A week's rest won't hurt."),
         ("Bumped into {teacher} at the supermarket, awkward small talk by the eggs.",
          "The supermarket is where everyone meets."),
         ("Driving lessons for my niece are costing her parents a fortune.",
          "Worth it for the independence."),
         ("Swimming lessons at the leisure centre are booked up until spring.", "Popular for a reason.")),
        "{instrument}",
        _zip(instrument=("cello", "saxophone", "banjo", "ukulele", "clarinet", "bass guitar"),
             teacher=("Okafor", "Delphine", "Haddad", "Brigitte", "Tomlin", "Ruairi"))),
    Family("diet", "fact",
        ((("{ev}", "That's a real change. How do you feel so far?"),
          ("{ev2}", "Sounds like it's sticking. Nice.")),),
        _asks(anchor=("Which diet did {friend} persuade me to try?",),
              topical=("What's the regime I've been following for my meals lately?",),
              paraphrase=("What kind of diet have I switched to?",
                          "Am I following any special eating plan?")),
        (("The diet cola machine at work is empty again.", "A tragedy for the afternoon slump."),
         ("I switched banks finally, the app is so much better.", "A good app saves so much hassle."),
         ("Following the election coverage is exhausting.", "Take a break; the results will wait."),
         ("Eating plan for the week: chilli Monday, leftovers Tuesday, chaos after that.",
          "Chaos Wednesday is a classic."),
         ("{friend} wants me to try bouldering next, absolutely not.", "Never say never."),
         ("Meals on wheels for Gran start on Monday.", "One less worry."),
         ("Lately the corner shop has been out of everything.", "Supply chains, apparently.")),
        "{diet}",
        ({"diet": "vegetarian",
          "ev": "Two weeks of meals without meat or fish now, all because {friend} dared me, and honestly "
                "I feel great.",
          "ev2": "Three weeks of meat-free meals, {friend} was right: I don't miss bacon as much as I "
                 "feared."},
         {"diet": "low-carb",
          "ev": "Cut bread, pasta and sugar out of my meals completely, three weeks in, and {friend} is "
                "doing it with me.",
          "ev2": "A month of meals with no bread, rice or pasta; {friend} has already cracked, I haven't."},
         {"diet": "vegan",
          "ev": "No animal products in my meals since the start of the month, cheese was the hardest. "
                "{friend} swears I'll get used to it.",
          "ev2": "Oat milk in everything now, no eggs, no cheese, no butter in any of my meals. {friend} "
                 "sent me recipes."},
         {"diet": "intermittent fasting",
          "ev": "No breakfast, just two meals: black coffee until noon, and the kitchen closes at eight. "
                "{friend} got me into it, week three.",
          "ev2": "Skipping breakfast, two meals a day and nothing after eight is getting easier, {friend} "
                 "was right."})),
    Family("language", "fact",
        ((("Ordered a {language} grammar workbook for the {city} trip, a page of vocabulary every "
           "morning with my tea.", "A page a day adds up faster than people think."),
          ("Had my first {language} conversation class; my vocabulary is tiny and {city} is only months "
           "away.", "Everyone starts there. It gets easier by week three.")),),
        _asks(anchor=("What am I studying for the {city} holiday?",),
              topical=("Which language's vocabulary am I cramming?",),
              paraphrase=("Which foreign tongue am I studying?", "What language have I begun learning?")),
        (("The foreign exchange rate is terrible this week, glad I'm not travelling.",
          "Good timing to stay put."),
         ("I'm studying the quarterly numbers for Tuesday's board meeting.",
          "Know the top three figures cold and you'll be fine."),
         ("The language in that contract is so vague, I've sent it back.",
          "Right call; vague contracts cause trouble later."),
         ("Learning the new expense system at work is a nightmare.", "New systems always hurt for a month."),
         ("{friend} is off to {city} for a stag weekend, poor {city}.", "It'll survive."),
         ("Flights to {city} went up again, glad I'm not flying this month.", "Prices are silly."),
         ("Holiday photos from {friend}, all sunsets and cocktails.", "Jealousy is allowed."),
         ("My nephew's vocabulary is now ninety percent dinosaur names.", "A fine vocabulary to have.")),
        "{language}",
        _zip(language=("Portuguese", "Japanese", "Welsh", "Greek", "Korean", "Dutch"),
             city=("Lisbon", "Kyoto", "Cardiff", "Crete", "Seoul", "Utrecht"))),
    Family("locker", "fact",
        ((("My locker at {gym} is number {n} now, they moved everyone around.", "Noted: {n}."),
          ("{gym} reshuffled the lockers, mine is {n} now. Writing it here so I don't forget.",
           "Got it, {n}.")),),
        _asks(anchor=("Which storage spot is mine at {gym}?",),
              topical=("Which locker is mine at the fitness club?",),
              paraphrase=("Which cubby is mine at the fitness club?",
                          "At the fitness club, which storage spot is mine?")),
        (("The book club picked another 800-page novel, I'm going to fail.",
          "Skim the middle; nobody will know."),
         ("Fitness tracker says I slept four hours. Feels right.", "Maybe an early night tonight."),
         ("The storage unit fees went up again.", "Worth checking what's still in there."),
         ("{gym} is shut for a deep clean on Monday.", "A rest day, then."),
         ("{friend} wants me to join {gym} with them, but the fees are steep.", "Try a day pass first."),
         ("The locker room at the pool smells of chlorine and feet.", "The classic pool bouquet.")),
        "{n}",
        _zip(n=("417", "238", "652", "91", "1203", "76"),
             gym=("Ironworks", "Pulse", "Forge", "Kinetic", "Anvil", "Vitality"))),
    Family("restaurant", "fact",
        ((("Tried {place} on the corner for dinner last night. The {dish} was the best I've had in years.",
           "High praise! Worth a second visit, clearly."),
          ("{place}, wow. {dish} to die for, best dinner in ages, going back next week.",
           "Sounds like a keeper.")),),
        _asks(anchor=("What did I order at {place} that I loved so much?",),
              topical=("Where was that dinner I couldn't stop talking about?",),
              paraphrase=("Which eatery did I rave about?", "Where did I have that amazing meal?")),
        (("The eatery by the office closed down, the sandwich place is all that's left.",
          "Maybe a chance to bring lunch."),
         ("My boss raved about the quarterly results, first time ever.", "Enjoy it while it lasts!"),
         ("Meal prep Sunday again: rice, beans, roasted veg.", "Solid routine."),
         ("Amazing how the rain knows exactly when I leave the house.", "Sod's law in weather form."),
         ("{place} was fully booked when {friend} tried to get a table on Friday.",
          "Popular places fill up fast."),
         ("Walked past {place} again, the queue was round the block.", "A good sign for a restaurant."),
         ("Ordered a new kettle online, the old one finally died.", "Rest in peace, old kettle."),
         ("Dinner at the in-laws tonight, wish me luck.", "Bring wine; it helps."),
         ("Too tired to cook dinner, cereal it is.", "A classic.")),
        "{place}, the {dish}",
        _zip(place=("Little Chengdu", "Tbilisi House", "Blue Nile", "Inti", "Cedar Table", "Pho Saigon"),
             dish=("dumplings in chilli oil", "khachapuri", "injera", "ceviche", "mezze", "bún chả"))),
    Family("colleague", "fact",
        ((("{colleague} presented my slides at the all-hands and took the credit as if they were theirs. "
           "I'm fuming.", "That's not okay. Worth raising calmly with your manager."),
          ("Can't believe {colleague} took credit for my analysis in front of the directors.",
           "Infuriating. Keep your drafts and emails; they show who did the work.")),),
        _asks(anchor=("What was it {colleague} did that left me so cross?",),
              topical=("Who walked off with the credit for my efforts?",),
              paraphrase=("Who annoyed me at the company meeting?", "Which coworker upset me?")),
        (("The company meeting ran over by an hour, nothing decided.",
          "Classic. Suggest an agenda next time."),
         ("My coworker brought homemade brownies, the office is thriving.", "Best kind of coworker."),
         ("The neighbours' drilling really annoyed me this morning.", "Weekend drilling should be illegal."),
         ("Upset stomach all afternoon, no more canteen curry for me.", "Stick to plain food tonight."),
         ("{colleague} is off on holiday for two weeks, the office is bliss.", "Enjoy the peace."),
         ("Cross-town traffic was awful, left at five and home at seven.", "Brutal."),
         ("Credit card bill arrived, I'm not opening it until payday.", "Denial is a strategy."),
         ("The credits rolled and I realised I'd missed the whole plot.", "Happens to the best of us.")),
        "{colleague}, who took the credit for my work"),
)

TEMPORAL: tuple[Family, ...] = (
    Family("dentist", "temporal",
        ((("Just back from the dentist, Dr {dentist} did two fillings. My whole jaw is numb.",
           "Ouch. Soft food and no hot drinks until the numbness wears off."),
          ("Dentist today: Dr {dentist} replaced one crown and lectured me about flossing.",
           "The flossing lecture is mandatory, I believe.")),),
        _asks(anchor=("When was my last appointment with Dr {dentist}?",),
              topical=("When was my most recent trip to the dentist, roughly?",),
              paraphrase=("When did I last get my teeth seen to?", "When was my last check-up on my teeth?")),
        (("My teeth chatter just thinking about that cold-water swim on Saturday.",
          "Bring a flask of something hot."),
         ("Last check-up on the boiler was two years ago, I should book one.", "Yes, before winter."),
         ("{friend} swears by Dr {dentist}, says they're gentle.", "A gentle one is gold."),
         ("Dr {dentist} has moved to the new practice by the station, apparently.",
          "Worth knowing for next time."),
         ("The dentist's waiting room had magazines from 2009.", "Vintage reading."),
         ("Trip to the tip with the old mattress, finally.", "Satisfying.")),
        "{date}",
        _zip(dentist=("Okonkwo", "Farrell", "Lindqvist", "Mehta", "Castellano", "Byrne"))),
    Family("haircut", "temporal",
        ((("New haircut from {barber}, went much shorter than planned. My hair feels weirdly light.",
           "Shorter is brave! Give it a few days to settle."),
          ("Finally got my hair cut, {barber} took the fringe off completely.",
           "Bold move. A change like that feels strange for a week.")),),
        _asks(anchor=("When did I last see {barber} for a trim?",),
              topical=("When was the last time somebody did my hair?",),
              paraphrase=("When was I last at the barber's?", "When did I last visit the salon?")),
        (("The barber shop on the corner is a vape store now, sad.", "The high street keeps changing."),
         ("Mum wants me to visit next weekend, she's got a list of jobs for me.", "Bring tools."),
         ("Last time I checked, the parking permit was still valid.", "Double-check the expiry though."),
         ("{barber} has opened a second shop across town, business is booming.", "Good for them."),
         ("Saw {barber} at the gym, barely recognised them without the scissors.",
          "Context is everything."),
         ("Found a grey hair this morning. Just the one. So far.", "Distinguished."),
         ("The dog's hair is on every surface of this flat.", "Lint rollers by the door.")),
        "{date}",
        _zip(barber=("Marco", "Ola", "Kenji", "Tash", "Dimitri", "Sorcha"))),
    Family("passport", "temporal",
        ((("Posted the forms for my new passport this morning, fingers crossed it comes before the trip.",
           "It usually takes three weeks; you should be fine."),
          ("Passport photos taken, forms posted. Now we wait.", "The waiting is the worst part.")),),
        _asks(anchor=("On what date did I send the passport paperwork away?",),
              topical=("When did I fill in those renewal forms?",),
              paraphrase=("When did I apply to renew my travel document?",
                          "When did I send off the renewal application?")),
        (("I need to renew my gym membership before Friday or I lose the discount.", "Set a reminder now."),
         ("The travel insurance document is forty pages, who reads these?",
          "Nobody, which is how they get you."),
         ("Sent off my application for the allotment waiting list.",
          "Those lists are long; good to be on it."),
         ("{friend} lost their passport on the way back from Spain, what a saga.",
          "Emergency documents are a pain."),
         ("Passport control at the airport took an hour last time.", "Bring a book."),
         ("Filled in the census forms, took ages.", "Civic duty done.")),
        "{date}",
        nouns=("passport",)),
    Family("car_repair", "temporal",
        ((("{garage}'s finally gave the car back. New brakes, new exhaust, lighter wallet.",
           "At least it's safe now. Brakes aren't something to skimp on."),
          ("Collected the car from {garage}'s, the rattle is gone at last.",
           "Blissful silence. Good to have it sorted.")),),
        _asks(anchor=("When was I at {garage}'s picking up my vehicle?",),
              topical=("When did the mechanics finish with my car?",),
              paraphrase=("When did my vehicle get fixed?", "When was the motor repaired?")),
        (("The vehicle in front of me stopped dead at the lights, nearly went into it.",
          "Glad you had the distance."),
         ("Fixed the wobbly shelf in the hallway myself, very proud.", "DIY victory!"),
         ("Repaired the puncture on my bike in ten minutes, a personal record.", "Impressive."),
         ("The motor on the electric blind died, so the bedroom is permanently dark.",
          "Great for naps, at least."),
         ("{friend} says {garage}'s has put its prices up again.", "Everyone has, lately."),
         ("Walked past {garage}'s, there's a vintage Jaguar in the window.", "Pretty, and pricey."),
         ("Car boot sale on Sunday, I'm selling the old bread maker.", "One person's junk..."),
         ("Someone dented my car in the supermarket car park and drove off.", "Check for cameras.")),
        "{date}",
        _zip(garage=("Dunmore", "Pellow", "Hassan", "Kowalski", "Ashby", "Trevelyan"))),
    Family("race", "temporal",
        ((("Finished the {race} in {time}! Legs like jelly.",
           "Brilliant effort. Stretch, eat, and enjoy the medal."),
          ("Crossed the line of the {race}, {time}, medal round my neck. Never again. Until next year.",
           "Ha, the classic promise.")),),
        _asks(anchor=("What was the date of that {race} I ran, more or less?",),
              topical=("What day did I earn that medal from running?",),
              paraphrase=("When did I do that running event?", "When was my big running day?")),
        (("Running late, the event starts at seven and I'm still on the bus.",
          "Text them you're on your way."),
         ("The charity event at work raised over two thousand.", "That's a great total."),
         ("My nose has been running all day, hay fever I think.", "Antihistamines and a closed window."),
         ("{friend} has signed up for a {race} in the spring, keen as anything.", "Good luck to them."),
         ("The {race} route closes half the roads in town on Sunday.", "Plan around it."),
         ("The medal count at the swimming gala was embarrassing for our club.", "Next year."),
         ("Grandad's war medal is being mounted and framed.", "A lovely keepsake.")),
        "{date}",
        _zip(race=("half marathon", "10k", "trail race", "charity 5k"),
             time=("1:52", "48 minutes", "1:10", "26 minutes"))),
    Family("first_meet", "temporal",
        ((("Had a drink with {friend} from the climbing wall, we talked for three hours straight.",
           "Sounds like the start of a real friendship."),
          ("Went for a drink with {friend} after the book swap, turns out we grew up near each other.",
           "Small world! That's a nice thing to share.")),),
        _asks(anchor=("When did {friend} and I first hang out?",
                      "When was my first proper catch-up with {friend}?"),
              topical=("When did I first go for drinks with that new pal?",),
              paraphrase=("When did I make that new friend, roughly?",
                          "When did I first properly meet my new pal?")),
        (("{friend} texted, running late again.", "Some things never change."),
         ("{friend} says hi, by the way.", "Hi back!"),
         ("First time I've been out all week and of course it's pouring.", "Typical."),
         ("My new boots are killing me.", "Break them in at home first."),
         ("Rough night, the baby upstairs is teething.", "Earplugs, and patience."),
         ("Pen pal letters from when I was ten turned up in a box.", "What a find."),
         ("Drinks after work turned into karaoke somehow.", "Those are the best nights.")),
        "{date}, with {friend}"),
    Family("ill", "temporal",
        ((("Woke up with flu, a fever and a sore throat, calling in to work and crawling to the sofa.",
           "Rest, fluids, and no heroics. Work will survive."),
          ("Flu has flattened me. Day two on the sofa.",
           "Horrible. Keep drinking water and sleep as much as you can.")),),
        _asks(anchor=("When was it I had that nasty bout of flu?",),
              topical=("When was I stuck on the sofa feeling rotten?",),
              paraphrase=("When was I ill?", "When was I off sick?")),
        (("My neighbour has been ill all week, I dropped off soup.", "That's kind of you."),
         ("Sick of this weather, honestly.", "Same, if I could be."),
         ("Ill-fitting shoes ruined the whole wedding for me.",
          "Blisters and speeches, a tough combination."),
         ("My nephew was sick on the bus home, poor thing.", "Poor kid. Travel sickness is miserable."),
         ("{friend} is off with flu, so the pub quiz is cancelled.", "Next week, then."),
         ("Got my flu jab at the pharmacy, two minutes.", "Quick and done."),
         ("New sofa arrives Thursday, the old one goes to the tip.", "Out with the old."),
         ("Stuck in traffic for an hour, feeling rotten about missing the start.", "It happens.")),
        "{date}",
        nouns=("flu",)),
    Family("raise", "temporal",
        ((("My manager confirmed the pay rise today: {pct}% from next month!",
           "Congratulations, that's well deserved."),
          ("HR letter came through, I'm getting bumped up a pay band, {pct}% more.",
           "Wonderful news, enjoy it.")),),
        _asks(anchor=("When did I find out about the {pct}% increase?",),
              topical=("Which day was I told my pay was going up, roughly?",),
              paraphrase=("When did I get the salary increase?",
                          "When did I find out about my higher salary?")),
        (("Rent increase letter came today. Fifty more a month, ugh.", "Check it's within the legal limit."),
         ("Salary day can't come soon enough, I'm living on pasta.", "Pasta is a noble budget food."),
         ("The salary survey says we're paid less than average.", "Useful ammunition for your next review."),
         ("Prices are higher every time I go to the market.", "It adds up quickly."),
         ("Rent is going up {pct}% at the next renewal, apparently.", "Check it's within the rules."),
         ("Energy bills up {pct}% on last year, brilliant.", "Layers and blankets, then."),
         ("Pay and display machines only take the app now.", "Progress, supposedly."),
         ("Told the landlord about the leak, again.", "Put it in writing this time.")),
        "{date}",
        _zip(pct=("12", "15", "10", "11", "14", "16"))),
    Family("parents", "temporal",
        ((("Mum and Dad arrived from {town} on the noon train, they're here until Sunday.",
           "Enjoy the time together. Any plans?"),
          ("Mum and Dad are up from {town} and on the sofa bed this week, the flat feels tiny.",
           "Tight, but nice to have them.")),),
        _asks(anchor=("When did my folks come down from {town} to stay?",),
              topical=("When did Mum come and stay?",),
              paraphrase=("When were my folks staying with me?", "When did my folks come over to visit?")),
        (("My folks keep sending me articles about pensions.", "Maybe they're hinting."),
         ("Visiting hours at the hospital are strict, only two at a time.", "Understandable, though."),
         ("Staying in tonight, too tired for anything.", "A quiet night is underrated."),
         ("{friend} grew up near {town}, small world.", "It really is."),
         ("Storm warnings for {town} tonight, I've told Mum to stay in.", "Sensible."),
         ("Mum sent a photo of her new glasses, very stylish.", "She has taste."),
         ("Mum rang about Christmas already, it's months away.", "Planning is her love language.")),
        "{date}",
        _zip(town=("Inverness", "Carlisle", "Truro", "Hexham", "Whitby", "Aberdeen"))),
    Family("phone", "temporal",
        ((("Dropped my phone in the canal. The {model}, fully gone.", "Oh no. Are your photos backed up?"),
          ("Left my phone in a taxi last night, the new {model}, and the driver isn't answering.",
           "Report it to the cab company; they often turn up.")),),
        _asks(anchor=("Around when did my {model} go missing, do you recall?",),
              topical=("Around when was it that my phone went missing?",),
              paraphrase=("When did I lose my mobile?", "When did I misplace my mobile?")),
        (("I always lose at cards against my brother, he cheats.", "Suspicious."),
         ("The mobile signal in the kitchen is terrible, calls keep cutting out.", "Try the window."),
         ("Don't lose heart, says my coach, after I came last again.", "Your coach is right."),
         ("Mobile banking app is down again.", "Annoying; usually fixed within the hour."),
         ("I always misplace my keys on Mondays.", "A hook by the door changes lives."),
         ("{friend} got the new {model} and won't stop showing me the camera.", "It's a good camera."),
         ("The {model} adverts are on every bus stop.", "Hard to miss."),
         ("Phone bill went up again, time to switch.", "Worth shopping around."),
         ("Missing the days when phones lasted a week on one charge.", "Those were the days.")),
        "{date}",
        _zip(model=("Pixel", "iPhone", "Galaxy", "Nokia", "Xperia", "Fairphone"))),
    Family("gig", "temporal",
        ((("{band} were incredible live, my ears are still ringing after that gig.",
           "Sounds like a great show!"),
          ("Front row for {band} tonight! The crowd went wild, best gig in years.",
           "Unforgettable, I bet.")),),
        _asks(anchor=("When did I see {band} play?",),
              topical=("Which day did I go to that gig, more or less?",),
              paraphrase=("When did I go to that concert?", "When did I see that band play?")),
        (("Concert tickets for the summer festival sold out in four minutes.",
          "Resale sites might have some."),
         ("The concert hall is finally getting new seats.", "About time, those seats were ancient."),
         ("My cousin's band has a gig in Leeds, but I can't make it.", "Maybe catch the next one."),
         ("That article on the gig economy was depressing.", "It's a bleak picture."),
         ("{band} have announced a new album, out in the autumn.", "Something to look forward to."),
         ("{friend} has {band} on repeat, I know every song by now.", "Osmosis."),
         ("Going to see the new exhibition at the museum on Sunday.", "Go early, it gets busy."),
         ("Kids' play at the school went on for two hours.", "Heroic patience.")),
        "{date}",
        _zip(band=("The Lumineers", "Khruangbin", "Fontaines D.C.", "Wet Leg", "Bonobo", "Big Thief"))),
    Family("garden", "temporal",
        ((("Put {plant} in along the back fence of the garden, muddy but happy.",
           "Lovely. They'll thank you in a few months."),
          ("Spent the afternoon digging in the garden and got {plant} into the ground.",
           "Satisfying work. Water them well this week.")),),
        _asks(anchor=("Roughly when did I sort out the {plant}?",),
              topical=("When was my last proper session in the garden?",),
              paraphrase=("When did I plant things outside?", "When did I get my hands dirty outdoors?")),
        (("Gardening gloves are on sale at the hardware store.", "Good time to stock up."),
         ("The office plant is dying, nobody waters it.", "Adopt it."),
         ("Outside it's grey and miserable again.", "Tea weather."),
         ("Next door's garden party went on until two in the morning.", "Hope you got an invite at least."),
         ("The neighbours asked where I got the {plant} from.", "Spread the word."),
         ("Sorted out the sock drawer, very calming.", "Small victories."),
         ("Washed my hands of the office fantasy league.", "Wise."),
         ("Outdoors all day at the festival, I'm sunburnt.", "Aloe vera tonight.")),
        "{date}",
        _zip(plant=("raspberry canes", "tulip bulbs", "an apple tree", "lavender", "tomato seedlings",
                    "runner beans"))),
)

MULTI: tuple[Family, ...] = (
    Family("kitchen", "multi",
        ((("The tiler quoted {a} for the backsplash, which seems fair.", "Sounds reasonable for a good job."),
          ("Tiler's bill for the backsplash: {a}.", "Not bad for the work involved.")),
         (("Cupboards ordered, {b} including fitting.", "That's usually the biggest line item done."),
          ("Signed off on the new cupboards, {b} with installation.", "It'll feel like a new room.")),
         (("The plumber moved the sink pipes today, {c} cash.",
           "Plumbers are worth every penny when it's done right."),),
         (("Electrician rewired the sockets by the worktop, another {d}.", "Safety first, good call."),)),
        _asks(anchor=("Adding up the tiler and everyone else, what has the kitchen makeover set me back?",),
              topical=("With the cupboards and everything, how much is the kitchen costing me?",),
              paraphrase=("How much has the kitchen project cost me so far?",
                          "What's my total spend on doing up the kitchen?")),
        (("The project at work is way over budget and nobody wants to say it.",
          "Someone has to, ideally early."),
         ("How much does a decent kitchen scale cost? Mine died.", "Twenty or so gets a reliable one."),
         ("Total chaos at the supermarket, someone dropped a crate of eggs.", "Slippery aisle, I bet."),
         ("The tiler from next door's bathroom job left a ladder in our hall.", "Free ladder, technically."),
         ("The cupboards at work are full of mugs nobody owns.", "Office mug graveyards.")),
        "{a} + {b} + {c} + {d}",
        _zip(a=("800", "650", "920"), b=("2,300", "3,100", "2,750"), c=("350", "280", "410"),
             d=("420", "390", "510")),
        nouns=("tiler",)),
    Family("job_hunt", "multi",
        ((("Sent my CV to {company} for the analyst opening. Long shot.",
           "Long shots land more often than you'd think."),),
         (("Second interview went well, they grilled me on SQL for an hour.",
           "An hour on SQL means they're serious about you."),),
         (("They made an offer!! Starting on the first.", "Fantastic news, congratulations!"),)),
        _asks(anchor=("What came of my application to {company}?",),
              topical=("So what was the final outcome after all those interviews?",),
              paraphrase=("How did things turn out with the position I applied for?",
                          "What happened with that role I was going for?")),
        (("I applied sunscreen twice and still burned.", "The sun wins again."),
         ("The position of the sofa is all wrong, I'm shifting it tonight.", "Mind your back."),
         ("My niece's role in the school play: tree number three. She's thrilled.",
          "Every play needs good trees."),
         ("Things turned out fine with the boiler, it just needed resetting.", "The best kind of fix."),
         ("What happened to the free coffee at work? Gone, overnight.", "The quiet end of an era."),
         ("{company} is sponsoring the local football team now, the logo is everywhere.",
          "Good publicity."),
         ("{friend}'s brother works at {company}, says the canteen is amazing.", "Important perk."),
         ("Watched an interview with the mayor, lots of words, no answers.", "Politics in a nutshell."),
         ("The final of the bake-off was a let-down.", "Finals often are.")),
        "hired by {company}",
        _zip(company=("Nordwind", "Halcyon Labs", "Brightwater", "Quillon", "Tessera Health",
                      "Arbor Freight"))),
    Family("trips", "multi",
        ((("Back from {city1}. The food alone was worth the flight.",
           "Welcome back! What was the best thing you ate?"),),
         (("Weekend in {city2} with {friend}, walked about thirty kilometres.",
           "Your feet must hate you, but what a way to see a city."),),
         (("Work sent me to {city3} for two days, saw nothing but the hotel.",
           "Shame. Maybe go back properly one day."),)),
        _asks(anchor=("Apart from {city1}, where else have I been lately?",),
              topical=("Where have I been off to lately, weekends away and all?",),
              paraphrase=("Which places have I travelled to recently?",
                          "Where have I been on my trips lately?")),
        (("I travelled by coach today, never again, seven hours.", "Coaches are cheap for a reason."),
         ("Places to eat near the office are so limited.", "Packed lunches it is."),
         ("Been meaning to clear the loft for months, trips to the tip all weekend.", "Satisfying, though."),
         ("Tripped on the kerb and tore my jeans, lovely.", "Ouch. Hope only the jeans suffered."),
         ("Stayed up late sorting receipts.", "Thrilling Friday night."),
         ("A documentary about {city1} was on last night, gorgeous shots of the old town.",
          "TV makes everywhere look lovely."),
         ("Weekend plans: absolutely nothing, and I can't wait.", "The best plans.")),
        "{city1}, {city2}, {city3}",
        _zip(city1=("Lisbon", "Kraków", "Seville", "Valencia"), city2=("Bruges", "Edinburgh", "Ljubljana",
             "Ghent"), city3=("Tallinn", "Bologna", "Porto", "Riga"))),
    Family("reading", "multi",
        ((("Finished {book1} on the train home, the twist got me, what a novel.",
           "The best twists feel obvious afterwards."),),
         (("Just closed the last page of {book2}, a slow-burn novel but worth it.",
           "Slow burns stay with you longer."),)),
        _asks(anchor=("Besides {book1}, which other titles have I got through?",),
              topical=("Which novels have I polished off over the past few weeks?",),
              paraphrase=("Which titles have I got through lately?",
                          "What books have I completed recently?")),
        (("The book club is arguing about the title for the newsletter.", "Committees and titles never mix."),
         ("Completed the tax return, only took four hours and two coffees.", "Painful but done."),
         ("Title of the presentation is still 'Untitled', due tomorrow.",
          "A title will come once the slides are done."),
         ("Up late again doing the crossword.", "Worth it if you finished it."),
         ("There's a film of {book1} coming out, the trailer looks dreadful.",
          "Adaptations rarely match."),
         ("The library waiting list for {book1} is as long as my arm.", "Popular for a reason."),
         ("Novel idea from the council: actually fixing the potholes.", "Revolutionary."),
         ("Polished off the leftover cake for breakfast, no shame.", "None needed.")),
        "{book1}, {book2}",
        _zip(book1=("The Lighthouse Accounts", "Under the Copper Sky", "The Vienna Hours"),
             book2=("Ferns and Foxes", "The Tidewater Letters", "The Patient Orchard"))),
    Family("recovery", "multi",
        ((("Physio says the {injury} needs four more weeks of exercises.",
           "Stick with it; the boring exercises are the ones that work."),),
         (("Did the physio routine every day this week, it feels much better.", "Consistency pays off."),),
         (("Physio cleared me to jog again!", "Brilliant, ease back in gently."),)),
        _asks(anchor=("How is my {part} coming along, all in all?",),
              topical=("Are the exercises doing any good, how am I healing?",),
              paraphrase=("How is my recovery coming along?", "How has my healing progressed?")),
        (("Recovery mode today after the wedding, sofa and films.", "Well earned."),
         ("The report is coming along, slowly.", "Slowly still counts."),
         ("Progress on the garden shed: a roof, finally.", "Roofs are important."),
         ("The healing crystals shop opened next to the bakery. Interesting.",
          "The high street is full of surprises."),
         ("Progress meeting with my manager went fine.", "Good to hear."),
         ("{friend} hurt their {part} at five-a-side, crutches for a week.", "Ouch. Rest and ice."),
         ("The exercises in my nephew's maths book are far too easy for him.", "Ask for harder ones."),
         ("Good news: the bin men are back on Tuesdays.", "Order restored.")),
        "{injury}: getting better, cleared to jog",
        _zip(injury=("sprained ankle", "torn calf", "sore shoulder", "knee strain"),
             part=("ankle", "calf", "shoulder", "knee"))),
    Family("party", "multi",
        ((("Got {friend} a set of fancy oil paints for the birthday.", "Perfect for someone creative."),),
         (("Ordered a cake for the party, lemon and elderflower.", "That sounds delicious."),),
         (("Balloons and candles sorted for Saturday.", "You're well organised."),)),
        _asks(anchor=("What have I already got for {friend}'s celebration?",
                      "What's ready so far for {friend}'s big day?"),
              topical=("What have I lined up for the birthday so far?",),
              paraphrase=("What's ready so far for the celebration I'm planning?",
                          "What have I already got together for the surprise do?")),
        (("{friend} already knows about the surprise, apparently.", "Act surprised anyway."),
         ("The celebration at work was awkward, warm wine and speeches.", "Office celebrations, eh."),
         ("{friend} already asked to borrow the car again.", "Some habits stick."),
         ("Plans for the bank holiday are still up in the air.", "Keep it loose."),
         ("The birthday card for Gran is still on my desk, unsigned.", "Post it tomorrow!"),
         ("So far, so good with the new alarm clock.", "Early days.")),
        "for {friend}: oil paints, a lemon and elderflower cake, balloons and candles"),
    Family("conference", "multi",
        ((("Met {p1} at the conference, she runs a robotics startup and wants to stay in touch.",
           "Useful person to know."),),
         (("Second day of the conference: had lunch with {p2}, who's hiring for a data role.",
           "Worth following up."),)),
        _asks(anchor=("Besides {p1_first}, who did I get to know at that industry event?",),
              topical=("Apart from the startup founder, whom did I meet at the summit?",),
              paraphrase=("Whom did I network with at the summit?",
                          "Who were the contacts I made at that industry event?")),
        (("The summit of Ben Nevis was in cloud, saw nothing.", "The climb still counts."),
         ("Network's down at the office again, everyone's on their phones.", "Productivity soars."),
         ("The industry newsletter says prices will rise again.", "They usually do."),
         ("Contact lenses are irritating my eyes today.", "Glasses day, maybe."),
         ("The event planning for the summer fête is chaos.", "Fêtes run on chaos."),
         ("{p1_first} from accounts is retiring, there's a collection going round.", "Chip in a fiver."),
         ("Another startup in our building folded, the third this year.", "Tough market.")),
        "{p1} and {p2}",
        _zip(p1=("Ingrid Lund", "Rosa Ortega", "Anya Petrova"), p1_first=("Ingrid", "Rosa", "Anya"),
             p2=("Femi Adeyemi", "Ken Watanabe", "Tom Brennan"))),
    Family("loan", "multi",
        ((("Lent {friend} {lent} for the taxi home after the party.", "That's what friends are for."),),
         (("Got {back} of it repaid today, the rest next week, apparently.", "At least it's coming back."),)),
        _asks(anchor=("How much does {friend} still owe me, all told?",
                      "What's {friend}'s outstanding debt to me?"),
              topical=("How much is still outstanding from that taxi loan?",),
              paraphrase=("Who's still in my debt, and by how much?",
                          "Does anybody owe me money at the moment?")),
        (("{friend} still hasn't returned my drill.", "Drills never come back."),
         ("I owe the library a fortune in late fees.", "Libraries forgive, eventually."),
         ("Paying off the credit card debt, slowly.", "Slowly is still progress."),
         ("The outstanding invoices at work are piling up.", "Chase the biggest ones first."),
         ("Taxi drivers were on strike, had to walk home in the rain.", "Miserable."),
         ("The bank turned down the loan for the extension.", "Try another lender."),
         ("Money is tight this month, no more takeaways.", "Batch cooking it is."),
         ("Debt collectors keep ringing for the previous tenant.", "Send them the forwarding address.")),
        "{friend} owes {lent} - {back}",
        _zip(lent=("60", "80", "45"), back=("25", "30", "20"))),
    Family("weight", "multi",
        ((("Weighed in at {w1} kg this morning. Time to do something.", "Small steps add up."),),
         (("Scale says {w2} today, the walking is paying off.", "That's real progress."),),
         (("{w3} kg! Lowest in five years.", "Fantastic, well done."),)),
        _asks(anchor=("Starting from {w1}, how has my body mass moved over the past weeks?",),
              topical=("What numbers has the bathroom scale shown me lately?",),
              paraphrase=("How has my body mass changed over the past weeks?", "Am I getting any lighter?")),
        (("My body is not built for 6am spin classes.", "Nobody's is."),
         ("The past weeks at work have been relentless.", "Hope it eases soon."),
         ("Changed the bedsheets and the duvet cover, felt like a workout.", "Duvet covers are cardio."),
         ("Lighter evenings at last, walked home in daylight.", "The best time of year."),
         ("Bought a lighter duvet for the summer.", "Good move before the heat arrives."),
         ("The number {w1} bus is cancelled for the whole summer.", "Typical."),
         ("The scale of the new shopping centre is ridiculous.", "Bigger isn't better."),
         ("Bathroom tiles are cracking, another job for the list.", "The list never ends.")),
        "{w1} -> {w2} -> {w3} kg",
        _zip(w1=("84", "92", "71"), w2=("81", "89", "69"), w3=("78", "86", "67"))),
    Family("course", "multi",
        ((("Got the first {subject} assignment back: {g1}. Not bad for a first go.", "A solid start."),),
         (("Essay two came back with {g2}, the tutor liked the structure.", "Improving already."),)),
        _asks(anchor=("What marks have I had for {subject} so far?",),
              topical=("What has the tutor been giving me for my work?",),
              paraphrase=("What grades have I received so far?",
                          "How are my marks looking on the evening course?")),
        (("My nephew is worried about his exam marks.", "Tell him one exam isn't everything."),
         ("The evening course catalogue arrived, so tempting.", "Pick one and go for it."),
         ("Received a parcel for the neighbour again.", "The courier's favourite address."),
         ("So far the new boiler is behaving.", "Long may it last."),
         ("My nephew's grades came in, he's over the moon.", "Tell him well done."),
         ("{friend} did {subject} at uni and says the second year is the hard one.", "Good to know."),
         ("My old maths tutor is on the parish council now.", "Small town."),
         ("Giving the spare room a lick of paint this weekend.", "Pick a light colour.")),
        "{g1}, then {g2}",
        _zip(subject=("criminology", "psychology", "archaeology"), g1=("68", "61", "72"),
             g2=("74", "70", "79"))),
)

FAMILIES: Mapping[Kind, tuple[Family, ...]] = {"fact": FACTS, "temporal": TEMPORAL, "multi": MULTI}

# -- small talk ---------------------------------------------------------------------------------

# Word pools for the filler templates; "{Slot}" is the same pool with its first letter raised.
POOLS: Mapping[str, tuple[str, ...]] = {
    "weather": ("grey and drizzly", "blazing sunshine", "blowing a gale", "thick fog", "freezing",
                "muggy and close", "bright but bitter", "sleeting sideways", "mild for once"),
    "weather_note": ("the washing will never dry", "perfect for a long walk", "my umbrella turned "
                     "inside out", "the cat refuses to go out", "the bus shelter was packed", "I wore "
                     "the wrong coat entirely", "the windows are steamed up", "the park was empty"),
    "dish": ("a mushroom risotto", "chickpea curry", "shakshuka", "a big pot of minestrone",
             "fish tacos", "lamb stew", "pad thai", "cheese toasties", "a tray of roast vegetables",
             "lentil soup", "homemade pizza", "stir-fried noodles", "jacket potatoes", "a frittata",
             "chilli con carne", "a Thai green curry"),
    "cooking_note": ("nothing fancy", "first attempt so fingers crossed", "enough for three days",
                     "recipe from the back of the packet", "added far too much chilli",
                     "the smoke alarm approved, apparently"),
    "cooking_verdict": ("turned out surprisingly well", "a bit bland, needs more salt next time",
                        "everyone asked for seconds", "burnt the bottom, ate it anyway",
                        "too spicy but I'm proud of it"),
    "show": ("that Danish crime series", "the baking competition", "a documentary about octopuses",
             "the new sci-fi thing everyone talks about", "an old sitcom from the nineties",
             "a cooking show set in Sicily", "the courtroom drama", "a mountain rescue docuseries",
             "the spy thriller with the long title", "a series about a vet in Yorkshire"),
    "show_opinion": ("hooked after one episode", "not sure about it yet", "the second season is weaker",
                     "the soundtrack is brilliant", "way too many cliffhangers",
                     "the lead actor is fantastic", "it's slow but I like it"),
    "delay": ("ten", "twenty", "forty", "fifteen", "twenty-five", "thirty-five"),
    "commute_mood": ("standing the whole way", "at least I got a seat", "the heating was broken",
                     "someone was eating an egg sandwich", "I finished my podcast though",
                     "the carriage was silent and tense"),
    "cycle_note": ("legs are burning", "headwind both ways", "a lorry came far too close",
                   "beautiful along the canal path", "got soaked to the skin"),
    "work_event": ("three meetings back to back", "a surprise deadline", "the quarterly review",
                   "a fire drill", "onboarding the new starter", "budget planning",
                   "a two-hour workshop", "an outage on the billing system",
                   "the migration of the old database", "a vendor demo"),
    "work_mood": ("I'm drained", "it actually went fine", "nobody knew what was going on",
                  "I got nothing else done", "we finished early for once", "my brain is mush"),
    "count": ("143", "67", "212", "35", "98", "301"),
    "errand": ("drop off the dry cleaning", "pick up a parcel", "return the library books",
               "buy light bulbs", "post a birthday card", "get the bike pump back from next door",
               "sort the recycling", "top up the electricity meter", "get a spare key cut"),
    "team": ("United", "the Rovers", "City", "our rugby side", "the county cricket team", "Athletic"),
    "result": ("lost again", "scraped a draw", "won in the last minute", "were hopeless",
               "finally won at home", "threw away a two-goal lead"),
    "podcast": ("a history podcast about the Hanseatic League", "an episode on sleep science",
                "a true-crime series", "a chat show with comedians",
                "an episode about urban planning", "a podcast on the economics of football",
                "a series about famous shipwrecks"),
    "sleep_note": ("slept like a log for once", "up at five for no reason",
                   "the neighbour's alarm went off at four", "dreamt I missed an exam again",
                   "woke up with the cat on my face"),
    "sleep_reason": ("too much coffee", "the street was noisy", "the room was too warm",
                     "my brain wouldn't switch off", "the wind rattled the windows all night"),
    "grocery_note": ("forgot the one thing I went for", "spent twice what I planned",
                     "the self-checkout hated me", "got everything for once",
                     "bumped into an old teacher by the cereal"),
    "staple": ("coffee", "oat milk", "butter", "olive oil", "washing-up liquid", "cheddar",
               "tomatoes", "teabags", "bin bags", "porridge oats"),
    "room": ("bathroom", "spare room", "kitchen", "hallway", "balcony", "living room"),
    "appliance": ("fridge", "dishwasher", "boiler", "tumble dryer", "extractor fan", "toaster"),
    "home_note": ("very satisfying", "found a fiver under the sofa", "took all morning",
                  "the dust was unreal", "found three odd socks"),
    "tech_issue": ("froze during a video call", "is running hot for no reason",
                   "decided to update at the worst moment", "won't talk to the printer",
                   "keeps forgetting the wifi password"),
    "wifi_issue": ("dropped out three times this evening", "is crawling",
                   "needed another router restart", "works everywhere except the bedroom"),
    "tech_after": ("the battery drains by lunch", "all my icons moved",
                   "the keyboard feels different", "it's faster, surprisingly"),
    "news": ("the new tram line", "the heatwave in Spain", "the bridge closure",
             "the museum reopening", "the local election results", "the library extension",
             "the cycle lane on the ring road"),
    "trivia": ("octopuses have three hearts", "honey never goes off",
               "the Eiffel Tower grows in summer", "bananas are berries but strawberries aren't",
               "there are more trees on Earth than stars in the galaxy",
               "wombats have cube-shaped droppings"),
    "weekend_plan": ("a long walk by the reservoir", "doing absolutely nothing",
                     "a trip to the flea market", "baking bread", "sorting the photos from last year",
                     "a bike ride along the coast", "finally clearing the balcony"),
    "outing": ("bowling", "to the cinema", "for a curry", "to the escape room", "to a pub quiz",
               "to the farmers' market"),
    "day": ("Saturday", "Sunday", "Friday night", "the bank holiday", "Thursday"),
}

# Topics of small talk: user templates (slots from POOLS, {friend} from the conversation) and
# replies that fit any of them.
TOPICS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("{Weather} out there today, {weather_note}.", "Checked the forecast: {weather} until the weekend.",
      "Is it ever going to stop being {weather}?",
      "Walked to the shop and it was {weather}, {weather_note}."),
     ("Proper seasonal weather, then.", "{Weather}, lovely. Stay dry if you can.",
      "Sounds like a day for staying in.",
      "Hopefully it clears up by the weekend.", "Layers, always layers.",
      "At least the garden will be happy.")),
    (("Train was {delay} minutes late this morning, {commute_mood}.",
      "The bus skipped my stop again, {commute_mood}.", "Cycled in today, {cycle_note}.",
      "Roadworks on the high street added {delay} minutes to the drive."),
     ("Commuting really tests the patience.", "{Delay} minutes is a lot to lose every morning.",
      "Nothing like a chaotic start to the day.",
      "Hope the way home is smoother.", "Maybe worth leaving ten minutes earlier tomorrow.")),
    (("Making {dish} tonight, {cooking_note}.", "Tried {dish} for the first time, {cooking_verdict}.",
      "Leftover {dish} for lunch again.", "What goes well with {dish}? Trying to plan dinner."),
     ("That sounds comforting.", "Enjoy the {dish}!", "{Dish} is a good call on a weeknight.",
      "Nothing beats a home-cooked dinner midweek.",
      "A green salad or some crusty bread would go nicely.", "Batch cooking is such a time saver.",
      "Good food sorts out most days.")),
    (("Started watching {show}, {show_opinion}.", "Finished {show} last night, {show_opinion}.",
      "{friend} keeps telling me to watch {show}.", "Is {show} worth it? Everyone is talking about it."),
     ("Sounds like a good one for a quiet evening.", "I've heard good things about {show}.",
      "Nice to have something to look forward to.",
      "Give it two more episodes before you decide.", "Some shows take a while to find their feet.")),
    (("{Work_event} today, {work_mood}.", "{Work_event} tomorrow and I'm not ready.",
      "My inbox has {count} unread emails, {work_mood}.",
      "Spent the afternoon on spreadsheets, {work_mood}."),
     ("Sounds like a full day.", "{Work_event} would wear anyone out.",
      "Those days are exhausting; do something nice this evening.",
      "Hopefully tomorrow is calmer.", "One thing at a time.")),
    (("Need to {errand} before the shop shuts.", "Finally managed to {errand}.",
      "Note for Saturday: {errand}.", "Spent my lunch break trying to {errand}, didn't happen."),
     ("Small jobs like that add up.", "Worth getting it done: {errand}, then tick it off.",
      "One less thing on the list.", "Noted. Saturday it is.",
      "Weekends are for catching up on those.")),
    (("{Team} {result} tonight.", "Watched {team} at the pub with {friend}, they {result}.",
      "Can't believe {team} {result}."),
     ("Being a fan is a lifelong commitment.", "{Team} will keep you humble.", "There's always next week.",
      "The atmosphere must have been something.", "Sport has a way of ruining evenings.")),
    (("Listened to {podcast} on the way home, fascinating.", "{friend} recommended {podcast}, any good?",
      "Fell asleep halfway through {podcast}."),
     ("Podcasts make a commute fly by.", "That sounds like a rabbit hole worth going down.",
      "Sounds interesting; anything surprising in it?")),
    (("{Sleep_note}.", "Slept badly again, {sleep_reason}.",
      "Napped for twenty minutes after lunch and feel great."),
     ("Sleep is everything, really.", "If it's {sleep_reason}, a calmer evening might help.",
      "Maybe try winding down without screens tonight.",
      "Hope tonight is kinder.", "Good sleep changes the whole day.")),
    (("Supermarket run done, {grocery_note}.", "We're out of {staple} again.",
      "The price of {staple} has gone up again."),
     ("The forgotten item is a universal experience.", "Add {staple} to the list for next time.",
      "Prices lately are wild.",
      "Worth keeping a running list on the fridge door.", "At least that's done for the week.")),
    (("Cleaned the {room} top to bottom, {home_note}.", "The {appliance} is making a strange noise.",
      "Rearranged the {room}, it feels bigger now."),
     ("A clean room really clears the head.", "If the {appliance} keeps it up, get someone to look.",
      "If the noise keeps up, get someone to look at it.",
      "A fresh layout makes a real difference.")),
    (("{friend} came round for dinner, we talked until midnight.",
      "Caught up with {friend} on the phone for an hour.",
      "{friend} is thinking about a sabbatical.", "Helped {friend} assemble a wardrobe, took four hours.",
      "{friend} sent me a photo of their new shoes, very pleased with them."),
     ("Good friends are worth the late nights.", "Say hi to {friend} from me.",
      "That's a nice way to spend an evening.",
      "Flat-pack furniture tests every friendship.", "Sounds like they value your opinion.")),
    (("My laptop {tech_issue}.", "The wifi {wifi_issue}.", "Updated my phone and now {tech_after}."),
     ("Have you tried turning it off and on again? Genuinely, it often works.",
      "Technology is wonderful until it isn't.", "A restart and a clear-out of old apps usually helps.",
      "Sounds like it might need a proper look.")),
    (("Did you see the news about {news}?", "Everyone at the bakery was talking about {news}."),
     ("Interesting times.", "I'd heard a little about {news}; people seem divided.",
      "That's the talk of the town, I imagine.", "Good to keep up with what's happening locally.")),
    (("Apparently {trivia}. Who knew?", "Fun fact of the day: {trivia}.", "{friend} swears that {trivia}."),
     ("The world is full of odd facts.", "That's a good one for a pub quiz.",
      "Nature is strange and wonderful.")),
    (("Thinking of {weekend_plan} this weekend.", "Plans for {day}: {weekend_plan}, then nothing.",
      "{friend} wants to go {outing} on {day}."),
     ("Sounds like a good plan.", "{Day} sounds nice for that.", "Nothing wrong with a quiet weekend.",
      "That'll be a nice change of scene.",
      "Enjoy it!")),
)

# Requests for advice: the reply joins two or three of the task's tips (the longer messages).
HELP_ASKS = ("Any tips for {task}?", "How do I go about {task}?",
"Quick question: what's the trick to {task}?")
HELP: Mapping[str, tuple[str, ...]] = {
    "descaling the kettle": (
        "Fill it halfway with equal parts water and white vinegar.",
        "Bring it to the boil, then leave it to sit for an hour.",
        "Rinse it two or three times and boil fresh water once before using it.",
        "Citric acid works too and smells less.", "Once a month keeps the limescale from building up."),
    "getting red wine out of a carpet": (
        "Blot, don't rub: press kitchen roll onto it to lift as much as you can.",
        "Cold water first, then a paste of bicarbonate of soda.", "Leave the paste to dry and hoover it up.",
        "A drop of washing-up liquid in warm water helps with what's left.",
        "Test any cleaner on a hidden corner first."),
    "keeping basil alive on a windowsill": (
        "Give it the sunniest spot you have.",
        "Water from below and let the top of the soil dry out in between.",
        "Pinch off the tops so it bushes out instead of flowering.",
        "Supermarket pots are crowded: split them into three.", "Keep it away from cold draughts at night."),
    "writing a polite complaint email": (
        "Say what happened in one or two sentences, with dates and order numbers.",
        "State clearly what you'd like them to do about it.", "Keep the tone calm; it gets results faster.",
        "Give them a reasonable deadline to respond.", "Keep a copy and note who you spoke to."),
    "packing light for a weekend away": (
        "Plan outfits around one pair of shoes.", "Roll clothes rather than folding them.",
        "Decant toiletries into small bottles.", "Wear the bulkiest items while travelling.",
        "One layer for warmth, one for rain, and that's it."),
    "cooking rice that isn't sticky": (
        "Rinse the rice until the water runs clear.", "Use a bit less water than the packet says.",
        "Bring it to the boil, then lowest heat with the lid on.",
        "Leave it to rest off the heat for ten minutes before fluffing.", "Don't stir it while it cooks."),
    "staying focused in the afternoon": (
        "Do the hardest task first thing, so the afternoon is lighter.",
        "A ten-minute walk after lunch works wonders.", "Try working in 25-minute blocks with short breaks.",
        "Put your phone in another room.", "Drink water; mild dehydration feels like tiredness."),
    "fixing a squeaky door": (
        "A few drops of oil on the hinge usually does it.",
        "Lift the hinge pin out and rub it with a bit of petroleum jelly.",
        "Open and close the door a dozen times to work it in.",
        "Tighten the hinge screws while you're there.", "Wipe off any excess so it doesn't collect dust."),
    "sleeping in hot weather": (
        "Keep the curtains closed during the day.", "A damp flannel on the wrists cools you down fast.",
        "Cotton sheets, and a fan pointing across a bowl of ice.",
        "A lukewarm shower before bed, not a cold one.",
        "Open windows on opposite sides for a cross-breeze once the sun goes down."),
    "starting a household budget": (
        "List every regular outgoing first, including the small subscriptions.",
        "Move savings out on payday, before you can spend them.", "Give every category a monthly cap.",
        "Review it once a week for the first month.", "Keep a small buffer for the unexpected."),
    "ironing a shirt without creases": (
        "Start with the collar, then the cuffs and sleeves, the body last.",
        "Iron while it's still slightly damp.", "Use the pointed end of the board for the shoulders.",
        "Hang it straight away so it doesn't crumple again.",
        "Steam setting for cotton, lower heat for blends."),
    "getting a toddler to eat vegetables": (
        "Put a small amount next to something they already like.", "Let them help wash or stir.",
        "Offer the same vegetable several times; it can take ten tries.",
        "Cut things into fun shapes or call them silly names.", "Eat them yourself where they can see."),
    "defrosting the freezer quickly": (
        "Turn it off and put towels along the bottom.", "A bowl of hot water inside speeds things up.",
        "Scrape gently with a plastic spatula, never a knife.",
        "A hairdryer on low works, kept well away from water.", "Dry it fully before switching it back on."),
    "remembering people's names": (
        "Say the name back when you're introduced.", "Link it to something about them.",
        "Use it once more before the conversation ends.", "Write it down afterwards if it matters.",
        "Ask again early; it's far less awkward than later."),
    "making a small balcony feel cosy": (
        "A string of warm lights changes everything.", "Outdoor cushions and a small rug.",
        "Tall plants in the corners give privacy.", "A folding table that goes away when not needed.",
        "A blanket basket for the cooler evenings."),
    "cleaning a cast-iron pan": (
        "Hot water and a stiff brush, no soap soak.", "Coarse salt scrubs off stuck bits.",
        "Dry it on the hob straight away so it can't rust.", "Wipe a thin layer of oil on while it's warm.",
        "Avoid leaving tomato sauce in it overnight."),
}
OPENERS = ("", "", "", "", "Ok so. ", "Random update: ", "Hi! ", "Update: ", "Right. ", "Well. ", "Hmm. ")
CLOSERS = ("", "", "", "", " Anyway.", " Ugh.", " Long day.", " Such is life.", " Small wins.", " Classic.")
REPLY_TAILS = ("", "", "", " How's the rest of your day looking?", " Anything I can help with?",
               " Let me know how it goes.", " Fingers crossed.", " Take it easy tonight.")
ANSWER_LEADS = ("From what you told me: {answer}.", "If I have it right, {answer}.",
                "Looking back at our chats: {answer}.")
TEMPORAL_LEADS = ("That was on {answer}.", "You mentioned it on {answer}.")

USERS = ("Caroline", "Daniel", "Mei", "Oliver", "Fatima", "Henrik", "Lucia", "Samuel", "Ayesha",
         "Tobias", "Grace", "Mateo", "Ingrid", "Kofi", "Zoe", "Ravi", "Elena", "Jakob", "Noor",
         "Patrick", "Sofia", "Arjun", "Helena", "Bruno")
FRIENDS = ("Maya", "Tomasz", "Priya", "Jonas", "Aiko", "Rafael", "Leila", "Oskar", "Nadia", "Marcus",
           "Elif", "Sven", "Ines", "Kwame", "Hana", "Diego", "Freya", "Luca", "Amara", "Yusuf")
COLLEAGUES = ("Derek", "Fiona", "Gareth", "Holly", "Ivan", "Julia", "Brendan", "Marguerite")

_SLOT = re.compile(r"\{(\w+)\}")


def _fill(
    template: str, rng: random.Random, pools: Mapping[str, Sequence[str]], drawn: dict[str, str]
) -> str:
    """A template with each slot drawn from its pool ("{Slot}": the same pool, capitalised); a slot
    already in `drawn` keeps its value, so a reply can name what the message did."""
    def draw(match: re.Match[str]) -> str:
        name = match.group(1)
        value = drawn.setdefault(name.lower(), rng.choice(pools[name.lower()]))
        return value[:1].upper() + value[1:] if name[:1].isupper() else value
    return _SLOT.sub(draw, template)


def _small_talk(rng: random.Random, pools: Mapping[str, Sequence[str]], asked: set[str]) -> Pair:
    """One turn of small talk; now and then a request for advice not asked before (`asked`)."""
    tasks = sorted(set(HELP) - asked)
    if tasks and rng.random() < 0.05:
        task = rng.choice(tasks)
        asked.add(task)
        tips = rng.sample(HELP[task], rng.randint(2, 3))
        return rng.choice(HELP_ASKS).format(task=task), " ".join(tips)
    users, replies = rng.choice(TOPICS)
    drawn: dict[str, str] = {}
    user = _fill(rng.choice(users), rng, pools, drawn)
    user = rng.choice(OPENERS) + user + rng.choice(CLOSERS)
    reply = _fill(rng.choice(replies), rng, pools, drawn) + rng.choice(REPLY_TAILS)
    return user[:1].upper() + user[1:], reply


# -- the generator ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Plant:
    family: Family
    values: Mapping[str, str]
    wording: Wording
    question: str
    evidence: tuple[Pair, ...]  # one variant per step, formatted
    distractors: tuple[Pair, ...]  # variants sharing words with the question, formatted
    asked: int  # turn index of the question
    evidence_at: tuple[int, ...]
    distractors_at: tuple[int, ...]


def generate(
    count: int = 20, seed: int = 13, mix: Mapping[Wording, int] = MIX, *, extended: bool = False
) -> list[Conversation]:
    """`count` conversations, the same for the same seed and mix (conversation i does not depend
    on `count`). `extended`: the set of issue 38, with multi-hop and inference questions too, in
    conversations of 300-700 turns over 8-16 weeks (the original set is unchanged without it)."""
    return [_conversation(index, random.Random(f"{seed}:{index}" + (":x" if extended else "")),
                          _wordings(seed, index, mix, extended), extended)
            for index in range(count)]


def families(kind: Kind) -> tuple[Family, ...]:
    """The families of one kind of question."""
    if kind in HARD_KINDS:
        from bench.labelled_misses import INFERENCE, MULTIHOP

        return MULTIHOP if kind == "multihop" else INFERENCE
    return FAMILIES[kind]


def _wordings(
    seed: int, index: int, mix: Mapping[Wording, int], extended: bool = False
) -> dict[Kind, list[Wording]]:
    """The wordings of conversation `index`'s questions, per kind. Question n of a kind (counted over
    the whole set) takes place n % B of a seeded shuffle of `mix` for block n // B (B the mix's
    total), so every B questions of a kind hold exactly the mix (10 anchored, 6 topical and 4
    paraphrased of every 20 by default). The extended set's hard kinds are worded as their
    family's questions are (`_place`): names only, or no shared word at all."""
    pattern = [wording for wording in WORDINGS for _ in range(mix[wording])]
    block = len(pattern)
    wordings: dict[Kind, list[Wording]] = {}
    for kind in HARD_KINDS if extended else ():
        wordings[kind] = ["paraphrase"] * PER_CONVERSATION_EXTENDED[kind]
    for kind in KINDS:
        per = PER_CONVERSATION[kind]
        wordings[kind] = []
        for n in range(index * per, (index + 1) * per):
            shuffled = pattern.copy()
            random.Random(f"{seed}:{kind}:{n // block}").shuffle(shuffled)
            wordings[kind].append(shuffled[n % block])
    return wordings


def _conversation(
    index: int, rng: random.Random, wordings: Mapping[Kind, list[Wording]], extended: bool = False
) -> Conversation:
    user = USERS[index % len(USERS)] + ("" if index < len(USERS) else f" {index // len(USERS) + 1}")
    friends = rng.sample(FRIENDS, 4)
    colleague = rng.choice(COLLEAGUES)
    total = rng.randint(300, 700 if extended else 600)
    plants = _place(rng, total, friends, colleague, wordings)
    times = _times(rng, total, START + timedelta(days=3 * index), (8, 16) if extended else (5, 10))
    pools = {**POOLS, "friend": tuple(friends)}
    at_turn: dict[int, tuple[Role, Pair]] = {}
    questions: list[Question] = []
    for plant in plants:
        family, values = plant.family, plant.values
        for pair, position in zip(plant.evidence, plant.evidence_at, strict=True):
            at_turn[position] = ("evidence", pair)
        for pair, position in zip(plant.distractors, plant.distractors_at, strict=True):
            at_turn[position] = ("distractor", pair)
        day = datetime.fromtimestamp(times[plant.evidence_at[0]][0], UTC)
        answer = family.answer.format_map({**values, "date": f"{day:%A} {day.day} {day:%B}"})
        leads = TEMPORAL_LEADS if family.kind == "temporal" else ANSWER_LEADS
        at_turn[plant.asked] = ("question", (plant.question, rng.choice(leads).format(answer=answer)))
        questions.append(Question(plant.asked, family.kind, family.name, plant.wording, plant.question,
                                  answer, plant.evidence_at, plant.distractors_at))
    turns = []
    asked: set[str] = set()
    for position, (at, reply_at) in enumerate(times):
        role, (said, reply) = at_turn.get(position) or ("filler", _small_talk(rng, pools, asked))
        turns.append(Turn(position, said, reply, at, reply_at, role))
    questions.sort(key=lambda q: q.turn)
    return Conversation(index, user, tuple(turns), tuple(questions))


def render(template: str, values: Mapping[str, str]) -> str:
    """A template with its slots filled; a value may hold slots of its own (a diet's {ev} holds
    {friend})."""
    text = template.format_map(values)
    return text.format_map(values) if "{" in text else text


def _format(pair: Pair, values: Mapping[str, str]) -> Pair:
    return render(pair[0], values), render(pair[1], values)


def _place(
    rng: random.Random, total: int, friends: list[str], colleague: str,
    wordings: Mapping[Kind, list[Wording]],
) -> list[_Plant]:
    """Which families this conversation plants, worded how, and at which turns: evidence in the
    first 60 %, questions in the last quarter, two or three distractors that share words with the
    question anywhere between (at least one after the evidence) but never within the 15 turns
    before the question, where the lookback sees everything anyway."""
    chosen = [(family, wording) for kind in ALL_KINDS if kind in wordings for family, wording in
              zip(rng.sample(families(kind), len(wordings[kind])), wordings[kind], strict=True)]
    asked = rng.sample(range(total * 3 // 4, total), len(chosen))
    used = set(asked)

    def free(low: int, high: int, count: int) -> list[int]:
        spots = [p for p in range(low, high) if p not in used]
        picked = sorted(rng.sample(spots, count))
        used.update(picked)
        return picked

    plants = []
    for (family, wording), question_at in zip(chosen, asked, strict=True):
        friend = rng.choice(friends)
        values = {"friend": friend, "friend2": friends[(friends.index(friend) + 1) % len(friends)],
                  "colleague": colleague, **rng.choice(family.options)}
        if not family.questions[wording]:  # a hard kind's family words its questions one way
            wording = rng.choice([w for w in WORDINGS if family.questions[w]])
        question = render(rng.choice(family.questions[wording]), values)
        evidence = tuple(_format(rng.choice(step), values) for step in family.steps)
        pool = [_format(pair, values) for pair in family.distractors]
        distractors = _distractors(rng, question, evidence, pool)
        if family.kind == "multihop":  # one evidence turn per stretch: weeks apart
            stretch = (total * 3 // 5 - 3) // len(family.steps)
            evidence_at = [free(3 + n * stretch + stretch // 4, 3 + n * stretch + stretch * 3 // 4, 1)[0]
                           for n in range(len(family.steps))]
        else:
            evidence_at = free(3, total * 3 // 5, len(family.steps))
        later = free(evidence_at[-1] + 1, question_at - 15, 1)
        distractors_at = later + free(3, question_at - 15, len(distractors) - 1)
        plants.append(_Plant(family, values, wording, question, evidence, tuple(distractors),
                             question_at, tuple(evidence_at), tuple(distractors_at)))
    return plants


def _distractors(
    rng: random.Random, question: str, evidence: Sequence[Pair], pool: Sequence[Pair]
) -> list[Pair]:
    """Two or three of `pool` whose message shares a content word with the question. When the
    question shares a word with its evidence (its anchor or topical word), the first of them (the
    one placed after the evidence) shares that word too if any can, so that a lexical match on it
    is not automatically evidence."""
    asked = content_words(question)
    shared = asked & frozenset().union(*(content_words(f"{user}\n{reply}") for user, reply in evidence))
    sharing = [pair for pair in pool if asked & content_words(pair[0])]
    count = min(len(sharing), rng.randint(2, 3))
    hitting = [pair for pair in sharing if shared & content_words(pair[0])]
    first = [rng.choice(hitting)] if hitting else []
    return first + rng.sample([pair for pair in sharing if pair not in first], count - len(first))


def _times(
    rng: random.Random, total: int, start: datetime, weeks: tuple[int, int] = (5, 10)
) -> list[tuple[float, float]]:
    """(user, reply) times for `total` turns: bursts of 2-14 turns on random days and waking hours
    over 5-10 weeks (`weeks`), a minute or a few between turns, the reply within a minute."""
    days = 7 * rng.randint(*weeks)
    sizes: list[int] = []
    while sum(sizes) < total:
        sizes.append(min(rng.randint(2, 14), total - sum(sizes)))
    starts = sorted(rng.uniform(0, days) // 1 * 86_400 + rng.uniform(7.5, 23) * 3600 for _ in sizes)
    base = start.timestamp()
    times: list[tuple[float, float]] = []
    clock = 0.0
    for size, begin in zip(sizes, starts, strict=True):
        clock = max(begin, clock + 600)
        for _ in range(size):
            reply = clock + rng.uniform(3, 45)
            times.append((base + clock, base + reply))
            clock = reply + rng.uniform(20, 420)
    return times


# -- word overlap -------------------------------------------------------------------------------

# Function words and chat fillers; what is left of a text, stemmed, is its content words.
STOPWORDS = frozenset(str.split(
    "a an the and but or if because as until while of at by for with about against between into "
    "through during before after above below to from up down in out on off over under again then "
    "once here there when where why how what which who whom whose this that these those all any both "
    "each few more most other some such no nor not only own same so than too very can will just "
    "should would could might must shall may now i me my mine myself we us our ours you your yours "
    "he him his she her hers it its they them their theirs am is are was were be been being have has "
    "had do does did doing done get got gets go going gone went make made please thanks thank okay "
    "ok yes yeah hey hello hi remember remind tell know think said say like want need one two "
    "still ever also really much"
))
_WORD = re.compile(r"[^\W_]+")
_stemmer = snowballstemmer.stemmer("english")


def content_words(text: str) -> frozenset[str]:
    """The stems of the words of `text` that carry meaning (3+ letters, not a stopword), and its
    numbers of two or more digits and identifiers with digits ("417", "40k"), as the lexical index
    keeps them."""
    words: list[str] = []
    kept: set[str] = set()
    for piece in _WORD.findall(text.lower().replace("'s", "")):
        if piece.isalpha():
            if len(piece) >= 3 and piece not in STOPWORDS:
                words.append(piece)
        elif len(piece) >= 2:
            kept.add(piece)
    return frozenset(stem for stem in _stemmer.stemWords(words) if stem not in STOPWORDS) | kept


def overlap(question: str, text: str) -> float:
    """The share of the question's content words that `text` holds too."""
    wanted = content_words(question)
    return len(wanted & content_words(text)) / len(wanted) if wanted else 0.0


def shared_words(question: str, texts: Sequence[str]) -> frozenset[str]:
    """The question's content words that any of `texts` holds."""
    return content_words(question) & frozenset().union(*(content_words(text) for text in texts))


def turn_text(turn: Turn) -> str:
    return f"{turn.user}\n{turn.reply}"


def fts5_top(conversations: Sequence[Conversation], k: int = 20) -> float:
    """The share of evidence turns plain FTS5 bm25 ranks in its top `k`, averaged over questions:
    the statistic the issue's judge reports for real chats (65 %), measured the same way here.

    One in-memory index per conversation over every turn (user message and reply, the porter
    stemmer), searched for any of the question's words (3+ letters, not a stopword) among the
    turns before it. Independent of Switchboard's own recall, so it calibrates the set, not us.
    """
    found = [share for _, share in _fts5_found(conversations, k)]
    return sum(found) / len(found)


def fts5_by_kind(conversations: Sequence[Conversation], k: int = 20) -> dict[str, float]:
    """`fts5_top` per kind of question."""
    return _by_kind(_fts5_found(conversations, k))


def semantic_top(
    conversations: Sequence[Conversation], encode: Callable[[Sequence[str]], Any], k: int = 40
) -> dict[str, float]:
    """Per kind of question, the share of evidence turns a plain cosine ranks in its top `k`: every
    turn before the question (user message and reply, one text) and the question encoded by
    `encode` (texts to unit vectors), nothing else. The set's other calibration beside bm25."""
    import numpy as np

    found: list[tuple[str, float]] = []
    for conversation in conversations:
        vectors = np.asarray(encode([turn_text(turn) for turn in conversation.turns]), dtype=np.float32)
        asked = np.asarray(encode([q.text for q in conversation.questions]), dtype=np.float32)
        for q, vector in zip(conversation.questions, asked, strict=True):
            scores = vectors[:q.turn] @ vector
            top = set(np.argsort(-scores)[:k].tolist())
            found.append((q.kind, len(top & set(q.evidence)) / len(q.evidence)))
    return _by_kind(found)


def word_reachable(conversations: Sequence[Conversation]) -> dict[str, float]:
    """Per kind of question, the share of evidence turns holding at least one of the question's
    content words (averaged over questions, as recall is): the ceiling of any recall that matches
    the question's own words, bm25 or ours, before a thesaurus or a model adds words of its own."""
    found: list[tuple[str, float]] = []
    for conversation in conversations:
        for q in conversation.questions:
            wanted = content_words(q.text)
            reachable = sum(1 for i in q.evidence if wanted & content_words(turn_text(conversation.turns[i])))
            found.append((q.kind, reachable / len(q.evidence)))
    return _by_kind(found)


def _by_kind(found: Sequence[tuple[str, float]]) -> dict[str, float]:
    kinds: dict[str, list[float]] = {"all": []}
    for kind, share in found:
        kinds.setdefault(kind, []).append(share)
        kinds["all"].append(share)
    return {kind: sum(shares) / len(shares) for kind, shares in kinds.items()}


def _fts5_found(conversations: Sequence[Conversation], k: int) -> list[tuple[str, float]]:
    found: list[tuple[str, float]] = []
    for conversation in conversations:
        with sqlite3.connect(":memory:") as db:
            db.execute("CREATE VIRTUAL TABLE turns USING fts5(body, "
                       "tokenize = 'porter unicode61 remove_diacritics 2')")
            db.executemany("INSERT INTO turns (rowid, body) VALUES (?, ?)",
                           [(turn.index + 1, turn_text(turn)) for turn in conversation.turns])
            for q in conversation.questions:
                words = [w for w in _WORD.findall(q.text.lower().replace("'s", ""))
                         if len(w) >= 3 and w not in STOPWORDS]
                query = " OR ".join(f'"{word}"' for word in words)
                ranked = {row[0] - 1 for row in db.execute(
                    "SELECT rowid FROM turns WHERE turns MATCH ? AND rowid <= ? ORDER BY bm25(turns) "
                    "LIMIT ?", (query, q.turn, k))} if words else set()
                found.append((q.kind, len(ranked & set(q.evidence)) / len(q.evidence)))
    return found


def describe(conversations: Sequence[Conversation]) -> dict[str, float]:
    """Counts, wordings and word overlaps of a generated set, for the bench's header and the tests.

    `overlap_*` are per turn (the share of the question's content words an evidence or distractor
    turn holds, averaged over turns); `shares_*` are per question (how many of its content words
    any of its evidence turns holds: none, one, two or more).
    """
    turns = [len(c.turns) for c in conversations]
    questions = [q for c in conversations for q in c.questions]
    evidence: list[float] = []
    distractor: list[float] = []
    shared: list[int] = []
    for conversation in conversations:
        for q in conversation.questions:
            texts = [turn_text(conversation.turns[i]) for i in q.evidence]
            evidence += [overlap(q.text, text) for text in texts]
            distractor += [overlap(q.text, turn_text(conversation.turns[i])) for i in q.distractors]
            shared.append(len(shared_words(q.text, texts)))
    distinct = []
    for conversation in conversations:
        filler = [t.user for t in conversation.turns if t.role == "filler"]
        distinct.append(len(set(filler)) / len(filler))
    first = [c.turns[0].at for c in conversations]
    last = [c.turns[-1].at for c in conversations]
    summary: dict[str, float] = {
        "conversations": len(conversations),
        "turns": sum(turns),
        "turns_min": min(turns),
        "turns_max": max(turns),
        "weeks_mean": sum(b - a for a, b in zip(first, last, strict=True)) / len(first) / 604_800,
        "questions": len(questions),
        "evidence_turns": len(evidence),
        "distractor_turns": len(distractor),
    }
    for kind in ALL_KINDS:
        summary[f"questions_{kind}"] = sum(1 for q in questions if q.kind == kind)
    for wording in WORDINGS:
        summary[f"wording_{wording}"] = sum(1 for q in questions if q.wording == wording) / len(questions)
    summary |= {
        "shares_none": sum(1 for n in shared if n == 0) / len(shared),
        "shares_one": sum(1 for n in shared if n == 1) / len(shared),
        "shares_two": sum(1 for n in shared if n >= 2) / len(shared),
        "shares_max": max(shared),
        "overlap_evidence": sum(evidence) / len(evidence),
        "overlap_distractor": sum(distractor) / len(distractor),
        "evidence_zero_overlap": sum(1 for v in evidence if v == 0) / len(evidence),
        "filler_distinct": sum(distinct) / len(distinct),  # per conversation
    }
    return summary


if __name__ == "__main__":
    for name, value in describe(generate()).items():
        print(f"{name:<22} {value:,.3f}" if isinstance(value, float) else f"{name:<22} {value}")
