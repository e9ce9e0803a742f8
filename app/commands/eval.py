"""`parley eval`: the held-out front-desk benchmark of a model (tool calls, grounding, small talk, latency)."""
import dataclasses
import json
import sys

from app.commands.common import add_model_flags, settings_from


def register(subparsers) -> None:
    p = subparsers.add_parser("eval", help="score a model on held-out front-desk dialogues")
    p.add_argument("--dialogues", type=int, default=200, help="held-out dialogues to replay (each has 1-6 turns)")
    p.add_argument("--seed", type=int, default=0, help="seed of the held-out dialogues")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--block-length", type=int, help="override the decoding block length of the checkpoint")
    p.add_argument("--threshold", type=float, help="override the decoding confidence threshold of the checkpoint")
    p.add_argument("--cache", choices=("prefix", "dual", "none"),
                   help="override the sampler's KV cache mode of the checkpoint")
    p.add_argument("--free-calls", action="store_true",
                   help="decode tool calls without the tools' schemas (app.agent.schema_grammar), to measure what "
                        "they do")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument("--show-misses", action="store_true", help="print every failed turn, per metric")
    add_model_flags(p)
    p.set_defaults(func=run)


def run(args) -> int:
    import torch
    from tqdm import tqdm

    import llm
    from app.agent.options import agent_options_for
    from app.agent.profile import load_profile
    from app.training.evaluate import evaluate
    from app.training.recipe import study

    torch.set_num_threads(args.threads)
    settings = settings_from(args)
    try:
        profile = load_profile(settings.profile)
        engine = llm.load(settings.llm_model, device=settings.llm_device)
        options = agent_options_for(settings.llm_model)
        overrides = {"block_length": args.block_length, "threshold": args.threshold, "cache": args.cache}
        options = dataclasses.replace(options, **{k: v for k, v in overrides.items() if v is not None},
                                      tool_grammar=not args.free_calls)
        if options.draft_length and options.cache == "block":  # as `parley serve` starts (app.commands.common)
            study(engine, profile)
    except ValueError as exc:
        print(f"parley eval: {exc}", file=sys.stderr)
        return 2
    report = evaluate(engine, profile, args.dialogues, args.seed, options=options,
                      progress=lambda xs: tqdm(xs, desc="eval", unit="turn", dynamic_ncols=True))
    summary = report.summary()
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"held-out front desk, {args.dialogues} dialogues, model {settings.llm_model}, "
              f"{torch.get_num_threads()} CPU threads on {engine.device}, block_length {options.block_length}, "
              f"threshold {options.threshold}, cache {options.cache}, "
              f"tool calls {'held to the tools schemas' if options.holds_calls else 'free'}")
        # two decimals and the counts: a rate just under a target (283 of 298 is 94.97%) must not print as it
        print(f"{'metric':<28}{'value':>10}{'right':>8}{'turns':>8}")
        rows = [("tool-call exact match", report.tool_calls), ("no call when none needed", report.no_call),
                ("grounded replies", report.grounded), ("small talk fits", report.small_talk)]
        for name, tally in rows:
            print(f"{name:<28}{100 * tally.rate:>9.2f}%{tally.hits:>8}{tally.total:>8}")
        for key in ("turn_ms_median", "turn_ms_p95", "reply_ms_median", "reply_ms_p95"):
            print(f"{'LLM ' + key.replace('_ms_', ' ms ').replace('_', ' '):<28}{summary[key]:>10.1f}")
        print(f"{'passes per token':<28}{summary['passes_per_token']:>10.3f}")
        print(f"{'tokens per pass':<28}{summary['tokens_per_pass']:>10.2f}")
    if args.show_misses:
        for name in ("tool_calls", "no_call", "grounded", "small_talk"):
            for miss in getattr(report, name).misses:
                print(f"[{name}] {json.dumps(miss, default=str)}")
    return 0
