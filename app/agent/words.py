"""How Parley compares words: a text's words folded and stemmed, a name's words, and where a phrase stands among
a text's words (in another order too). app.agent.said builds its rule of words said on these.
"""
import re
import unicodedata
from functools import lru_cache

import snowballstemmer

SENTENCE_WORDS = re.compile(r"[\w']+")
WRITTEN_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")  # letters and digits, with inner apostrophes (O'Brien)
POSSESSIVES = frozenset({"my", "our", "your", "his", "her", "their"})  # English's possessive determiners


@lru_cache(maxsize=4096)
def fold(text: str) -> str:
    """Lowercase, accents dropped: 'Sofía' -> 'sofia'. (Remembered: a turn's checks fold the same messages and the
    profile's names thousands of times.)"""
    text = unicodedata.normalize("NFKD", text.lower())
    return "".join(c for c in text if not unicodedata.combining(c))


def name_words(name: str) -> tuple[str, ...]:
    """A name's words as names are compared: lower case, accents dropped ("García Lopez" -> ("garcia", "lopez")); a
    recognizer writes a name with or without its accents."""
    return tuple(WRITTEN_WORD.findall(fold(name)))


def stands_in(words, phrase) -> bool:
    """Whether the words of `phrase` stand together, in order, in `words` (both lists or both tuples)."""
    return any(words[i:i + len(phrase)] == phrase for i in range(len(words) - len(phrase) + 1))


def holds(name: tuple[str, ...], part: tuple[str, ...]) -> bool:
    """Whether a name's words (`name_words`) hold every one of `part`'s, each as often as it is there."""
    left = list(name)
    for word in part:
        if word not in left:
            return False
        left.remove(word)
    return True


def stem(word: str) -> str:
    """A word less a plural or possessive ending, so that "Saturdays" says "saturday" and "kid's cut" says "kids
    cut"; both sides of a comparison are read the same way."""
    word = word.removesuffix("'s")
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def words_of(text: str) -> list[str]:
    """A text's words as values are compared: folded (`fold`), each `stem`med."""
    return list(_words_of(text))


@lru_cache(maxsize=4096)
def _words_of(text: str) -> tuple[str, ...]:
    return tuple(stem(w) for w in SENTENCE_WORDS.findall(fold(text)))


def value_words(value: str) -> set[str]:
    """The words of a value as `says` compares them: "Friday" and "fridays" are {"friday"}."""
    return set(words_of(value))


_ENGLISH = snowballstemmer.stemmer("english")


@lru_cache(maxsize=4096)
def root_of(word: str) -> str:
    """A word without its ending (Snowball's English stemmer)."""
    return _ENGLISH.stemWord(word)


def roots_of(words: list[str]) -> list[str]:
    """The words without their endings (Snowball's English stemmer: "colored", "coloring" -> "color")."""
    return [root_of(w) for w in words]


# English's function words by which a caller turns a service's name around, its last words first: "a haircut for a
# kid" (kids haircut), "a cleaning of my teeth" (teeth cleaning), "an adjustment on my brakes" (brake adjustment).
# Grammar's closed classes, the same for every business: prepositions, then maybe a determiner or a possessive.
_TURNED_BY = frozenset({"for", "of", "on"})
# a phrase's last word said first, then what it is: "my wheel is all wobbly" ("wobbly wheel"; "wheel's" reads
# "wheel", so "my wheel's wobbly" has none of these)
_BEING = frozenset({"is", "are", "was", "were", "got", "get", "gets", "went", "looks", "feels", "seems", "keeps"})
_DETERMINERS = POSSESSIVES | {"a", "an", "the", "this", "that", "these", "those", "some"}


def phrase_spans(words: list[str], phrase: list[str], roots: list[str] | None = None) -> list[tuple[int, int]]:
    """Where the words of `phrase` stand in `words` (`words_of`' both), as (start, end): a phrase of several words
    also with other endings (`roots`: `roots_of(words)`, given or computed): a service's name said as a verb's
    participle ("get my teeth cleaned": "teeth cleaning"); and turned around, its last words first, then one of
    `_TURNED_BY`, maybe one of `_DETERMINERS`, then the words before them ("a haircut for a kid": "kids haircut";
    "eye exams for kids": "kids eye exam"); or its last words first, then maybe one of `_BEING` and one more
    word, then the words before them ("my back wheel is all wobbly", "my wheel's wobbly": "wobbly wheel"; "I think
    my tooth is broken": "broken tooth"). A single word says itself only: as a verb it is seldom the service ("can
    you fill me in?" at a dentist's, "filling")."""
    n = len(phrase)
    spans = [(i, i + n) for i in range(len(words) - n + 1) if n and words[i:i + n] == phrase]
    if n < 2:
        return spans
    roots, wanted = roots if roots is not None else roots_of(words), roots_of(phrase)
    spans += [(i, i + n) for i in range(len(words) - n + 1) if roots[i:i + n] == wanted and (i, i + n) not in spans]
    for first in range(1, n):   # the words before wanted[first] go after the preposition
        last, before = wanted[first:], wanted[:first]
        for i in range(len(words) - len(last)):
            j = i + len(last)
            if roots[i:j] != last:
                continue
            if words[j] in _TURNED_BY:   # "a haircut for a kid"
                k = j + 1 + (j + 1 < len(words) and words[j + 1] in _DETERMINERS)
                if roots[k:k + first] == before:
                    spans.append((i, k + first))
            for k in [j] + ([j + 1, j + 2] if words[j] in _BEING else []):   # "my wheel is all wobbly"
                if roots[k:k + first] == before:
                    spans.append((i, k + first))
                    break
    return spans
