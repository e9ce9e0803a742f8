"""`parley train`: write front-desk dialogues for a profile, train a tokenizer and a small masked-diffusion model
(the recipe is app.training.recipe)."""
import argparse
from pathlib import Path

from app.settings import FRONTDESK_LLM_DIR


def register(subparsers) -> None:
    p = subparsers.add_parser("train", help="train the embedded front-desk model for a business profile")
    p.add_argument("--profile", help="business profile YAML (default: the shipped one)")
    p.add_argument("--out", default=str(FRONTDESK_LLM_DIR), help="checkpoint directory to write")
    p.add_argument("--size", default="default", help="model size preset: default (the shipped one) or tiny (tests)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=None, help="sequences per step")
    p.add_argument("--dialogues", type=int, default=None, help="training dialogues to write")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init", metavar="DIR", help="continue training from this parley checkpoint")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate")
    # NOTE: 2 threads on an idle 2-core machine: 0.58 s a step against 1.04 s for 1 (the default model, 20 steps);
    # with another job on the cores, 1 thread was faster (llm.train.TrainOptions.threads)
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (the result depends on it)")
    p.add_argument("--copy-fraction", type=float, default=None,
                   help="share of the left-context sequences replaced by the synthetic copy task (default 0: "
                        "see docs/EXPERIMENT_LOG.md)")
    p.add_argument("--copy-head-dim", type=int, default=None,
                   help="width of the copy head, a pointer into the prompt (0: none; default: the size's)")
    p.add_argument("--hour-twins", action=argparse.BooleanOptionalAction, default=True,
                   help="the copy head may write a spoken hour or minute in two digits, e.g. 2 p.m. -> 14 "
                        "(default: on)")
    p.add_argument("--copy-lookaround", action=argparse.BooleanOptionalAction, default=True,
                   help="the copy head's keys read two tokens back and its gate the token after the copied one "
                        "(default: on)")
    p.add_argument("--ema", type=float, default=None, metavar="DECAY",
                   help="keep an exponential moving average of the weights and write it (e.g. 0.999; default: none)")
    # NOTE: with the reader, the variants took held-out exact match from 86.9% to 94.0% (docs/EXPERIMENT_LOG.md)
    p.add_argument("--variants", action=argparse.BooleanOptionalAction, default=True,
                   help="training dialogues also use app.training.dialogues.variants, ~1100 more phrasings (default: on)")
    # NOTE: the reader took held-out exact match from 71.1% to 79.5% (same data and steps; docs/EXPERIMENT_LOG.md)
    p.add_argument("--reader", action=argparse.BooleanOptionalAction, default=True,
                   help="the model also reads what Whisper's text decoder makes of the caller's words (llm.reader; "
                        "default: on)")
    p.add_argument("--drafter-only", action="store_true",
                   help="no training: rewrite the --out checkpoint's drafter.json from the profile's dialogues")
    p.set_defaults(func=run)


def run(args) -> int:
    from app.agent.profile import load_profile  # deferred: the model stack (see app/commands/__init__.py)
    from app.training.recipe import SIZES, DataOptions, run_training, write_drafter
    from llm.train import TrainOptions

    if args.size not in SIZES:
        print(f"parley train: --size {args.size!r}: expected one of {', '.join(sorted(SIZES))}")
        return 2

    try:
        profile = load_profile(args.profile)
        opts = TrainOptions(**{k: v for k, v in dict(steps=args.steps, batch_size=args.batch_size,
                                                       seed=args.seed, threads=args.threads, lr=args.lr,
                                                       copy_fraction=args.copy_fraction, ema_decay=args.ema).items()
                                  if v is not None})
        data = DataOptions(**({"train_dialogues": args.dialogues} if args.dialogues else {}), variants=args.variants)
    except ValueError as exc:
        print(f"parley train: {exc}")
        return 2
    if args.drafter_only:
        try:
            path = write_drafter(profile, Path(args.out), data, opts.seed)
        except ValueError as exc:  # not a checkpoint directory
            print(f"parley train: {exc}")
            return 2
        print(f"wrote {path}")
        return 0
    if args.copy_head_dim is not None and args.copy_head_dim < 0:
        print(f"parley train: --copy-head-dim {args.copy_head_dim} must be >= 0")
        return 2
    summary = run_training(profile, Path(args.out), args.size, data, opts, init=args.init,
                           copy_head_dim=args.copy_head_dim, hours=args.hour_twins, lookaround=args.copy_lookaround,
                           reader=args.reader)
    print(f"wrote {args.out} in {summary['seconds'] / 60:.1f} min of training; "
          f"final held-out loss {summary['heldout_loss'][-1][1]:.4f}")
    return 0
