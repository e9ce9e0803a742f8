"""Engine.generate end to end on tiny random checkpoints, the text stream, the chat formats and bad directories."""
import json
import threading

import pytest
import torch
from tokenizers import Tokenizer, models

import llm
from llm import chat
from llm.engine import TextStream
from llm.tokenizer import CheckpointError
from tests.checkpoints import single_thread  # noqa: F401 (autouse)
from tests.checkpoints import write_dream, write_llada, write_parley

CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "When do you open?"},
                {"role": "assistant", "content": "At nine."}, {"role": "tool", "content": '{"open": "9:00"}'},
                {"role": "user", "content": "Thanks!"}]


@pytest.fixture(scope="module")
def parley_dir(tmp_path_factory):
    return write_parley(tmp_path_factory.mktemp("parley"))


def test_generate_streams_blocks_whose_concatenation_is_the_text(parley_dir):
    engine = llm.load(parley_dir, device="cpu")
    pieces = []
    gen = engine.generate(CONVERSATION[:2], max_new_tokens=40, block_length=8, threshold=0.5,
                          on_block=pieces.append, stop_at_eos=False)
    assert gen.stopped == "length" and gen.tokens == 40
    assert "".join(pieces) == gen.text and len(pieces) >= 2
    assert 5 <= gen.passes <= 40 and 0 < gen.first_block_s <= gen.seconds


def test_generate_is_deterministic_and_seeded_sampling_repeats(parley_dir):
    engine = llm.load(parley_dir, device="cpu")
    greedy = [engine.generate(CONVERSATION[:2], max_new_tokens=16, block_length=8).text for _ in range(2)]
    sampled = [engine.generate(CONVERSATION[:2], max_new_tokens=16, block_length=8, temperature=1.0,
                               seed=11).text for _ in range(2)]
    assert greedy[0] == greedy[1] and sampled[0] == sampled[1]


def test_a_reply_whose_first_tokens_were_weighed_writes_them_without_a_pass(tmp_path):
    """The agent's checks read the reply's first token's probabilities, and after a call's opening its tool's
    (app.agent.weighed): the reply that follows commits those tokens, and the opening's own from the same pass's
    rows, without a pass each: the same text."""
    from llm.engine import Engine

    loaded = llm.load(write_parley(tmp_path, shift_logits=True), device="cpu")
    engine = Engine(loaded.model, loaded.tokenizer, loaded.chat_style, loaded.special, left_to_right=True)
    messages = CONVERSATION[:2]

    def reply():
        return engine.generate(messages, max_new_tokens=12, block_length=1, threshold=1.0, use_cache="block",
                               stop_at_eos=False)

    alone = reply()
    engine.forget_earlier()
    first = engine.next_token_probabilities(messages)
    assert engine.next_token_probabilities(messages) is first   # asked again: no pass
    # after the first two tokens (as a call's opening is asked for): the pass's rows after the first one too
    engine.next_token_probabilities(messages, alone.ids[:2])
    weighed = reply()
    assert weighed.text == alone.text and weighed.tokens == alone.tokens == 12
    assert weighed.passes == alone.passes - 3 == 9


def test_eos_from_the_checkpoint_ends_the_reply(parley_dir):
    engine = llm.load(parley_dir, device="cpu")
    end = engine.tokenizer.token_to_id(chat.END)
    # make <|end|> the model's sure choice everywhere: residual = embedding, whose dim 0 alone reaches the head
    t = engine.model.transformer
    with torch.no_grad():
        t.wte.weight[:, 0] = 5.0
        for block in t.blocks:
            block.attn_out.weight.zero_()
            block.ff_out.weight.zero_()
        t.ln_f.weight.zero_()
        t.ln_f.weight[0] = 1.0
        t.ff_out.weight.zero_()
        t.ff_out.weight[end, 0] = 100.0
    gen = engine.generate(CONVERSATION[:2], max_new_tokens=32, block_length=8)
    assert gen.stopped == "eos" and gen.tokens == 0 and gen.text == "" and gen.passes == 1


def test_cancel_from_another_thread(parley_dir):
    engine = llm.load(parley_dir, device="cpu")
    cancel = threading.Event()
    first = threading.Event()

    def on_block(text):
        first.set()
        cancel.wait(5)  # hold the generating thread until the canceller has acted

    canceller = threading.Thread(target=lambda: (first.wait(5), cancel.set()))
    canceller.start()
    gen = engine.generate(CONVERSATION[:2], max_new_tokens=64, block_length=8, on_block=on_block, cancel=cancel,
                          stop_at_eos=False)
    canceller.join()
    assert gen.stopped == "cancelled" and gen.tokens == 8


