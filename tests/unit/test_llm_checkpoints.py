"""The tiny checkpoints of tests/checkpoints.py load to the logits of the plain-torch reference."""
import json

import pytest
import torch
from tokenizers import Tokenizer

import llm
from tests.checkpoints import (VOCAB, ref_forward, single_thread, write_dream, write_llada,  # noqa: F401 (autouse)
                               write_parley)

IDS = torch.tensor([[5, 17, 42, 99, 3, 250, 7, 11, 64, 128, 200, 1], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 300, 319]])


@pytest.mark.parametrize("shards", [1, 3])
def test_llada_logits_match_reference(tmp_path, shards):
    tensors = write_llada(tmp_path, shards=shards)
    engine = llm.load(tmp_path, device="cpu")
    assert engine.chat_style == "llada" and engine.dtype == torch.float32
    with torch.no_grad():
        got = engine.model(IDS)
    assert got.shape == (2, IDS.shape[1], VOCAB)
    assert (got - ref_forward(tensors, IDS, "llada")).abs().max() <= 1e-4


def test_dream_logits_match_reference_with_shift(tmp_path):
    tensors = write_dream(tmp_path)
    engine = llm.load(tmp_path, device="cpu")
    assert engine.chat_style == "dream"
    with torch.no_grad():
        got = engine.model(IDS)
    assert (got - ref_forward(tensors, IDS, "dream")).abs().max() <= 1e-4


def test_parley_roundtrip_matches_reference(tmp_path):
    write_parley(tmp_path)
    from safetensors.torch import load_file
    tensors = load_file(str(tmp_path / "model.safetensors"))
    config = json.loads((tmp_path / "config.json").read_text())
    tokenizer = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert config["model_type"] == "parley"
    assert config["mask_token_id"] == tokenizer.token_to_id("<|mask|>")
    assert config["eos_token_id"] == config["eot_token_id"] == tokenizer.token_to_id("<|end|>")
    assert config["pad_token_id"] == tokenizer.token_to_id("<|pad|>")
    engine = llm.load(tmp_path, device="cpu")
    with torch.no_grad():
        got = engine.model(IDS)
    assert (got - ref_forward(tensors, IDS, "llada")).abs().max() <= 1e-4


def test_special_ids_come_from_the_checkpoint(tmp_path):
    write_llada(tmp_path / "llada")
    write_dream(tmp_path / "dream")
    llada, dream = llm.load(tmp_path / "llada"), llm.load(tmp_path / "dream")
    tok = llada.tokenizer
    assert llada.special.mask == tok.token_to_id("<|mdm_mask|>")
    assert set(llada.special.stop) == {tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|eot_id|>")}
    assert llada.bos_token == "<|startoftext|>"
    tok = dream.tokenizer
    assert dream.special.mask == tok.token_to_id("<|mask|>") == 290 + 4
    assert set(dream.special.stop) == {tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")}


def test_dream_tokenizer_from_vocab_and_merges(tmp_path):
    write_dream(tmp_path)
    engine = llm.load(tmp_path)
    text = "<|im_start|>user\nWe open at nine, café!<|im_end|>"
    ids = engine.tokenizer.encode(text, add_special_tokens=False).ids
    assert ids[0] == engine.tokenizer.token_to_id("<|im_start|>")
    assert engine.tokenizer.token_to_id("<|im_end|>") in ids
    assert engine.tokenizer.decode(ids, skip_special_tokens=False) == text


def test_cached_chunk_equals_full_pass(tmp_path):
    """A pass over [start, T) attending to a fresh cache of [0, start) gives the full pass's logits."""
    write_dream(tmp_path)
    model = llm.load(tmp_path).model
    ids = IDS[:1]
    with torch.inference_mode():
        cache = model.new_cache(1, ids.shape[1])
        full = model.head(model.trunk(ids, 0, cache))
        part = model.head(model.trunk(ids[:, 5:], 5, cache))
        dual = model.head(model.trunk(ids[:, 5:8], 5, cache, kv_len=ids.shape[1]))
    assert (full[:, 5:] - part).abs().max() <= 1e-5
    assert (full[:, 5:8] - dual).abs().max() <= 1e-5


def test_llada_in_bfloat16_stays_close_to_the_fp32_reference(tmp_path):
    tensors = write_llada(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "rope_full_precision": True}))
    engine = llm.load(tmp_path, dtype=torch.bfloat16)
    with torch.no_grad():
        got = engine.model(IDS).float()
    ref = ref_forward(tensors, IDS, "llada")
    assert engine.dtype == torch.bfloat16 and (got - ref).abs().max() <= 0.05 * ref.abs().max()
