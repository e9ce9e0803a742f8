"""LoRA (Hu et al. 2021): a frozen base adapted by low-rank updates W + (alpha / r) B A, merged for inference.

An adapter is a dict of tensors: `{linear name}.lora_a` (r, in) and `.lora_b` (out, r) for each adapted linear,
and `mask_embedding` (d_model,), the trained embedding row of the mask token that block diffusion adds.
"""
import math
import threading
from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F

from llm.model import BLOCK_LINEARS, FUSED_LINEARS, Transformer


class LoRALinear(nn.Module):
    """A frozen linear plus a trainable low-rank update (B starts at zero: the model starts as the base)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, generator: torch.Generator | None = None):
        super().__init__()
        self.base = base
        self.scale = alpha / rank
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))
        with torch.no_grad():
            bound = 1 / math.sqrt(base.in_features)  # nn.Linear's default (kaiming uniform, a = sqrt(5))
            self.lora_a.uniform_(-bound, bound, generator=generator)

    enabled = True   # False: the base alone (`off`)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return self.base(x)
        return self.base(x) + F.linear(F.linear(x, self.lora_a.to(x.dtype)), self.lora_b.to(x.dtype)) * self.scale


def add_lora(model: Transformer, rank: int, alpha: float, seed: int = 0) -> list[nn.Parameter]:
    """Freeze model and wrap every BLOCK_LINEARS linear of every block in a LoRALinear -> the trainable parameters."""
    generator = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.requires_grad_(False)
    trainable = []
    for block in model.transformer.blocks:
        for name in BLOCK_LINEARS:
            wrapped = LoRALinear(getattr(block, name), rank, alpha, generator)
            setattr(block, name, wrapped)
            trainable += [wrapped.lora_a, wrapped.lora_b]
    return trainable


@contextmanager
def off(model: Transformer):
    """Within it, a model wrapped by add_lora computes as its base (the teacher the adapter is kept close to)."""
    wrapped = [m for m in model.modules() if isinstance(m, LoRALinear)]
    for m in wrapped:
        m.enabled = False
    try:
        yield model
    finally:
        for m in wrapped:
            m.enabled = True


def adapter_state(model: Transformer) -> dict[str, torch.Tensor]:
    """The LoRA tensors of a model wrapped by add_lora, by `transformer.blocks.{i}.{name}`."""
    return {name: p.detach().clone() for name, p in model.named_parameters() if ".lora_" in name}


def merge(model: Transformer, adapter: dict[str, torch.Tensor], alpha_over_rank: float) -> None:
    """Add each adapted linear's update (alpha / r) B A into the plain model's weights, in place."""
    params = dict(model.named_parameters())
    pairs = {name.rsplit(".", 1)[0] for name in adapter if name.endswith(".lora_a")}
    for prefix in sorted(pairs):
        a, b = adapter[f"{prefix}.lora_a"], adapter[f"{prefix}.lora_b"]
        weight = params.get(prefix.replace(".base", "") + ".weight")
        if weight is None:
            raise ValueError(f"the adapter adapts {prefix}, which this model does not have")
        if weight.shape != (b.shape[0], a.shape[1]):
            raise ValueError(f"the adapter's {prefix} is {b.shape[0]}x{a.shape[1]}, the model's {tuple(weight.shape)}")
        with torch.no_grad():
            weight += (alpha_over_rank * (b.float() @ a.float())).to(weight.dtype)


def unwrap(model: Transformer) -> None:
    """Undo add_lora after merging: each LoRALinear goes back to its (merged) base linear."""
    for block in model.transformer.blocks:
        for name in BLOCK_LINEARS:
            module = getattr(block, name)
            if isinstance(module, LoRALinear):
                setattr(block, name, module.base)


class MergedAdapter:
    """What a merged adapter added to a model (llm.adapt.load_adapted), kept to take off again: within
    `removed()`, on the calling thread, every adapted projection's output loses its update (alpha / r) x A^T B^T,
    and the model computes as its base does, with no copy of the base's weights (its A and B: ~18 MB in fp32 for
    SmolLM2 at rank 16). A projection the model packed with others (FUSED_LINEARS) loses their updates at once.
    The judgement of where a caller's turn ends reads the base (llm.Engine.end_of_turn_probability)."""

    def __init__(self, model: Transformer, adapter: dict[str, torch.Tensor], alpha_over_rank: float):
        self._model = model
        self._local = threading.local()
        self._updates = []   # (module, A (k r, in), B (out, k r) block-diagonal, scaled), each fp32
        device = model.device
        for i, block in enumerate(model.transformer.blocks):
            groups = [(name, parts) for name, parts in FUSED_LINEARS.items() if getattr(block, name, None) is not None]
            packed = {part for _, parts in groups for part in parts}
            groups += [(name, (name,)) for name in BLOCK_LINEARS
                       if name not in packed and getattr(block, name, None) is not None]
            for name, parts in groups:
                keys = [f"transformer.blocks.{i}.{part}" for part in parts]
                if not all(f"{key}.lora_a" in adapter for key in keys):
                    continue
                a = torch.cat([adapter[f"{key}.lora_a"].float() for key in keys]).to(device)
                b = (torch.block_diag(*[adapter[f"{key}.lora_b"].float() for key in keys]) * alpha_over_rank).to(device)
                self._updates.append((getattr(block, name), a, b))

    @contextmanager
    def removed(self):
        """A span in which this thread's forwards compute the base model. Its hooks exist only meanwhile: the
        adapted model's passes pay nothing for them."""
        def hook(a, b):
            def take_off(module, args, output):
                if getattr(self._local, "on", False):
                    return output - F.linear(F.linear(args[0].float(), a), b).to(output.dtype)
            return take_off

        handles = [module.register_forward_hook(hook(a, b)) for module, a, b in self._updates]
        self._local.on = True
        try:
            yield self._model
        finally:
            self._local.on = False
            for handle in handles:
                handle.remove()
