"""The copy head: a pointer into the prompt mixed with the vocabulary head, and a model that learns to copy with it."""
import pytest
import torch

from llm.model import ModelArgs, Transformer
from llm.train import Example, forward_with_mask, left_context_batch, left_context_loss
from tests.checkpoints import single_thread  # noqa: F401 (autouse)

ARGS = ModelArgs(d_model=32, n_layers=2, n_heads=2, n_kv_heads=2, mlp_hidden_size=64, vocab_size=64,
                 max_sequence_length=64, shift_logits=True, copy_head_dim=16)


def model_with_gate(bias: float, **fields) -> Transformer:
    """A random model (ARGS and `fields`) whose gate is pinned: +30 is the vocabulary head alone, -30 the pointer
    alone."""
    torch.manual_seed(0)
    model = Transformer(ModelArgs(**{**ARGS.__dict__, **fields}))
    model.init_weights(std=0.2)
    with torch.no_grad():
        model.transformer.copy.gate.weight.zero_()
        model.transformer.copy.copy_gate.weight.zero_()
        model.transformer.copy.gate.bias.fill_(bias)
    return model.eval()


@torch.no_grad()
def test_the_mixture_is_a_distribution_and_the_gate_chooses_between_its_parts():
    ids = torch.tensor([[5, 9, 9, 12, 40, 7, 3]])
    valid = torch.tensor([[True, True, True, True, False, True, True]])  # 40 is not a source token
    vocabulary_only = model_with_gate(30.0)
    hidden = vocabulary_only.trunk(ids)
    logits = vocabulary_only.transformer.ff_out(vocabulary_only.transformer.ln_f(hidden))
    mixed = vocabulary_only.head(hidden, vocabulary_only.copy_source(hidden, ids, valid))
    assert torch.allclose(mixed.exp().sum(-1), torch.ones(1, 7), atol=1e-5)
    assert torch.allclose(mixed, torch.log_softmax(logits, -1), atol=1e-4)

    pointer_only = model_with_gate(-30.0)
    hidden = pointer_only.trunk(ids)
    p = pointer_only.head(hidden, pointer_only.copy_source(hidden, ids, valid)).exp()[0]  # (7, V)
    sources = [5, 9, 12, 7, 3]
    assert torch.allclose(p[:, sources].sum(-1), torch.ones(7), atol=1e-5)
    assert p[:, 40].max() < 1e-6  # a position not valid is never copied


# A chat-like toy: 3 system, 4 user, 6 assistant open a turn, 2 ends it; the copy head copies the user's words
ROLES = dict(copy_roles=(4,), copy_never=(0, 1, 2, 3, 4, 6))


def test_only_the_callers_words_are_copied_and_the_rest_of_the_prompt_is_sinks():
    model = model_with_gate(-30.0, **ROLES)  # the pointer alone
    ids = torch.tensor([[3, 40, 41, 2, 4, 42, 43, 2, 6, 44, 2, 4, 45, 2, 6]])
    assert model.copyable(ids)[0].tolist() == [i in (5, 6, 12) for i in range(15)]
    with torch.no_grad():
        hidden = model.trunk(ids)
        source = model.copy_source(hidden, ids)
        p = model.head(hidden, source).exp()[0]  # (15, V)
        vocabulary = torch.softmax(model.transformer.ff_out(model.transformer.ln_f(hidden)), -1)[0]
    assert torch.allclose(p.sum(-1), torch.ones(15), atol=1e-5)
    # the pointer's mass on the system, assistant, role and end positions is the vocabulary head's to give
    scores = model.transformer.copy.query(model.transformer.ln_f(hidden)) @ source.keys.transpose(1, 2) / 4
    pointer = torch.softmax(scores, -1)[0]  # (15, 15)
    sink = pointer[:, ~model.copyable(ids)[0]].sum(-1)
    assert torch.allclose(p[:, 40], sink * vocabulary[:, 40], atol=1e-5)  # 40 is only in the system turn
    assert torch.allclose(p[:, 42], pointer[:, 5] + sink * vocabulary[:, 42], atol=1e-5)


