"""Load LLaDA, Dream and Parley checkpoints from a local directory; save Parley's own.

A directory holds config.json, *.safetensors (one file, or shards listed by model.safetensors.index.json) and a
tokenizer (tokenizer.json, or vocab.json + merges.txt). Special ids come from these files, never from code.
"""
import dataclasses
import json
import re
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tokenizers import Tokenizer
from tqdm import tqdm

from llm import chat
from llm.adapt import load_adapted
from llm.engine import Engine
from llm.generate import SpecialIds
from llm.gguf import load_gguf
from llm.model import DTYPES, ModelArgs, Transformer
from llm.tokenizer import CheckpointError, load_tokenizer, read_json, token_string

FAMILIES = ("parley", "llada", "dream")
MASK_TOKEN = {"parley": chat.MASK, "llada": "<|mdm_mask|>", "dream": "<|mask|>"}  # when config has no id
MAX_ROPE_POSITIONS = 32768  # Dream declares 131072 positions; the rope table stops here (documented 2048)
PROGRESS_BYTES = 1 << 30  # show a progress bar for checkpoints larger than this
IGNORED_TENSORS = re.compile(r".*rotary_emb\.inv_freq$")  # recomputed, never loaded

# Dream's Qwen2 tensor names and ours (LLaDA's without the "model." prefix); {i} is the layer.
DREAM_NAMES = [
    ("model.embed_tokens.weight", "transformer.wte.weight"),
    ("model.layers.{i}.input_layernorm.weight", "transformer.blocks.{i}.attn_norm.weight"),
    *((f"model.layers.{{i}}.self_attn.{p}_proj.{kind}", f"transformer.blocks.{{i}}.{p}_proj.{kind}")
      for p in "qkv" for kind in ("weight", "bias")),
    ("model.layers.{i}.self_attn.o_proj.weight", "transformer.blocks.{i}.attn_out.weight"),
    ("model.layers.{i}.post_attention_layernorm.weight", "transformer.blocks.{i}.ff_norm.weight"),
    ("model.layers.{i}.mlp.gate_proj.weight", "transformer.blocks.{i}.ff_proj.weight"),
    ("model.layers.{i}.mlp.up_proj.weight", "transformer.blocks.{i}.up_proj.weight"),
    ("model.layers.{i}.mlp.down_proj.weight", "transformer.blocks.{i}.ff_out.weight"),
    ("model.norm.weight", "transformer.ln_f.weight"),
    ("lm_head.weight", "transformer.ff_out.weight"),
]


def _rename(name: str, pairs) -> str | None:
    """name matched against each (from, to) template pair -> the `to` name, or None."""
    for source, target in pairs:
        match = re.fullmatch(re.escape(source).replace(r"\{i\}", r"(\d+)"), name)
        if match:
            return target.replace("{i}", match.group(1)) if match.groups() else target
    return None


def _field(config: dict, key: str, config_path: Path):
    if key not in config:
        raise CheckpointError(f"{config_path}: missing field {key!r}")
    return config[key]


def _require(config: dict, config_path: Path, **expected) -> None:
    """Options our model does not implement must hold their plain value."""
    for key, value in expected.items():
        allowed = (value, None) if value is False else (value,)  # an absent/null flag means off
        if key in config and config[key] not in allowed:
            raise CheckpointError(f"{config_path}: {key}={config[key]!r} is not supported (expected {value!r})")


def model_family(config: dict, config_path: Path) -> str:
    family = str(config.get("model_type", "")).lower()
    if family not in FAMILIES:
        raise CheckpointError(f"{config_path}: unknown model_type {config.get('model_type')!r}: "
                              f"choose one of {', '.join(FAMILIES)}")
    return family


