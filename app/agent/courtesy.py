"""The parts of a caller's turn that a courtesy around its words may hide: "Joaquin Santos, thanks." is "Joaquin
Santos." (app.agent.weighed asks the model again about these parts)."""
import re

from app.agent.words import SENTENCE_WORDS

_CLAUSE_END = re.compile(r"[,;.?!]+(?=\s)")


def leading_parts(text: str, most_words: int) -> list[str]:
    """`text` without its last clause, then without its last two, and so on, longest first, while the words left
    out are at most `most_words` and some remain: "Joaquin Santos, thanks, thanks." -> ["Joaquin Santos, thanks.",
    "Joaquin Santos."]. A clause ends at a comma or a sentence end; each part ends as a sentence does, as a speech
    recognizer writes it."""
    text = text.strip()
    parts = []
    for cut in reversed(list(_CLAUSE_END.finditer(text))):
        lead = text[:cut.start()].strip()
        if not SENTENCE_WORDS.search(lead) or len(SENTENCE_WORDS.findall(text[cut.start():])) > most_words:
            break
        parts.append(lead + (cut.group().strip(",;")[-1:] or "."))
    return parts


def courtesy_parts(text: str, most_words: int) -> list[str]:
    """The parts of `text` a courtesy around it may hide: `leading_parts`, then, when its first clause is shorter
    than the rest (a greeting, not the answer), the text without it and the leading parts of what is left, while
    the words left out in all are at most `most_words`: "Hello, Kenji, thanks." -> ["Hello, Kenji.", "Hello.",
    "Kenji, thanks.", "Kenji."]; "Joaquin Santos, thanks." -> ["Joaquin Santos."]."""
    text = text.strip()
    parts = leading_parts(text, most_words)
    first = _CLAUSE_END.search(text)
    if first is None:
        return parts
    rest, dropped = text[first.end():].strip(), len(SENTENCE_WORDS.findall(text[:first.start()]))
    if 0 < dropped < min(most_words, len(SENTENCE_WORDS.findall(rest))):
        parts += [rest, *leading_parts(rest, most_words - dropped)]
    return parts
