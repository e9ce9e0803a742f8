"""Speech-stage measurements, printed as tables: `python -m speech.bench [vad|asr|tts|endpoint]`.

vad: endpointing on Piper speech with mid-sentence pauses and added noise, over aggressiveness x silence_ms.
asr: transcribe latency for short utterances, 10 s encoder window vs Whisper's 30 s.
tts: time to the first clause's audio vs the whole reply.
endpoint: the end-of-turn policies (speech.endpoint) on the labeled set of speech.endpoint_set: silence waited
after complete turns, share of paused turns cut off, CPU ms per decision; the plain 600 ms VAD is the baseline.
vocabulary: Whisper with the business's words as its prompt, and without (the baseline), on callers of two
businesses (speech.vocabulary_set): WER, the business's words missed and made up, noise alone heard as words.
"""
import argparse
import functools
import statistics
import time
from dataclasses import replace

import numpy as np

from speech import endpoint_set, vocabulary_set
from speech.asr import AsrOptions, Transcriber
from speech.audio import SAMPLE_RATE_HZ, frames, resample
from speech.endpoint import EndpointPolicy, SmartTurn
from speech.endpoint_set import add_noise, trimmed
from speech.tts import Synthesizer
from speech.vad import SpeechEnd, SpeechStart, TurnDetector, VadConfig, detect_turns
from speech.wer import word_error_rate

# Each turn is spoken clause by clause with a pause between clauses, like a person thinking mid-sentence.
TURNS = [
    ["I'd like to book a haircut", "for next Tuesday afternoon"],
    ["Can you tell me", "what time you open", "on Saturday morning?"],
    ["My name is Anna Berg", "and my number is five five five, one two three four."],
    ["Actually", "could we make that", "a little later in the day?"],
    ["Yes please", "that works for me."],
    ["I need to cancel my appointment", "because something came up at work."],
]
PAUSES_MS = (300, 500, 700)
SNRS_DB = (None, 20, 10)   # None = clean; noise is pinkish, steady
EDGE_MS = 1_000            # silence before and after each turn
_VOICED_LEVEL = 500        # |int16| above this counts as speech when trimming Piper's edges


def _speech(synth: Synthesizer, text: str) -> np.ndarray:
    """Piper speech at 16 kHz with its own leading and trailing silence trimmed."""
    return trimmed(resample(synth.synthesize(text), synth.sample_rate_hz, SAMPLE_RATE_HZ))