@pytest.mark.parametrize("writer,style", [(write_llada, "llada"), (write_dream, "dream"), (write_parley, "parley")])
def test_every_family_generates(tmp_path, writer, style):
    writer(tmp_path)
    engine = llm.load(tmp_path)
    assert engine.chat_style == style
    gen = engine.generate(CONVERSATION, max_new_tokens=12, block_length=4, steps=2)
    assert gen.passes <= 6 and gen.stopped in ("eos", "length")


def test_prompt_longer_than_the_model_is_a_clear_error(parley_dir):
    engine = llm.load(parley_dir)
    with pytest.raises(ValueError, match="exceeds the model's max_sequence_length=512"):
        engine.generate(CONVERSATION, max_new_tokens=500)


def test_text_stream_holds_back_split_characters():
    vocab = {chr(i): i for i in range(ord("a"), ord("z") + 1)}
    byte_level = Tokenizer(models.BPE(vocab={**vocab, "Ã": 200, "©": 201, "Ġ": 202}, merges=[]))
    from tokenizers import decoders
    byte_level.decoder = decoders.ByteLevel()
    stream = TextStream(byte_level)
    pieces = [stream.push([ord("c"), ord("a"), ord("f")]), stream.push([200]), stream.push([201, 202]),
              stream.push([], final=True)]
    assert pieces == ["caf", "", "é ", ""]
    assert stream.text == "café "


def test_chat_formats():
    assert chat.render(CONVERSATION, "parley") == (
        '<|system|>Be brief.<|end|><|user|>When do you open?<|end|><|assistant|>At nine.<|end|>'
        '<|tool|>{"open": "9:00"}<|end|><|user|>Thanks!<|end|><|assistant|>')
    assert chat.render(CONVERSATION[1:2], "llada", bos_token="<|startoftext|>") == (
        "<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nWhen do you open?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert "<|start_header_id|>ipython<|end_header_id|>\n\n{\"open\": \"9:00\"}<|eot_id|>" in \
        chat.render(CONVERSATION, "llada")
    assert chat.render(CONVERSATION[1:2], "dream") == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhen do you open?"
        "<|im_end|>\n<|im_start|>assistant\n")
    two_tools = [{"role": "tool", "content": "a"}, {"role": "tool", "content": "b"}]
    assert chat.render(two_tools, "dream", add_generation_prompt=False).endswith(
        "<|im_start|>user\n<tool_response>\na\n</tool_response>\n<tool_response>\nb\n</tool_response><|im_end|>\n")


def test_chat_rejects_bad_roles_and_styles():
    with pytest.raises(ValueError, match="system, user, assistant, tool"):
        chat.render([{"role": "robot", "content": "hi"}], "parley")
    with pytest.raises(ValueError, match="parley, llada, dream"):
        chat.render(CONVERSATION, "alpaca")


def test_parley_prompt_tokens_are_single_special_tokens(parley_dir):
    engine = llm.load(parley_dir)
    ids = engine.prompt_ids(CONVERSATION[:2])
    tok = engine.tokenizer
    assert ids[0] == tok.token_to_id("<|system|>") and ids[-1] == tok.token_to_id("<|assistant|>")
    assert ids.count(tok.token_to_id("<|end|>")) == 2


# ---- one clear error per bad checkpoint directory ----

def test_missing_config(tmp_path):
    write_llada(tmp_path)
    (tmp_path / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json: file not found"):
        llm.load(tmp_path)


def test_missing_shard(tmp_path):
    write_llada(tmp_path, shards=3)
    (tmp_path / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model-00002-of-00003\.safetensors: shard listed in "
                                              r"model\.safetensors\.index\.json is missing"):
        llm.load(tmp_path)


def test_wrong_shape(tmp_path):
    from safetensors.torch import save_file
    tensors = write_llada(tmp_path)
    tensors["model.transformer.blocks.1.k_proj.weight"] = torch.zeros(32, 32)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor 'model\.transformer\.blocks\.1\.k_proj"
                                              r"\.weight' has shape \(32, 32\), expected \(16, 32\)"):
        llm.load(tmp_path)


def test_unknown_model_type(tmp_path):
    write_dream(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "qwen2"}))
    with pytest.raises(CheckpointError, match="unknown model_type 'qwen2': choose one of parley, llada, dream"):
        llm.load(tmp_path)


def test_missing_tokenizer(tmp_path):
    write_dream(tmp_path)
    (tmp_path / "merges.txt").unlink()
    with pytest.raises(CheckpointError, match="no tokenizer: expected tokenizer.json, or vocab.json and merges.txt"):
        llm.load(tmp_path)


def test_missing_tensor(tmp_path):
    from safetensors.torch import save_file
    tensors = write_dream(tmp_path)
    del tensors["model.layers.0.self_attn.q_proj.bias"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"1 tensors missing .* model\.layers\.0\.self_attn\.q_proj\.bias"):
        llm.load(tmp_path)
