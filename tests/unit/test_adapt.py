"""LoRA adaptation of a left-to-right model to block diffusion (llm.blockdiff's training side, llm.lora, llm.adapt),
on tiny random models: training's attention is the sampler's, the adapter starts as the base and merges exactly, and
adaptation is deterministic."""
import dataclasses
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from llm import lora
from llm.adapt import AdaptOptions, Example, adapt, apply_adapter
from llm.blocktrain import block_batch, kept_log_probs, packed_loss
from llm.passes import Pass, passes
from llm.quant import fbgemm_available, pack_fp16
from tests.checkpoints import TINY_MASK as MASK, random_ids, tiny_block_model


@torch.no_grad()
def test_training_attention_is_the_samplers():
    """The logits training computes for a block's noisy copy equal the sampler's for the same canvas."""
    model = tiny_block_model()
    ids = random_ids(24)
    spans = [(10, 18)]  # one reply of 8 tokens: blocks [10, 14) and [14, 18)
    packed = block_batch(ids, spans, 4, MASK, torch.Generator().manual_seed(3), ar_weight=0.5)
    hidden, _ = model.trunk_masked(packed.ids[None], packed.positions[None], packed.allowed[None])
    n = len(ids)
    for k, b0 in enumerate((10, 14)):
        canvas = packed.ids[n + 4 * k:n + 4 * k + 4]
        cache = model.new_cache(1, 256)
        got = passes(model, [Pass(cache, 0, torch.cat([torch.tensor(ids[:b0]), canvas]))])[0]  # the prompt, the canvas
        torch.testing.assert_close(got[b0:], hidden[0, n + 4 * k:n + 4 * k + 4], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(got[:b0], hidden[0, :b0], atol=1e-5, rtol=1e-4)
    # targets: the clean stream predicts each reply token; a copy row predicts the masked token after it
    rows = (packed.weights > 0).nonzero()[:, 0]
    assert all(packed.targets[r] >= 0 for r in rows)
    assert packed.targets[9] == ids[10] and packed.weights[9] == 1.0  # a block's first token, from the clean row


def test_lora_starts_as_the_base_and_merges_exactly():
    model = tiny_block_model()
    ids = torch.tensor([random_ids(12)])
    with torch.no_grad():
        base = model(ids)
    lora.add_lora(model, rank=4, alpha=8.0, seed=0)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), base)  # B starts at zero
        for name, p in model.named_parameters():
            if name.endswith("lora_b"):
                p.normal_(std=0.05)
        wrapped = model(ids)
    adapter = lora.adapter_state(model)
    lora.unwrap(model)
    with torch.no_grad():
        lora.merge(model, adapter, 8.0 / 4)
        torch.testing.assert_close(model(ids), wrapped, atol=1e-5, rtol=1e-4)


def test_adapt_lowers_the_loss_and_is_deterministic():
    def run():
        model = tiny_block_model()
        ids = random_ids(40, seed=5)
        examples = [Example(ids, [(20, 30), (34, 40)])]
        losses = []
        opts = AdaptOptions(steps=12, batch_size=1, lr=1e-2, warmup_steps=1, rank=4, alpha=8.0, threads=1)
        adapter = adapt(model, examples, MASK, opts, on_step=lambda step, loss, s: losses.append(loss))
        return losses, adapter

    first, adapter = run()
    second, _ = run()
    assert first == second
    assert min(first[-3:]) < first[0]
    model = tiny_block_model()
    apply_adapter(model, adapter, 2.0, MASK)
    assert torch.equal(model.transformer.wte.weight[MASK], adapter["mask_embedding"])


def test_a_second_stage_goes_on_from_the_first_adapter():
    ids = random_ids(40, seed=5)
    examples = [Example(ids, [(20, 30), (34, 40)])]
    opts = AdaptOptions(steps=12, batch_size=1, lr=1e-2, warmup_steps=1, rank=4, alpha=8.0, threads=1)
    first_losses, second_losses = [], []
    adapter = adapt(tiny_block_model(), examples, MASK, opts, on_step=lambda step, loss, s: first_losses.append(loss))
    frozen = {k: v.clone() for k, v in adapter.items()}
    quiet = AdaptOptions(steps=1, batch_size=1, lr=1e-9, warmup_steps=1, rank=4, alpha=8.0, threads=1)
    again = adapt(tiny_block_model(), examples, MASK, quiet, on_step=lambda step, loss, s: second_losses.append(loss),
                  init=adapter)
    assert second_losses[0] < first_losses[0] / 2  # it starts where the first stage ended, not from the base
    assert all(torch.allclose(again[k], frozen[k], atol=1e-6) for k in frozen)
    with pytest.raises(ValueError, match="does not fit"):
        adapt(tiny_block_model(), examples, MASK, dataclasses.replace(quiet, rank=2), init=adapter)


def test_packed_loss_pads_without_changing_a_sequence():
    model = tiny_block_model()
    g = torch.Generator().manual_seed(0)
    a = block_batch(random_ids(20, 1), [(12, 20)], 4, MASK, g)
    b = block_batch(random_ids(30, 2), [(12, 30)], 4, MASK, g)
    with torch.no_grad():
        alone = packed_loss(model, [a])
        both = packed_loss(model, [a, b])
        torch.testing.assert_close(packed_loss(model, [a, a]), alone)
    assert both.item() != alone.item()


