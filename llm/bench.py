"""`parley llm bench`: diffusion decoding policies and caches against an autoregressive baseline, same weights.

Every method writes a reply to the same prompt in the same process; each row is the median of `repeats` runs
after one warm-up, and ratios are against the autoregressive row measured in this run.
"""
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from llm.blockdiff import BlockOptions
from llm.engine import Engine
from llm.generate import DecodeOptions, autoregressive_reply

BASELINE = "autoregressive (causal, KV cache)"
CACHE_NAMES = {"prefix": "prefix cache", "dual": "dual cache", "none": "no cache"}


@dataclass(frozen=True)
class BenchOptions:
    max_new_tokens: int = DecodeOptions.max_new_tokens
    block_length: int = DecodeOptions.block_length
    threshold: float = DecodeOptions.threshold
    steps: int = 8            # passes per block for the fixed-steps rows
    repeats: int = 5
    stop_at_eos: bool = True  # False: every method fills max_new_tokens


def block_methods(opts: BenchOptions) -> list[tuple[str, BlockOptions | None]]:
    """The rows for a left-to-right base adapted to block diffusion (llm.blockdiff): block sizes at the
    threshold; one token per pass (threshold 1: the base's own greedy text through the same sampler); the same
    text with the mask rows' predictions verified as the next pass's guesses (block 4), with guesses by prompt
    lookup verified, and both (the brain's decoding: generation_config.json)."""
    rows: list[tuple[str, BlockOptions | None]] = [(BASELINE, None)]
    for block in (4, 8):
        rows.append((f"block {block}, threshold {opts.threshold}", BlockOptions(
            max_new_tokens=opts.max_new_tokens, block_length=block, threshold=opts.threshold,
            stop_at_eos=opts.stop_at_eos)))
    for block, draft, name in ((1, 0, "block 1, one token per pass"), (4, 0, "block 4, masks guess, verified"),
                               (1, 8, "block 1, 8 looked up, verified"),
                               (4, 8, "block 4, looked up or masks'")):
        rows.append((name, BlockOptions(max_new_tokens=opts.max_new_tokens, block_length=block, threshold=1.0,
                                        stop_at_eos=opts.stop_at_eos, draft_length=draft)))
    return rows


def methods(opts: BenchOptions) -> list[tuple[str, DecodeOptions | None]]:
    """(row name, diffusion options) for each method; None is the autoregressive baseline."""
    common = dict(max_new_tokens=opts.max_new_tokens, block_length=opts.block_length, stop_at_eos=opts.stop_at_eos)
    rows: list[tuple[str, DecodeOptions | None]] = [(BASELINE, None)]
    for cache, name in CACHE_NAMES.items():
        rows.append((f"threshold {opts.threshold}, {name}", DecodeOptions(threshold=opts.threshold, cache=cache, **common)))
    for cache, name in CACHE_NAMES.items():
        rows.append((f"steps {opts.steps}/block, {name}", DecodeOptions(steps=opts.steps, cache=cache, **common)))
    return rows


@torch.inference_mode()
def _autoregressive_run(engine: Engine, prompt_ids: list[int], opts: BenchOptions) -> dict:
    start = time.perf_counter()
    first_block_s = None

    def on_token(count: int) -> None:
        nonlocal first_block_s
        if count == opts.block_length:
            first_block_s = time.perf_counter() - start
    prompt = torch.tensor(prompt_ids, dtype=torch.long, device=engine.device)
    decoded = autoregressive_reply(engine.model, prompt, engine.special, opts.max_new_tokens, opts.stop_at_eos,
                                   on_token=on_token)
    seconds = time.perf_counter() - start
    return dict(passes=decoded.passes, tokens=len(decoded.tokens), seconds=seconds,
                first_block_s=first_block_s or seconds)


def _run(engine: Engine, prompt_ids: list[int], decode: DecodeOptions | None, opts: BenchOptions) -> dict:
    if decode is None:
        return _autoregressive_run(engine, prompt_ids, opts)
    if isinstance(decode, BlockOptions):
        engine.forget_earlier()  # every run pays its prefill, as the autoregressive row does, and guesses alone
        gen = engine.generate_blocks(prompt_ids, decode)
    else:
        gen = engine.generate_ids(prompt_ids, decode)
    return dict(passes=gen.passes, tokens=gen.tokens, seconds=gen.seconds, first_block_s=gen.first_block_s)


def _row(engine: Engine, prompt_ids: list[int], name: str, decode, opts: BenchOptions) -> dict:
    """One method's row: median passes, tokens, tokens/pass, tokens/s, first-block and total ms (one warm-up)."""
    _run(engine, prompt_ids, decode, opts)  # warm-up
    runs = [_run(engine, prompt_ids, decode, opts) for _ in range(opts.repeats)]
    med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    return dict(method=name, passes=med["passes"], tokens=med["tokens"],
                tokens_per_pass=statistics.median(r["tokens"] / max(r["passes"], 1) for r in runs),
                tokens_per_s=statistics.median(r["tokens"] / r["seconds"] for r in runs),
                first_block_ms=1000 * med["first_block_s"], total_ms=1000 * med["seconds"])