def model_args(family: str, config: dict, config_path: Path) -> ModelArgs:
    """ModelArgs from config.json: LLaDA field names for llada/parley, Qwen2 names for dream."""
    f = lambda key: _field(config, key, config_path)  # noqa: E731
    if family == "dream":
        _require(config, config_path, hidden_act="silu", rope_scaling=None, use_sliding_window=False)
        args = dict(d_model=f("hidden_size"), n_layers=f("num_hidden_layers"), n_heads=f("num_attention_heads"),
                    n_kv_heads=config.get("num_key_value_heads") or f("num_attention_heads"),
                    mlp_hidden_size=f("intermediate_size"), vocab_size=f("vocab_size"),
                    rope_theta=float(config.get("rope_theta", 1e6)), rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
                    max_sequence_length=min(config.get("max_position_embeddings", 4096), MAX_ROPE_POSITIONS),
                    qkv_bias=True, weight_tying=bool(config.get("tie_word_embeddings", False)), shift_logits=True)
    else:
        _require(config, config_path, block_type="llama", activation_type="silu", layer_norm_type="rms",
                 alibi=False, rope=True, attention_layer_norm=False, include_bias=False, scale_logits=False,
                 input_emb_norm=False)
        own = config if family == "parley" else {}  # Parley's own fields; a LLaDA config never sets them
        args = dict(d_model=f("d_model"), n_layers=f("n_layers"), n_heads=f("n_heads"),
                    n_kv_heads=config.get("n_kv_heads") or f("n_heads"), mlp_hidden_size=f("mlp_hidden_size"),
                    vocab_size=config.get("embedding_size") or f("vocab_size"),
                    rope_theta=float(config.get("rope_theta", 500000.0)),
                    rms_norm_eps=float(config.get("rms_norm_eps", 1e-5)),
                    max_sequence_length=min(config.get("max_sequence_length", 4096), MAX_ROPE_POSITIONS),
                    qkv_bias=bool(config.get("include_qkv_bias", False)),
                    weight_tying=bool(config.get("weight_tying", False)),
                    rope_full_precision=bool(config.get("rope_full_precision", False)),
                    shift_logits=bool(own.get("shift_logits", False)))
    head_dim = config.get("head_dim")
    if head_dim is not None and head_dim * args["n_heads"] != args["d_model"]:
        raise CheckpointError(f"{config_path}: head_dim={head_dim} is not d_model / n_heads")
    try:
        return ModelArgs(**args)
    except ValueError as exc:
        raise CheckpointError(f"{config_path}: {exc}") from None


def _ids(value) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


def special_ids(family: str, config: dict, tokenizer: Tokenizer, path: Path, vocab_size: int) -> SpecialIds:
    """Mask and stop ids from config.json, generation_config.json and the tokenizer's own tokens."""
    mask = config.get("mask_token_id")
    if mask is None:
        mask = tokenizer.token_to_id(MASK_TOKEN[family])
    if mask is None:
        raise CheckpointError(f"{path / 'config.json'}: no mask_token_id, and the tokenizer has no "
                              f"{MASK_TOKEN[family]!r} token")
    generation_config = read_json(path / "generation_config.json", required=False)
    stop = set(_ids(config.get("eos_token_id")) + _ids(config.get("eot_token_id"))
               + _ids(generation_config.get("eos_token_id")))
    end_of_turn = tokenizer.token_to_id(chat.END_OF_TURN[family])
    if end_of_turn is not None:
        stop.add(end_of_turn)
    if not stop:
        raise CheckpointError(f"{path}: no eos_token_id in config.json and no {chat.END_OF_TURN[family]!r} token")
    for name, token_id in [("mask_token_id", mask), *(("stop id", s) for s in stop)]:
        if not 0 <= token_id < vocab_size:
            raise CheckpointError(f"{path / 'config.json'}: {name} {token_id} is outside the vocabulary "
                                  f"of {vocab_size}")
    return SpecialIds(mask=int(mask), stop=tuple(sorted(stop)))


