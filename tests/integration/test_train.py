"""Masked-diffusion training on a tiny configuration: the loss falls, a seed fixes the result, the pipeline saves."""
import torch

from app.agent.profile import load_profile
from app.training.recipe import SIZES, DataOptions, build_data, run_training
from llm import chat
from llm.model import ModelArgs
from llm.train import Example, TrainOptions, collate, masked_diffusion_loss, train, train_tokenizer

TINY = ModelArgs(**SIZES["tiny"], vocab_size=64, max_sequence_length=64)  # shift_logits, as shipped


def toy_examples(n: int, seed: int) -> list[Example]:
    """Prompt: 6 random tokens; response: the same tokens reversed, then <|end|> (id 2) padding."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        prompt = torch.randint(8, 64, (6,), generator=g).tolist()
        out.append(Example(prompt, prompt[::-1] + [2] * 4))
    return out


def test_loss_masks_only_the_response_and_weights_by_one_over_t():
    torch.manual_seed(0)
    from llm.model import Transformer
    model = Transformer(TINY)
    ids, is_response, attend = collate(toy_examples(4, 0), pad_id=0)
    assert is_response[:, :6].sum() == 0 and is_response[:, 6:].all()
    ratio = torch.full((4,), 1.0)
    full = masked_diffusion_loss(model, ids, is_response, attend, mask_id=1, ratio=ratio)
    logits = model(torch.where(is_response, torch.ones_like(ids), ids), key_padding_mask=attend,
                   copy_from=attend & ~is_response)  # the copy head points into the prompt only
    expected = torch.nn.functional.cross_entropy(logits[is_response], ids[is_response])  # t = 1: plain mean CE
    assert torch.allclose(full, expected, atol=1e-5)


def test_loss_at_any_mask_ratio_is_the_cross_entropy_of_the_masked_tokens_of_forward():
    """The loss runs the head on the rows that predict a masked token only; the same number as Transformer.forward's
    logits at every masked token, each weighted 1/t over its sequence's response length."""
    from llm.model import Transformer

    torch.manual_seed(0)
    model = Transformer(TINY)
    batch = toy_examples(5, 3)
    batch[1] = Example(batch[1].prompt[:3], batch[1].response)  # a shorter prompt: rows gathered per sequence
    ids, is_response, attend = collate(batch, pad_id=0)
    ratio, suffix = torch.tensor([0.3, 0.5, 0.7, 0.9, 0.2]), torch.tensor([True, False, True, False, False])
    got = masked_diffusion_loss(model, ids, is_response, attend, 1, ratio, torch.Generator().manual_seed(4), suffix)
    noise = torch.rand(ids.shape, generator=torch.Generator().manual_seed(4))  # the loss's own draws, again
    rank = (is_response.cumsum(1) - 1).clamp(min=0) / is_response.sum(1, keepdim=True)
    masked = is_response & (torch.where(suffix[:, None], 1 - rank - 1e-6, noise) < ratio[:, None])
    assert 0 < masked.sum() < is_response.sum()
    logits = model(torch.where(masked, torch.ones_like(ids), ids), key_padding_mask=attend,
                   copy_from=attend & ~is_response)
    ce = torch.nn.functional.cross_entropy(logits[masked], ids[masked], reduction="none")
    weight = (1 / ratio[:, None] / is_response.sum(1, keepdim=True)).expand_as(ids)[masked]
    assert torch.allclose(got, (ce * weight).sum() / len(batch), atol=1e-5)