def test_a_token_may_be_copied_as_its_twin_in_each_map():
    """copy_twins ((40 -> 41), (40 -> 42, 9 -> 43)): the pointer's mass on a 40 goes to 40, 41 and 42 as the
    choice of twin on the row splits it; the first map has no twin for 9, which stays 9 there."""
    model = model_with_gate(-30.0, copy_twins=(((40, 41),), ((40, 42), (9, 43))))  # the pointer alone
    ids = torch.tensor([[5, 40, 9, 12]])
    with torch.no_grad():
        model.transformer.copy.fold.weight.zero_()
        hidden = model.trunk(ids)
        source = model.copy_source(hidden, ids)
        assert source.twins[0].tolist() == [[5, 41, 9, 12], [5, 42, 43, 12]]
        for bias, shares in (((30.0, -30.0), (0, 1, 0)), ((-30.0, -30.0), (1, 0, 0)), ((-30.0, 30.0), (0, 0, 1)),
                             ((0.0, 0.0), (1 / 3, 1 / 3, 1 / 3))):
            model.transformer.copy.fold.bias.copy_(torch.tensor(bias))
            p = model.head(hidden, source).exp()[0]
            assert torch.allclose(p.sum(-1), torch.ones(4), atol=1e-5)
            on_40 = p[:, 40] + p[:, 41] + p[:, 42]
            for token, share in zip((40, 41, 42), shares):
                assert torch.allclose(p[:, token], share * on_40, atol=1e-5)
    with pytest.raises(ValueError, match="copy_twins"):
        ModelArgs(copy_twins=(((40, 41),),))


def test_a_model_without_its_source_is_refused():
    model = model_with_gate(0.0)
    with pytest.raises(ValueError, match="copy_source"):
        model.head(model.trunk(torch.tensor([[1, 2, 3]])))
    with pytest.raises(ValueError, match="copy_head_dim"):
        ModelArgs(copy_head_dim=-1)