def bos_token(path: Path) -> str | None:
    """The BOS string that LLaDA's chat template opens with, from the tokenizer's config files."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        token = token_string(read_json(path / name, required=False).get("bos_token"))
        if token:
            return token
    return None


def weight_files(path: Path) -> dict[Path, list[str] | None]:
    """Each safetensors file -> the tensor names the index assigns it (None: all it holds)."""
    index_path = path / "model.safetensors.index.json"
    if index_path.is_file():
        weight_map = _field(read_json(index_path), "weight_map", index_path)
        files: dict[Path, list[str]] = {}
        for name, file_name in weight_map.items():
            files.setdefault(path / file_name, []).append(name)
        for file in files:
            if not file.is_file():
                raise CheckpointError(f"{file}: shard listed in {index_path.name} is missing")
        return files
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{path}: no *.safetensors weights (and no model.safetensors.index.json)")
    return {file: None for file in files}


def our_name(family: str, name: str) -> str | None:
    """A checkpoint tensor name -> our parameter name (None when it is not one of a model's tensors)."""
    if family == "dream":
        return _rename(name, DREAM_NAMES)
    return name[len("model."):] if name.startswith("model.") else None


def checkpoint_name(family: str, ours: str) -> str:
    """Our parameter name -> the tensor name the family's checkpoints use."""
    if family == "dream":
        return _rename(ours, [(b, a) for a, b in DREAM_NAMES])
    return "model." + ours


def load_weights(model: Transformer, family: str, path: Path, device, dtype) -> dict[str, torch.Tensor]:
    """Every parameter of model read from path's safetensors, shape-checked, on device in dtype."""
    expected = {name: tuple(p.shape) for name, p in model.named_parameters()}
    files = weight_files(path)
    total_bytes = sum(file.stat().st_size for file in files)
    state: dict[str, torch.Tensor] = {}
    with tqdm(total=total_bytes, unit="B", unit_scale=True, desc=f"loading {path.name}",
              disable=total_bytes < PROGRESS_BYTES) as progress:
        for file, names in files.items():
            with safe_open(str(file), framework="pt", device="cpu") as handle:
                for name in names if names is not None else handle.keys():
                    if IGNORED_TENSORS.fullmatch(name):
                        continue
                    ours = our_name(family, name)
                    if ours not in expected:
                        raise CheckpointError(f"{file}: tensor {name!r} is not part of a {family} model "
                                              f"with this config.json")
                    shape = tuple(handle.get_slice(name).get_shape())
                    if shape != expected[ours]:
                        raise CheckpointError(f"{file}: tensor {name!r} has shape {shape}, expected "
                                              f"{expected[ours]} from config.json")
                    state[ours] = handle.get_tensor(name).to(device=device, dtype=dtype)
            progress.update(file.stat().st_size)
    missing = sorted(checkpoint_name(family, name) for name in set(expected) - set(state))
    if missing:
        raise CheckpointError(f"{path}: {len(missing)} tensors missing from the safetensors files, "
                              f"e.g. {', '.join(missing[:3])}")
    return state


def _dtype(dtype, config: dict) -> torch.dtype:
    """The dtype asked for (a torch.dtype or its name), else the checkpoint's torch_dtype, else float32."""
    if isinstance(dtype, torch.dtype):
        return dtype
    name = dtype or config.get("torch_dtype") or config.get("dtype") or "float32"
    if name not in DTYPES:
        raise ValueError(f"dtype {name!r}: choose one of {', '.join(DTYPES)}")
    return DTYPES[name]


def load(path, device=None, dtype=None) -> Engine:
    """An Engine for the checkpoint directory at path (parley, llada or dream) or a .gguf file, on device in dtype.

    device defaults to cuda when available, else cpu; dtype (torch.dtype or name) to the checkpoint's torch_dtype.
    """
    path = Path(path)
    if path.suffix == ".gguf":  # one llama.cpp file (llm.gguf)
        return load_gguf(path, device, _dtype(dtype, {}))
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a checkpoint directory")
    config_path = path / "config.json"
    config = read_json(config_path)
    if config.get("model_type") == "parley-adapter":  # `parley adapt`'s LoRA on the SmolLM2 base (llm.adapt)
        return load_adapted(path, device, dtype)
    family = model_family(config, config_path)
    args = model_args(family, config, config_path)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = _dtype(dtype, config)
    tokenizer = load_tokenizer(path)
    special = special_ids(family, config, tokenizer, path, args.vocab_size)
    with torch.device("meta"):
        model = Transformer(args)
    model.load_state_dict(load_weights(model, family, path, device, dtype), assign=True)
    model.reset_rope(device)
    return Engine(model, tokenizer, family, special, bos_token(path) if family == "llada" else None)


def save_parley(model: Transformer, tokenizer: Tokenizer, out_dir) -> Path:
    """Write a parley checkpoint: config.json, model.safetensors (LLaDA names), tokenizer.json."""
    out_dir = Path(out_dir)
    args = model.args
    token_ids = {token: tokenizer.token_to_id(token) for token in chat.PARLEY_SPECIAL_TOKENS}
    absent = [token for token, token_id in token_ids.items() if token_id is None]
    if absent:
        raise ValueError(f"the tokenizer lacks Parley's special tokens {', '.join(absent)}")
    fields = dataclasses.asdict(args)
    fields["include_qkv_bias"] = fields.pop("qkv_bias")
    # rope_full_precision keeps LLaDA's name; shift_logits (Dream-style: raw row i holds token i+1) is saved
    # only when set, so LLaDA-layout parley checkpoints stay as they were
    if not fields["shift_logits"]:
        fields.pop("shift_logits")
    dtype = model.dtype
    config = {"model_type": "parley", "architectures": ["ParleyDiffusionLM"], **fields,
              "mask_token_id": token_ids[chat.MASK], "eos_token_id": token_ids[chat.END],
              "eot_token_id": token_ids[chat.END], "pad_token_id": token_ids[chat.PAD],
              "torch_dtype": str(dtype).removeprefix("torch.")}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    tensors = {f"model.{name}": t.detach().contiguous().cpu() for name, t in model.state_dict().items()}
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save(str(out_dir / "tokenizer.json"))
    return out_dir