def test_a_shared_prefix_run_once_gives_the_same_loss():
    model = tiny_block_model()
    g = torch.Generator().manual_seed(0)
    head = random_ids(10, 7)
    a = block_batch(head + random_ids(14, 1), [(16, 24)], 4, MASK, g)
    b = block_batch(head + random_ids(20, 2), [(14, 30)], 4, MASK, g)
    with torch.no_grad():
        torch.testing.assert_close(packed_loss(model, [a, b], prefix_len=10), packed_loss(model, [a, b]))


def _divergence_from_base(model, base, packed) -> float:
    """The mean KL of the model's predictions at packed's kept rows from the base model's."""
    teacher = kept_log_probs(base, [packed])
    return (packed_loss(model, [packed], teacher=teacher, teacher_weight=1.0) - packed_loss(model, [packed])).item()


@torch.no_grad()
def test_the_teacher_is_the_base_model_under_the_adapter():
    """With llm.lora.off the adapted model predicts the caller's words as its base does, and the teacher's term
    measures how far the adapter has moved them: nothing at the start (B = 0), something once it has."""
    base, model = tiny_block_model(), tiny_block_model()
    lora.add_lora(model, rank=4, alpha=8.0, seed=0)
    g = torch.Generator().manual_seed(0)
    head = random_ids(8, 7)
    a = block_batch(head + random_ids(22, 1), [(20, 30)], 4, MASK, g, kept_spans=[(10, 16)])
    b = block_batch(head + random_ids(26, 2), [(18, 34)], 4, MASK, g, kept_spans=[(9, 14)])
    assert a.kept.sum() == 6 and not a.kept[a.clean_len:].any()
    assert _divergence_from_base(model, base, a) == pytest.approx(0.0, abs=1e-6)
    for name, p in model.named_parameters():
        if name.endswith("lora_b"):
            p.normal_(std=0.05, generator=torch.Generator().manual_seed(1))
    assert _divergence_from_base(model, base, a) > 1e-4
    with lora.off(model):   # the teacher, with the batch's shared prefix run once
        teacher = kept_log_probs(model, [a, b], prefix_len=8)
    torch.testing.assert_close(teacher, kept_log_probs(base, [a, b]))
    plain = packed_loss(model, [a, b], prefix_len=8)
    assert packed_loss(model, [a, b], prefix_len=8, teacher=teacher, teacher_weight=0.5) > plain


def test_adapt_with_a_teacher_keeps_the_callers_words_closer_to_the_base():
    ids = random_ids(40, seed=5)
    example = Example(ids, [(20, 30), (34, 40)], [(10, 19), (31, 33)])
    packed = block_batch(ids, example.spans, 4, MASK, torch.Generator().manual_seed(0), kept_spans=example.user_spans)
    divergence = {}
    for weight in (0.0, 1.0):
        opts = AdaptOptions(steps=12, batch_size=1, lr=1e-2, warmup_steps=1, rank=4, alpha=8.0, threads=1,
                            teacher_weight=weight)
        model = tiny_block_model()
        apply_adapter(model, adapt(tiny_block_model(), [example], MASK, opts), 2.0, MASK)
        with torch.no_grad():
            divergence[weight] = _divergence_from_base(model, tiny_block_model(), packed)
    assert divergence[1.0] < divergence[0.0] / 2


@torch.no_grad()
@pytest.mark.parametrize("packing", [None, "fp16"])
def test_a_merged_adapter_taken_off_gives_the_base_model_back(packing):
    """Within MergedAdapter.removed() the adapted model computes as its base, its projections fused or not
    (q, k and v packed as one product lose their three updates at once); outside it, and on other threads, it
    stays the adapted model, and its hooks are gone."""
    base = tiny_block_model()
    ids = torch.tensor([random_ids(12)])
    want_base = base(ids)
    lora.add_lora(base, rank=4, alpha=8.0, seed=0)
    for name, p in base.named_parameters():
        if name.endswith("lora_b"):
            p.normal_(std=0.05, generator=torch.Generator().manual_seed(2))
    adapter = lora.adapter_state(base)
    model = tiny_block_model()
    apply_adapter(model, adapter, 2.0, MASK)
    if packing == "fp16":
        if not fbgemm_available():
            pytest.skip("fp16 packing needs fbgemm")
        pack_fp16(model)
    adapted = model(ids)
    merged = lora.MergedAdapter(model, adapter, 2.0)
    moved = (adapted - want_base).abs().max()
    assert moved > 0.05   # the adapter changes the model
    with merged.removed():
        if packing:   # the merged weights rounded to fp16: within a twentieth of what the adapter moved
            assert (model(ids) - want_base).abs().max() < moved / 20
        else:
            torch.testing.assert_close(model(ids), want_base, atol=1e-5, rtol=1e-4)
        with ThreadPoolExecutor(1) as pool:   # another thread, as another session's pass would run
            elsewhere = pool.submit(lambda: model(ids).detach()).result()
    torch.testing.assert_close(elsewhere, adapted)
    torch.testing.assert_close(model(ids), adapted)
    assert not any(m._forward_hooks for m in model.modules())
