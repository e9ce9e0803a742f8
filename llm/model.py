"""A transformer for masked and block diffusion: LLaDA, Dream (Qwen2 layout), SmolLM2 (LLaMA layout) and Parley's own layout.

Pre-norm RMSNorm, rotate-half RoPE on absolute positions, grouped-query attention with no causal mask,
SwiGLU MLP, untied output head. Module names follow LLaDA's checkpoint (`transformer.blocks.{i}.q_proj`, ...);
llm/load.py maps the Qwen2 names of Dream onto them.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

import kernels
from llm.linear import Linear

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}  # by their names


@dataclass(frozen=True)
class ModelArgs:
    d_model: int = 256               # residual width (LLaDA d_model, Qwen2 hidden_size)
    n_layers: int = 4
    n_heads: int = 4                 # query heads
    n_kv_heads: int = 4              # key/value heads; n_heads % n_kv_heads == 0 (grouped-query attention)
    mlp_hidden_size: int = 704       # SwiGLU inner width (Qwen2 intermediate_size)
    vocab_size: int = 1024           # rows of the embedding and the output head (LLaDA embedding_size)
    rope_theta: float = 500000.0     # LLaDA 5e5, Dream 1e6
    rms_norm_eps: float = 1e-5       # LLaDA 1e-5, Dream 1e-6
    max_sequence_length: int = 4096  # longest canvas (prompt + reply); sizes the rope table
    qkv_bias: bool = False           # Dream/Qwen2: bias on the q, k, v projections only
    weight_tying: bool = False       # output head shares the embedding matrix
    shift_logits: bool = False       # Dream: raw logit i predicts token i+1; forward() realigns it
    rope_full_precision: bool = False  # LLaDA: rotate q, k in fp32 even when the model runs in bf16

    def __post_init__(self):
        if self.d_model % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"d_model={self.d_model} must divide by n_heads={self.n_heads}, "
                f"and n_heads by n_kv_heads={self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even for rotary embeddings")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def n_params(self) -> int:
        """Parameters of the model these arguments build, however its weights are stored (llm.quant packs some)."""
        d, hd, ff = self.d_model, self.head_dim, self.mlp_hidden_size
        attention = d * (self.n_heads + 2 * self.n_kv_heads) * hd + self.n_heads * hd * d
        bias = (self.n_heads + 2 * self.n_kv_heads) * hd if self.qkv_bias else 0
        block = attention + bias + 3 * d * ff + 2 * d
        head = 0 if self.weight_tying else d * self.vocab_size
        return self.vocab_size * d + self.n_layers * block + d + head


class KVCache:
    """Keys and values of every layer for one canvas, allocated once: k, v (L, B, Hkv, T_max, D)."""

    def __init__(self, args: ModelArgs, batch: int, max_len: int, device=None, dtype=None):
        shape = (args.n_layers, batch, args.n_kv_heads, max_len, args.head_dim)
        # uninitialized: a chunk writes its positions before anything reads them
        self.k = torch.empty(shape, device=device, dtype=dtype)
        self.v = torch.empty(shape, device=device, dtype=dtype)

    @property
    def max_len(self) -> int:
        return self.k.shape[3]


class Embedding(nn.Embedding):
    """nn.Embedding (the same parameter and state dict) that leaves a weight made on the meta device, to be loaded
    from a checkpoint, uninitialized. NOTE: nn.Embedding's random init on the meta device goes through torch's
    Python references, whose first call imports torch._dynamo and with it Triton: 147 MB more resident memory in a
    process that runs neither (`parley serve` on a CPU; 2026-12-06)."""

    def reset_parameters(self) -> None:
        if not self.weight.is_meta:
            super().reset_parameters()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernels.rms_norm(x, self.weight, self.eps)


def causal_attention(q, k, v, start_pos: int):
    """Causal GQA attention for the autoregressive baseline: query i sits at position start_pos + i."""
    t_q, t_k = q.shape[2], k.shape[2]
    query_pos = torch.arange(start_pos, start_pos + t_q, device=q.device)[:, None]  # (Tq, 1)
    allowed = torch.arange(t_k, device=q.device)[None, :] <= query_pos  # (Tq, Tk) True = attend
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)  # (B, H, Tk, D)
        v = v.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


BLOCK_LINEARS = ("q_proj", "k_proj", "v_proj", "attn_out", "ff_proj", "up_proj", "ff_out")  # every projection
# projections of one input that an inference-only model may run as one product (llm.quant.pack_fp16)
FUSED_LINEARS = {"qkv": ("q_proj", "k_proj", "v_proj"), "gate_up": ("ff_proj", "up_proj")}


class Block(nn.Module):
    """x += attn_out(attn(attn_norm(x))); h = ff_norm(x); x += ff_out(silu(ff_proj(h)) * up_proj(h))."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        d, hd = args.d_model, args.head_dim
        self.attn_norm = RMSNorm(d, args.rms_norm_eps)
        self.q_proj = Linear(d, args.n_heads * hd, bias=args.qkv_bias)
        self.k_proj = Linear(d, args.n_kv_heads * hd, bias=args.qkv_bias)
        self.v_proj = Linear(d, args.n_kv_heads * hd, bias=args.qkv_bias)
        self.attn_out = Linear(args.n_heads * hd, d, bias=False)
        self.ff_norm = RMSNorm(d, args.rms_norm_eps)
        self.ff_proj = Linear(d, args.mlp_hidden_size, bias=False)  # the SwiGLU gate
        self.up_proj = Linear(d, args.mlp_hidden_size, bias=False)
        self.ff_out = Linear(args.mlp_hidden_size, d, bias=False)
        # FUSED_LINEARS: set in place of their parts by an inference-only packing (llm.quant.pack_fp16)
        self.qkv: nn.Module | None = None
        self.gate_up: nn.Module | None = None

    def project(self, x):
        """Normed residual (B, T, d) -> q (B, H, T, D), k, v (B, Hkv, T, D), before rotary embedding."""
        B, T, _ = x.shape
        a = self.args
        if self.qkv is not None:
            q, k, v = self.qkv(x).split([a.n_heads * a.head_dim] + [a.n_kv_heads * a.head_dim] * 2, dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(B, T, a.n_heads, a.head_dim).transpose(1, 2)
        k = k.view(B, T, a.n_kv_heads, a.head_dim).transpose(1, 2)
        v = v.view(B, T, a.n_kv_heads, a.head_dim).transpose(1, 2)
        return q, k, v

    def merge(self, y):
        """Attention output (B, H, T, D) -> the residual update (B, T, d)."""
        B, H, T, D = y.shape
        return self.attn_out(y.transpose(1, 2).reshape(B, T, H * D))

    def mlp(self, x):
        """x + the SwiGLU feed-forward of its norm."""
        h = self.ff_norm(x)
        if self.gate_up is not None:
            gate, up = self.gate_up(h).chunk(2, dim=-1)
        else:
            gate, up = self.ff_proj(h), self.up_proj(h)
        return x + self.ff_out(kernels.swiglu(gate, up))

    def attend(self, x, cos, sin, start_pos, cache_kv, kv_len, key_padding_mask, causal):
        """The attention update of every row; its keys and values enter the cache."""
        T = x.shape[1]
        a = self.args
        q, k, v = self.project(x)
        if a.rope_full_precision and q.dtype != torch.float32:
            q32, k32 = kernels.rope(q.float(), k.float(), cos.float(), sin.float())
            q, k = q32.to(q.dtype), k32.to(k.dtype)
        else:
            q, k = kernels.rope(q, k, cos, sin)
        if cache_kv is not None:
            # write this chunk's keys at its absolute positions, then attend to the first kv_len cached ones
            cache_k, cache_v = cache_kv  # (B, Hkv, T_max, D)
            cache_k[:, :, start_pos:start_pos + T] = k
            cache_v[:, :, start_pos:start_pos + T] = v
            k, v = cache_k[:, :, :kv_len], cache_v[:, :, :kv_len]  # (B, Hkv, kv_len, D)
        if causal:
            y = causal_attention(q, k, v, start_pos)
        else:
            y = kernels.attention(q, k, v, key_padding_mask)  # (B, H, T, D)
        return self.merge(y)

    def forward(self, x, cos, sin, start_pos=0, cache_kv=None, kv_len=None, key_padding_mask=None, causal=False):
        """x (B, T, d) -> the residual after this block."""
        update = self.attend(self.attn_norm(x), cos, sin, start_pos, cache_kv, kv_len, key_padding_mask, causal)
        return self.mlp(x + update)


def rope_tables(args: ModelArgs, device=None):
    """cos, sin (max_sequence_length, head_dim) fp32, rotate-half layout (each frequency twice)."""
    hd = args.head_dim
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd))
    positions = torch.arange(args.max_sequence_length, device=device, dtype=torch.float32)
    angles = torch.outer(positions, inv_freq)  # (T_max, D/2) radians
    angles = torch.cat((angles, angles), dim=-1)  # (T_max, D)
    return angles.cos(), angles.sin()


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.transformer = nn.ModuleDict(dict(
            wte=Embedding(args.vocab_size, args.d_model),
            blocks=nn.ModuleList(Block(args) for _ in range(args.n_layers)),
            ln_f=RMSNorm(args.d_model, args.rms_norm_eps),
        ))
        if not args.weight_tying:
            self.transformer["ff_out"] = Linear(args.d_model, args.vocab_size, bias=False)
        # the output projection of a tied head as a module of its own (llm.quant, CPU): the embedding is then only
        # looked up (llm.embedding)
        self.tied_head: nn.Module | None = None
        self.reset_rope()

    def reset_rope(self, device=None):
        """(Re)build the rope tables, e.g. after the weights were materialized from the meta device. A model made
        on the meta device gets empty ones there (computing them would import torch._dynamo: see Embedding)."""
        if device is None and self.device.type == "meta":
            shape = (self.args.max_sequence_length, self.args.head_dim)
            cos, sin = torch.empty(shape, device="meta"), torch.empty(shape, device="meta")
        else:
            cos, sin = rope_tables(self.args, device)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def init_weights(self, std: float = 0.02):
        """Normal(0, std) matrices, residual outputs scaled by 1/sqrt(2 * n_layers), unit norms."""
        for name, p in self.named_parameters():
            if name.endswith("norm.weight") or name.endswith("ln_f.weight"):
                nn.init.ones_(p)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)
            elif name.endswith("attn_out.weight") or (name.endswith("ff_out.weight") and ".blocks." in name):
                nn.init.normal_(p, std=std / math.sqrt(2 * self.args.n_layers))
            else:
                nn.init.normal_(p, std=std)

    @property
    def device(self) -> torch.device:
        return self.transformer.ln_f.weight.device

    @property
    def dtype(self) -> torch.dtype:
        """What the residual stream and the KV caches hold (a packed CPU model's projections keep their weights in
        their own formats: llm.quant)."""
        return self.transformer.ln_f.weight.dtype

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        return KVCache(self.args, batch, max_len, device=self.device, dtype=self.dtype)

    def embed(self, ids):
        """Token embeddings (B, T, d_model)."""
        return self.transformer.wte(ids)

    def trunk(self, ids, start_pos=0, cache: KVCache | None = None, kv_len=None, key_padding_mask=None,
              causal=False):
        """ids (B, T) at positions start_pos.. -> residual stream (B, T, d_model), before the final norm.

        With a cache, this chunk's keys/values are written at their positions and attention reaches the first
        kv_len cached positions (default: up to the chunk's end); key_padding_mask (B, kv_len) then covers them.
        """
        T = ids.shape[1]
        if start_pos + T > self.args.max_sequence_length:
            raise ValueError(f"sequence of {start_pos + T} tokens exceeds max_sequence_length="
                             f"{self.args.max_sequence_length}")
        kv_len = start_pos + T if kv_len is None else kv_len
        cos = self.rope_cos[start_pos:start_pos + T]  # (T, D)
        sin = self.rope_sin[start_pos:start_pos + T]
        x = self.embed(ids)  # (B, T, d_model)
        for i, block in enumerate(self.transformer.blocks):
            cache_kv = None if cache is None else (cache.k[i], cache.v[i])
            x = block(x, cos, sin, start_pos, cache_kv, kv_len, key_padding_mask, causal)
        return x

    def trunk_masked(self, ids, positions, allowed, past: KVCache | None = None, past_len: int = 0,
                     embeds: torch.Tensor | None = None):
        """The trunk with an explicit attention mask, for layouts no cache mode covers (block diffusion's packed
        training sequences, its passes over guessed tokens). Leaves the first past_len positions of `past` as
        they are. embeds (B, T, d_model): the input embeddings, when the caller made them (a trained mask row).

        ids, positions (B, T); the keys are the first past_len positions of `past`, then this chunk's T tokens;
        allowed (B, T, past_len + T) bool, True = attend. -> (residual (B, T, d_model), [(k, v) (B, Hkv, T, D)
        of the chunk for each layer], for the caller to write where it chooses). When `past` has room for T more
        positions after past_len, the chunk's keys are written there and attention reads the cache in place;
        otherwise they are appended to a copy of it.
        """
        a = self.args
        cos, sin = self.rope_cos[positions][:, None], self.rope_sin[positions][:, None]  # (B, 1, T, D)
        groups = a.n_heads // a.n_kv_heads
        x = self.embed(ids) if embeds is None else embeds  # (B, T, d_model)
        chunk_kv = []
        for i, block in enumerate(self.transformer.blocks):
            q, k, v = block.project(block.attn_norm(x))
            q, k = kernels.rope_ref(q, k, cos, sin)
            chunk_kv.append((k, v))
            if past is not None and past_len and past.max_len >= past_len + ids.shape[1]:
                past.k[i][:, :, past_len:past_len + ids.shape[1]] = k  # the spare room: no copy of the cache
                past.v[i][:, :, past_len:past_len + ids.shape[1]] = v
                k, v = past.k[i][:, :, :past_len + ids.shape[1]], past.v[i][:, :, :past_len + ids.shape[1]]
            elif past is not None and past_len:
                k = torch.cat([past.k[i][:, :, :past_len], k], dim=2)  # (B, Hkv, past_len + T, D)
                v = torch.cat([past.v[i][:, :, :past_len], v], dim=2)
            if groups > 1:
                k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None])  # (B, H, T, D)
            x = block.mlp(x + block.merge(y))
        return x, chunk_kv

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Residual stream (B, T, d_model) -> raw logits (B, T, V) (Dream's still shifted by one)."""
        x = self.transformer.ln_f(x)
        if self.tied_head is not None:
            logits = self.tied_head(x)
        elif self.args.weight_tying:
            logits = F.linear(x, self.transformer.wte.weight)
        else:
            logits = self.transformer.ff_out(x)
        return logits

    def forward(self, ids: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """ids (B, T) int64 -> logits (B, T, V), logit i for token i for every model family."""
        logits = self.head(self.trunk(ids, key_padding_mask=key_padding_mask))
        if self.args.shift_logits:
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)  # raw i predicts token i+1
        return logits
