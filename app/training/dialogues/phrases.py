"""What callers say: names, days, times the way Whisper writes them, fillers, and the carrier phrases per intent.

Every list is split by position: items at positions i % 4 == 3 belong to the held-out split only, the rest to
training only, so held-out dialogues use phrasings and values the training split never saw.
"""
import functools
import hashlib
import random
from pathlib import Path

import chatterbot_corpus
import yaml

HELDOUT_EVERY = 4  # one item in four is held out

FIRST_NAMES = """Maria James Aisha Tom Priya Daniel Sofia Ahmed Emma Lucas Olivia Noah Chloe Ethan Fatima Liam Grace
Mateo Hannah Omar Isabella Ryan Mei Jacob Zoe Carlos Nina Samuel Leila David Ava Kenji Ruby Marcus Elena Tyler
Amara Ben Julia Victor Sara Diego Claire Raj Laura Henry Yuki Oscar Mia Andre Nora Felix Ivy Hugo Alice Kofi Rosa
Adam Lily Pedro Anna Theo Maya Jonah Leah Ivan Eva Kai Stella Luis Naomi Paul Jade Rahul Ella Sean Tara Malik
Wendy Colin Dana Jorge Gemma Tariq Holly Simon Ines Reza Molly Grant Ayla Nate Vera Kevin Dina Arjun Lena Miles
Rita Owen Sana Bruno Freya Dmitri Keisha Lars Bianca Emeka Greta Joel Yasmin Rohan Celia Finn Alma Tobias Nadia
Quentin Lorena Abdul Petra Wesley Harriet Joaquin Imani Gideon Svetlana""".split()
LAST_NAMES = """Lopez Smith Khan Nguyen Patel Garcia Brown Kim Chen Okafor Rossi Muller Silva Cohen Walker Novak Haddad
Ito Murphy Santos Dubois Larsen Moreno Kowalski Adeyemi Fischer Reyes Park Hughes Sato Ali Jensen Costa Mensah
Weber Torres Quinn Bauer Mendez Yilmaz""".split()

# Services callers ask for that the default business does not offer (refused with a reason).
UNKNOWN_SERVICES = """massage|manicure|pedicure|facial|waxing|eyebrow threading|tattoo|perm|hair extensions|
spray tan|nail art|eyelash extensions|makeup|hot stone massage|scalp treatment|teeth whitening""".replace("\n", "").split("|")

# Made-up names from syllables: training sees many more spellings than real names alone, so the model learns to
# copy any name piece by piece rather than recognize a fixed list (held-out names are real and unseen).
_ONSETS = "b c d f g h j k l m n p r s t v w z br ch dr fl gr kr pr sh st th tr".split()
_VOWELS = "a e i o u a e i o ai ea ia io".split()
_CODAS = ["", "", "", "n", "l", "r", "s", "m", "nd", "th", "x", "ck"]


# Capitalized words that are no names (greetings, openers, prepositions, days, months): a made-up name is never one
# of them ("So", "No"), with variants (Script.made_up_name). NOTE: the word list of the from-scratch model's tools
# grammar, which refused them as names; kept here so the adapter's recipe writes the same dialogues per seed.
NOT_NAMES = frozenset("""I I'm I'd I'll I've AM PM Monday Tuesday Wednesday Thursday Friday Saturday Sunday January
February March April May June July August September October November December Hi Hello Hey Hiya Yes Yeah Yep No
Nope Okay Ok OK Oh Um Uh Hmm Well So Right Sure Thanks Please Great Perfect Fine Cool Awesome Wonderful Alright
Good Bye Goodbye A An The This That It It's Let's Let What What's How Could Would Is Are Do Does Just Actually And
But Or Also Maybe Then Under For With On At By From To In Of As If Can My Who Whose Where When Why Which Did Have
Has Was Were Should Shall Name Name's Today Tomorrow Tonight Next You Your Our""".split())


def made_up_name(rng: random.Random) -> str:
    syllables = [rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(rng.choice((1, 2, 2, 3)))]
    return ("".join(syllables) + rng.choice(_CODAS)).capitalize()


FILLERS = ["um", "uh", "so", "okay so", "yeah", "hi", "hello", "well", "oh", "right", "hey"]
# What a caller may add after a request or an answer ("Noah, thank you."): the words around a slot must not change
# what the agent does. None of them ends a carrier phrase in templates.py, so no held-out phrasing is recreated;
# "thanks" is held out, so "Noah, thanks." (a held-out answer) stays a phrasing training never saw.
TAILS = ["thank you", "if that's alright", "that would be great", "thanks", "cheers", "if that works",
         "much appreciated", "thanks so much"]

NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve"]
MINUTE_WORDS = {0: "o'clock", 15: "fifteen", 30: "thirty", 45: "forty-five"}


def split_items(items: list, split: str) -> list:
    """The items that belong to `split` ("train" or "heldout")."""
    if split not in ("train", "heldout"):
        raise ValueError(f"unknown split {split!r}; valid: train, heldout")
    held = split == "heldout"
    return [x for i, x in enumerate(items) if (i % HELDOUT_EVERY == HELDOUT_EVERY - 1) == held]


def stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def spoken_hour(hour: int) -> int:
    return (hour - 1) % 12 + 1


def time_forms(hour: int, minute: int, ampm_implied: bool) -> list[str]:
    """Ways Whisper writes the time hour:minute (24-hour). `ampm_implied`: the bare hour is read right by the
    business rule (1-7 -> afternoon, 8-11 -> morning), so forms without a.m./p.m. are allowed."""
    h = spoken_hour(hour)
    suffixes = ["p.m.", "pm", "PM"] if hour >= 12 else ["a.m.", "am", "AM"]
    part = "in the morning" if hour < 12 else ("in the afternoon" if hour < 18 else "in the evening")
    if minute % 15:  # off the quarter-hour grid (a free range after a made-up business's 50-minute service)
        return [f"{h}:{minute:02d} {suffix}" for suffix in suffixes] + [f"{h}:{minute:02d}"] * ampm_implied
    word_h = NUMBER_WORDS[h]
    forms = []
    for suffix in suffixes:
        forms.append(f"{h}:{minute:02d} {suffix}")
        if minute == 0:
            forms.append(f"{h} {suffix}")
            forms.append(f"{h}{suffix}" if suffix != "p.m." and suffix != "a.m." else f"{h} {suffix}")
    forms.append(f"{h}:{minute:02d} {part}")
    if minute == 0:
        forms += [f"{h} {part}", f"{word_h} o'clock {part}", f"{word_h} {part}"]
    else:
        forms.append(f"{word_h} {MINUTE_WORDS[minute]} {part}")
    if hour == 12 and minute == 0:
        forms += ["noon", "12 noon", "midday"]
    if ampm_implied:
        forms.append(f"{h}:{minute:02d}")
        if minute == 0:
            forms += [f"{word_h} o'clock", f"{h} o'clock", f"{word_h}"]
        elif minute == 30:
            forms += [f"half past {word_h}", f"{word_h} thirty"]
        elif minute == 15:
            forms += [f"quarter past {word_h}", f"{word_h} fifteen"]
        else:
            forms += [f"quarter to {NUMBER_WORDS[spoken_hour(hour + 1)]}", f"{word_h} forty-five"]
    return forms


def time_phrase(rng: random.Random, hour: int, minute: int, split: str) -> str:
    """One way of saying hour:minute; (time, form) pairs are split between train and held-out by a stable hash."""
    implied = 8 <= hour <= 19  # the bare hour means 8-11 a.m. or 12-7 p.m.
    forms = time_forms(hour, minute, implied)
    held = [f for f in forms if stable_hash(f"{hour}:{minute}|{f}") % HELDOUT_EVERY == 0]
    pool = held if split == "heldout" else [f for f in forms if f not in held]
    return rng.choice(pool or forms)


def day_phrase(rng: random.Random, day: str) -> str:
    """How a caller names `day` (today, tomorrow or a weekday)."""
    if day in ("today", "tomorrow"):
        return rng.choice([day, day, f"for {day}", "later today" if day == "today" else "tomorrow"])
    d = day.capitalize()
    return rng.choice([f"on {d}", f"on {d}", f"this {d}", f"next {d}", f"{d}", f"this coming {d}"])


@functools.cache
def chatterbot_lines(categories: tuple[str, ...], split: str) -> list[str]:
    """The first line of each conversation of the chatterbot-corpus categories (user-side utterances)."""
    root = Path(chatterbot_corpus.__file__).parent / "data" / "english"
    lines = []
    for category in categories:
        data = yaml.safe_load((root / f"{category}.yml").read_text(encoding="utf-8"))
        for conv in data.get("conversations", []):
            first = str(conv[0]).strip() if conv else ""
            if 3 <= len(first) <= 80 and first not in lines:
                lines.append(first)
    return [x for x in lines if (stable_hash(x) % HELDOUT_EVERY == 0) == (split == "heldout")]
