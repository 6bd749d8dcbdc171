"""A labelled set for context quality: long generated chats with planted facts and questions on them.

Everything is generated from a seed (no network, no dataset, no model): `generate(count, seed)`
gives `count` conversations of 300-600 turns spread over 5-10 weeks. Each conversation plants
facts early (one turn for a fact or an event, 2-4 turns for a story that needs them together) and
asks about them in its last quarter, in other words than the evidence used (paraphrase, synonyms,
hypernyms: "Signed up for pottery lessons" / "What new pastime did I take up?"). Distractor turns
share the question's words without answering it; the rest is varied small talk composed from
templates and word pools, so neither the evidence nor the filler repeats a handful of lines.

A turn is a user message and the agent's reply; evidence is whole turns, named by their index.
`content_words` and `overlap` measure how many of a question's content words (lower-cased, English
Snowball stems, stopwords out) a turn holds: the set is built so that this is low for evidence and
high for distractors, and `describe` reports both.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

import snowballstemmer  # type: ignore[import-untyped]

Kind = Literal["fact", "temporal", "multi"]
Role = Literal["filler", "evidence", "distractor", "question"]
Pair = tuple[str, str]  # (user message, agent reply)

KINDS: tuple[Kind, ...] = ("fact", "temporal", "multi")
PER_CONVERSATION: Mapping[Kind, int] = {"fact": 5, "temporal": 4, "multi": 3}
START = datetime(2025, 1, 6, tzinfo=UTC)  # a Monday; conversation i starts i * 3 days later


@dataclass(frozen=True, slots=True)
class Family:
    """One kind of planted fact: its evidence turns (variants per step), questions and distractors.

    `options` are coherent slot bundles, one chosen per conversation; `{friend}` and `{colleague}`
    are always there, `{date}` (the first evidence turn's day) in the answer.
    """

    name: str
    kind: Kind
    steps: tuple[tuple[Pair, ...], ...]
    questions: tuple[str, ...]
    distractors: tuple[Pair, ...]
    answer: str
    options: tuple[Mapping[str, str], ...] = ({},)


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


def _each(slot: str, *values: str) -> tuple[Mapping[str, str], ...]:
    return tuple({slot: value} for value in values)


# -- planted facts ------------------------------------------------------------------------------

FACTS: tuple[Family, ...] = (
    Family("pastime", "fact",
        ((("Signed up for {craft} lessons at the community centre, Thursday evenings for ten weeks.",
           "Lovely. Working with your hands after a day at a screen is a good balance."),
          ("First {craft} session tonight! The instructor says I have steady hands.",
           "That's a great start; steady hands will serve you well."),
          ("Booked a beginners' course in {craft}. I've wanted to try it for years.",
           "Good for you, finally doing it. Beginners' courses are the best way in.")),),
        ("What new pastime did I take up?", "Which hobby have I picked up lately?",
         "Remind me, what leisure activity was I getting into?"),
        (("My old hobby was chess, but I haven't picked up a board in years.",
          "Chess has a way of pulling people back in."),
         ("The leisure centre pool is closed for repairs again.", "Annoying. Hopefully it reopens soon."),
         ("Not sure I should take up the offer to coach the kids' football, I'm stretched thin.",
          "Only say yes if you'll enjoy it; stretched thin is a real warning sign."),
         ("Reading is my favourite pastime on trains, the time just flies.",
          "Trains make the perfect reading room."),
         ("Any new activity ideas for a rainy Sunday with my nephew?",
          "Baking, a board-game marathon or a blanket fort. Never fails."),
         ("Take a new photo for the staff badge, they said. Mine is from 2015.",
          "A fresh photo is probably overdue."),
         ("Lately I can't pick a film without scrolling for an hour.",
          "Choice paralysis is real; let someone else pick."),
         ("Hobby shops are disappearing, the model railway place shut too.",
          "Sad to see; they're hard to replace.")),
        "{craft}",
        _each("craft", "pottery", "watercolour painting", "woodcarving", "bookbinding",
              "calligraphy", "life drawing", "stained glass")),
    Family("research", "fact",
        ((("Spent the whole evening looking into {topic}: {detail}.",
           "That's a lot to take in. Did anything stand out so far?"),
          ("Went down a rabbit hole on {topic} tonight, {detail}. My head is spinning.",
           "Rabbit holes like that help when you're weighing something big. Sleep on it.")),),
        ("What was I investigating a few weeks back?", "What subject did I dig into that one night?",
         "What did I research recently?"),
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
         ("My favourite subject at school was geography, useless now.", "It still helps with pub quizzes.")),
        "{topic}",
        ({"topic": "adoption agencies", "detail": "waiting lists, home-study visits and the fees"},
         {"topic": "solar panel installers", "detail": "quotes, roof surveys and feed-in tariffs"},
         {"topic": "rescue greyhound charities", "detail": "home checks, fostering, first-time owners"},
         {"topic": "part-time MBA programmes", "detail": "entry tests, weekend schedules and tuition"},
         {"topic": "electric cargo bikes", "detail": "range, child seats and the dealers nearby"},
         {"topic": "heat pump grants", "detail": "eligibility, installers and the paperwork"})),
    Family("allergy", "fact",
        ((("Turns out I react badly to {allergen}. The clinic confirmed it with a skin-prick test.",
           "Good that you know now. Worth telling anyone who cooks for you."),
          ("So that rash last week was {allergen}. The GP says to carry antihistamines from now on.",
           "Glad it's identified. Keep a pack in your bag and one at work.")),),
        ("Is there any food I'm allergic to?", "What should I avoid eating for health reasons?"),
        (("My sister is allergic to cats, so her visit will be a short one.",
          "Maybe meet her at a café instead."),
         ("I should avoid the ring road tomorrow, there are roadworks all week.",
          "The back streets will be slower but steadier."),
         ("What food should we bring to the picnic on Saturday?",
          "Finger food travels best: wraps, fruit, a tart."),
         ("Eating lunch at my desk again, no time for anything else.",
          "Try to at least step away for ten minutes."),
         ("For health reasons the office is getting rid of the shared fridge, apparently.",
          "Probably for the best, given the state of most shared fridges.")),
        "{allergen}",
        _each("allergen", "shellfish", "peanuts", "sesame", "kiwi", "hazelnuts", "celery")),
    Family("pet", "fact",
        ((("We brought a {pet} home from the shelter yesterday. We've named her {pet_name}.",
           "Congratulations! {pet_name} is a lovely name. How is she settling in?"),
          ("Meet {pet_name}, the {pet} who has taken over the flat since this morning.",
           "Ha, that didn't take long. {pet_name} sounds like a character.")),),
        ("What did we call the animal that joined the family?", "What is our pet called?"),
        (("The animal documentary last night was stunning, all filmed in Patagonia.",
          "Those nature crews have endless patience."),
         ("My family group chat has been called 'Chaos' for years and it's accurate.",
          "Every family chat deserves that title."),
         ("Did you see the pet shop on the high street is closing?",
          "Shame; independent shops like that are hard to replace."),
         ("Whoever called the meeting at 8am owes everyone coffee.", "At least make it a short one.")),
        "{pet_name}",
        ({"pet": "kitten", "pet_name": "Pickle"}, {"pet": "puppy", "pet_name": "Biscuit"},
         {"pet": "rabbit", "pet_name": "Clover"}, {"pet": "rescue dog", "pet_name": "Juniper"},
         {"pet": "tabby", "pet_name": "Mochi"}, {"pet": "tortoise", "pet_name": "Sheldon"})),
    Family("friend_job", "fact",
        ((("{friend} just started as a {job}, {detail}.",
           "Good for {friend}! That's quite a change of pace."),
          ("Had lunch with {friend}, who's now a {job}: {detail}. Sounds intense.",
           "Intense but probably rewarding. Pass on my congratulations.")),),
        ("What is {friend}'s line of work these days?", "How does {friend} earn a living now?"),
        (("{friend} and I walked along the river after work, it was lovely.",
          "Evening walks by water are hard to beat."),
         ("{friend} is living at their parents' place until the new flat is ready.",
          "Generous of them, and probably cheaper too."),
         ("{friend} keeps sending me memes at work, I can't get anything done.",
          "Mute the chat for an hour; the memes will keep."),
         ("The lines at the post office were out the door today.", "Mid-morning is usually quieter.")),
        "{job}",
        ({"job": "paramedic", "detail": "night shifts on the ambulance"},
         {"job": "sous-chef", "detail": "a busy bistro by the harbour"},
         {"job": "primary school teacher", "detail": "a class of thirty seven-year-olds"},
         {"job": "data engineer", "detail": "a logistics startup"},
         {"job": "park ranger", "detail": "the national park up north"},
         {"job": "airline pilot", "detail": "short-haul flights from the regional airport"})),
    Family("car", "fact",
        ((("Picked up the keys to {car} today. Only 40k miles on the clock.",
           "Exciting! Enjoy the first few drives."),
          ("It's official, {car} is parked outside my door and it's mine.",
           "Congratulations, that's a big step. Drive safe.")),),
        ("What vehicle did I buy?", "Which motor did I end up getting?"),
        (("The vehicle inspection centre was closed again, third time this month.",
          "Maybe book online so they can't turn you away."),
         ("I want to buy a decent winter coat before the sales end.",
          "Wool with a good lining is worth the money."),
         ("The motor in the washing machine is making a grinding noise.",
          "Might be the bearings; worth getting looked at before it dies."),
         ("Everyone at work is buying the same phone, it's like a uniform.",
          "Peer pressure, gadget edition.")),
        "{car}",
        _each("car", "a used Skoda Octavia", "a little red Fiat 500", "a second-hand Volvo estate",
              "a Toyota Yaris hybrid", "a Mazda MX-5", "an old Land Rover Defender")),
    Family("book", "fact",
        ((("Couldn't put down {book}. Finished it at 2am, no regrets.",
           "That's the sign of a good one. Did the ending land?"),
          ("{book} is ruining my sleep, one more chapter turned into forty.",
           "Classic. Is it the plot or the writing that grabs you?")),),
        ("Which novel kept me awake until the early hours?", "What story had me hooked late into the night?"),
        (("The neighbours' dog kept me awake until the early hours again.",
          "Earplugs, and maybe a friendly word with them."),
         ("Any novel recommendations for a long flight?",
          "Something long and absorbing; a big historical one works."),
         ("Late night at the office, the release slipped again.",
          "Get some rest; a slipped release is never one person's fault."),
         ("That story about the whale stranded on the beach made me so sad.",
          "It's heartbreaking; the rescuers do try.")),
        "{book}",
        _each("book", "The Salt Orchard", "A Map of Small Fires", "Winter at Kestrel Point",
              "The Glass Archivist", "Nine Bridges North", "The Quiet Cartographer")),
    Family("moving", "fact",
        ((("Signed the lease on a flat in {district}! Keys on the first of the month.",
           "A fresh start. {district} has good cafés, I hear."),
          ("Decided: we're leaving the old place and taking the two-bed in {district}.",
           "Big decision, well made. Start packing early.")),),
        ("Where am I relocating to?", "Which neighbourhood will my next home be in?"),
        (("My colleague is relocating to Berlin next month, leaving drinks on Friday.",
          "Berlin will be an adventure for them."),
         ("The company might relocate our team to the other building.",
          "A change of building can shake things up."),
         ("The neighbourhood watch newsletter is mostly complaints about bins.", "The eternal bin debate."),
         ("Home by seven tonight, if the trains behave.", "Fingers crossed for the trains."),
         ("Next weekend is the only free one I have until summer.", "Guard it jealously.")),
        "{district}",
        _each("district", "Harbourside", "Old Town", "Northfield", "Riverside Gardens", "Kingsgate",
              "Elm Hill")),
    Family("mum_gift", "fact",
        ((("For Mum's birthday I'm getting her {gift}.", "She'll love that, it's thoughtful."),
          ("Sorted Mum's birthday: {gift}. Wrapped and hidden.", "Organised and early. Well done.")),),
        ("What present did I plan for my mother?", "What gift am I giving my mother?"),
        (("My mother called for an hour, mostly about her neighbour's hedge.", "The hedge saga continues."),
         ("I still need to wrap the present for {friend}'s leaving do.",
          "Wrapping at midnight is a tradition."),
         ("We plan to repaint the hallway at Easter.", "A lighter colour would open it up."),
         ("Giving blood tomorrow, remind me to eat breakfast.", "Eat something solid and drink water.")),
        "{gift}",
        _each("gift", "a silk scarf from the market in Lyon", "a framed print of her old street",
              "a cashmere cardigan", "a pasta-making class for two", "a vintage brooch",
              "a tablet with big fonts set up")),
    Family("instrument", "fact",
        ((("Dusted off my old {instrument} and played scales for an hour, fingers are sore.",
           "Sore fingers mean you're at it again. Keep the sessions short at first."),
          ("Booked weekly {instrument} lessons with a teacher two streets away.",
           "A teacher that close means no excuses.")),),
        ("Which instrument am I practising?", "What instrument have I gone back to?"),
        (("My dad keeps practising his wedding speech on me.", "That's sweet; he'll be word-perfect."),
         ("The music at the café was so loud I couldn't think.",
          "Some places confuse volume with atmosphere."),
         ("The instrument panel in the hire car lit up like a Christmas tree.",
          "Probably a tyre-pressure warning; check the manual."),
         ("I've gone back to paper notebooks, screens were frying my brain.", "Paper is underrated.")),
        "{instrument}",
        _each("instrument", "cello", "saxophone", "banjo", "ukulele", "clarinet", "bass guitar")),
    Family("diet", "fact",
        ((("{ev}", "That's a real change. How do you feel so far?"),
          ("{ev2}", "Sounds like it's sticking. Nice.")),),
        ("What kind of diet have I switched to?", "Am I following any special eating plan?"),
        (("The diet cola machine at work is empty again.", "A tragedy for the afternoon slump."),
         ("I switched banks finally, the app is so much better.", "A good app saves so much hassle."),
         ("Following the election coverage is exhausting.", "Take a break; the results will wait."),
         ("Eating plan for the week: chilli Monday, leftovers Tuesday, chaos after that.",
          "Chaos Wednesday is a classic.")),
        "{diet}",
        ({"diet": "vegetarian", "ev": "Two weeks without meat or fish now, and honestly I feel great.",
          "ev2": "Three weeks with no meat or fish, and I don't miss bacon as much as I feared."},
         {"diet": "low-carb", "ev": "Cut out bread, pasta and sugar completely, three weeks in.",
          "ev2": "A month with no bread, rice or pasta, and the cravings are gone."},
         {"diet": "vegan",
          "ev": "No animal products at all since the start of the month, cheese was the hardest.",
          "ev2": "Oat milk in everything now, no eggs, no cheese, no butter. Surviving."},
         {"diet": "intermittent fasting",
          "ev": "Nothing but black coffee until noon, and the kitchen closes at eight. Week three.",
          "ev2": "Nothing passes my lips before noon or after eight these days, getting easier."})),
    Family("language", "fact",
        ((("Ordered a {language} grammar workbook and I'm doing a page every morning with my tea.",
           "A page a day adds up faster than people think."),
          ("Had my first {language} conversation class. I could barely say where I live.",
           "Everyone starts there. It gets easier by week three.")),),
        ("Which foreign tongue am I studying?", "What language have I begun learning?"),
        (("The foreign exchange rate is terrible this week, glad I'm not travelling.",
          "Good timing to stay put."),
         ("I'm studying the quarterly numbers for Tuesday's board meeting.",
          "Know the top three figures cold and you'll be fine."),
         ("The language in that contract is so vague, I've sent it back.",
          "Right call; vague contracts cause trouble later."),
         ("Learning the new expense system at work is a nightmare.", "New systems always hurt for a month.")),
        "{language}",
        _each("language", "Portuguese", "Japanese", "Welsh", "Greek", "Korean", "Dutch")),
    Family("locker", "fact",
        ((("My locker at the gym is number {n} now, they moved everyone around.", "Noted: {n}."),
          ("Gym locker changed to {n}. Writing it here so I don't forget.", "Got it, {n}.")),),
        ("Which cubby is mine at the fitness club?", "At the fitness club, which storage spot is mine?"),
        (("The book club picked another 800-page novel, I'm going to fail.",
          "Skim the middle; nobody will know."),
         ("Fitness tracker says I slept four hours. Feels right.", "Maybe an early night tonight."),
         ("That umbrella in the hall is definitely mine, not my flatmate's.", "Possession is nine-tenths."),
         ("The storage unit fees went up again.", "Worth checking what's still in there.")),
        "{n}",
        _each("n", "417", "238", "652", "91", "1203", "76")),
    Family("restaurant", "fact",
        ((("Tried {place} on the corner last night. The {dish} was the best I've had in years.",
           "High praise! Worth a second visit, clearly."),
          ("{place}, wow. {dish} to die for, going back next week.", "Sounds like a keeper.")),),
        ("Which eatery did I rave about?", "Where did I have that amazing meal?"),
        (("The eatery by the office closed down, the sandwich place is all that's left.",
          "Maybe a chance to bring lunch."),
         ("My boss raved about the quarterly results, first time ever.", "Enjoy it while it lasts!"),
         ("Meal prep Sunday again: rice, beans, roasted veg.", "Solid routine."),
         ("Amazing how the rain knows exactly when I leave the house.", "Sod's law in weather form.")),
        "{place}",
        ({"place": "Little Chengdu", "dish": "dumplings in chilli oil"},
         {"place": "Tbilisi House", "dish": "khachapuri"}, {"place": "Blue Nile", "dish": "injera"},
         {"place": "Inti", "dish": "ceviche"}, {"place": "Cedar Table", "dish": "mezze"},
         {"place": "Pho Saigon", "dish": "bún chả"})),
    Family("colleague", "fact",
        ((("{colleague} presented my slides at the all-hands as if they were theirs. I'm fuming.",
           "That's not okay. Worth raising calmly with your manager."),
          ("Can't believe {colleague} took credit for my analysis in front of the directors.",
           "Infuriating. Keep your drafts and emails; they show who did the work.")),),
        ("Who annoyed me at the company meeting?", "Which coworker upset me?"),
        (("The company meeting ran over by an hour, nothing decided.",
          "Classic. Suggest an agenda next time."),
         ("My coworker brought homemade brownies, the office is thriving.", "Best kind of coworker."),
         ("The neighbours' drilling really annoyed me this morning.", "Weekend drilling should be illegal."),
         ("Upset stomach all afternoon, no more canteen curry for me.", "Stick to plain food tonight.")),
        "{colleague}"),
)

TEMPORAL: tuple[Family, ...] = (
    Family("dentist", "temporal",
        ((("Just back from the dentist, two fillings. My whole jaw is numb.",
           "Ouch. Soft food and no hot drinks until the numbness wears off."),
          ("Dentist today: one crown replaced, one lecture about flossing.",
           "The flossing lecture is mandatory, I believe.")),),
        ("When did I last get my teeth seen to?", "When was my last check-up on my teeth?"),
        (("My teeth chatter just thinking about that cold-water swim on Saturday.",
          "Bring a flask of something hot."),
         ("Last check-up on the boiler was two years ago, I should book one.", "Yes, before winter."),
         ("When did it get so dark at five? I miss summer.", "A few more weeks till the days stretch out.")),
        "{date}"),
    Family("haircut", "temporal",
        ((("New haircut, went much shorter than planned. Feels weirdly light.",
           "Shorter is brave! Give it a few days to settle."),
          ("Finally got my hair cut, the fringe is gone.",
           "Bold move. A change like that feels strange for a week.")),),
        ("When was I last at the barber's?", "When did I last visit the salon?"),
        (("The barber shop on the corner is a vape store now, sad.", "The high street keeps changing."),
         ("Mum wants me to visit next weekend, she's got a list of jobs for me.", "Bring tools."),
         ("Last time I checked, the parking permit was still valid.", "Double-check the expiry though.")),
        "{date}"),
    Family("passport", "temporal",
        ((("Posted the forms for my new passport this morning, fingers crossed it comes before the trip.",
           "It usually takes three weeks; you should be fine."),
          ("Passport photos taken, forms posted. Now we wait.", "The waiting is the worst part.")),),
        ("When did I apply to renew my travel document?", "When did I send off the renewal application?"),
        (("I need to renew my gym membership before Friday or I lose the discount.", "Set a reminder now."),
         ("The travel insurance document is forty pages, who reads these?",
          "Nobody, which is how they get you."),
         ("Sent off my application for the allotment waiting list.",
          "Those lists are long; good to be on it.")),
        "{date}"),
    Family("car_repair", "temporal",
        ((("The garage finally gave the car back. New brakes, new exhaust, lighter wallet.",
           "At least it's safe now. Brakes aren't something to skimp on."),
          ("Collected the car from the mechanic, the rattle is gone at last.",
           "Blissful silence. Good to have it sorted.")),),
        ("When did my vehicle get fixed?", "When was the motor repaired?"),
        (("The vehicle in front of me stopped dead at the lights, nearly went into it.",
          "Glad you had the distance."),
         ("Fixed the wobbly shelf in the hallway myself, very proud.", "DIY victory!"),
         ("Repaired the puncture on my bike in ten minutes, a personal record.", "Impressive."),
         ("The motor on the electric blind died, so the bedroom is permanently dark.",
          "Great for naps, at least.")),
        "{date}"),
    Family("race", "temporal",
        ((("Finished the {race} in {time}! Legs like jelly.",
           "Brilliant effort. Stretch, eat, and enjoy the medal."),
          ("Crossed the line of the {race}, {time}. Never again. Until next year.",
           "Ha, the classic promise.")),),
        ("When did I do that running event?", "When was my big running day?"),
        (("Running late, the event starts at seven and I'm still on the bus.",
          "Text them you're on your way."),
         ("The charity event at work raised over two thousand.", "That's a great total."),
         ("My nose has been running all day, hay fever I think.", "Antihistamines and a closed window.")),
        "{date}",
        ({"race": "half marathon", "time": "1:52"}, {"race": "10k", "time": "48 minutes"},
         {"race": "trail race", "time": "1:10"}, {"race": "charity 5k", "time": "26 minutes"})),
    Family("first_meet", "temporal",
        ((("Had coffee with {friend} from the climbing wall, we talked for three hours straight.",
           "Sounds like the start of a real friendship."),
          ("Went for a drink with {friend} after the book swap, turns out we grew up near each other.",
           "Small world! That's a nice thing to share.")),),
        ("When did {friend} and I first hang out?", "When was my first proper catch-up with {friend}?"),
        (("{friend} texted, running late again.", "Some things never change."),
         ("{friend} says hi, by the way.", "Hi back!"),
         ("First time I've been out all week and of course it's pouring.", "Typical.")),
        "{date}"),
    Family("ill", "temporal",
        ((("Woke up with a fever and a sore throat, calling in to work.",
           "Rest, fluids, and no heroics. Work will survive."),
          ("Flu has flattened me. Day two on the sofa.",
           "Horrible. Keep drinking water and sleep as much as you can.")),),
        ("When was I ill?", "When was I off sick?"),
        (("My neighbour has been ill all week, I dropped off soup.", "That's kind of you."),
         ("Sick of this weather, honestly.", "Same, if I could be."),
         ("The office was half empty, everyone off for the school holidays.",
          "Quiet office, productive office."),
         ("Ill-fitting shoes ruined the whole wedding for me.",
          "Blisters and speeches, a tough combination."),
         ("My nephew was sick on the bus home, poor thing.", "Poor kid. Travel sickness is miserable.")),
        "{date}"),
    Family("raise", "temporal",
        ((("My manager confirmed the raise today: eight percent from next month!",
           "Congratulations, that's well deserved."),
          ("HR letter came through, I'm getting bumped up a pay band.", "Wonderful news, enjoy it.")),),
        ("When did I get the salary increase?", "When did I find out about my higher salary?"),
        (("Rent increase letter came today. Fifty more a month, ugh.", "Check it's within the legal limit."),
         ("Salary day can't come soon enough, I'm living on pasta.", "Pasta is a noble budget food."),
         ("Found out the bakery does half-price bread after six.", "Dangerous knowledge."),
         ("The salary survey says we're paid less than average.", "Useful ammunition for your next review."),
         ("Prices are higher every time I go to the market.", "It adds up quickly.")),
        "{date}"),
    Family("parents", "temporal",
        ((("Mum and Dad arrived on the noon train, they're here until Sunday.",
           "Enjoy the time together. Any plans?"),
          ("My parents are on the sofa bed this week, the flat feels tiny.",
           "Tight, but nice to have them.")),),
        ("When were my folks staying with me?", "When did my folks come over to visit?"),
        (("My folks keep sending me articles about pensions.", "Maybe they're hinting."),
         ("Visiting hours at the hospital are strict, only two at a time.", "Understandable, though."),
         ("Staying in tonight, too tired for anything.", "A quiet night is underrated.")),
        "{date}"),
    Family("phone", "temporal",
        ((("Dropped my phone in the canal. It's gone. Fully gone.", "Oh no. Are your photos backed up?"),
          ("Left my phone in a taxi last night and the driver isn't answering.",
           "Report it to the cab company; they often turn up.")),),
        ("When did I lose my mobile?", "When did I misplace my mobile?"),
        (("I always lose at cards against my brother, he cheats.", "Suspicious."),
         ("The mobile signal in the kitchen is terrible, calls keep cutting out.", "Try the window."),
         ("Don't lose heart, says my coach, after I came last again.", "Your coach is right."),
         ("Mobile banking app is down again.", "Annoying; usually fixed within the hour."),
         ("I always misplace my keys on Mondays.", "A hook by the door changes lives.")),
        "{date}"),
    Family("gig", "temporal",
        ((("{band} were incredible live, my ears are still ringing.", "Sounds like a great show!"),
          ("Front row for {band} tonight! The crowd went wild.", "Unforgettable, I bet.")),),
        ("When did I go to that concert?", "When was the gig I went to?"),
        (("That article on the gig economy was depressing.", "It's a bleak picture."),
         ("Concert tickets for the summer festival sold out in four minutes.",
          "Resale sites might have some."),
         ("Went to the hardware store for screws, came back with a lamp.", "Classic hardware store."),
         ("The concert hall is finally getting new seats.", "About time, those seats were ancient."),
         ("My cousin's band has a gig in Leeds, but I can't make it.", "Maybe catch the next one.")),
        "{date}",
        _each("band", "The Lumineers", "Khruangbin", "Fontaines D.C.", "Wet Leg", "Bonobo", "Big Thief")),
    Family("garden", "temporal",
        ((("Put {plant} in along the back fence, muddy but happy.",
           "Lovely. They'll thank you in a few months."),
          ("Spent the afternoon digging and got {plant} into the ground.",
           "Satisfying work. Water them well this week.")),),
        ("When did I do that gardening?", "When did I plant things outside?"),
        (("Gardening gloves are on sale at the hardware store.", "Good time to stock up."),
         ("The office plant is dying, nobody waters it.", "Adopt it."),
         ("Outside it's grey and miserable again.", "Tea weather."),
         ("Next door's garden party went on until two in the morning.", "Hope you got an invite at least."),
         ("The garden centre café does the best scones.", "Garden centres have the best cafés, oddly.")),
        "{date}",
        _each("plant", "raspberry canes", "tulip bulbs", "a young apple tree", "lavender",
              "tomato seedlings", "a row of runner beans")),
)

MULTI: tuple[Family, ...] = (
    Family("kitchen", "multi",
        ((("The tiler quoted {a} for the backsplash, which seems fair.", "Sounds reasonable for a good job."),
          ("Tiler's bill for the backsplash: {a}.", "Not bad for the work involved.")),
         (("Cabinets ordered, {b} including fitting.", "That's usually the biggest line item done."),
          ("Signed off on the new cupboards, {b} with installation.", "It'll feel like a new room.")),
         (("The plumber moved the sink pipes today, {c} cash.",
           "Plumbers are worth every penny when it's done right."),),
         (("Electrician rewired the sockets by the worktop, another {d}.", "Safety first, good call."),)),
        ("How much has the kitchen project cost me so far?",
         "What's my total spend on doing up the kitchen?"),
        (("The project at work is way over budget and nobody wants to say it.",
          "Someone has to, ideally early."),
         ("How much does a decent kitchen scale cost? Mine died.", "Twenty or so gets a reliable one."),
         ("Total chaos at the supermarket, someone dropped a crate of eggs.", "Slippery aisle, I bet.")),
        "{a} + {b} + {c} + {d}",
        ({"a": "800", "b": "2,300", "c": "350", "d": "420"}, {"a": "650", "b": "3,100", "c": "280",
          "d": "390"},
         {"a": "920", "b": "2,750", "c": "410", "d": "510"})),
    Family("job_hunt", "multi",
        ((("Sent my CV to {company} for the analyst opening. Long shot.",
           "Long shots land more often than you'd think."),),
         (("Second interview with {company} went well, they grilled me on SQL for an hour.",
           "An hour on SQL means they're serious about you."),),
         (("{company} made an offer!! Starting on the first.", "Fantastic news, congratulations!"),)),
        ("How did things turn out with the position I applied for?",
         "What happened with that role I was going for?"),
        (("I applied sunscreen twice and still burned.", "The sun wins again."),
         ("The position of the sofa is all wrong, I'm shifting it tonight.", "Mind your back."),
         ("My niece's role in the school play: tree number three. She's thrilled.",
          "Every play needs good trees."),
         ("Things turned out fine with the boiler, it just needed resetting.", "The best kind of fix."),
         ("What happened to the free coffee at work? Gone, overnight.", "The quiet end of an era."),
         ("Role-play exercise at the training day was mortifying.", "Nobody enjoys those.")),
        "hired by {company}",
        _each("company", "Nordwind", "Halcyon Labs", "Brightwater", "Quillon", "Tessera Health",
              "Arbor Freight")),
    Family("trips", "multi",
        ((("Back from {city1}. The food alone was worth the flight.",
           "Welcome back! What was the best thing you ate?"),),
         (("Weekend in {city2} with {friend}, walked about thirty kilometres.",
           "Your feet must hate you, but what a way to see a city."),),
         (("Work sent me to {city3} for two days, saw nothing but the hotel.",
           "Shame. Maybe go back properly one day."),)),
        ("Which places have I travelled to recently?", "Where have I been on my trips lately?"),
        (("I travelled by coach today, never again, seven hours.", "Coaches are cheap for a reason."),
         ("Places to eat near the office are so limited.", "Packed lunches it is."),
         ("Been meaning to clear the loft for months, trips to the tip all weekend.", "Satisfying, though."),
         ("Tripped on the kerb and tore my jeans, lovely.", "Ouch. Hope only the jeans suffered."),
         ("Stayed up late sorting receipts.", "Thrilling Friday night.")),
        "{city1}, {city2}, {city3}",
        ({"city1": "Lisbon", "city2": "Bruges", "city3": "Tallinn"},
         {"city1": "Kraków", "city2": "Edinburgh", "city3": "Bologna"},
         {"city1": "Seville", "city2": "Ljubljana", "city3": "Porto"},
         {"city1": "Valencia", "city2": "Ghent", "city3": "Riga"})),
    Family("reading", "multi",
        ((("Finished {book1} on the train home, the twist got me.",
           "The best twists feel obvious afterwards."),),
         (("Just closed the last page of {book2}, a slow burn but worth it.",
           "Slow burns stay with you longer."),)),
        ("Which titles have I got through lately?", "What books have I completed recently?"),
        (("The book club is arguing about the title for the newsletter.", "Committees and titles never mix."),
         ("I got through the whole inbox today, zero unread!", "A rare sight."),
         ("Completed the tax return, only took four hours and two coffees.", "Painful but done."),
         ("Title of the presentation is still 'Untitled', due tomorrow.",
          "A title will come once the slides are done."),
         ("Up late again doing the crossword.", "Worth it if you finished it.")),
        "{book1}, {book2}",
        ({"book1": "The Lighthouse Accounts", "book2": "Ferns and Foxes"},
         {"book1": "Under the Copper Sky", "book2": "The Tidewater Letters"},
         {"book1": "Small Hours in Vienna", "book2": "The Patient Orchard"})),
    Family("recovery", "multi",
        ((("Physio says the {injury} needs four more weeks of exercises.",
           "Stick with it; the boring exercises are the ones that work."),),
         (("Did the physio routine every day this week, the {injury} feels much better.",
           "Consistency pays off."),),
         (("Physio cleared me to jog again!", "Brilliant, ease back in gently."),)),
        ("How is my recovery coming along?", "How has my healing progressed?"),
        (("Recovery mode today after the wedding, sofa and films.", "Well earned."),
         ("The report is coming along, slowly.", "Slowly still counts."),
         ("Progress on the garden shed: a roof, finally.", "Roofs are important."),
         ("The healing crystals shop opened next to the bakery. Interesting.",
          "The high street is full of surprises."),
         ("Progress meeting with my manager went fine.", "Good to hear.")),
        "{injury}: getting better, cleared to jog",
        _each("injury", "sprained ankle", "torn calf", "sore shoulder", "knee strain")),
    Family("party", "multi",
        ((("Got {friend} a set of fancy oil paints for the birthday.", "Perfect for someone creative."),),
         (("Ordered a cake for {friend}'s party, lemon and elderflower.", "That sounds delicious."),),
         (("Balloons and candles sorted for Saturday.", "You're well organised."),)),
        ("What have I already got for {friend}'s celebration?",
         "What's ready so far for {friend}'s big day?"),
        (("{friend} already knows about the surprise, apparently.", "Act surprised anyway."),
         ("The celebration at work was awkward, warm wine and speeches.", "Office celebrations, eh."),
         ("{friend} already asked to borrow the car again.", "Some habits stick.")),
        "oil paints, a lemon and elderflower cake, balloons and candles"),
    Family("conference", "multi",
        ((("Met {p1} at the conference, she runs a robotics startup and wants to stay in touch.",
           "Useful person to know."),),
         (("Second day of the conference: had lunch with {p2}, who's hiring for a data role.",
           "Worth following up."),)),
        ("Whom did I network with at the summit?", "Who were the contacts I made at that industry event?"),
        (("The summit of Ben Nevis was in cloud, saw nothing.", "The climb still counts."),
         ("Network's down at the office again, everyone's on their phones.", "Productivity soars."),
         ("The industry newsletter says prices will rise again.", "They usually do."),
         ("Contact lenses are irritating my eyes today.", "Glasses day, maybe."),
         ("The event planning for the summer fête is chaos.", "Fêtes run on chaos.")),
        "{p1} and {p2}",
        ({"p1": "Ingrid Lund", "p2": "Femi Adeyemi"}, {"p1": "Rosa Ortega", "p2": "Ken Watanabe"},
         {"p1": "Anya Petrova", "p2": "Tom Brennan"})),
    Family("loan", "multi",
        ((("Lent {friend} {lent} for the taxi home after the party.", "That's what friends are for."),),
         (("{friend} paid back {back} today, says the rest next week.", "At least it's coming back."),)),
        ("How much does {friend} still owe me?", "What's {friend}'s outstanding debt to me?"),
        (("{friend} still hasn't returned my drill.", "Drills never come back."),
         ("I owe the library a fortune in late fees.", "Libraries forgive, eventually."),
         ("How much does a new bike chain cost these days?", "Twenty to forty, depending."),
         ("Paying off the credit card debt, slowly.", "Slowly is still progress."),
         ("The outstanding invoices at work are piling up.", "Chase the biggest ones first.")),
        "{lent} - {back}",
        ({"lent": "60", "back": "25"}, {"lent": "80", "back": "30"}, {"lent": "45", "back": "20"})),
    Family("weight", "multi",
        ((("Weighed in at {w1} kg this morning. Time to do something.", "Small steps add up."),),
         (("Scale says {w2} today, the walking is paying off.", "That's real progress."),),
         (("{w3} kg! Lowest in five years.", "Fantastic, well done."),)),
        ("How has my body mass changed over the past weeks?", "Am I getting any lighter?"),
        (("My body is not built for 6am spin classes.", "Nobody's is."),
         ("The past weeks at work have been relentless.", "Hope it eases soon."),
         ("Changed the bedsheets and the duvet cover, felt like a workout.", "Duvet covers are cardio."),
         ("Lighter evenings at last, walked home in daylight.", "The best time of year."),
         ("Bought a lighter duvet for the summer.", "Good move before the heat arrives.")),
        "{w1} -> {w2} -> {w3} kg",
        ({"w1": "84", "w2": "81", "w3": "78"}, {"w1": "92", "w2": "89", "w3": "86"},
         {"w1": "71", "w2": "69", "w3": "67"})),
    Family("course", "multi",
        ((("Got the first assignment back: {g1}. Not bad for a first go.", "A solid start."),),
         (("Essay two came back with {g2}, the tutor liked the structure.", "Improving already."),)),
        ("What grades have I received so far?", "How are my marks looking on the evening course?"),
        (("My nephew is worried about his exam marks.", "Tell him one exam isn't everything."),
         ("The evening course catalogue arrived, so tempting.", "Pick one and go for it."),
         ("Received a parcel for the neighbour again.", "The courier's favourite address."),
         ("So far the new boiler is behaving.", "Long may it last."),
         ("My nephew's grades came in, he's over the moon.", "Tell him well done.")),
        "{g1}, then {g2}",
        ({"g1": "68", "g2": "74"}, {"g1": "61", "g2": "70"}, {"g1": "72", "g2": "79"})),
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
    question: str
    distractors: tuple[Pair, ...]  # variants sharing words with the question, formatted
    asked: int  # turn index of the question
    evidence_at: tuple[int, ...]
    distractors_at: tuple[int, ...]


def generate(count: int = 20, seed: int = 13) -> list[Conversation]:
    """`count` conversations, the same for the same seed."""
    return [_conversation(index, random.Random(f"{seed}:{index}")) for index in range(count)]


def _conversation(index: int, rng: random.Random) -> Conversation:
    user = USERS[index % len(USERS)] + ("" if index < len(USERS) else f" {index // len(USERS) + 1}")
    friends = rng.sample(FRIENDS, 4)
    colleague = rng.choice(COLLEAGUES)
    total = rng.randint(300, 600)
    plants = _place(rng, total, friends, colleague)
    times = _times(rng, total, START + timedelta(days=3 * index))
    pools = {**POOLS, "friend": tuple(friends)}
    at_turn: dict[int, tuple[Role, Pair]] = {}
    questions: list[Question] = []
    for plant in plants:
        family, values = plant.family, plant.values
        for step, position in zip(family.steps, plant.evidence_at, strict=True):
            at_turn[position] = ("evidence", _format(rng.choice(step), values))
        for pair, position in zip(plant.distractors, plant.distractors_at, strict=True):
            at_turn[position] = ("distractor", pair)
        day = datetime.fromtimestamp(times[plant.evidence_at[0]][0], UTC)
        answer = family.answer.format_map({**values, "date": f"{day:%A} {day.day} {day:%B}"})
        leads = TEMPORAL_LEADS if family.kind == "temporal" else ANSWER_LEADS
        at_turn[plant.asked] = ("question", (plant.question, rng.choice(leads).format(answer=answer)))
        questions.append(Question(plant.asked, family.kind, family.name, plant.question, answer,
                                  plant.evidence_at, plant.distractors_at))
    turns = []
    asked: set[str] = set()
    for position, (at, reply_at) in enumerate(times):
        role, (said, reply) = at_turn.get(position) or ("filler", _small_talk(rng, pools, asked))
        turns.append(Turn(position, said, reply, at, reply_at, role))
    questions.sort(key=lambda q: q.turn)
    return Conversation(index, user, tuple(turns), tuple(questions))


def _format(pair: Pair, values: Mapping[str, str]) -> Pair:
    return pair[0].format_map(values), pair[1].format_map(values)


def _place(rng: random.Random, total: int, friends: list[str], colleague: str) -> list[_Plant]:
    """Which families this conversation plants, and at which turns: evidence in the first 60 %,
    questions in the last quarter, two or three distractors that share words with the question
    anywhere between (at least one after the evidence) but never within the 15 turns before the
    question, where the lookback sees everything anyway."""
    chosen = [f for kind in KINDS for f in rng.sample(FAMILIES[kind], PER_CONVERSATION[kind])]
    asked = rng.sample(range(total * 3 // 4, total), len(chosen))
    used = set(asked)

    def free(low: int, high: int, count: int) -> list[int]:
        spots = [p for p in range(low, high) if p not in used]
        picked = sorted(rng.sample(spots, count))
        used.update(picked)
        return picked

    plants = []
    for family, question_at in zip(chosen, asked, strict=True):
        values = {"friend": rng.choice(friends), "colleague": colleague, **rng.choice(family.options)}
        question = rng.choice(family.questions).format_map(values)
        sharing = [pair for pair in (_format(d, values) for d in family.distractors)
                   if overlap(question, pair[0]) > 0]
        distractors = rng.sample(sharing, min(len(sharing), rng.randint(2, 3)))
        evidence_at = free(3, total * 3 // 5, len(family.steps))
        later = free(evidence_at[-1] + 1, question_at - 15, 1)
        distractors_at = later + free(3, question_at - 15, len(distractors) - 1)
        plants.append(_Plant(family, values, question, tuple(distractors), question_at,
                             tuple(evidence_at), tuple(distractors_at)))
    return plants


def _times(rng: random.Random, total: int, start: datetime) -> list[tuple[float, float]]:
    """(user, reply) times for `total` turns: bursts of 2-14 turns on random days and waking hours
    over 5-10 weeks, a minute or a few between turns, the reply within a minute."""
    days = 7 * rng.randint(5, 10)
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
_WORD = re.compile(r"[^\W\d_]+")
_stemmer = snowballstemmer.stemmer("english")


def content_words(text: str) -> frozenset[str]:
    """The stems of the words of `text` that carry meaning (3+ letters, not a stopword)."""
    words = [w for w in _WORD.findall(text.lower().replace("'s", "")) if len(w) >= 3 and w not in STOPWORDS]
    return frozenset(stem for stem in _stemmer.stemWords(words) if stem not in STOPWORDS)


def overlap(question: str, text: str) -> float:
    """The share of the question's content words that `text` holds too."""
    wanted = content_words(question)
    return len(wanted & content_words(text)) / len(wanted) if wanted else 0.0


def turn_text(turn: Turn) -> str:
    return f"{turn.user}\n{turn.reply}"


def describe(conversations: Sequence[Conversation]) -> dict[str, float]:
    """Counts and word overlaps of a generated set, for the bench's header and the tests."""
    turns = [len(c.turns) for c in conversations]
    questions = [q for c in conversations for q in c.questions]
    evidence: list[float] = []
    distractor: list[float] = []
    for conversation in conversations:
        for q in conversation.questions:
            evidence += [overlap(q.text, turn_text(conversation.turns[i])) for i in q.evidence]
            distractor += [overlap(q.text, turn_text(conversation.turns[i])) for i in q.distractors]
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
        "overlap_evidence": sum(evidence) / len(evidence),
        "overlap_distractor": sum(distractor) / len(distractor),
        "evidence_zero_overlap": sum(1 for v in evidence if v == 0) / len(evidence),
        "filler_distinct": sum(distinct) / len(distinct),  # per conversation
    }
    for kind in KINDS:
        summary[f"questions_{kind}"] = sum(1 for q in questions if q.kind == kind)
    return summary


if __name__ == "__main__":
    for name, value in describe(generate()).items():
        print(f"{name:<22} {value:,.3f}" if isinstance(value, float) else f"{name:<22} {value}")
