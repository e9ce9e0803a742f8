"""llm.reader: Whisper tiny.en's text decoder reading the caller's words, and a model that reads them."""
import json

import pytest
import torch

import llm
from llm import chat
from llm.generate import DecodeOptions
from llm.model import ModelArgs, Transformer
from llm.reader import DIM, WIDTH, Reader, dense, read_prompt
from llm.tokenizer import CheckpointError
from speech.asr import silence_encoding


@pytest.fixture(scope="module")
def reader():
    return Reader.fresh(torch.from_numpy(silence_encoding()))


def next_word(reader, text):
    """Whisper's own greedy next token after text: its last normed state against its embeddings."""
    states = reader.states([reader.tokenizer.encode(" " + text, add_special_tokens=False).ids])[0]
    return reader.tokenizer.decode([int((states[-1, WIDTH:] @ reader.w["embeddings/weight"].T).argmax())])


def test_the_reader_is_whispers_decoder_and_knows_english(reader):
    # a decoder wired wrong (a layer norm, the causal mask, the memory) does not finish these
    assert next_word(reader, "The United States of") == " America"
    assert next_word(reader, "Thank you very") == " much"


def test_texts_read_in_one_batch_read_as_they_do_alone(reader):
    texts = ["Hi, this is Noah. Could I get a haircut on Wednesday at 3:30 p.m.?", "What's the number there?", "ok"]
    together = reader._read(texts)
    for text, (states, holder) in zip(texts, together):
        alone, alone_holder = reader._read([text])[0]
        assert torch.equal(holder, alone_holder) and len(holder) == len(text)
        assert torch.allclose(states, alone, atol=1e-3)
    # each character reads the Whisper token that holds it: "number" all one token, not the one of "there"
    features = reader("What's the number there?")
    start = "What's the ".__len__()
    assert torch.equal(features[start], features[start + 5])
    assert not torch.equal(features[start], features[start + len("number ")])


def test_a_prompt_is_read_at_the_callers_words_and_nowhere_else(reader):
    engine = llm.load("llm/weights/parley-frontdesk", device="cpu")  # its tokenizer: spaces are tokens
    messages = [{"role": "system", "content": "You answer calls for Maple Street Hair Studio."},
                {"role": "user", "content": "Hi, this is Noah."},
                {"role": "assistant", "content": "Hi Noah! How can I help?"},
                {"role": "tool", "content": '{"result": "hours"}'},
                {"role": "user", "content": "What's the number there?"}]
    text = chat.render(messages, "parley")
    encoding = engine.tokenizer.encode(text, add_special_tokens=False)
    chunks = read_prompt(reader, messages, encoding.offsets)
    read = dense(chunks, len(encoding.ids))
    assert read.shape == (len(encoding.ids), DIM)
    pieces = ["".join(text[a:b] for a, b in encoding.offsets[s:s + len(f)]) for s, f in chunks]
    assert pieces == ["Hi, this is Noah.", "What's the number there?"]
    spans = chat.parley_spans(messages)
    assert [text[a:b] for a, b in spans] == pieces
    inside = torch.tensor([any(a <= s and e <= b for a, b in spans) for s, e in encoding.offsets])
    assert (read.abs().sum(1) > 0).tolist() == inside.tolist()  # not the system, the agent, the tool, the roles
    # a token's features are those of its last character: " " before "number" reads the Whisper token " number"
    start, features = chunks[1]
    tokens = [text[a:b] for a, b in encoding.offsets[start:start + len(features)]]
    number = tokens.index("number")
    assert tokens[number - 1] == " " and torch.equal(features[number - 1], features[number])
    memo = {}
    again = read_prompt(reader, messages, encoding.offsets, memo)
    assert set(memo) == {"Hi, this is Noah.", "What's the number there?"}
    assert all(torch.equal(a[1], b[1]) for a, b in zip(again, chunks))  # the same fp16 values, remembered or not


def test_a_model_reads_only_with_a_reader():
    args = ModelArgs(d_model=32, n_layers=1, n_heads=2, n_kv_heads=2, mlp_hidden_size=64, vocab_size=64,
                     max_sequence_length=64, reader_dim=DIM)
    torch.manual_seed(0)
    model = Transformer(args)
    model.init_weights()
    ids = torch.randint(0, 64, (1, 10))
    read = torch.zeros(1, 10, DIM)
    assert torch.equal(model.trunk(ids), model.trunk(ids, read=read))  # zeros: no caller's words
    read[0, 3:6] = torch.randn(3, DIM)
    changed = (model.trunk(ids, read=read) - model.trunk(ids)).abs().sum(-1)[0] > 0
    assert changed.all()  # attention carries the read words to every position
    plain = Transformer(ModelArgs(**{**args.__dict__, "reader_dim": 0}))
    with pytest.raises(ValueError, match="no reader"):
        plain.trunk(ids, read=read)


def test_a_model_with_a_reader_trains_saves_and_answers(tmp_path):
    from app.agent.profile import load_profile
    from app.training.recipe import DataOptions, build_data, run_training
    from llm.train import TrainOptions

    data = DataOptions(train_dialogues=60, heldout_dialogues=10, vocab_size=400)
    opts = TrainOptions(steps=3, batch_size=4, eval_every=3, eval_batches=1)
    summary = run_training(load_profile(None), tmp_path, "tiny", data, opts, reader=True)
    assert (tmp_path / "reader.safetensors").is_file()
    assert json.loads((tmp_path / "config.json").read_text())["reader_dim"] == DIM == summary["reader_dim"]
    engine = llm.load(tmp_path, device="cpu")
    assert engine.reader is not None and engine.model.args.reader_dim == DIM
    messages = [{"role": "user", "content": "Hello, what are your hours?"}]
    ids, read = engine.prompt_read(messages)
    assert ids == engine.prompt_ids(messages) and read.shape == (len(ids), DIM) and read.abs().sum() > 0
    gen = engine.generate(messages, max_new_tokens=8, block_length=8)
    assert gen.passes >= 1
    with pytest.raises(ValueError, match="read features"):
        engine.generate_ids(ids, DecodeOptions(max_new_tokens=8, block_length=8))
    # every training example carries what the reader made of its callers' messages, at their tokens
    tokenizer, train_set, _ = build_data(load_profile(None), data, seed=0, reader=engine.reader)
    user = tokenizer.token_to_id(chat.PARLEY_ROLE_TOKENS["user"])
    for e in train_set[:20]:
        assert len(e.read) == e.prompt.count(user)
        assert all(e.prompt[start - 1] == user for start, _ in e.read)
    (tmp_path / "reader.safetensors").unlink()
    with pytest.raises(CheckpointError, match="reader.safetensors"):
        llm.load(tmp_path, device="cpu")
