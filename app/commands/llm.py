"""`parley llm generate` and `parley llm bench`: the diffusion LM on its own, from a checkpoint directory."""
import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path


def _add_model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", metavar="DIR", help="parley, LLaDA or Dream checkpoint directory, adapter or .gguf "
                                                  "(default: PARLEY_LLM_MODEL, else the embedded model)")
    p.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16", "int8"),
                   help="default: the checkpoint's (an adapter on the CPU: bf16 weights where the CPU has AMX, else "
                        "fp16; float16 = fp16 weights with fp32 products, bfloat16 = bf16 weights and products, "
                        "int8 = int8 weights; llm.quant)")
    p.add_argument("--threads", type=int, help="torch CPU threads (1 is fastest for small models on busy CPUs)")
    p.add_argument("--system", default=None, help="system prompt")
    p.add_argument("--prompt", default="Hi! What time do you open tomorrow?", help="the user's message")
    p.add_argument("--max-new-tokens", type=int, help="default: llm.generate.DecodeOptions's (96)")
    p.add_argument("--block-length", type=int, help="default: 4 for a left-to-right base (block diffusion), else 32")
    p.add_argument("--threshold", type=float, help="commit tokens at least this confident (default 0.9)")


def register(subparsers) -> None:
    llm = subparsers.add_parser("llm", help="run the diffusion language model on its own")
    commands = llm.add_subparsers(dest="llm_command", required=True)

    gen = commands.add_parser("generate", help="print the reply to --prompt and its decoding stats")
    _add_model_flags(gen)
    gen.add_argument("--steps", type=int, help="fixed passes per block instead of --threshold")
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--cache", choices=("prefix", "dual", "none", "block"),
                     help="KV cache mode (default: block for a left-to-right base such as SmolLM2, else prefix)")
    gen.add_argument("--seed", type=int)
    gen.set_defaults(func=run_generate)

    bench = commands.add_parser("bench", help="diffusion decoding vs an autoregressive baseline, same weights")
    _add_model_flags(bench)
    bench.add_argument("--steps", type=int, default=8, help="passes per block for the fixed-steps rows")
    bench.add_argument("--repeats", type=int, default=5, help="timed runs per method (median reported)")
    bench.add_argument("--ignore-eos", action="store_true", help="always fill --max-new-tokens")
    bench.add_argument("--json", action="store_true", help="print the rows as JSON")
    bench.add_argument("--profile", metavar="YAML", help="a business (a YAML, or 'default'): its compact system "
                                                         "prompt unless --system, and a last row with the guesses "
                                                         "of the dialogues written for it, as `parley serve` has")
    bench.add_argument("--callers", metavar="N,N", help="a block engine: also N replies at once against one after "
                                                        "another, sharing passes (e.g. 1,2,4)")
    bench.set_defaults(func=run_bench)


def _messages(args) -> list[dict]:
    messages = [{"role": "system", "content": args.system}] if args.system else []
    return messages + [{"role": "user", "content": args.prompt}]


def _load(args):
    """The Engine for --model, or None after printing why it cannot be loaded."""
    import torch

    import llm
    from app.settings import from_env

    if args.threads:
        torch.set_num_threads(args.threads)
    path = Path(args.model or from_env().llm_model)
    if args.model is None and not path.is_dir():
        print(f"parley llm: no model at {path} yet: pass --model DIR", file=sys.stderr)
        return None
    try:
        return llm.load(path, device=args.device, dtype=args.dtype)
    except ValueError as exc:  # CheckpointError is one
        print(f"parley llm: {exc}", file=sys.stderr)
        return None


def _decoding(args, engine) -> dict:
    """The decoding flags given; the rest are llm.generate.DecodeOptions' (BlockOptions' block for a left-to-right
    base, which decodes by block diffusion)."""
    from llm.blockdiff import BlockOptions  # deferred: the model stack (see app/commands/__init__.py)
    from llm.generate import DecodeOptions

    given = {"max_new_tokens": args.max_new_tokens, "threshold": args.threshold}
    block = BlockOptions.block_length if engine.left_to_right else DecodeOptions.block_length
    return {k: v for k, v in given.items() if v is not None} | {"block_length": args.block_length or block}


