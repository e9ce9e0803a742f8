"""Word error rate of a transcript: (substitutions + deletions + insertions) / reference words."""
import re

# Whisper writes numbers either way ("seven" or "7"): compare them as digits.
_NUMBER_WORDS = {word: str(i) for i, word in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty".split())}
_NUMBER_WORDS.update({"thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70",
                      "eighty": "80", "ninety": "90", "hundred": "100"})


def normalize_words(text: str) -> list[str]:
    """Lower-case words without punctuation, number words as digits ("Seven," -> "7", "I'd" -> "i'd")."""
    words = re.findall(r"[a-z0-9']+", text.lower().replace("-", " "))
    return [_NUMBER_WORDS.get(word, word) for word in words]


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Levenshtein distance over normalized words, divided by the reference length."""
    ref, hyp = normalize_words(reference), normalize_words(hypothesis)
    if not ref:
        return float(bool(hyp))
    previous = list(range(len(hyp) + 1))  # distances from ref[:0] to each hyp prefix
    for i, ref_word in enumerate(ref, 1):
        current = [i]
        for j, hyp_word in enumerate(hyp, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ref_word != hyp_word)))
        previous = current
    return previous[-1] / len(ref)
