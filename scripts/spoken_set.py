"""A conversation set as a caller's voice would reach the agent: every caller turn spoken (the bundled Piper voice
or an espeak-ng voice), then transcribed by the recognizer `parley serve` runs (Whisper tiny.en with the business's
words as its prompt, or none), written back as the same set with the transcripts for turns.

    .venv/bin/python scripts/spoken_set.py ../shared/evalsets/frontdesk_dev.jsonl --voice en-us --out /tmp/dev.jsonl
    python3 ../shared/evalsets/check_dev.py --set /tmp/dev.jsonl

Each line of the set is a JSON object with "turns" (the caller's words); every other field is kept as it is. A turn
heard as nothing becomes "..." (the agent would have heard no turn at all). --prompt none transcribes without the
business's words, the way Parley did before 2026-12-04. A conversation's booked names ("db_before") are heard as
`parley serve` hears the names on its books (app.pipeline.names_heard); names booked during the conversation are
not (its turns are transcribed before any is answered).
"""
import argparse
import json
from pathlib import Path

import numpy as np

from app.agent.profile import load_profile
from app.agent.prompt import recognizer_prompt
from app.pipeline.names_heard import NamesHeard
from speech.asr import AsrOptions, Transcriber
from speech.audio import SAMPLE_RATE_HZ
from speech.endpoint_set import espeak_speaker, piper_speaker
from speech.tts import Synthesizer

EDGE_MS = 250   # silence before and after each turn, as a turn detector leaves it


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("set", help="a JSON-lines conversation set with 'turns'")
    parser.add_argument("--voice", default="piper", help="piper (bundled) or an espeak-ng voice, e.g. en-us, en-us+f3")
    parser.add_argument("--profile", help="the business whose words the recognizer expects (default: the shipped one)")
    parser.add_argument("--prompt", choices=["business", "none"], default="business")
    parser.add_argument("--out", required=True, help="where to write the transcribed set")
    args = parser.parse_args()

    speak = piper_speaker(Synthesizer(varied=False)) if args.voice == "piper" else espeak_speaker(args.voice)
    prompt = recognizer_prompt(load_profile(args.profile)) if args.prompt == "business" else ""
    transcriber = Transcriber(AsrOptions(prompt=prompt))
    edge = np.zeros(EDGE_MS * SAMPLE_RATE_HZ // 1000, np.int16)
    cases = [json.loads(line) for line in Path(args.set).read_text().splitlines() if line.strip()]
    with open(args.out, "w") as out:
        for case in cases:
            booked = [row["name"] for row in case.get("db_before", [])]
            recognizer = NamesHeard(transcriber, lambda: booked)
            heard = [recognizer.transcribe(np.concatenate([edge, speak(turn), edge])) for turn in case["turns"]]
            out.write(json.dumps(case | {"turns": [h or "..." for h in heard]}) + "\n")
            print(f"{case.get('id', '?')}: " + " | ".join(heard), flush=True)


if __name__ == "__main__":
    main()
