"""Tiny random checkpoints in the LLaDA, Dream and Parley layouts, and a plain-torch reference forward pass.

The writers here produce real config.json fields, safetensors with the published tensor names and a small
tokenizer; the engine's tests load them. `single_thread`, imported into a test module, runs it on one torch thread.
"""
import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

import llm
from llm import chat
from llm.model import ModelArgs, Transformer

CORPUS = ["Hello! How can I help you today?", "We open at nine and close at five.",
          "Your appointment is booked for Tuesday at 3 pm.", "The weather is sunny; café prices are fair.",
          "I'm sorry, could you repeat that?", "Thanks, goodbye!"] * 4

LLADA_SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                  "<|mdm_mask|>"]
DREAM_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|beginoftext|>", "<|mask|>"]

DIM, LAYERS, HEADS, KV_HEADS, HIDDEN, VOCAB = 32, 2, 4, 2, 64, 320


@pytest.fixture(autouse=True)
def single_thread():
    """Toy models run fastest on one thread; two threads on a busy 2-core machine run ~5x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def train_bpe(specials: list[str], vocab_size: int = 300) -> Tokenizer:
    """A byte-level BPE trained on a few sentences, specials first."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer


def random_tensors(shapes: dict[str, tuple], seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in shapes.items():
        if name.endswith("norm.weight") or name.endswith("ln_f.weight"):
            out[name] = 1.0 + 0.1 * torch.randn(shape, generator=g)
        else:
            out[name] = 0.2 * torch.randn(shape, generator=g)
    return out


def llada_shapes(dim=DIM, layers=LAYERS, heads=HEADS, kv_heads=KV_HEADS, hidden=HIDDEN, vocab=VOCAB):
    hd = dim // heads
    shapes = {"model.transformer.wte.weight": (vocab, dim), "model.transformer.ln_f.weight": (dim,),
              "model.transformer.ff_out.weight": (vocab, dim)}
    for i in range(layers):
        p = f"model.transformer.blocks.{i}."
        shapes.update({p + "attn_norm.weight": (dim,), p + "q_proj.weight": (heads * hd, dim),
                       p + "k_proj.weight": (kv_heads * hd, dim), p + "v_proj.weight": (kv_heads * hd, dim),
                       p + "attn_out.weight": (dim, heads * hd), p + "ff_norm.weight": (dim,),
                       p + "ff_proj.weight": (hidden, dim), p + "up_proj.weight": (hidden, dim),
                       p + "ff_out.weight": (dim, hidden)})
    return shapes


def dream_shapes(dim=DIM, layers=LAYERS, heads=HEADS, kv_heads=KV_HEADS, hidden=HIDDEN, vocab=VOCAB):
    hd = dim // heads
    shapes = {"model.embed_tokens.weight": (vocab, dim), "model.norm.weight": (dim,), "lm_head.weight": (vocab, dim)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (dim,), p + "post_attention_layernorm.weight": (dim,),
                       p + "self_attn.q_proj.weight": (heads * hd, dim), p + "self_attn.q_proj.bias": (heads * hd,),
                       p + "self_attn.k_proj.weight": (kv_heads * hd, dim),
                       p + "self_attn.k_proj.bias": (kv_heads * hd,),
                       p + "self_attn.v_proj.weight": (kv_heads * hd, dim),
                       p + "self_attn.v_proj.bias": (kv_heads * hd,), p + "self_attn.o_proj.weight": (dim, heads * hd),
                       p + "mlp.gate_proj.weight": (hidden, dim), p + "mlp.up_proj.weight": (hidden, dim),
                       p + "mlp.down_proj.weight": (dim, hidden)})
    return shapes