def test_a_few_steps_reduce_the_heldout_loss_and_are_deterministic():
    opts = TrainOptions(steps=60, batch_size=16, lr=1e-2, warmup_steps=5, eval_every=30, eval_batches=2, seed=3)
    train_set, heldout_set = toy_examples(256, 0), toy_examples(32, 1)
    model, summary = train(TINY, train_set, heldout_set, mask_id=1, pad_id=0, opts=opts, log=lambda _: None)
    (_, first), (_, last) = summary["heldout_loss"][0], summary["heldout_loss"][-1]
    assert len(summary["heldout_loss"]) == 2
    again, summary_again = train(TINY, train_set, heldout_set, mask_id=1, pad_id=0, opts=opts, log=lambda _: None)
    assert summary_again["heldout_loss"] == summary["heldout_loss"]
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    untrained = TrainOptions(steps=1, batch_size=16, lr=1e-9, warmup_steps=1, eval_batches=2, seed=3)
    _, base = train(TINY, train_set, heldout_set, mask_id=1, pad_id=0, opts=untrained, log=lambda _: None)
    assert last < 0.9 * base["heldout_loss"][-1][1], (base["heldout_loss"], summary["heldout_loss"])


def test_tokenizer_keeps_special_tokens_whole():
    tok = train_tokenizer(["<|user|>Hi there, book a haircut at 15:30<|end|>"] * 20, 300,
                          list(chat.PARLEY_SPECIAL_TOKENS))
    assert [tok.token_to_id(t) for t in chat.PARLEY_SPECIAL_TOKENS] == list(range(len(chat.PARLEY_SPECIAL_TOKENS)))
    ids = tok.encode("<|assistant|>Maria Quentin<|end|>", add_special_tokens=False).ids
    assert ids[0] == tok.token_to_id("<|assistant|>") and ids[-1] == tok.token_to_id("<|end|>")
    assert tok.decode(ids, skip_special_tokens=True) == "Maria Quentin"  # unseen names still encode (byte level)


def test_tokenizer_spells_a_word_the_same_after_a_space_and_in_json():
    """What the caller said is copied into a tool call token for token: spaces are tokens of their own."""
    spoken = 'This is Dmitri, a blow dry at 10:00 please.'
    call = '{"name":"Dmitri","time":"10:00","service":"blow dry"}'
    tok = train_tokenizer([spoken, call] * 20, 300, list(chat.PARLEY_SPECIAL_TOKENS))

    def ids(text):
        return tok.encode(text, add_special_tokens=False).ids

    for value in ("Dmitri", "10:00", "blow dry"):
        assert f" {value}" in spoken and ids(f" {value}")[1:] == ids(value) == ids(f'"{value}"')[1:-1], value
    assert tok.decode(ids(spoken + call)) == spoken + call


def test_front_desk_pipeline_writes_a_loadable_checkpoint(tmp_path):
    import llm

    data = DataOptions(train_dialogues=60, heldout_dialogues=10, vocab_size=400)
    opts = TrainOptions(steps=3, batch_size=4, eval_every=3, eval_batches=1)
    summary = run_training(load_profile(None), tmp_path, "tiny", data, opts)
    assert ({"config.json", "model.safetensors", "tokenizer.json", "training.json", "drafter.json"}
            <= {p.name for p in tmp_path.iterdir()})
    engine = llm.load(tmp_path, device="cpu")
    args = engine.model.args
    assert args.shift_logits and args.copy_head_dim == 16  # saved and read back
    # it copies the caller's words and the tool results, and may lowercase them ("Tuesday" -> "tuesday") or write
    # a spoken hour in two digits, in the morning or the afternoon ("9" -> "09", "two" -> "14")
    tokens = engine.tokenizer
    assert {tokens.id_to_token(i) for i in args.copy_roles} == {"<|user|>", "<|tool|>"}
    assert {tokens.id_to_token(i) for i in args.copy_never} == set(chat.PARLEY_SPECIAL_TOKENS)
    assert len(args.copy_twins) == 3 and args.copy_lookaround  # lowercase, two digits, afternoon; read back
    assert args.copy_twins[0] and all(tokens.id_to_token(a).lower() == tokens.id_to_token(b) != tokens.id_to_token(a)
                                      for a, b in args.copy_twins[0])
    # the drafter's table knows the training replies: after "<|assistant|>" it guesses a reply's opening
    assert engine.drafter.table and engine.drafter.propose(engine.prompt_ids([{"role": "user", "content": "Hi."}]), 4)
    gen = engine.generate([{"role": "user", "content": "Hello."}], max_new_tokens=8, block_length=8)
    assert gen.passes >= 1 and summary["train_examples"] > 60
    tokenizer, train_set, _ = build_data(load_profile(None), data, seed=0)
    end = tokenizer.token_to_id(chat.END)
    run_training(load_profile(None), tmp_path / "plain", "tiny", data, opts, copy_head_dim=0)
    assert llm.load(tmp_path / "plain", device="cpu").model.args.copy_head_dim == 0  # a model without the head
    run_training(load_profile(None), tmp_path / "lower", "tiny", data, opts, hours=False, lookaround=False)
    args = llm.load(tmp_path / "lower", device="cpu").model.args
    assert len(args.copy_twins) == 1 and not args.copy_lookaround  # lowercase only (--no-hour-twins ...)
    assert all(e.response[-1] == end and len(e.response) <= data.response_len for e in train_set)


