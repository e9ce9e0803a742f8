"""The copy head: a pointer into the prompt mixed with the vocabulary head, and a model that learns to copy with it."""
import pytest
import torch

from llm.model import ModelArgs, Transformer
from llm.train import Example, forward_with_mask, left_context_batch, left_context_loss
from tests.test_llm_checkpoints import single_thread  # noqa: F401 (autouse)

ARGS = ModelArgs(d_model=32, n_layers=2, n_heads=2, n_kv_heads=2, mlp_hidden_size=64, vocab_size=64,
                 max_sequence_length=64, shift_logits=True, copy_head_dim=16)


def model_with_gate(bias: float) -> Transformer:
    """A random model whose gate is pinned: +30 is the vocabulary head alone, -30 the pointer alone."""
    torch.manual_seed(0)
    model = Transformer(ARGS)
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


def test_a_model_without_its_source_is_refused():
    model = model_with_gate(0.0)
    with pytest.raises(ValueError, match="copy_source"):
        model.head(model.trunk(torch.tensor([[1, 2, 3]])))
    with pytest.raises(ValueError, match="copy_head_dim"):
        ModelArgs(copy_head_dim=-1)


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
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    model = Transformer(ARGS)
    model.init_weights()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95))
    for _ in range(150):
        loss = left_context_loss(model, copy_examples(16, generator), 0, 1, 2)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        ids, positions, allowed, targets, _, is_prompt = left_context_batch(copy_examples(64, generator), 0, 1, 2)
        chosen = forward_with_mask(model, ids, positions, allowed, is_prompt).argmax(-1)
    span = targets > 2  # the copied tokens, not the end padding
    assert (chosen[span] == targets[span]).float().mean() > 0.9