def write_llada(directory: Path, seed: int = 0, shards: int = 1) -> dict[str, torch.Tensor]:
    """A LLaDA-8B-Instruct-shaped directory at toy size; returns the tensors written."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = train_bpe(LLADA_SPECIALS)
    tokenizer.save(str(directory / "tokenizer.json"))
    ids = {t: tokenizer.token_to_id(t) for t in LLADA_SPECIALS}
    config = {"model_type": "llada", "architectures": ["LLaDAModelLM"], "activation_type": "silu",
              "alibi": False, "attention_layer_norm": False, "block_type": "llama", "d_model": DIM,
              "embedding_size": VOCAB, "vocab_size": VOCAB, "include_bias": False, "include_qkv_bias": False,
              "layer_norm_type": "rms", "mask_token_id": ids["<|mdm_mask|>"], "eos_token_id": ids["<|endoftext|>"],
              "pad_token_id": ids["<|endoftext|>"], "max_sequence_length": 256, "mlp_hidden_size": HIDDEN,
              "n_heads": HEADS, "n_kv_heads": KV_HEADS, "n_layers": LAYERS, "rms_norm_eps": 1e-5, "rope": True,
              "rope_theta": 500000.0, "scale_logits": False, "torch_dtype": "float32", "weight_tying": False}
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<|startoftext|>",
                                                                 "eos_token": "<|endoftext|>"}))
    tensors = random_tensors(llada_shapes(), seed)
    write_safetensors(directory, tensors, shards)
    return tensors


def write_dream(directory: Path, seed: int = 0) -> dict[str, torch.Tensor]:
    """A Dream-v0-Instruct-7B-shaped directory: Qwen2 names, vocab.json + merges.txt, added tokens declared."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = train_bpe([], vocab_size=290)
    tokenizer.model.save(str(directory))  # vocab.json, merges.txt
    base = tokenizer.get_vocab_size()
    added = {str(base + i): {"content": t, "special": True, "lstrip": False, "rstrip": False, "normalized": False,
                             "single_word": False} for i, t in enumerate(DREAM_SPECIALS)}
    ids = {t: base + i for i, t in enumerate(DREAM_SPECIALS)}
    (directory / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": added,
                                                                 "eos_token": "<|endoftext|>"}))
    config = {"model_type": "Dream", "architectures": ["DreamModel"], "hidden_size": DIM, "hidden_act": "silu",
              "intermediate_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
              "num_key_value_heads": KV_HEADS, "vocab_size": VOCAB, "max_position_embeddings": 131072,
              "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None, "tie_word_embeddings": False,
              "use_sliding_window": False, "mask_token_id": ids["<|mask|>"], "eos_token_id": ids["<|endoftext|>"],
              "pad_token_id": ids["<|endoftext|>"], "bos_token_id": ids["<|endoftext|>"], "torch_dtype": "float32"}
    (directory / "config.json").write_text(json.dumps(config))
    tensors = random_tensors(dream_shapes(), seed)
    write_safetensors(directory, tensors, 1)
    return tensors


def parley_tokenizer() -> Tokenizer:
    return train_bpe(list(chat.PARLEY_SPECIAL_TOKENS))


def write_parley(directory: Path, seed: int = 0, **overrides) -> Path:
    """A random Parley model saved through llm.save_parley."""
    from llm.model import ModelArgs, Transformer
    torch.manual_seed(seed)
    fields = dict(d_model=DIM, n_layers=LAYERS, n_heads=HEADS, n_kv_heads=KV_HEADS, mlp_hidden_size=HIDDEN,
                  vocab_size=VOCAB, max_sequence_length=512)
    model = Transformer(ModelArgs(**{**fields, **overrides}))
    model.init_weights(std=0.2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn_like(p))
    return llm.save_parley(model, parley_tokenizer(), directory)


def write_safetensors(directory: Path, tensors: dict, shards: int) -> None:
    names = list(tensors)
    if shards == 1:
        save_file(tensors, str(directory / "model.safetensors"))
        return
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = names[s::shards]
        save_file({n: tensors[n] for n in part}, str(directory / file))
        weight_map.update({n: file for n in part})
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