def trained_on(examples, args: ModelArgs, steps: int):
    """A fresh model trained on examples(16, generator) batches for `steps` steps (left-context loss), then run on
    64 new ones: -> (its choice per row, the targets) (B, T)."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    model = Transformer(args)
    model.init_weights()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95))
    for _ in range(steps):
        loss = left_context_loss(model, examples(16, generator), 0, 1, 2)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        ids, positions, allowed, targets, _, is_prompt = left_context_batch(examples(64, generator), 0, 1, 2)
        return forward_with_mask(model, ids, positions, allowed, is_prompt).argmax(-1), targets


def copy_examples(n: int, generator) -> list[Example]:
    """Prompt: random filler, a marker (4), a span of 3-6 random tokens, a closer (5); response: the span."""
    out = []
    for _ in range(n):
        span = torch.randint(8, 64, (int(torch.randint(3, 7, (), generator=generator)),), generator=generator)
        filler = torch.randint(8, 64, (int(torch.randint(0, 8, (), generator=generator)),), generator=generator)
        out.append(Example([3] + filler.tolist() + [4] + span.tolist() + [5], span.tolist() + [2] * (8 - len(span))))
    return out


def test_with_a_copy_head_a_small_model_learns_to_copy_unseen_spans():
    """Copying random spans: the span's tokens are nowhere else, so the reply must come from the prompt.
    (Without the head, a 4-layer d_model 128 model copied 0% of the tokens after 400 steps of this.)"""
    chosen, targets = trained_on(copy_examples, ARGS, steps=150)
    span = targets > 2  # the copied tokens, not the end padding
    assert (chosen[span] == targets[span]).float().mean() > 0.9


def test_with_lowercase_twins_a_small_model_learns_to_copy_a_word_in_lowercase():
    """Half the replies repeat the span (closer 5), half write it in "lowercase" (closer 6; token k's twin is
    k + 28), as "Tuesday" said by a caller is "tuesday" in a tool call. (Without the twins: 5% of the lowercase
    tokens right after 300 steps of this.)"""
    def examples(n, generator):
        out = []
        for _ in range(n):
            span = torch.randint(8, 36, (int(torch.randint(3, 7, (), generator=generator)),), generator=generator)
            lower = bool(torch.rand((), generator=generator) < 0.5)
            out.append(Example([3, 4] + span.tolist() + [6 if lower else 5],
                               (span + 28 if lower else span).tolist() + [2] * (8 - len(span))))
        return out

    twins = ModelArgs(**{**ARGS.__dict__, "copy_twins": (tuple((k, k + 28) for k in range(8, 36)),)})
    chosen, targets = trained_on(examples, twins, steps=300)
    for tokens in (targets >= 36, (targets > 2) & (targets < 36)):  # written in lowercase, copied as they are
        assert (chosen[tokens] == targets[tokens]).float().mean() > 0.9


def name_examples(n: int, generator) -> list[Example]:
    """A name ends the caller's turn and the reply quotes it: [user] filler marker span [end] [assistant] ->
    span, a closing quote (7), end. What follows the span's last token in the prompt is the turn's end."""
    out = []
    for _ in range(n):
        span = torch.randint(8, 64, (int(torch.randint(2, 5, (), generator=generator)),), generator=generator)
        filler = torch.randint(8, 64, (int(torch.randint(0, 8, (), generator=generator)),), generator=generator)
        out.append(Example([3, 20, 2, 4] + filler.tolist() + [5] + span.tolist() + [2, 6],
                           span.tolist() + [7] + [2] * (7 - len(span))))
    return out


def test_a_copied_name_is_ended_where_the_callers_turn_ends():
    """The pointer that follows the name lands on the turn's end, a sink, and the vocabulary closes the quote:
    names ran on past their end ("Noah Noah Noah") when every prompt position could be copied."""
    chosen, targets = trained_on(name_examples, ModelArgs(**{**ARGS.__dict__, **ROLES}), steps=150)
    span, close = targets > 7, targets == 7
    assert (chosen[span] == targets[span]).float().mean() > 0.9
    assert (chosen[close] == 7).float().mean() > 0.9


def spaced_name_examples(n: int, generator) -> list[Example]:
    """Spaces are tokens of their own (8) and words are followed by more words: [user] words, a marker (5), a
    name of 1-3 words (10-35), more words (36-63) [end] [assistant] -> the name with its spaces, a closing quote
    (7), end. After a name word and a space, one token before matches every word that follows a space."""
    def words(lo, hi, count):
        out = []
        for w in torch.randint(lo, hi, (count,), generator=generator).tolist():
            out += [w, 8]
        return out[:-1]

    def count(lo, hi):
        return int(torch.randint(lo, hi + 1, (), generator=generator))

    out = []
    for _ in range(n):
        name = words(10, 36, count(1, 3))
        prompt = [3, 20, 2, 4] + words(36, 64, count(1, 4)) + [8, 5, 8] + name + [8] + words(36, 64, count(1, 4))
        out.append(Example(prompt + [2, 6], name + [7] + [2] * (7 - len(name))))
    return out


def test_looking_around_the_pointer_copies_a_name_of_several_words_and_stops_at_its_end():
    """copy_lookaround: keys read two tokens back (the pointer finds the word after "name word, space"), the copy
    gate the token after the copied one (after the name's last word comes a space, then a word that is not part
    of the name: the vocabulary closes the quote). NOTE: without it, 150 steps of this copied 57% of the name
    tokens and closed 78% of the quotes right (with it 86% and 100%; 300 steps: 68% and 94%, against 88%, 100%).
    300 steps here: at 150 the same model copied 76-86% as rounding changed (the last layer skipping the rows no
    loss reads), around the 80% this asserts."""
    args = ModelArgs(**{**ARGS.__dict__, **ROLES, "copy_lookaround": True})
    chosen, targets = trained_on(spaced_name_examples, args, steps=300)
    name, close = (targets > 7), targets == 7
    assert (chosen[name] == targets[name]).float().mean() > 0.8
    assert (chosen[close] == 7).float().mean() > 0.95