def run_generate(args) -> int:
    engine = _load(args)
    if engine is None:
        return 2
    cache = args.cache or ("block" if engine.left_to_right else "prefix")
    extra = {} if cache == "block" else dict(steps=args.steps, temperature=args.temperature, seed=args.seed)
    try:
        gen = engine.generate(_messages(args), **_decoding(args, engine), use_cache=cache, **extra,
                              on_block=lambda text: print(text, end="", flush=True))
    except ValueError as exc:
        print(f"parley llm: {exc}", file=sys.stderr)
        return 2
    print()
    print(f"[{gen.tokens} tokens in {gen.passes} passes ({gen.tokens / max(gen.passes, 1):.2f} tokens/pass), "
          f"{1000 * gen.seconds:.1f} ms, first block {1000 * gen.first_block_s:.1f} ms, "
          f"{gen.tokens / gen.seconds:.1f} tokens/s, stopped: {gen.stopped}]")
    return 0


def run_bench(args) -> int:
    import torch

    from app.agent.profile import load_profile
    from app.agent.prompt import system_prompt
    from app.training.recipe import study as study_dialogues
    from llm.bench import BenchOptions, format_table
    from llm.bench import run_bench as bench

    profile = None
    if args.profile:  # before the model loads: a wrong path is one line, at once
        try:
            profile = load_profile(None if args.profile == "default" else args.profile)
        except ValueError as exc:
            print(f"parley llm: {exc}", file=sys.stderr)
            return 2
    engine = _load(args)
    if engine is None:
        return 2
    opts = BenchOptions(**_decoding(args, engine), steps=args.steps, repeats=args.repeats,
                        stop_at_eos=not args.ignore_eos)
    study = None
    if profile is not None:
        args.system = args.system or system_prompt(profile, None, engine.chat_style)
        study = lambda: study_dialogues(engine, profile)  # noqa: E731
    try:
        rows = bench(engine, _messages(args), opts, study)
    except ValueError as exc:
        print(f"parley llm: {exc}", file=sys.stderr)
        return 2
    from llm.quant import weight_format

    params_m = engine.model.args.n_params / 1e6
    where = f"{engine.device} {weight_format(engine.model)}, {torch.get_num_threads()} threads"
    if args.json:
        print(json.dumps({"model": str(args.model), "parameters_m": params_m, "device": where,
                          "prompt_tokens": len(engine.prompt_ids(_messages(args))), "options": asdict(opts),
                          "rows": rows}, indent=2))
        return 0
    header = (f"{engine.chat_style} model, {params_m:.1f}M parameters, {where}; "
              f"max_new_tokens={opts.max_new_tokens}, block_length={opts.block_length}, "
              f"median of {opts.repeats}")
    print(format_table(rows, header))
    if args.callers:
        return _bench_callers(args, engine, opts)
    return 0


def _bench_callers(args, engine, opts) -> int:
    """The callers table: the checkpoint's own decoding (the agent's: generation_config.json), N replies at once."""
    from app.agent.options import agent_options_for
    from app.settings import from_env
    from llm.bench import format_callers, run_callers
    from llm.blockdiff import BlockOptions

    if not engine.left_to_right:
        print("parley llm: --callers needs a block engine (a left-to-right base: an adapter or a .gguf)",
              file=sys.stderr)
        return 2
    agent = agent_options_for(args.model or from_env().llm_model)
    decode = BlockOptions(max_new_tokens=opts.max_new_tokens, block_length=agent.block_length,
                          threshold=agent.threshold, stop_at_eos=opts.stop_at_eos, draft_length=agent.draft_length)
    try:
        counts = [int(n) for n in args.callers.split(",")]
        rows = run_callers(engine, _messages(args), decode, counts, opts.repeats)
    except ValueError as exc:
        print(f"parley llm: --callers {args.callers}: {exc}", file=sys.stderr)
        return 2
    print(f"\ncallers at once (block_length={decode.block_length}, threshold={decode.threshold}, "
          f"draft_length={decode.draft_length}; median of {opts.repeats})")
    print(format_callers(rows))
    return 0