def test_left_context_layout_sees_nothing_it_must_predict():
    from llm.train import left_context_batch

    batch = [Example([10, 11, 12], [20, 21, 2, 2, 2, 2]), Example([10, 11], [30, 2, 2, 2, 2, 2])]
    ids, positions, allowed, targets, lengths, is_prompt = left_context_batch(batch, pad_id=0, mask_id=1, stop_id=2,
                                                                   extra_stops=1)
    assert lengths.tolist() == [4, 3]  # the reply, its stop token and one more
    for b, e in enumerate(batch):
        P, L, C = len(e.prompt), int(lengths[b]), len(e.response)
        rows = range(P - 1, P + L - 1)  # the last prompt token, then the clean tokens: row r predicts r + 1
        assert [targets[b, r].item() for r in rows] == e.response[:L]
        assert (targets[b] != -100).sum() == L
        clean = range(P, P + L)
        for r in rows:
            seen = [positions[b, c].item() for c in clean if allowed[b, r, c]]
            assert seen == list(range(P, r + 1))  # settled tokens up to its own, never the one it predicts
        masks = range(P + L, P + L + C)
        assert [positions[b, m].item() for m in masks] == list(range(P, P + C))
        assert not any(allowed[b, m, c] for m in masks for c in clean)  # masks see no clean token
        assert allowed[b, :P, P + L:P + L + C].all()  # the prompt sees the canvas of masks


def test_forward_with_an_all_true_mask_is_the_model_forward():  # raw rows: not realigned for shift_logits
    from llm.model import Transformer
    from llm.train import forward_with_mask

    torch.manual_seed(0)
    model = Transformer(TINY)
    ids, _, attend = collate(toy_examples(3, 2), pad_id=0)
    T = ids.shape[1]
    allowed = attend[:, None, :].expand(3, T, T)
    got = forward_with_mask(model, ids, torch.arange(T).expand(3, T), allowed, attend)
    hidden = model.trunk(ids, key_padding_mask=attend)
    assert torch.allclose(got, model.head(hidden, model.copy_source(hidden, ids, attend)), atol=1e-5)


def test_left_context_loss_is_the_mean_cross_entropy_of_the_rows_with_a_target():
    """The loss runs the head on the target rows only; the same number as the head on every row."""
    from llm.model import Transformer
    from llm.train import forward_with_mask, left_context_batch, left_context_loss

    torch.manual_seed(0)
    model = Transformer(TINY)
    batch = [Example([10, 11, 12, 13], [20, 21, 2, 2, 2]), Example([10, 11], [30, 31, 32, 2, 2])]
    ids, positions, allowed, targets, lengths, is_prompt = left_context_batch(batch, 0, 1, 2)
    logits = forward_with_mask(model, ids, positions, allowed, is_prompt)  # (B, T, V)
    ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    expected = (ce.sum(1) / lengths).mean()
    assert torch.allclose(left_context_loss(model, batch, 0, 1, 2), expected, atol=1e-5)


