"""Word error rate for ASR checks: (substitutions + deletions + insertions) / reference words."""
import re


def normalize_words(text: str) -> list[str]:
    """Lower-case words without punctuation ("Tuesday," -> "tuesday", "I'd" -> "i'd")."""
    return re.findall(r"[a-z0-9']+", text.lower().replace("-", " "))


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