def run_bench(engine: Engine, messages: list[dict], opts: BenchOptions, study=None) -> list[dict]:
    """One row per method: median passes, tokens, tokens/pass, tokens/s, first-block and total ms, ratios.
    study: a function that has the engine's drafter study a business's dialogues (as `parley serve` does at
    start; app.training.recipe.study): a block engine's last row (the brain's decoding) again after it."""
    if opts.repeats < 1:
        raise ValueError(f"repeats={opts.repeats} must be >= 1")
    prompt_ids = engine.prompt_ids(messages)
    rows_of = block_methods(opts) if engine.left_to_right else methods(opts)
    rows = [_row(engine, prompt_ids, name, decode, opts) for name, decode in rows_of]
    if study is not None and engine.left_to_right:
        study()
        name, decode = rows_of[-1]
        rows.append(_row(engine, prompt_ids, f"{name}, studied", decode, opts))
    base = rows[0]
    for row in rows:
        row["speed_vs_ar"] = row["tokens_per_s"] / base["tokens_per_s"] if base["tokens_per_s"] else float("nan")
        row["first_block_vs_ar"] = base["first_block_ms"] / row["first_block_ms"]
    return rows


def format_table(rows: list[dict], header: str = "") -> str:
    """A fixed-width table; the ×AR columns are speed-ups over the autoregressive row (higher is better)."""
    columns = [("method", "{:<36}", "method"), ("passes", "{:>6.0f}", "passes"), ("tokens", "{:>6.0f}", "tokens"),
               ("tok/pass", "{:>8.2f}", "tokens_per_pass"), ("tok/s", "{:>8.1f}", "tokens_per_s"),
               ("×AR", "{:>6.2f}", "speed_vs_ar"), ("1st block ms", "{:>12.1f}", "first_block_ms"),
               ("×AR", "{:>6.2f}", "first_block_vs_ar"), ("total ms", "{:>9.1f}", "total_ms")]
    widths = [len(fmt.format(rows[0][key])) if rows else len(title) for title, fmt, key in columns]
    lines = [header] if header else []
    lines.append("  ".join(title.rjust(w) if i else title.ljust(w)
                           for i, ((title, _, _), w) in enumerate(zip(columns, widths))))
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(fmt.format(row[key]) for _, fmt, key in columns) for row in rows]
    return "\n".join(lines)


def run_callers(engine: Engine, messages: list[dict], decode: BlockOptions, counts: list[int],
                repeats: int) -> list[dict]:
    """Several callers' replies at once against one after another, in the same run (a block engine): each count
    writes that many replies to `messages`, first one after another, then on as many threads at once, whose
    passes share forwards (llm.passes.PassBatcher). Every reply pays its prefill and guesses from its prompt
    alone. Medians of `repeats` after one warm-up."""
    if repeats < 1 or not counts or min(counts) < 1:
        raise ValueError(f"repeats={repeats} and every count of callers {counts} must be >= 1")
    prompt_ids = engine.prompt_ids(messages)

    def reply(_=None):
        return engine.generate_blocks(prompt_ids, decode).text

    def one_after_another(n: int) -> list[str]:
        texts = []
        for _ in range(n):
            engine.forget_earlier()
            texts.append(reply())
        return texts

    rows = []
    for n in counts:
        apart, together, forwards, passes, same = [], [], [], [], True
        for _ in range(repeats + 1):
            engine.forget_earlier()
            start = time.perf_counter()
            # on a pool thread too, as the replies at once are: torch's small products are slower off the main
            # thread (its OpenMP team), and that is no part of what sharing forwards saves
            with ThreadPoolExecutor(1) as pool:
                alone = pool.submit(one_after_another, n).result()
            apart.append(time.perf_counter() - start)
            engine.forget_earlier()
            batches, asked = engine.batcher.batches, engine.batcher.passes
            start = time.perf_counter()
            with ThreadPoolExecutor(n) as pool:
                shared = list(pool.map(reply, range(n)))
            together.append(time.perf_counter() - start)
            forwards.append(engine.batcher.batches - batches)
            passes.append(engine.batcher.passes - asked)
            same = same and shared == alone
        apart_ms, together_ms = 1000 * statistics.median(apart[1:]), 1000 * statistics.median(together[1:])
        rows.append(dict(callers=n, apart_ms=apart_ms, together_ms=together_ms, speedup=apart_ms / together_ms,
                         passes=statistics.median(passes[1:]), forwards=statistics.median(forwards[1:]),
                         same_replies=same))
    return rows


def format_callers(rows: list[dict]) -> str:
    lines = ["callers  one after another ms  at once ms  speed-up  passes  forwards  same replies",
             "-------  -------------------  ----------  --------  ------  --------  ------------"]
    lines += [f"{r['callers']:>7}  {r['apart_ms']:>19.1f}  {r['together_ms']:>10.1f}  {r['speedup']:>7.2f}x  "
              f"{r['passes']:>6.0f}  {r['forwards']:>8.0f}  {'yes' if r['same_replies'] else 'no':>12}" for r in rows]
    return "\n".join(lines)
