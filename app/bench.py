"""End-to-end latency benchmark: spoken questions through the whole pipeline, with and without drafting.

    python -m app.bench [--llm-model DIR] [--repeats 3]

Each question is synthesized with the bundled Piper voice, streamed through a Session at real-time pace (so the
end-of-turn silence is real), and the per-stage latencies of the turn are collected. The same questions run under
each policy (POLICIES: no drafting, the baseline; drafting during the silence; a short first phrase as the
reply's first audio; and the language model's end-of-turn judgement, speech.endpoint) in the same process; the
table gives medians and ratios to the baseline.
"""
import argparse
import asyncio
import dataclasses
import statistics
import tempfile

import numpy as np

from app.commands.common import study
from app.pipeline.services import Services, served_threads
from app.pipeline.session import SessionOptions
from app.settings import from_env
from app.transports.file import converse
from speech.audio import SAMPLE_RATE_HZ, resample

QUESTIONS = (
    "Hi, what time do you open on Saturday?",
    "How much is a haircut?",
    "Can I book a haircut for tomorrow at ten in the morning? My name is Jordan Avery.",
    "What's your address?",
)
METRICS = ("end_of_turn_delay_ms", "asr_ms", "llm_ttft_ms", "tts_ttfb_ms", "send_ms", "e2e_latency_ms", "llm_ms")


# (column, SessionOptions changes): the first column is the baseline of the ratios
POLICIES = (
    ("no drafting", {"speculate_ms": None, "first_phrase_words": None, "end_of_turn": None}),
    ("drafting", {"first_phrase_words": None, "end_of_turn": None}),
    ("+ first phrase", {"end_of_turn": None}),
    ("+ LM end of turn", {}),
)


def run(services: Services, audio: list[np.ndarray], changes: dict, repeats: int) -> dict[str, list[float]]:
    """Per-metric samples over repeats x questions, each question in a fresh session."""
    samples = {m: [] for m in METRICS}
    options = dataclasses.replace(SessionOptions(), **changes)
    for _ in range(repeats):
        # each round guesses from its own replies only: a repeat of the same questions would guess its replies whole
        # from the round before (llm.drafter), which callers asking different things would not
        services.engine.drafter.forget()
        for question in audio:
            result = asyncio.run(converse(services, question, realtime=True, options=options))
            for metric in METRICS:
                if metric in result["metrics"]:
                    samples[metric].append(result["metrics"][metric])
    return samples


def table(columns: dict[str, dict]) -> str:
    """Medians per metric and policy, and each policy's ratio to the first."""
    names = list(columns)
    header = f"| {'stage (median ms)':<22} | " + " | ".join(f"{n:>14}" for n in names) + " | " + \
        " | ".join(f"{'ratio ' + str(i + 1):>8}" for i in range(1, len(names))) + " |"
    rows = [header, "|" + "|".join("-" * (len(cell) + 2) for cell in header.split("|")[1:-1]) + "|"]
    for metric in METRICS:
        medians = [statistics.median(columns[n][metric]) if columns[n][metric] else float("nan") for n in names]
        ratios = [m / medians[0] if medians[0] else float("nan") for m in medians[1:]]
        rows.append(f"| {metric:<22} | " + " | ".join(f"{m:>14.1f}" for m in medians) + " | " +
                    " | ".join(f"{r:>8.2f}" for r in ratios) + " |")
    return "\n".join(rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm-model", help="checkpoint directory (default: the embedded model)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        settings = from_env().replace(llm_model=args.llm_model, db_path=f"{tmp}/bench.sqlite3")
        services = Services.load(settings)
        threads = served_threads(services)
        study(services)
        services.warm_up()
        tts = services.tts
        audio = [resample(tts.synthesize(q), tts.sample_rate_hz, SAMPLE_RATE_HZ) for q in QUESTIONS]
        columns = {name: run(services, audio, changes, args.repeats) for name, changes in POLICIES}
        services.shutdown()
    n = len(columns[POLICIES[0][0]]["e2e_latency_ms"])
    print(f"# {len(QUESTIONS)} spoken questions x {args.repeats}, real-time input, {n} turns per column; "
          f"LLM {settings.llm_model}; {threads}")
    print("# " + "; ".join(f"{i + 1}: {name}" for i, (name, _) in enumerate(POLICIES)))
    print(table(columns))


if __name__ == "__main__":
    main()