def test_copy_task_examples_repeat_a_span_of_the_callers_words():
    from app.training.recipe import copy_task_for

    data = DataOptions(train_dialogues=40, heldout_dialogues=4, vocab_size=400)
    tokenizer, train_set, _ = build_data(load_profile(None), data, seed=0)
    task = copy_task_for(train_set, tokenizer, data.response_len)
    user, end, assistant = (tokenizer.token_to_id(t) for t in ("<|user|>", "<|end|>", "<|assistant|>"))
    assert user not in task.text and end not in task.text      # callers' words only
    samples = task.sample(20, torch.Generator().manual_seed(1))
    assert samples == task.sample(20, torch.Generator().manual_seed(1))
    for e in samples:
        span = e.prompt[1:-2]
        assert e.prompt[0] == user and e.prompt[-2:] == [end, assistant] and 3 <= len(span) <= 24
        assert e.response == span + [end] * (data.response_len - len(span))
        assert any(task.text[i:i + len(span)] == span for i in range(len(task.text)))


def test_training_with_a_copy_task_runs_and_stays_deterministic():
    from llm.train import CopyTask

    text = torch.randint(8, 64, (500,), generator=torch.Generator().manual_seed(5)).tolist()
    task = CopyTask(text, [3], [2, 4], end_id=2, response_len=10, max_len=6)
    opts = TrainOptions(steps=6, batch_size=8, eval_every=3, eval_batches=1, copy_fraction=0.5, seed=2)
    runs = [train(TINY, toy_examples(64, 0), toy_examples(8, 1), mask_id=1, pad_id=0, stop_id=2, opts=opts,
                  log=lambda _: None, copy_task=task)[1]["heldout_loss"] for _ in range(2)]
    assert runs[0] == runs[1]
    plain = train(TINY, toy_examples(64, 0), toy_examples(8, 1), mask_id=1, pad_id=0, stop_id=2, opts=opts,
                  log=lambda _: None)[1]["heldout_loss"]
    assert plain != runs[0]                                    # the copy examples were trained on


def test_spoken_hours_have_two_digit_and_afternoon_twins_in_the_shipped_tokenizer():
    from tokenizers import Tokenizer

    from app.settings import FRONTDESK_LLM_DIR
    from app.training.recipe import number_twins

    tokens = Tokenizer.from_file(str(FRONTDESK_LLM_DIR / "tokenizer.json"))
    digits, afternoon = ({tokens.id_to_token(a): tokens.id_to_token(b) for a, b in pairs}
                         for pairs in number_twins(tokens))
    assert digits["9"] == digits["nine"] == "09" and digits["thirty"] == "30"
    # "noon" has a twin when it is one token (the tokenizer trained with the variants splits it: "noo" "n"; the
    # tools' grammar still reads it as 12:00)
    assert digits.get("noon", "12") == "12" and ("noon" in digits) == (tokens.token_to_id("noon") is not None)
    assert afternoon["2"] == afternoon["two"] == "14" and afternoon["11"] == "23"
    assert "12" not in afternoon and "10" not in digits  # 12 p.m. is 12; a pair that changes nothing is left out


def test_a_moving_average_of_the_weights_leaves_training_as_it_was():
    """With ema_decay the model returned is the average and the last weights are the summary's raw_state: the
    same weights a run without the average ends with. A decay of ~0 averages nothing."""
    def run(decay):
        opts = TrainOptions(steps=12, batch_size=8, lr=1e-2, warmup_steps=2, eval_every=6, eval_batches=1, seed=4,
                            ema_decay=decay)
        return train(TINY, toy_examples(64, 0), toy_examples(8, 1), mask_id=1, pad_id=0, stop_id=2, opts=opts,
                     log=lambda _: None)

    plain, plain_summary = run(0.0)
    averaged, summary = run(0.9)
    assert "raw_state" not in plain_summary and summary["heldout_loss"] == plain_summary["heldout_loss"]
    assert all(torch.equal(summary["raw_state"][k], v) for k, v in plain.state_dict().items())
    assert not all(torch.equal(averaged.state_dict()[k], v) for k, v in plain.state_dict().items())
    nothing, _ = run(1e-9)
    assert all(torch.allclose(nothing.state_dict()[k], v, atol=1e-6) for k, v in plain.state_dict().items())
    assert "ema_heldout_loss" in summary
