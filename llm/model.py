"""A bidirectional transformer for masked diffusion: LLaDA, Dream (Qwen2 layout) and Parley's own models.

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
from llm.copy_head import CopyHead, CopySource
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
    copy_head_dim: int = 0           # Parley: > 0 adds a CopyHead of this width (a pointer into the prompt)
    # Parley: the copy head copies only the content of the turns these role tokens open (the caller's words, the
    # tool results), never a token of copy_never (the role and end tokens, which also open and close the turns);
    # the rest of the prompt is sinks (CopyHead). Empty: it copies whatever it may point at.
    copy_roles: tuple[int, ...] = ()
    copy_never: tuple[int, ...] = ()
    # Parley: maps of (token, its twin) pairs; the copy head may copy a token as its twin in any map: "Tuesday"
    # said by the caller is "tuesday" in a tool call (lowercase), "2" said with "p.m." is "14" (afternoon hours)
    copy_twins: tuple[tuple[tuple[int, int], ...], ...] = ()
    # Parley: the copy head looks around the position it points at: its key reads the two tokens before it (not
    # one), the copy gate also reads the token after it, and the choice of twin reads the token itself
    copy_lookaround: bool = False
    # Parley: > 0 adds a projection of this many features per prompt position to the token embeddings: what
    # Whisper's text decoder makes of the caller's words (llm.reader.Reader, frozen), zeros elsewhere
    reader_dim: int = 0

    def __post_init__(self):
        if self.d_model % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"d_model={self.d_model} must divide by n_heads={self.n_heads}, "
                f"and n_heads by n_kv_heads={self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even for rotary embeddings")
        if self.copy_head_dim < 0:
            raise ValueError(f"copy_head_dim={self.copy_head_dim} must be >= 0 (0: no copy head)")
        if (self.copy_roles or self.copy_never) and not self.copy_head_dim:
            raise ValueError("copy_roles and copy_never need a copy head (copy_head_dim > 0)")
        if (self.copy_twins or self.copy_lookaround) and not self.copy_head_dim:
            raise ValueError("copy_twins and copy_lookaround need a copy head (copy_head_dim > 0)")
        if self.reader_dim < 0:
            raise ValueError(f"reader_dim={self.reader_dim} must be >= 0 (0: no reader)")
        if self.copy_roles and not self.copy_never:
            raise ValueError("copy_roles needs copy_never: the tokens that open and close a turn")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


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

    def project(self, x):
        """Normed residual (B, T, d) -> q (B, H, T, D), k, v (B, Hkv, T, D), before rotary embedding."""
        B, T, _ = x.shape
        a = self.args
        q = self.q_proj(x).view(B, T, a.n_heads, a.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, a.n_kv_heads, a.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, a.n_kv_heads, a.head_dim).transpose(1, 2)
        return q, k, v

    def merge(self, y):
        """Attention output (B, H, T, D) -> the residual update (B, T, d)."""
        B, H, T, D = y.shape
        return self.attn_out(y.transpose(1, 2).reshape(B, T, H * D))

    def mlp(self, x):
        """x + the SwiGLU feed-forward of its norm."""
        h = self.ff_norm(x)
        return x + self.ff_out(kernels.swiglu(self.ff_proj(h), self.up_proj(h)))

    def attend(self, x, cos, sin, start_pos, cache_kv, kv_len, key_padding_mask, causal, rows=None):
        """The attention update of the first `rows` rows (default all); every row's key and value still enter
        the cache."""
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
        if rows is not None:
            q = q[:, :, :rows]
        if causal:
            y = causal_attention(q, k, v, start_pos)
        else:
            y = kernels.attention(q, k, v, key_padding_mask)  # (B, H, T, D)
        return self.merge(y)

    def forward(self, x, cos, sin, start_pos=0, cache_kv=None, kv_len=None, key_padding_mask=None, causal=False,
                rows=None):
        """x (B, T, d) -> the residual of its first `rows` rows (default all)."""
        update = self.attend(self.attn_norm(x), cos, sin, start_pos, cache_kv, kv_len, key_padding_mask, causal, rows)
        return self.mlp(x[:, :rows] + update)


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
            wte=nn.Embedding(args.vocab_size, args.d_model),
            blocks=nn.ModuleList(Block(args) for _ in range(args.n_layers)),
            ln_f=RMSNorm(args.d_model, args.rms_norm_eps),
        ))
        if not args.weight_tying:
            self.transformer["ff_out"] = Linear(args.d_model, args.vocab_size, bias=False)
        if args.copy_head_dim:
            self.transformer["copy"] = CopyHead(args)
        if args.reader_dim:
            self.transformer["reader"] = Linear(args.reader_dim, args.d_model, bias=False)
        # the output projection of a tied head as an int8 module of its own (llm.quant, CPU): the embedding stays fp32
        self.tied_head: nn.Module | None = None
        self.reset_rope()

    def reset_rope(self, device=None):
        """(Re)build the rope tables, e.g. after the weights were materialized from the meta device."""
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
            elif name == "transformer.reader.weight":  # its output starts at the embeddings' scale
                nn.init.normal_(p, std=std / math.sqrt(self.args.reader_dim))
            elif name.endswith("attn_out.weight") or (name.endswith("ff_out.weight") and ".blocks." in name):
                nn.init.normal_(p, std=std / math.sqrt(2 * self.args.n_layers))
            else:
                nn.init.normal_(p, std=std)

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        p = self.transformer.wte.weight
        return KVCache(self.args, batch, max_len, device=p.device, dtype=p.dtype)

    def embed(self, ids, read=None):
        """Token embeddings (B, T, d_model), plus the reader's projected features read (B, T, reader_dim) when
        given (a model with reader_dim; zeros where no caller's word is)."""
        x = self.transformer.wte(ids)
        if read is not None:
            if not self.args.reader_dim:
                raise ValueError("this model has no reader (reader_dim=0): pass no read features")
            # projected only where a caller's word is (a few positions in a prompt of hundreds): a zero row adds
            # nothing (no bias). NOTE: a full run was no faster for it (1891 s at step 2500 against 1844 s
            # projecting every position): the step's cost is elsewhere
            rows = read.abs().amax(-1) > 0  # (B, T)
            x = x.index_put((rows,), self.transformer.reader(read[rows].to(x.dtype)), accumulate=True)
        return x

    def trunk(self, ids, start_pos=0, cache: KVCache | None = None, kv_len=None, key_padding_mask=None,
              causal=False, read=None, rows: int | None = None):
        """ids (B, T) at positions start_pos.. -> residual stream (B, T, d_model), before the final norm.

        With a cache, this chunk's keys/values are written at their positions and attention reaches the first
        kv_len cached positions (default: up to the chunk's end); key_padding_mask (B, kv_len) then covers them.
        rows: only the first `rows` rows' residual is wanted (B, rows, d_model): the last layer skips the others'
        attention and MLP (their keys and values, which the cache keeps, come before it). The left sampler's first
        pass wants the prompt's rows, not the reply's canvas of masks.
        """
        T = ids.shape[1]
        if start_pos + T > self.args.max_sequence_length:
            raise ValueError(f"sequence of {start_pos + T} tokens exceeds max_sequence_length="
                             f"{self.args.max_sequence_length}")
        kv_len = start_pos + T if kv_len is None else kv_len
        cos = self.rope_cos[start_pos:start_pos + T]  # (T, D)
        sin = self.rope_sin[start_pos:start_pos + T]
        x = self.embed(ids, read)  # (B, T, d_model)
        last = len(self.transformer.blocks) - 1
        for i, block in enumerate(self.transformer.blocks):
            cache_kv = None if cache is None else (cache.k[i], cache.v[i])
            x = block(x, cos, sin, start_pos, cache_kv, kv_len, key_padding_mask, causal, rows if i == last else None)
        return x

    def trunk_masked(self, ids, positions, allowed, past: KVCache | None = None, past_len: int = 0, read=None,
                     rows: int | None = None, embeds: torch.Tensor | None = None):
        """The trunk with an explicit attention mask, for layouts no cache mode covers (training's left-context
        sequences, the left sampler's verification passes). Leaves the first past_len positions of `past` as
        they are. embeds (B, T, d_model): the input embeddings, when the caller made them (a trained mask row).

        ids, positions (B, T); the keys are the first past_len positions of `past`, then this chunk's T tokens;
        allowed (B, T, past_len + T) bool, True = attend. -> (residual (B, T, d_model), [(k, v) (B, Hkv, T, D)
        of the chunk for each layer], for the caller to write where it chooses). When `past` has room for T more
        positions after past_len, the chunk's keys are written there and attention reads the cache in place;
        otherwise they are appended to a copy of it. rows: as trunk's, the residual of the first `rows` rows only
        (training's left-context loss wants the prompt and the settled reply, not the canvas of masks after it).
        """
        a = self.args
        cos, sin = self.rope_cos[positions][:, None], self.rope_sin[positions][:, None]  # (B, 1, T, D)
        groups = a.n_heads // a.n_kv_heads
        x = self.embed(ids, read) if embeds is None else embeds  # (B, T, d_model)
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
            if i == len(self.transformer.blocks) - 1 and rows is not None:  # every key is in: the rows wanted
                q, allowed, x = q[:, :, :rows], allowed[:, :rows], x[:, :rows]
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None])  # (B, H, T, D)
            x = block.mlp(x + block.merge(y))
        return x, chunk_kv

    def copyable(self, ids) -> torch.Tensor | None:
        """(B, S) bool: the positions inside a turn that ModelArgs.copy_roles opens (the tokens a copy head may
        copy), or None without copy_roles (all)."""
        a = self.args
        if not a.copy_roles:
            return None
        never = torch.isin(ids, torch.tensor(a.copy_never, device=ids.device))
        positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
        opened_at = torch.where(never, positions, -1).cummax(dim=1).values  # the last role or end token so far
        opener = ids.gather(1, opened_at.clamp(min=0))
        return ~never & (opened_at >= 0) & torch.isin(opener, torch.tensor(a.copy_roles, device=ids.device))

    def copy_source(self, hidden, ids, valid=None) -> CopySource | None:
        """The copy head's source from the residual stream (B, S, d_model) of positions 0.. holding ids (B, S);
        valid (B, S) bool marks those it may point at (default all); of those, it copies only copyable(ids). None
        for a model without a copy head."""
        if not self.args.copy_head_dim:
            return None
        normed = F.rms_norm(self.transformer.wte(ids), (self.args.d_model,))  # (B, S, d)
        look = 2 if self.args.copy_lookaround else 1
        before = [F.pad(normed, (0, 0, n, 0))[:, :ids.shape[1]] for n in range(1, look + 1)]  # tokens j-1 (j-2)
        keys = self.transformer.copy.keys(self.transformer.ln_f(hidden), before)
        twins = None
        if self.args.copy_twins:  # (K, V): each token's twin in each map, itself where the map has none
            table = torch.arange(self.args.vocab_size, device=ids.device).repeat(len(self.args.copy_twins), 1)
            for k, pairs in enumerate(self.args.copy_twins):
                if pairs:
                    pairs = torch.tensor(pairs, device=ids.device)
                    table[k, pairs[:, 0]] = pairs[:, 1]
            twins = table[:, ids].transpose(0, 1)  # (B, K, S)
        after = F.pad(normed, (0, 0, 0, 1))[:, 1:] if self.args.copy_lookaround else None  # token j+1
        return CopySource(keys, ids, normed, valid, self.copyable(ids), twins, after)

    def head(self, x: torch.Tensor, source: CopySource | None = None) -> torch.Tensor:
        """Residual stream (B, T, d_model) -> raw logits (B, T, V) (Dream's still shifted by one).

        With a copy head (and its source, from copy_source), log-probabilities of the mixture instead: softmax
        and argmax read them as they read logits.
        """
        x = self.transformer.ln_f(x)
        if self.tied_head is not None:
            logits = self.tied_head(x)
        elif self.args.weight_tying:
            logits = F.linear(x, self.transformer.wte.weight)
        else:
            logits = self.transformer.ff_out(x)
        if not self.args.copy_head_dim:
            return logits
        if source is None:
            raise ValueError("this model has a copy head: head() needs the prompt's copy_source()")
        return self.transformer.copy.mix(x, logits, source)

    def forward(self, ids: torch.Tensor, key_padding_mask: torch.Tensor | None = None,
                copy_from: torch.Tensor | None = None, read: torch.Tensor | None = None) -> torch.Tensor:
        """ids (B, T) int64 -> logits (B, T, V), logit i for token i for every model family.

        copy_from (B, T) bool: the positions a copy head may point at (default: every one key_padding_mask keeps).
        """
        hidden = self.trunk(ids, key_padding_mask=key_padding_mask, read=read)
        source = self.copy_source(hidden, ids, key_padding_mask if copy_from is None else copy_from)
        logits = self.head(hidden, source)
        if self.args.shift_logits:
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)  # raw i predicts token i+1
        return logits