# ---- an independent plain-torch reference, written from the published architectures ----

def ref_rms(x, w, eps):
    return w * (x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def ref_rope(x, theta):
    """x (B, H, T, D): rotate pairs (i, i + D/2) by position * theta^(-2i/D)."""
    T, D = x.shape[2], x.shape[3]
    freqs = theta ** (-torch.arange(0, D // 2, dtype=torch.float64) * 2 / D)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * freqs[None]  # (T, D/2)
    cos, sin = ang.cos().float(), ang.sin().float()
    a, b = x[..., :D // 2], x[..., D // 2:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def ref_attention(q, k, v):
    rep = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)  # no causal mask
    return weights @ v


def ref_forward(t: dict, ids: torch.Tensor, layout: str) -> torch.Tensor:
    """Logits (B, T, V) from raw checkpoint tensors; Dream's are shifted back so row i is for token i."""
    if layout == "dream":
        n = lambda i, s: t[f"model.layers.{i}.{s}"]  # noqa: E731
        emb, norm_f, head, eps, theta = t["model.embed_tokens.weight"], t["model.norm.weight"], t["lm_head.weight"], 1e-6, 1e6
        names = dict(an="input_layernorm.weight", q="self_attn.q_proj", k="self_attn.k_proj", v="self_attn.v_proj",
                     o="self_attn.o_proj.weight", fn="post_attention_layernorm.weight", g="mlp.gate_proj.weight",
                     u="mlp.up_proj.weight", d="mlp.down_proj.weight")
    else:
        n = lambda i, s: t[f"model.transformer.blocks.{i}.{s}"]  # noqa: E731
        emb, norm_f, head, eps, theta = (t["model.transformer.wte.weight"], t["model.transformer.ln_f.weight"],
                                         t["model.transformer.ff_out.weight"], 1e-5, 5e5)
        names = dict(an="attn_norm.weight", q="q_proj", k="k_proj", v="v_proj", o="attn_out.weight",
                     fn="ff_norm.weight", g="ff_proj.weight", u="up_proj.weight", d="ff_out.weight")
    B, T = ids.shape
    hd = DIM // HEADS
    x = emb[ids]
    for i in range(LAYERS):
        h = ref_rms(x, n(i, names["an"]), eps)

        def proj(key, heads):
            y = h @ n(i, names[key] + ".weight").T
            if layout == "dream":
                y = y + n(i, names[key] + ".bias")
            return y.view(B, T, heads, hd).transpose(1, 2)
        q, k, v = proj("q", HEADS), proj("k", KV_HEADS), proj("v", KV_HEADS)
        y = ref_attention(ref_rope(q, theta), ref_rope(k, theta), v).transpose(1, 2).reshape(B, T, DIM)
        x = x + y @ n(i, names["o"]).T
        h = ref_rms(x, n(i, names["fn"]), eps)
        x = x + (torch.nn.functional.silu(h @ n(i, names["g"]).T) * (h @ n(i, names["u"]).T)) @ n(i, names["d"]).T
    logits = ref_rms(x, norm_f, eps) @ head.T
    if layout == "dream":
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
    return logits


TINY_MASK = 63  # tiny_block_model's mask id, the last of its 64


def tiny_block_model(seed=0) -> Transformer:
    """A tiny random left-to-right model with shifted logits, as block diffusion runs one (llm.blockdiff)."""
    torch.manual_seed(seed)
    args = ModelArgs(d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, mlp_hidden_size=64, vocab_size=64,
                     rope_theta=10000.0, max_sequence_length=256, weight_tying=True, shift_logits=True)
    model = Transformer(args)
    model.init_weights(std=0.3)  # peaked logits: confident choices, so several commit per pass
    return model.eval()


def random_ids(n=20, seed=1) -> list[int]:
    """n token ids of tiny_block_model's vocabulary, none of its special ones."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, 60, (n,), generator=g).tolist()