def _turn_audio(clauses: list[np.ndarray], pause_ms: int) -> tuple[np.ndarray, float, float]:
    """(audio, speech start ms, speech end ms): clauses joined by pause_ms of silence, EDGE_MS around."""
    gap = np.zeros(pause_ms * SAMPLE_RATE_HZ // 1000, dtype=np.int16)
    edge = np.zeros(EDGE_MS * SAMPLE_RATE_HZ // 1000, dtype=np.int16)
    speech = np.concatenate([part for clause in clauses for part in (clause, gap)][:-1])
    return np.concatenate([edge, speech, edge]), EDGE_MS, EDGE_MS + speech.size * 1000 / SAMPLE_RATE_HZ


def bench_vad() -> None:
    synth = Synthesizer()
    rng = np.random.default_rng(0)
    spoken = [[_speech(synth, c) for c in clauses] for clauses in TURNS]
    loud = np.concatenate([c for clauses in spoken for c in clauses]).astype(np.float64)
    speech_rms = np.sqrt(np.mean(loud[np.abs(loud) > _VOICED_LEVEL] ** 2))
    noise_levels = {snr: 0.0 if snr is None else speech_rms / 10 ** (snr / 20) for snr in SNRS_DB}
    cases = [(add_noise(audio, noise_levels[snr], rng), start, end, pause)
             for pause in PAUSES_MS for snr in SNRS_DB
             for audio, start, end in (_turn_audio(clauses, pause) for clauses in spoken)]
    noise_only = [add_noise(np.zeros(10 * SAMPLE_RATE_HZ, np.int16), level, rng)
                  for level in noise_levels.values() if level]
    print(f"{len(cases)} turns: {len(TURNS)} texts x pauses {PAUSES_MS} ms x SNR {SNRS_DB} dB "
          f"(speech RMS {speech_rms:.0f})")
    print("cut% = turns split at a mid-sentence pause of that length; miss% = turn never ended;")
    print("end = endpoint decision - true speech end (median, p90); head = audio kept before the true onset;")
    print("false = speech_starts per minute of noise alone")
    print(f"{'aggr':>4} {'silence':>7} " + " ".join(f"{'cut%@' + str(p):>9}" for p in PAUSES_MS)
          + f" {'miss%':>6} {'end ms':>7} {'p90':>5} {'head ms':>7} {'false':>6}")
    for aggressiveness in (1, 2, 3):
        for silence_ms in (300, 400, 500, 600, 700, 800):
            config = VadConfig(aggressiveness=aggressiveness, silence_ms=silence_ms)
            print(_vad_row(config, cases, noise_only))


def _vad_row(config: VadConfig, cases, noise_only) -> str:
    cuts = {p: 0 for p in PAUSES_MS}
    misses, end_delays, heads = 0, [], []
    for audio, start_ms, end_ms, pause in cases:
        ends = [e for e in detect_turns(audio, config) if isinstance(e, SpeechEnd)]
        if not ends:
            misses += 1
            continue
        cuts[pause] += any(e.time_ms < end_ms for e in ends)
        end_delays.append(ends[-1].time_ms - end_ms)
        # The first utterance's audio ends tail_ms after its last voiced frame.
        utterance_start_ms = ends[0].last_voiced_ms + config.tail_ms - ends[0].audio.size * 1000 / SAMPLE_RATE_HZ
        heads.append(start_ms - utterance_start_ms)
    noise_minutes = sum(a.size for a in noise_only) / SAMPLE_RATE_HZ / 60
    false_starts = sum(isinstance(e, SpeechStart) for a in noise_only for e in detect_turns(a, config))
    per_pause = len(cases) // len(PAUSES_MS)
    cut_cols = " ".join(f"{100 * cuts[p] / per_pause:>9.0f}" for p in PAUSES_MS)
    median = statistics.median(end_delays) if end_delays else float("nan")
    p90 = float(np.percentile(end_delays, 90)) if end_delays else float("nan")
    head = statistics.median(heads) if heads else float("nan")
    return (f"{config.aggressiveness:>4} {config.silence_ms:>7} {cut_cols} {100 * misses / len(cases):>6.0f} "
            f"{median:>7.0f} {p90:>5.0f} {head:>7.0f} {false_starts / noise_minutes:>6.1f}")


def bench_asr(repeats: int = 5) -> None:
    synth = Synthesizer()
    texts = ["Yes, that works.", "I'd like to book a haircut for Tuesday afternoon.",
             "Can you move my appointment to Friday at three thirty in the afternoon, please?"]
    clips = [resample(synth.synthesize(t), synth.sample_rate_hz, SAMPLE_RATE_HZ) for t in texts]
    print(f"{'window':>7} {'threads':>7} " + " ".join(f"{f'{c.size / SAMPLE_RATE_HZ:.1f} s':>8}" for c in clips)
          + "   (median transcribe ms)")
    baseline = None
    for window_s in (30.0, 10.0):
        for threads in (1, 2):
            transcriber = Transcriber(AsrOptions(window_s=window_s, cpu_threads=threads))
            transcriber.warm_up()
            medians = []
            for clip in clips:
                times = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    transcriber.transcribe(clip)
                    times.append(1000 * (time.perf_counter() - start))
                medians.append(statistics.median(times))
            baseline = baseline or medians
            ratios = " ".join(f"{b / m:.2f}x" for b, m in zip(baseline, medians))
            print(f"{window_s:>7.0f} {threads:>7} " + " ".join(f"{m:>8.0f}" for m in medians)
                  + f"   speed-up vs 30 s/1 thread: {ratios}")


def bench_tts(repeats: int = 5) -> None:
    synth = Synthesizer()
    synth.warm_up()
    reply = ("Sure, I can help with that. I have an opening on Tuesday at 3:30 p.m. with Maria, "
             "and another one on Wednesday morning at ten. Which one would you prefer?")
    first, whole, audio_s = [], [], 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        chunks = []
        for _, audio in synth.stream(reply):
            if not chunks:
                first.append(1000 * (time.perf_counter() - start))
            chunks.append(audio)
        whole.append(1000 * (time.perf_counter() - start))
        audio_s = sum(c.size for c in chunks) / synth.sample_rate_hz
    print(f"reply: {len(reply)} chars, {audio_s:.1f} s of audio")
    print(f"{'first clause ms':>16} {'whole reply ms':>15} {'ratio':>6} {'real-time factor':>17}")
    first_ms, whole_ms = statistics.median(first), statistics.median(whole)
    print(f"{first_ms:>16.0f} {whole_ms:>15.0f} {whole_ms / first_ms:>5.1f}x {whole_ms / 1000 / audio_s:>17.3f}")


# --- end of turn -------------------------------------------------------------------------------------------

LM_POLICY = EndpointPolicy()
SMART_TURN_POLICY = EndpointPolicy(complete_at=0.5, unfinished_below=0.1)
# The LM's judgement decided at other silences than the default's check_ms (frames are 20 ms): a decision that comes
# before a pause ends cuts the paused turn off (README, "End of turn").
DECIDED_AT_MS = (200, 260, 300, 400)


def bench_endpoint(llm_model: str = "llm/weights/parley-smollm2") -> None:
    # deferred: the LM's signal needs the LM, loaded by this command only; speech/ itself never imports llm
    import torch

    import llm
    from app.agent.profile import load_profile   # deferred: nor app; the business whose words Whisper expects
    from app.agent.prompt import recognizer_prompt   # deferred too: those words, as serve gives them to Whisper
    from app.pipeline.services import asr_threads, idle_speech_threads   # serve's threads
    from app.pipeline.session import SessionOptions   # where a lone caller's draft starts

    # the recognizer `parley serve` has: the default business's words as Whisper's prompt for the transcript, none
    # for the words the judgement reads (app.pipeline.drafting)
    synth = Synthesizer(varied=False)
    asr = Transcriber(AsrOptions(cpu_threads=asr_threads(), prompt=recognizer_prompt(load_profile())))
    try:
        smart = SmartTurn()
    except FileNotFoundError as exc:   # an optional row: its model comes from a package Parley does not need
        print(f"(Smart Turn left out: {exc})")
        smart = None
    engine = llm.load(llm_model, device="cpu")
    torch.set_num_threads(idle_speech_threads(engine, asr.options.cpu_threads))
    print(f"(threads as `parley serve` has them in a silence: Whisper {asr.options.cpu_threads}, "
          f"the language model {torch.get_num_threads()})")
    cases = endpoint_set.build(synth)
    # the signals are asked where a draft starts in a process with nothing else to do (a lone caller)
    ask_ms = SessionOptions().speculate_idle_ms
    checks = [_endpoint_checks(case, asr, smart, engine, ask_ms) for case in cases]
    voices = sorted({c.voice for c in cases})
    print(f"{len(cases)} turns: {len(endpoint_set.COMPLETE)} complete and {len(endpoint_set.PAUSED)} paused "
          f"(pauses {endpoint_set.PAUSES_MS} ms) x voices {voices} x SNR {endpoint_set.SNRS_DB} dB")
    print(f"signals asked at {ask_ms} ms of silence (a lone caller's draft starts), a turn judged complete ended "
          f"from {LM_POLICY.check_ms} ms; wait = silence from the end of speech to the endpoint after complete turns "
          "(median, p90), the decision's CPU time here included (the turn holds until it is known); free: were the "
          "decision instant, as on a GPU; cut% = paused turns ended in their pause; split% = complete turns ended "
          "early; ms = CPU per decision (median)")
    policies = {
        "fixed 600 ms VAD (today)": lambda c: VadConfig().silence_ms,
        "LM, unprompted (default)": lambda c: LM_POLICY.wait_ms(c["lm"]),
        "LM, prompted Whisper": lambda c: LM_POLICY.wait_ms(c["lm_prompted"]),
        "Smart Turn (audio)": lambda c: SMART_TURN_POLICY.wait_ms(c["smart"]),
        "LM and Smart Turn agree": lambda c: max(LM_POLICY.wait_ms(c["lm"]), SMART_TURN_POLICY.wait_ms(c["smart"])),
        "LM or Smart Turn": lambda c: min(LM_POLICY.wait_ms(c["lm"]), SMART_TURN_POLICY.wait_ms(c["smart"])),
    }
    cost = {"fixed 600 ms VAD (today)": lambda c: 0.0,
            # the draft's transcript first (the encoding both decodes read), then the words the judgement reads
            "LM, unprompted (default)": lambda c: c["asr_ms"] + c["plain_asr_ms"] + c["lm_ms"],
            "LM, prompted Whisper": lambda c: c["asr_ms"] + c["prompted_lm_ms"],
            "Smart Turn (audio)": lambda c: c["smart_ms"]}
    cost["LM and Smart Turn agree"] = cost["LM or Smart Turn"] = \
        lambda c: cost["LM, unprompted (default)"](c) + c["smart_ms"]
    print(f"{'policy':<28} {'wait ms':>8} {'p90':>6} {'free':>6} {'cut%':>6} {'split%':>7} {'ms':>6}   cut% by pause "
          + " ".join(f"{p:>5}" for p in endpoint_set.PAUSES_MS))
    shown = [name for name in policies if smart is not None or "Smart Turn" not in name]
    for name in shown:
        print(_endpoint_row(name, cases, checks, policies[name], cost[name], ask_ms))
    for ms in DECIDED_AT_MS:
        policy = replace(LM_POLICY, check_ms=ms)
        print(_endpoint_row(f"LM, decided from {ms} ms", cases, checks, lambda c, p=policy: p.wait_ms(c["lm"]),
                            cost["LM, unprompted (default)"], ask_ms))
    for voice in voices:
        mine = [i for i, c in enumerate(cases) if c.voice == voice]
        print(f"-- {voice}")
        for name in [n for n in shown if " and " not in n and " or " not in n]:
            print(_endpoint_row(name, [cases[i] for i in mine], [checks[i] for i in mine], policies[name],
                                cost[name], ask_ms))


def _endpoint_checks(case, asr, smart, engine, ask_ms: int) -> list[dict]:
    """Every point of the turn where the silence reached ask_ms: the signals there (the LM's on what `asr` wrote
    without its prompt, as `parley serve` judges, and with it), and how long that silence really lasted (until
    speech resumed; the last one has no end)."""
    config = VadConfig(silence_ms=LM_POLICY.max_silence_ms + 100)
    detector, checks, silence_ms = TurnDetector(config), [], 0.0
    for frame in frames(case.audio):
        ended = any(isinstance(e, SpeechEnd) for e in detector.push(frame))
        if checks and checks[-1]["open"]:
            if ended:
                checks[-1]["open"] = False                     # the turn's last silence: it never ends
            elif detector.trailing_silence_ms == 0:
                checks[-1]["open"] = False                     # speech resumed: that silence is over
                checks[-1]["silence_ms"] = silence_ms
            else:
                silence_ms = detector.trailing_silence_ms
        if detector.in_speech and detector.trailing_silence_ms == ask_ms:
            audio = detector.endpoint_audio()
            text, prompted_lm, asr_ms, prompted_lm_ms = _judged(asr.transcribe, engine, audio)
            _, lm, plain_asr_ms, lm_ms = _judged(functools.partial(asr.transcribe, prompted=False), engine, audio, text)
            p_smart, smart_ms = _timed(smart.probability, audio) if smart is not None else (0.0, 0.0)
            silence_start_ms = detector.time_ms - detector.trailing_silence_ms
            checks.append({"lm": lm, "smart": p_smart, "asr_ms": asr_ms, "lm_ms": lm_ms, "smart_ms": smart_ms,
                           "lm_prompted": prompted_lm, "plain_asr_ms": plain_asr_ms, "prompted_lm_ms": prompted_lm_ms,
                           "text": text, "silence_ms": float("inf"), "open": True,
                           "final": silence_start_ms >= case.end_ms - 150})   # (a soft last syllable)
    return checks


def _judged(transcribe, engine, audio, fallback: str = "") -> tuple[str, float, float, float]:
    """What `transcribe` wrote of the audio, the LM's P(complete) for it (or for `fallback` where it wrote nothing,
    as app.pipeline.drafting judges; 0 for no words), and the CPU ms of each."""
    text, asr_ms = _timed(transcribe, audio)
    judged = text.strip() or fallback.strip()
    lm, lm_ms = _timed(engine.end_of_turn_probability, judged) if judged else (0.0, 0.0)
    return text, lm, asr_ms, lm_ms


def _timed(f, *args) -> tuple:
    """(f(*args), its CPU ms)."""
    start = time.perf_counter()
    result = f(*args)
    return result, (time.perf_counter() - start) * 1000


def _endpoint_row(name, cases, checks, wait, cost, ask_ms: int) -> str:
    """A policy over the set. As in app.pipeline.session: a judgement is known ask_ms + its CPU time into a silence;
    until then the turn holds, so a silence ends the turn at max(the wait chosen, that time), if it lasts."""
    def end(c) -> float:
        return max(wait(c), ask_ms + cost(c))

    waits, free, cut, split, costs = [], [], {p: [0, 0] for p in endpoint_set.PAUSES_MS}, [0, 0], []
    for case, points in zip(cases, checks):
        early = any(not c["final"] and end(c) < c["silence_ms"] for c in points)
        costs += [cost(c) for c in points]
        if case.pause_ms is not None:
            cut[case.pause_ms][0] += early
            cut[case.pause_ms][1] += 1
            continue
        split[0] += early
        split[1] += 1
        final = next((c for c in points if c["final"]), None)
        if final is not None and not early:
            waits.append(end(final))
            free.append(wait(final))
    paused = sum(n for n, _ in cut.values()), sum(t for _, t in cut.values())
    by_pause = " ".join(f"{100 * n / max(t, 1):>5.0f}" for n, t in cut.values())
    median = statistics.median(waits) if waits else float("nan")
    p90 = float(np.percentile(waits, 90)) if waits else float("nan")
    free_median = statistics.median(free) if free else float("nan")
    return (f"{name:<28} {median:>8.0f} {p90:>6.0f} {free_median:>6.0f} {100 * paused[0] / max(paused[1], 1):>6.1f} "
            f"{100 * split[0] / max(split[1], 1):>7.1f} {statistics.median(costs) if costs else 0:>6.0f}   "
            f"{'':13} {by_pause}")


def bench_vocabulary() -> None:
    # deferred, a benchmark's imports: the business's words and the times read back as the server reads them;
    # speech/ itself never imports app
    from app.agent.profile import load_profile
    from app.agent.prompt import recognizer_prompt
    from app.agent.spoken_times import times_in

    clips = vocabulary_set.build(Synthesizer(varied=False))
    noise = vocabulary_set.noise_only()
    print(f"{len(clips)} clips ({', '.join(sorted({c.voice for c in clips}))}; clean and "
          f"{', '.join(f'{s} dB' for s in vocabulary_set.SNRS_DB if s is not None)}), {len(noise)} of noise alone")
    print(f"{'business':<28} {'prompt':<11} {'WER':>6} {'clean':>6} {'noisy':>6} {'words missed':>13} "
          f"{'made up':>8} {'times heard':>12} {'noise heard':>12} {'ms':>5}")
    for path in vocabulary_set.SENTENCES:
        profile = load_profile(path)
        terms = [term for s in profile.services for term in (s.name, *s.aliases)]
        mine = [c for c in clips if c.profile == path]
        for name, prompt in (("none", ""), ("business", recognizer_prompt(profile))):
            transcriber = Transcriber(AsrOptions(cpu_threads=1, prompt=prompt))
            transcriber.warm_up()
            rates, costs, counts, times = {None: [], "noisy": []}, [], [0, 0, 0], [0, 0]
            for clip in mine:
                start = time.perf_counter()
                heard = transcriber.transcribe(clip.audio)
                costs.append(1000 * (time.perf_counter() - start))
                rates[None if clip.snr_db is None else "noisy"].append(word_error_rate(clip.text, heard))
                counts = [a + b for a, b in zip(counts, vocabulary_set.term_counts(clip.text, heard, terms))]
                meant = times_in(clip.text, clock_only=True)
                times = [times[0] + bool(meant), times[1] + bool(meant & times_in(heard, clock_only=True))]
            heard_noise = sum(bool(transcriber.transcribe(n)) for n in noise)
            said, missed, made_up = counts
            print(f"{profile.name[:28]:<28} {name:<11} {statistics.mean(rates[None] + rates['noisy']):>6.3f} "
                  f"{statistics.mean(rates[None]):>6.3f} {statistics.mean(rates['noisy']):>6.3f} "
                  f"{f'{missed}/{said}':>13} {made_up:>8} {f'{times[1]}/{times[0]}':>12} "
                  f"{f'{heard_noise}/{len(noise)}':>12} {statistics.median(costs):>5.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="*", choices=["vad", "asr", "tts", "endpoint", "vocabulary"],
                        default=["vad", "asr", "tts"])
    for which in parser.parse_args().which:
        print(f"== {which}")
        {"vad": bench_vad, "asr": bench_asr, "tts": bench_tts, "endpoint": bench_endpoint,
         "vocabulary": bench_vocabulary}[which]()


if __name__ == "__main__":
    main()
