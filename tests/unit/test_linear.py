"""llm.linear.Linear: nn.Linear whose weight is laid out (in, out) for its product on the CPU outside autograd."""
import torch

from llm.linear import Linear


def test_same_as_nn_linear_with_and_without_autograd():
    torch.manual_seed(0)
    layer = Linear(24, 40, bias=True)
    x = torch.randn(2, 17, 24)
    expected = torch.nn.functional.linear(x, layer.weight, layer.bias)
    with torch.inference_mode():
        assert torch.allclose(layer(x), expected, atol=1e-6)
    with torch.no_grad():
        assert torch.allclose(layer(x), expected, atol=1e-6)
    y = layer(x)  # autograd: nn.Linear's own path, gradients reach the weight
    y.sum().backward()
    assert layer.weight.grad is not None and torch.allclose(y, expected, atol=1e-6)


def test_the_laid_out_weight_follows_changes_and_is_held_once():
    """An optimizer step or a load changes the weight in place: the next product uses the new weight."""
    layer = Linear(8, 4, bias=False)
    x = torch.randn(3, 8)
    with torch.no_grad():
        layer(x)
        layer.weight.mul_(2.0)  # in place, as an optimizer step
        assert torch.allclose(layer(x), x @ layer.weight.t(), atol=1e-6)
        layer.load_state_dict({"weight": torch.ones(4, 8)})
        assert torch.allclose(layer(x), x.sum(-1, keepdim=True).expand(3, 4), atol=1e-6)
    assert set(layer.state_dict()) == {"weight"} and layer.weight.shape == (4, 8)
    assert layer.weight.t().is_contiguous()  # the parameter itself holds the (in, out) layout: no second copy


def test_big_weights_keep_nn_linear_and_its_layout():
    layer = Linear(8, 4, bias=False)
    layer.SMALL = 16  # as if the weight (32 elements) were a big checkpoint's
    with torch.no_grad():
        y = layer(torch.ones(2, 8))
    assert layer.weight.is_contiguous() and torch.allclose(y, layer.weight.sum(-1).expand(2, 4))


def test_a_weight_laid_out_in_inference_mode_still_trains():
    layer = Linear(8, 4, bias=False)
    with torch.inference_mode():
        layer(torch.ones(2, 8))
    layer(torch.ones(2, 8)).sum().backward()
    assert layer.weight.grad is not None and layer.weight.t().is_contiguous()
