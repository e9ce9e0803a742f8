"""End-to-end latency benchmark: spoken questions through the whole pipeline, with and without drafting.

    python -m app.bench [--llm-model DIR] [--repeats 3]

Each question is synthesized with the bundled Piper voice, streamed through a Session at real-time pace (so the
end-of-turn silence is real), and the per-stage latencies of the turn are collected. The same questions run with
drafting during the silence off (the baseline) and on, in the same process; the table gives medians and ratios.
"""
import argparse
import asyncio
import dataclasses
import statistics
import tempfile

import numpy as np

from app.commands.converse import converse
from app.services import Services
from app.session import SessionOptions
from app.settings import from_env
from speech.audio import SAMPLE_RATE_HZ, resample

QUESTIONS = (
    "Hi, what time do you open on Saturday?",
    "How much is a haircut?",
    "Can I book a haircut for tomorrow at ten in the morning? My name is Jordan Avery.",
    "What's your address?",
)
METRICS = ("end_of_turn_delay_ms", "asr_ms", "llm_ttft_ms", "tts_ttfb_ms", "send_ms", "e2e_latency_ms", "llm_ms")


def run(services: Services, audio: list[np.ndarray], speculate_ms, repeats: int) -> dict[str, list[float]]:
    """Per-metric samples over repeats x questions, each question in a fresh session."""
    samples = {m: [] for m in METRICS}
    options = dataclasses.replace(SessionOptions(), speculate_ms=speculate_ms)
    for _ in range(repeats):
        for question in audio:
            result = asyncio.run(converse(services, question, realtime=True, options=options))
            for metric in METRICS:
                if metric in result["metrics"]:
                    samples[metric].append(result["metrics"][metric])
    return samples


def table(baseline: dict, drafted: dict) -> str:
    rows = [f"| {'stage (median ms)':<22} | {'no drafting':>11} | {'drafting':>9} | {'ratio':>6} |",
            f"| {'-' * 22} | {'-' * 11} | {'-' * 9} | {'-' * 6} |"]
    for metric in METRICS:
        a = statistics.median(baseline[metric]) if baseline[metric] else float("nan")
        b = statistics.median(drafted[metric]) if drafted[metric] else float("nan")
        ratio = b / a if a else float("nan")
        rows.append(f"| {metric:<22} | {a:>11.1f} | {b:>9.1f} | {ratio:>6.2f} |")
    return "\n".join(rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm-model", help="checkpoint directory (default: the embedded model)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        settings = from_env().replace(llm_model=args.llm_model, db_path=f"{tmp}/bench.sqlite3")
        services = Services.load(settings)
        services.warm_up()
        tts = services.tts
        audio = [resample(tts.synthesize(q), tts.sample_rate_hz, SAMPLE_RATE_HZ) for q in QUESTIONS]
        baseline = run(services, audio, None, args.repeats)
        drafted = run(services, audio, SessionOptions().speculate_ms, args.repeats)
        services.shutdown()
    n = len(baseline["e2e_latency_ms"])
    print(f"# {len(QUESTIONS)} spoken questions x {args.repeats}, real-time input, {n} turns per column; "
          f"LLM {settings.llm_model}")
    print(table(baseline, drafted))


if __name__ == "__main__":
    main()
